"""Preemption by the real kube-scheduler: a higher PriorityClass evicts a lower one."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.testbed.cluster import whole_card_node
from tests.k8s.conftest import Admin, eventually
from tests.k8s.helpers import job, runs_for

pytestmark = pytest.mark.k8s
POOL = "preempt-test"


@pytest.fixture(scope="module")
def preempt_node(k8s_testbed: Any) -> str:
    """A node of its own (8 GPUs) so that no other test's pods take part."""
    node = whole_card_node("preempt-test-1", pool=POOL)
    k8s_testbed.add_nodes([node])
    return node.name


def test_a_higher_priority_job_preempts_a_lower_one(
    k8s_backend: Any, k8s_project: str, k8s_admin: Admin, preempt_node: str
) -> None:
    low = job(
        k8s_project,
        pool=POOL,
        gpu_count=8,
        priority_class_name="gpu-portal-low",
        annotations=runs_for("1h"),
    )
    k8s_backend.launch(low)
    running = eventually(
        lambda: (
            (s := k8s_backend.get_workload(k8s_project, low.request_id, 1)).phase == "running" and s
        ),
        what="the low-priority job running",
    )
    assert running.node_name == preempt_node

    high = job(
        k8s_project,
        pool=POOL,
        gpu_count=8,
        priority_class_name="gpu-portal-high",
        annotations=runs_for("1h"),
    )
    k8s_backend.launch(high)
    placed = eventually(
        lambda: (
            (s := k8s_backend.get_workload(k8s_project, high.request_id, 1)).phase == "running"
            and s
        ),
        timeout=90,
        what="the high-priority job running",
    )
    assert placed.node_name == preempt_node
    victim = eventually(
        lambda: (
            (s := k8s_backend.get_workload(k8s_project, low.request_id, 1)).phase
            in ("failed", "missing")
            and s
        ),
        what="the victim failed",
    )
    assert victim.phase == "failed", victim
    pods = k8s_admin.core.list_namespaced_pod(
        k8s_project, label_selector=f"gpu-portal/request={high.request_id}"
    ).items
    assert pods[0].spec.priority == 10000
    for spec in (low, high):
        k8s_backend.terminate(k8s_project, spec.request_id, 1, reason="t", grace_seconds=0)
