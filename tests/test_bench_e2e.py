"""The end-to-end benchmark's own rules (bench/e2e.py), without a test bed: both sides create
the same Job, the open loop's arrivals do not wait for answers, and a side that does not finish
ends the run instead of reporting."""

from __future__ import annotations

import json
import statistics
import threading
import time
from typing import Any

import pytest

from bench.e2e import Incomplete, direct_template, open_loop, poisson_offsets, wait_all
from runtime.cluster.kubernetes_manifests import job_manifest
from runtime.cluster.specs import WorkloadSpec


def portal_job() -> dict[str, Any]:
    """A Job as the portal creates it for one whole A100 pinned to a node, as the API server
    answers it (selector added), with the pod the LimitRange admitted."""
    spec = WorkloadSpec(
        request_id="7",
        attempt=1,
        team_slug="vision",
        project_slug="detection",
        namespace="gpu-vision-detection",
        kind="job",
        image="registry.example.com/ml/pytorch:2.4",
        sharing="exclusive",
        gpu_count=1,
        node_selector={"gpu-portal/pool": "a100-training"},
        gpu_products=("NVIDIA-A100-SXM4-80GB",),
        node_name="e2e-0003",
        priority_class_name="gpu-portal-normal",
        max_runtime_seconds=3600,
    )
    job: dict[str, Any] = json.loads(json.dumps(job_manifest(spec)))
    job["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}}
    pod_spec = json.loads(json.dumps(job["spec"]["template"]["spec"]))
    pod_spec["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
        "requests": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"},
    }
    job["admitted_pod"] = {"spec": pod_spec}
    return job


def test_the_direct_side_creates_the_portals_job_without_the_portal() -> None:
    job = portal_job()
    direct = direct_template(job)
    pod = direct["template"]["spec"]
    # What placed the pod on the engine's node, or ties it to the portal, is gone.
    assert "kubernetes.io/hostname" not in json.dumps(pod.get("nodeSelector", {}))
    assert "nodeName" not in pod
    assert "selector" not in direct
    assert direct["template"]["metadata"] == {}
    # What the Job asks of the cluster stays: the same object kind and limits on both sides.
    kept = job["spec"]
    for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        assert direct[key] == kept[key]
    assert pod["nodeSelector"] == {"gpu-portal/pool": "a100-training"}
    assert pod["priorityClassName"] == "gpu-portal-normal"
    assert pod["affinity"] == kept["template"]["spec"]["affinity"]
    assert pod["containers"][0]["resources"]["requests"]["memory"] == "8Gi"


def test_poisson_arrivals_are_repeatable_at_the_set_rate() -> None:
    offsets = poisson_offsets(4000, rate=5.0, seed=1)
    assert offsets == poisson_offsets(4000, rate=5.0, seed=1)
    assert offsets != poisson_offsets(4000, rate=5.0, seed=2)
    gaps = [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]
    assert all(gap > 0 for gap in gaps)
    assert statistics.mean(gaps) == pytest.approx(0.2, rel=0.05)
    # Exponential gaps: the standard deviation is the mean (a fixed rate would have none).
    assert statistics.stdev(gaps) == pytest.approx(0.2, rel=0.1)


def test_open_loop_arrivals_do_not_wait_for_answers() -> None:
    started: list[float] = []
    lock = threading.Lock()

    def slow_call(_: int) -> None:
        with lock:
            started.append(time.monotonic())
        time.sleep(0.5)

    t0 = time.monotonic()
    lag = open_loop(slow_call, [0.05 * i for i in range(10)])
    # Ten calls of 0.5 s each, arriving 0.05 s apart: a closed loop would take 5 s.
    assert time.monotonic() - t0 < 2.0
    assert max(started) - t0 < 1.0
    assert lag < 0.5


class StalledWatch:
    """A pod watch that saw 3 of its pods run and no more."""

    running = {"a": 1.0, "b": 2.0, "c": 3.0}

    def wait_running(self, count: int, *, timeout: float) -> bool:
        return len(self.running) >= count


def test_a_side_that_does_not_finish_ends_the_run_with_how_many_ran() -> None:
    watch: Any = StalledWatch()
    wait_all(watch, 3, 1.0, "direct 1 burst", time.time())
    with pytest.raises(Incomplete, match=r"direct 1 burst: 3 of 5 pods Running within 1 s"):
        wait_all(watch, 5, 1.0, "direct 1 burst", time.time())
