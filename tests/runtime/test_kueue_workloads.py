"""Kueue's Workloads mapped onto the portal's Jobs: state, reason, preemptor, queue position."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.cluster.kueue_workloads import kueue_views, request_of_job

QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
    "in flavor a100-training, 2 more needed"
)
PREEMPTED_MESSAGE = (
    "Preempted to accommodate a workload (UID: uid-7, JobUID: job-uid-7) due to prioritization "
    "in the ClusterQueue; preemptor path: /gpu-portal-team-a; preemptee path: /gpu-portal-team-a"
)


def condition(kind: str, status: bool, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": str(status), "reason": reason, "message": message}


def workload(
    job: str,
    *,
    namespace: str = "gp-a-one",
    conditions: tuple[dict[str, str], ...] = (),
    priority: int = 1000,
    created: str = "2026-12-04T10:00:00Z",
    uid: str = "",
    admitted_to: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if admitted_to:
        status["admission"] = {"clusterQueue": admitted_to}
    return {
        "metadata": {
            "name": f"job-{job}-abcde",
            "namespace": namespace,
            "uid": uid or f"uid-{job}",
            "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job}],
        },
        "spec": {"queueName": "gpu-portal", "priority": priority},
        "status": status,
    }


QUEUES = [
    {
        "metadata": {"namespace": "gp-a-one", "name": "gpu-portal"},
        "spec": {"clusterQueue": "gpu-portal-team-a"},
    },
    {
        "metadata": {"namespace": "gp-a-two", "name": "gpu-portal"},
        "spec": {"clusterQueue": "gpu-portal-team-a"},
    },
    {
        "metadata": {"namespace": "gp-b-one", "name": "gpu-portal"},
        "spec": {"clusterQueue": "gpu-portal-team-b"},
    },
]


@pytest.mark.parametrize(
    ("conditions", "state", "reason", "message"),
    [
        ((), "pending", "Queued", "Queued in Kueue's ClusterQueue gpu-portal-team-a."),
        (
            (condition("QuotaReserved", False, "Pending", QUOTA_MESSAGE),),
            "pending",
            "Pending",
            QUOTA_MESSAGE,
        ),
        (
            (condition("QuotaReserved", True, "QuotaReserved"),),
            "pending",
            "QuotaReserved",
            "Quota reserved; waiting for Kueue's admission checks.",
        ),
        (
            (condition("QuotaReserved", True), condition("Admitted", True, "Admitted")),
            "admitted",
            "Admitted",
            "Admitted by Kueue in ClusterQueue gpu-portal-team-a.",
        ),
        (
            (
                condition("QuotaReserved", False, "Preempted"),
                condition("Evicted", True, "Preempted", "Preempted to accommodate a workload"),
            ),
            "evicted",
            "Preempted",
            "Preempted to accommodate a workload",
        ),
        (
            (condition("Evicted", True, "InactiveWorkload", "The workload is deactivated"),),
            "evicted",
            "InactiveWorkload",
            "The workload is deactivated",
        ),
        (
            (condition("Admitted", True), condition("Finished", True, "Succeeded", "done")),
            "finished",
            "Succeeded",
            "done",
        ),
        (
            (condition("Evicted", False, "QuotaReserved"), condition("Admitted", True)),
            "admitted",
            "Admitted",
            "Admitted by Kueue in ClusterQueue gpu-portal-team-a.",
        ),
    ],
)
def test_a_workload_maps_to_kueues_state_reason_and_message(
    conditions: tuple[dict[str, str], ...], state: str, reason: str, message: str
) -> None:
    views = kueue_views([workload("gpr-5-a1", conditions=conditions)], QUEUES)
    view = views[("gp-a-one", "gpr-5-a1")]
    assert (view.state, view.reason, view.message) == (state, reason, message)
    assert view.cluster_queue == "gpu-portal-team-a"


def test_positions_follow_best_effort_fifo_per_cluster_queue() -> None:
    pending = (condition("QuotaReserved", False, "Pending", QUOTA_MESSAGE),)
    views = kueue_views(
        [
            workload("gpr-1-a1", conditions=pending, created="2026-12-04T10:00:01Z"),
            # Higher priority comes first, however young.
            workload(
                "gpr-2-a1", conditions=pending, priority=10000, created="2026-12-04T10:09:00Z"
            ),
            # Another project of the same team shares the ClusterQueue.
            workload(
                "gpr-3-a1", namespace="gp-a-two", conditions=pending, created="2026-12-04T10:00:00Z"
            ),
            # Another team's queue counts on its own.
            workload("gpr-4-a1", namespace="gp-b-one", created="2026-12-04T09:00:00Z"),
            # Admitted workloads hold no place in the queue.
            workload(
                "gpr-5-a1",
                conditions=(condition("QuotaReserved", True), condition("Admitted", True)),
                created="2026-12-04T08:00:00Z",
                admitted_to="gpu-portal-team-a",
            ),
        ],
        QUEUES,
    )
    positions = {job: view.position for (_ns, job), view in views.items()}
    assert positions == {
        "gpr-2-a1": 1,
        "gpr-3-a1": 2,
        "gpr-1-a1": 3,
        "gpr-4-a1": 1,
        "gpr-5-a1": None,
    }


def test_an_evicted_workload_names_the_portal_request_that_preempted_it() -> None:
    preempted = (
        condition("Evicted", True, "Preempted", PREEMPTED_MESSAGE),
        condition("Preempted", True, "InClusterQueue", PREEMPTED_MESSAGE),
    )
    views = kueue_views(
        [
            workload("gpr-6-a2", conditions=preempted),
            workload("gpr-7-a1", uid="uid-7", conditions=(condition("Admitted", True),)),
        ],
        QUEUES,
    )
    view = views[("gp-a-one", "gpr-6-a2")]
    assert view.state == "evicted"
    assert view.preempted_by_request == "7"
    assert view.message == (
        "Kueue preempted it for request 7 (prioritization in the ClusterQueue)."
    )


def test_a_preemptor_kueue_no_longer_lists_leaves_kueues_own_message() -> None:
    preempted = (condition("Evicted", True, "Preempted", PREEMPTED_MESSAGE),)
    view = kueue_views([workload("gpr-6-a2", conditions=preempted)], QUEUES)[
        ("gp-a-one", "gpr-6-a2")
    ]
    assert (view.message, view.preempted_by_request) == (PREEMPTED_MESSAGE, None)


def test_workloads_of_other_owners_are_left_out() -> None:
    pod_workload = workload("x")
    pod_workload["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "x"}]
    assert kueue_views([pod_workload], QUEUES) == {}


@pytest.mark.parametrize(
    ("job", "request_id"),
    [("gpr-812-a1", "812"), ("gpr-ab-12-a3", "ab-12"), ("train-1", None), ("gpr-5", None)],
)
def test_request_of_job(job: str, request_id: str | None) -> None:
    assert request_of_job(job) == request_id


class PagedObjects:
    """A CustomObjectsApi stand-in: each kind in pages of one item, or a 404 for all."""

    def __init__(self, items: dict[str, list[dict[str, Any]]], *, status: int | None = None):
        self.items, self.status, self.calls = items, status, 0

    def list_cluster_custom_object(
        self, group: str, version: str, plural: str, **kwargs: Any
    ) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        self.calls += 1
        if self.status is not None:
            raise ApiException(status=self.status)
        index = int(kwargs.get("_continue") or 0)
        rest = self.items[plural][index + 1 :]
        return {
            "items": self.items[plural][index : index + 1],
            "metadata": {"continue": str(index + 1) if rest else None},
        }


def test_the_reader_pages_through_workloads_and_local_queues() -> None:
    from kubernetes import client as k8s

    from runtime.cluster.kubernetes_kueue import KueueWorkloadReader

    reader = KueueWorkloadReader(k8s.ApiClient())
    pending = (condition("QuotaReserved", False, "Pending", QUOTA_MESSAGE),)
    reader.objects = PagedObjects(
        {
            "workloads": [
                workload("gpr-1-a1", conditions=pending, created="2026-12-04T10:00:00Z"),
                workload("gpr-2-a1", conditions=pending, created="2026-12-04T10:00:01Z"),
            ],
            "localqueues": QUEUES,
        }
    )
    views = reader.views()
    assert [views[("gp-a-one", job)].position for job in ("gpr-1-a1", "gpr-2-a1")] == [1, 2]
    assert reader.objects.calls == 2 + len(QUEUES)


def test_a_cluster_without_kueue_is_a_clear_permanent_error() -> None:
    from kubernetes import client as k8s

    from runtime.cluster.base import PermanentClusterError
    from runtime.cluster.kubernetes_kueue import KueueWorkloadReader

    reader = KueueWorkloadReader(k8s.ApiClient())
    reader.objects = PagedObjects({}, status=404)
    with pytest.raises(PermanentClusterError, match="needs Kueue"):
        reader.views()
