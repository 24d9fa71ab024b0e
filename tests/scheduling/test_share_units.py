"""A vGPU share counts against its quota as the flavor's units it asks, whatever memory the
pool's cards report: a quota of N units of a 6 GiB share admits N of them on real L4 cards."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from runtime.services.propagation import flavor_quota
from scheduling.choices import RequestStatus
from scheduling.models import GpuDevice, GpuRequest, Quota
from scheduling.services import cycle
from scheduling.services.requests import GpuRequestSpec, submit_gpu_request
from tests.support.fleet import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

L4_MEMORY_MIB = 23_034  # what an L4 reports: not 24 GiB


def notebook(org: Org, fleet: Fleet, **share: Any) -> GpuRequest:
    return submit_gpu_request(
        actor=org.dev_a,
        spec=GpuRequestSpec(
            project=org.project_a,
            flavor=fleet.l4_6g,
            gpu_count=1,
            kind="notebook",
            image="jupyter/pytorch-notebook:2024-10-07",
            max_runtime_seconds=3600,
            **share,
        ),
    )


def test_a_quota_of_n_shares_admits_n_shares_on_cards_of_23034_mib(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    GpuDevice.objects.filter(node__pool=fleet.l4_6g.pool).update(memory_mib=L4_MEMORY_MIB)
    Quota.objects.filter(team=org.team_a, flavor=fleet.l4_6g).update(guaranteed=8, limit=8)
    requests = [notebook(org, fleet) for _ in range(8)]
    assert {r.gpu_equivalent for r in requests} == {Decimal("0.25")}
    with django_capture_on_commit_callbacks(execute=True):
        cycle.run_cycle()
    statuses = GpuRequest.objects.filter(pk__in=[r.pk for r in requests]).values_list(
        "status", flat=True
    )
    assert list(statuses) == [RequestStatus.ADMITTED] * 8


def test_a_larger_share_of_a_flavor_counts_as_the_units_it_asks(org: Org, fleet: Fleet) -> None:
    GpuDevice.objects.filter(node__pool=fleet.l4_6g.pool).update(memory_mib=L4_MEMORY_MIB)
    assert notebook(org, fleet, gpu_memory_mib=12_288).gpu_equivalent == Decimal("0.5")
    assert notebook(org, fleet, gpu_cores_percent=75).gpu_equivalent == Decimal("0.75")
    # All of an L4's memory is 3.749 units of 6 GiB, each 0.25 GPU-eq.
    assert notebook(org, fleet, gpu_memory_mib=L4_MEMORY_MIB).gpu_equivalent == Decimal("0.9373")


def test_the_namespace_quota_holds_every_share_the_quota_admits(org: Org, fleet: Fleet) -> None:
    GpuDevice.objects.filter(node__pool=fleet.l4_6g.pool).update(memory_mib=L4_MEMORY_MIB)
    hard = flavor_quota(fleet.l4_6g, 8)
    # Eight 6 GiB shares at 25 % of the cores: 49,152 MiB, 200 % (not 8 x 0.25 x 23,034 MiB).
    assert hard == {
        "requests.nvidia.com/gpu": 8,
        "requests.nvidia.com/gpumem": 8 * 6144,
        "requests.nvidia.com/gpucores": 200,
    }
