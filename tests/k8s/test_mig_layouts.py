"""MIG layouts on the real control plane: nodes carrying the GPU operator's
`nvidia.com/mig.config` label and `nvidia.com/mig-*` resources are read into per-card layouts;
a node whose label and resources disagree is held back from MIG work."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.services.inventory import apply_inventory
from scheduling.demo import seed_demo_fleet
from scheduling.models import GpuDevice, Node
from scheduling.selectors.snapshot import build_snapshot
from scripts.testbed.cluster import NodeShape, Testbed
from tenants.services.organisation import seed_demo_organisation
from tests.k8s.conftest import Admin

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]


def h100_node(name: str, config: str | None, **mig: int) -> NodeShape:
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/mig.strategy": "mixed",
    }
    if config is not None:
        labels["nvidia.com/mig.config"] = config
        labels["nvidia.com/mig.config.state"] = "success"
    resources = {f"nvidia.com/mig-{p.replace('_', '.')}": str(n) for p, n in mig.items()}
    return NodeShape(name=name, pool="h100-mig", resources=resources, labels=labels)


NODES = [
    h100_node("mig-balanced", "all-balanced", **{"1g_10gb": 4, "2g_20gb": 2, "3g_40gb": 2}),
    h100_node("mig-counted", None, **{"1g_10gb": 7, "3g_40gb": 2}),
    # The label promises 7 x 1g.10gb per card (14); the node advertises 10.
    h100_node("mig-unreadable", "all-1g.10gb", **{"1g_10gb": 10}),
]


@pytest.fixture
def mig_nodes(k8s_testbed: Testbed, k8s_admin: Admin) -> Iterator[list[str]]:
    k8s_testbed.add_nodes(NODES)
    yield [n.name for n in NODES]
    for node in NODES:
        with contextlib.suppress(Exception):
            k8s_admin.core.delete_node(node.name, _preload_content=False)


def test_mig_layouts_are_read_from_the_label_and_resources(
    k8s_backend: Any, mig_nodes: list[str]
) -> None:
    seed_demo_fleet(teams=seed_demo_organisation(password="x"))
    reported = {n.name: n for n in k8s_backend.sync_inventory()}
    assert reported["mig-balanced"].labels["nvidia.com/mig.config"] == "all-balanced"
    assert reported["mig-unreadable"].mig_devices == {"1g.10gb": 10}
    counts = apply_inventory(list(reported.values()))
    assert counts["held_back"] == 1

    def layouts(name: str) -> list[dict[str, int]]:
        rows = GpuDevice.objects.filter(node__name=name).order_by("index")
        return list(rows.values_list("mig_layout", flat=True))

    assert layouts("mig-balanced") == [{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}] * 2
    assert layouts("mig-counted") == [{"3g.40gb": 2}, {"1g.10gb": 7}]
    # The demo node (4 x 7 x 1g.10gb and 4 x 2 x 3g.40gb, no label) is read from its counts.
    demo = layouts("h100-mig-1")
    assert sorted(map(sorted, (d.items() for d in demo))) == sorted(
        [[("1g.10gb", 7)]] * 4 + [[("3g.40gb", 2)]] * 4
    )
    unreadable = Node.objects.get(name="mig-unreadable")
    assert unreadable.mig_layout_problem == (
        "nvidia.com/mig.config=all-1g.10gb gives 14 x 1g.10gb on 2 cards, but the node "
        "advertises 10 x 1g.10gb."
    )
    assert unreadable.held_back_reason.startswith("Its MIG layout cannot be read")
    offered = {n.id: n.schedulable for n in build_snapshot().nodes}
    assert offered["mig-balanced"] and offered["mig-counted"] and offered["h100-mig-1"]
    assert not offered["mig-unreadable"]
