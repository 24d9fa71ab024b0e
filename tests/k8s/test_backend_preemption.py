"""The portal alone preempts: kube-scheduler never evicts portal work for other portal work.

The portal's PriorityClasses are `preemptionPolicy: Never`, so a higher-priority portal pod
that does not fit waits (Unschedulable) instead of evicting a lower one; preemption is the
engine's decision, carried out by the worker (tests/k8s/test_portal_flow.py).
"""

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


def test_kube_scheduler_never_evicts_portal_work_for_higher_priority_portal_work(
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

    critical = job(
        k8s_project,
        pool=POOL,
        gpu_count=8,
        priority_class_name="gpu-portal-critical",
        annotations=runs_for("1h"),
    )
    k8s_backend.launch(critical)

    def unschedulable() -> Any:
        pods = k8s_admin.core.list_namespaced_pod(
            k8s_project, label_selector=f"gpu-portal/request={critical.request_id}"
        ).items
        conditions = (pods[0].status.conditions or []) if pods else []
        return next(
            (c for c in conditions if c.type == "PodScheduled" and c.reason == "Unschedulable"),
            None,
        )

    condition = eventually(unschedulable, timeout=60, what="the critical pod unschedulable")
    assert "Insufficient nvidia.com/gpu" in condition.message, condition.message
    # kube-scheduler retried with the critical pod for a while; the low one is untouched.
    pods = k8s_admin.core.list_namespaced_pod(
        k8s_project, label_selector=f"gpu-portal/request={critical.request_id}"
    ).items
    assert pods[0].spec.priority == 100000
    assert pods[0].spec.preemption_policy == "Never"
    assert not pods[0].status.nominated_node_name
    still = k8s_backend.get_workload(k8s_project, low.request_id, 1)
    assert (still.phase, still.node_name) == ("running", preempt_node)
    for spec in (low, critical):
        k8s_backend.terminate(k8s_project, spec.request_id, 1, reason="t", grace_seconds=0)
