"""A launch the cluster refuses: a refusal for authorization is retried a few times (an API
server refuses everything while its authorizer catches up after a start, and after a new
RoleBinding), anything else fails the request at once, admitted or launching."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.cluster.base import PermanentClusterError, ProjectSpec, TransientClusterError
from runtime.cluster.simulated import SimulatedCluster
from runtime.services import execution
from runtime.tasks import AUTHORIZATION_RETRIES, launch_workload
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


class RefusingCluster(SimulatedCluster):
    """The simulated cluster, unreachable the first `unreachable` times, then refusing the
    project's namespace the next `refusals` times: the faults a real API server gives while it
    restarts and for a moment after, which cannot be timed here."""

    def __init__(self, *, status: int, refusals: int, unreachable: int = 0) -> None:
        super().__init__(speed=100_000)
        self.status, self.refusals, self.unreachable = status, refusals, unreachable
        self.calls = 0

    def ensure_project(self, spec: ProjectSpec) -> None:
        self.calls += 1
        if self.calls <= self.unreachable:
            raise TransientClusterError("cannot reach the API server: connection refused")
        if self.calls <= self.unreachable + self.refusals:
            raise PermanentClusterError(
                f"Kubernetes API {self.status}: namespaces is forbidden",
                status=self.status,
            )
        super().ensure_project(spec)


def admitted(org: Org, fleet: Fleet) -> GpuRequest:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_12g, to="admitted")
    assert (request.status, request.attempt) == (RequestStatus.ADMITTED, 1)
    return request


def launch_on(cluster: SimulatedCluster, request: GpuRequest, monkeypatch: Any) -> Any:
    monkeypatch.setattr(execution, "cluster_backend", lambda: cluster)
    # Retries not thrown: each is applied again at once, as a worker would after the countdown.
    monkeypatch.setitem(launch_workload.app.conf, "task_eager_propagates", False)
    result = launch_workload.apply(args=(request.pk, request.attempt))
    request.refresh_from_db()
    return result.get()


def test_a_refusal_for_authorization_is_retried_and_the_launch_goes_on(
    org: Org, fleet: Fleet, monkeypatch: Any
) -> None:
    request = admitted(org, fleet)
    cluster = RefusingCluster(status=403, refusals=2)
    assert launch_on(cluster, request, monkeypatch) == f"gpr-{request.pk}-a1"
    assert cluster.calls == 3
    assert request.status == RequestStatus.LAUNCHING


def test_a_refusal_after_an_outage_still_gets_its_own_retries(
    org: Org, fleet: Fleet, monkeypatch: Any
) -> None:
    request = admitted(org, fleet)
    unreachable = AUTHORIZATION_RETRIES + 3  # more retries than the refusals' own budget
    cluster = RefusingCluster(status=403, refusals=AUTHORIZATION_RETRIES, unreachable=unreachable)
    assert launch_on(cluster, request, monkeypatch) == f"gpr-{request.pk}-a1"
    assert cluster.calls == unreachable + AUTHORIZATION_RETRIES + 1
    assert request.status == RequestStatus.LAUNCHING


def test_a_refusal_once_an_outage_used_every_retry_leaves_the_request_to_the_sweeper(
    org: Org, fleet: Fleet, monkeypatch: Any
) -> None:
    request = admitted(org, fleet)
    worn_out = RefusingCluster(status=403, refusals=1, unreachable=launch_workload.max_retries)
    with pytest.raises(PermanentClusterError):
        launch_on(worn_out, request, monkeypatch)
    assert request.status == RequestStatus.ADMITTED
    assert Allocation.objects.get(request=request).ended_at is None
    # The sweeper's launch is a new task, with fresh retries and refusals.
    relaunch = RefusingCluster(status=403, refusals=AUTHORIZATION_RETRIES)
    assert launch_on(relaunch, request, monkeypatch) == f"gpr-{request.pk}-a1"
    assert request.status == RequestStatus.LAUNCHING


@pytest.mark.parametrize(
    ("status", "attempts"),
    [(403, 1 + AUTHORIZATION_RETRIES), (401, 1 + AUTHORIZATION_RETRIES), (422, 1)],
)
def test_a_refusal_that_lasts_fails_the_admitted_request_once_its_retries_are_used(
    org: Org, fleet: Fleet, monkeypatch: Any, status: int, attempts: int
) -> None:
    request = admitted(org, fleet)
    cluster = RefusingCluster(status=status, refusals=1_000)
    assert launch_on(cluster, request, monkeypatch) == "failed"
    assert cluster.calls == attempts
    assert request.status == RequestStatus.FAILED
    assert request.status_reason.startswith(f"The cluster refused it: Kubernetes API {status}")
    assert Allocation.objects.get(request=request).ended_at is not None
