"""Driving requests through the pipeline and auditing where they ended, for the fault tests."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.models import SimulatedWorkload
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Flavor, GpuRequest
from tenants.models import AuditEvent
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

TERMINAL = frozenset({RequestStatus.SUCCEEDED, RequestStatus.FAILED})


def submit_and_approve(org: Org, flavor: Flavor, count: int) -> list[int]:
    """`count` one-GPU jobs from team A's developer, each approved by the lead (training tier:
    whole cards need a lead), so each one really goes submit → approve → queued."""
    requests = GpuRequestFactory.create_batch(
        count,
        project=org.project_a,
        flavor=flavor,
        command=["python", "train.py"],
        reason="fault suite",
        to="queued",
    )
    assert {(r.owner, r.approved_by) for r in requests} <= {(org.dev_a, org.lead_a)}
    return [request.pk for request in requests]


def status_counts(ids: list[int] | None = None) -> Counter[str]:
    rows = GpuRequest.objects.all() if ids is None else GpuRequest.objects.filter(pk__in=ids)
    return Counter(rows.values_list("status", flat=True))


def wait_until_settled(
    ids: list[int], *, timeout: float, log: Callable[[], str] = lambda: ""
) -> float:
    """Seconds until every request is succeeded or failed; fails the test after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        counts = status_counts(ids)
        if sum(counts[s] for s in TERMINAL) == len(ids):
            return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(
        f"not settled after {timeout:.0f}s: {dict(status_counts(ids))}\n{log()[-6000:]}"
    )


@dataclass
class Outcome:
    """What happened to each request, and every way it could have gone wrong."""

    requests: int
    statuses: dict[str, int]
    lost: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    wrong_end: list[int] = field(default_factory=list)
    allocations_open: list[int] = field(default_factory=list)
    # Why each duplicated request is one: attempts, workloads, allocations, reclaim events.
    details: dict[int, str] = field(default_factory=dict)

    @property
    def figures(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "statuses": self.statuses,
            "lost": len(self.lost),
            "duplicates": len(self.duplicated),
            "wrong_end_state": len(self.wrong_end),
            "allocations_left_open": len(self.allocations_open),
        }

    def assert_clean(self) -> None:
        assert not self.lost, f"requests lost (not finished): {self.lost}"
        assert not self.duplicated, f"workloads or attempts duplicated: {self.details}"
        assert not self.wrong_end, f"requests that ended in the wrong state: {self.wrong_end}"
        assert not self.allocations_open, f"allocations still open: {self.allocations_open}"


def audit(ids: list[int]) -> Outcome:
    """Compare each request with the cluster's record of its workload.

    A request must have finished, with exactly one attempt, one allocation (closed) and one
    workload in the simulated cluster; `failed` exactly when the simulation made the workload
    fail, with the cluster's reason in the request's status reason.
    """
    requests = {r.pk: r for r in GpuRequest.objects.filter(pk__in=ids)}
    workloads: dict[str, list[SimulatedWorkload]] = {}
    for workload in SimulatedWorkload.objects.filter(request_key__in=[str(i) for i in ids]):
        workloads.setdefault(workload.request_key, []).append(workload)
    allocations = Counter(
        Allocation.objects.filter(request_id__in=ids).values_list("request_id", flat=True)
    )
    still_open = set(
        Allocation.objects.filter(request_id__in=ids, ended_at__isnull=True).values_list(
            "request_id", flat=True
        )
    )
    outcome = Outcome(requests=len(requests), statuses=dict(status_counts(ids)))
    for pk in ids:
        request = requests.get(pk)
        if request is None or request.status not in TERMINAL:
            outcome.lost.append(pk)
            continue
        made = workloads.get(str(pk), [])
        if len(made) != 1 or request.attempt != 1 or allocations[pk] != 1:
            outcome.duplicated.append(pk)
            events = AuditEvent.objects.filter(
                target_id=str(pk), action__startswith="reclaim."
            ).values_list("action", "message")
            outcome.details[pk] = (
                f"attempt {request.attempt}, {len(made)} workloads, {allocations[pk]} "
                f"allocations, {request.status}: {request.status_reason}; {list(events)}"
            )
            continue
        should_fail = made[0].fails
        if (request.status == RequestStatus.FAILED) != should_fail or (
            should_fail and made[0].failure_reason not in request.status_reason
        ):
            outcome.wrong_end.append(pk)
        if pk in still_open:
            outcome.allocations_open.append(pk)
    return outcome
