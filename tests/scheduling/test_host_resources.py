"""Host resources in the cycle: the snapshot offers each node's allocatable CPU and memory minus
what other tenants' pods request, running work holds its request's, and a request no node has
the CPU for waits with the `host_resources` blocker instead of being admitted (the demo fleet,
simulated cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.services.inventory import apply_inventory
from scheduling.choices import RequestStatus, WorkloadKind
from scheduling.models import Node
from scheduling.selectors.snapshot import build_snapshot
from scheduling.services import cycle
from scheduling.services.quotas import set_quota
from tests.runtime.test_inventory import reported
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.factories import GpuRequestFactory, api_submit
from tests.support.personas import Org

pytestmark = pytest.mark.django_db
GIB = 1024


def run_cycle(capture: Any) -> list[int]:
    admitted: list[int] = []
    with capture(execute=True):
        cycle.run_cycle(on_admit=lambda r, a: admitted.append(r))
    return admitted


def test_inventory_records_the_allocatable_cpu_and_memory_a_node_reports(fleet: Fleet) -> None:
    apply_inventory(
        [
            reported("gpu-a", "a100-training", cpu_millicores=96_000, memory_mib=1024 * GIB),
            reported("gpu-b", "a100-training"),
        ]
    )
    a, b = Node.objects.get(name="gpu-a"), Node.objects.get(name="gpu-b")
    assert (a.cpu_millicores, a.memory_mib) == (96_000, 1024 * GIB)
    assert (b.cpu_millicores, b.memory_mib) == (None, None)


def test_the_snapshot_offers_allocatable_minus_foreign_requests(org: Org, fleet: Fleet) -> None:
    Node.objects.filter(name="a100-training-1").update(
        cpu_millicores=128_000,
        memory_mib=2048 * GIB,
        foreign_usage={"cpu_millicores": 6_000, "memory_mib": 24 * GIB},
    )
    job = GpuRequestFactory.create(
        to="queued", project=org.project_a, flavor=fleet.a100, gpu_count=2, cpu_millicores=32_000
    )
    notebook = GpuRequestFactory.create(
        to="queued",
        project=org.project_a,
        flavor=fleet.l4_12g,
        gpu_count=2,
        kind=WorkloadKind.NOTEBOOK,
        memory_mib=64 * GIB,
    )
    snap = build_snapshot()
    node = next(n for n in snap.nodes if n.id == "a100-training-1")
    assert (node.cpu_millicores, node.memory_mib) == (122_000, 2024 * GIB)
    pending = {r.id: r for r in snap.pending}
    assert (pending[str(job.pk)].cpu_millicores, pending[str(job.pk)].distributed) == (32_000, True)
    assert pending[str(notebook.pk)].memory_mib == 64 * GIB
    assert pending[str(notebook.pk)].distributed is False


def test_admitted_work_holds_its_cpu_in_the_next_snapshot(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    request = GpuRequestFactory.create(
        to="queued", project=org.project_a, flavor=fleet.a100, gpu_count=1, cpu_millicores=24_000
    )
    assert run_cycle(django_capture_on_commit_callbacks) == [request.pk]
    (running,) = build_snapshot().allocations
    assert running.cpu_millicores == 24_000


def test_a_request_no_node_has_the_cpu_for_waits_with_the_host_resources_blocker(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    set_quota(actor=org.admin, team=org.team_a, flavor=fleet.a100, guaranteed=8, limit=8)
    # CPU-only pods of another tenant leave 16 of the nodes' 128 cores.
    Node.objects.filter(pool__slug="a100-training").update(
        foreign_usage={"cpu_millicores": 112_000}
    )
    request = GpuRequestFactory.create(
        to="queued", project=org.project_a, flavor=fleet.a100, gpu_count=4, cpu_millicores=64_000
    )
    assert run_cycle(django_capture_on_commit_callbacks) == []
    request.refresh_from_db()
    assert request.status == RequestStatus.QUEUED
    # The flavor's default 64 GiB of memory is asked too.
    assert request.waiting_reason.startswith(
        f"waiting for a node with 64 CPU and 64 GiB free beside 4 {request.flavor.gpu_model} GPUs; "
        "the nodes with room for the GPUs have at most 16 CPU free"
    )
    assert request.blocker["code"] == "host_resources"
    assert request.blocker["detail"]["most_cpu_free_millicores"] == 16_000


def test_a_request_asking_more_than_any_node_of_its_pool_offers_is_refused(
    org: Org, fleet: Fleet
) -> None:
    body = request_body(org.project_a, fleet.l4_6g, cpu_millicores=64_000)
    error = api_submit(org.dev_a, body, status=400).json()["error"]
    assert "cpu_millicores" in error["fields"]
    assert "the largest has 48000" in error["fields"]["cpu_millicores"]
    body = request_body(org.project_a, fleet.l4_6g, cpu_millicores=8_000, memory_mib=512 * GIB)
    error = api_submit(org.dev_a, body, status=400).json()["error"]
    assert "memory_mib" in error["fields"]
    # A node that does not report its memory does not limit it.
    Node.objects.filter(name="l4-vgpu-2").update(memory_mib=None)
    api_submit(org.dev_a, body, status=201)
