"""A MIG node's layout is what the cluster says: the GPU operator's `nvidia.com/mig.config`
label and the `nvidia.com/mig-*` resources. A node whose layout cannot be read is held back
from MIG work, and a request that only it could serve waits on a `mig_layout` blocker."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import TestCase

from runtime.cluster.base import NodeInventory
from runtime.services.inventory import apply_inventory
from scheduling.choices import RequestStatus
from scheduling.engine.mig import read_node_layout
from scheduling.models import Flavor, GpuDevice, GpuRequest, Node
from scheduling.selectors.snapshot import build_snapshot
from scheduling.services import cycle
from tests.support.factories import FlavorFactory, GpuRequestFactory, QuotaFactory, TierFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def mig_node(name: str, pool: str, config: str | None, **mig: int) -> NodeInventory:
    """A node of H100 cards (GPU feature discovery's product name) advertising `mig`."""
    labels = {"gpu-portal/pool": pool, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    if config is not None:
        labels["nvidia.com/mig.config"] = config
    resources = {f"nvidia.com/mig-{p.replace('_', '.')}": str(n) for p, n in mig.items()}
    return NodeInventory(
        name=name,
        labels=labels,
        taints=(),
        ready=True,
        schedulable=True,
        allocatable=resources,
        capacity=resources,
        gpu_model="NVIDIA-H100-80GB-HBM3",
        gpu_count=2,
        gpu_memory_mib=81920,
        mig_devices={p.replace("_", "."): n for p, n in mig.items()},
    )


def layouts(name: str) -> list[dict[str, int]]:
    return list(
        GpuDevice.objects.filter(node__name=name)
        .order_by("index")
        .values_list("mig_layout", flat=True)
    )


@pytest.mark.parametrize(
    ("labels", "advertised", "cards", "source"),
    [
        ({"nvidia.com/mig.config": "all-1g.10gb"}, {"1g.10gb": 14}, [{"1g.10gb": 7}] * 2, "label"),
        (
            {"nvidia.com/mig.config": "all-balanced"},
            {"1g.10gb": 4, "2g.20gb": 2, "3g.40gb": 2},
            [{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}] * 2,
            "label",
        ),
        ({}, {"1g.10gb": 7, "3g.40gb": 2}, [{"3g.40gb": 2}, {"1g.10gb": 7}], "resources"),
        (
            {"nvidia.com/mig.config": "my-custom"},
            {"4g.40gb": 2, "3g.40gb": 2},
            [{"4g.40gb": 1, "3g.40gb": 1}] * 2,
            "resources",
        ),
    ],
)
def test_the_layout_is_read_from_the_label_or_the_advertised_counts(
    labels: dict[str, str], advertised: dict[str, int], cards: list[dict[str, int]], source: str
) -> None:
    reading = read_node_layout(
        gpu_model="H100-80G", gpu_count=2, labels=labels, advertised=advertised
    )
    assert (list(reading.cards), reading.source, reading.problem) == (cards, source, "")


@pytest.mark.parametrize(
    ("model", "labels", "advertised", "problem"),
    [
        ("H100-80G", {"nvidia.com/mig.config": "all-1g.10gb"}, {"1g.10gb": 10}, "gives 14 x"),
        ("H100-80G", {}, {"3g.40gb": 5}, "do not fit on 2 H100-80G cards"),
        ("H100-80G", {}, {"1g.5gb": 2}, "which H100-80G does not offer"),
        ("L4", {}, {"1g.10gb": 2}, "not in the MIG profile table"),
        (
            "H100-80G",
            {"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "pending"},
            {"1g.10gb": 14},
            "mig.config.state=pending",
        ),
    ],
)
def test_a_layout_that_cannot_be_read_says_why(
    model: str, labels: dict[str, str], advertised: dict[str, int], problem: str
) -> None:
    reading = read_node_layout(gpu_model=model, gpu_count=2, labels=labels, advertised=advertised)
    assert reading.cards == ()
    assert problem in reading.problem


def test_inventory_stores_the_layout_the_cluster_reports(org: Org) -> None:
    flavor: Flavor = FlavorFactory.create(mig=True, gpu_model="H100-80G")
    pool = flavor.pool.slug
    balanced = {"1g_10gb": 4, "2g_20gb": 2, "3g_40gb": 2}
    apply_inventory(
        [
            mig_node("gpu-label", pool, "all-balanced", **balanced),
            mig_node("gpu-counts", pool, None, **{"1g_10gb": 7, "3g_40gb": 2}),
        ]
    )
    assert layouts("gpu-label") == [{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}] * 2
    assert layouts("gpu-counts") == [{"3g.40gb": 2}, {"1g.10gb": 7}]
    assert Node.objects.get(name="gpu-label").held_back_reason == ""
    assert Node.objects.get(name="gpu-label").gpu_model == "H100-80G"


def test_a_node_whose_layout_cannot_be_read_is_not_offered_and_blocks_with_mig_layout(
    org: Org,
) -> None:
    tier = TierFactory.create(allowed_teams=[org.team_a])
    flavor: Flavor = FlavorFactory.create(
        mig=True,
        gpu_model="H100-80G",
        mig_profile="1g.10gb",
        gpu_equivalent=Decimal("0.1429"),
        pool__tier=tier,
    )
    QuotaFactory.create(team=org.team_a, flavor=flavor, guaranteed=8, limit=8)
    pool = flavor.pool.slug
    apply_inventory([mig_node("gpu-odd", pool, "all-1g.10gb", **{"1g_10gb": 14})])
    request = GpuRequestFactory.create(
        project=org.project_a, flavor=flavor, gpu_count=1, to="queued"
    )
    # The label says seven 1g.10gb per card, the node advertises ten over two cards.
    counts = apply_inventory([mig_node("gpu-odd", pool, "all-1g.10gb", **{"1g_10gb": 10})])
    assert counts["held_back"] == 1
    node = Node.objects.get(name="gpu-odd")
    assert "gives 14 x 1g.10gb on 2 cards, but the node advertises 10 x 1g.10gb" in (
        node.mig_layout_problem
    )
    assert node.held_back_reason.startswith("Its MIG layout cannot be read")
    assert layouts("gpu-odd") == [{}, {}]
    engine_node = next(n for n in build_snapshot().nodes if n.id == "gpu-odd")
    assert not engine_node.schedulable
    with TestCase.captureOnCommitCallbacks(execute=False):
        cycle.run_cycle()
    request = GpuRequest.objects.get(pk=request.pk)
    assert request.status == RequestStatus.QUEUED
    assert request.blocker["code"] == "mig_layout"
    assert request.blocker["message"].startswith(
        "The MIG layout of node gpu-odd cannot be read from the cluster, so it is not offered "
        "for MIG work: nvidia.com/mig.config=all-1g.10gb gives 14 x 1g.10gb"
    )
    # Once the cluster's counts agree with the label, the node takes the work.
    apply_inventory([mig_node("gpu-odd", pool, "all-1g.10gb", **{"1g_10gb": 14})])
    assert Node.objects.get(name="gpu-odd").mig_layout_problem == ""
    with TestCase.captureOnCommitCallbacks(execute=False):
        cycle.run_cycle()
    assert GpuRequest.objects.get(pk=request.pk).status != RequestStatus.QUEUED
