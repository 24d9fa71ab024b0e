"""Table-driven tests of the pool and node filter plugins."""

from __future__ import annotations

import pytest

from scheduling.engine.filters import (
    capacity,
    fit_node,
    gpu_model,
    mig_start,
    node_labels,
    node_schedulable,
    node_taints,
    pool_kind,
    pool_sharing,
    shared_node,
)
from scheduling.engine.state import shape_of
from scheduling.engine.types import Pool, Taint

from .builders import FLAVOR, alloc, fleet, node, req, state_and_shape, whole_claims


@pytest.mark.parametrize(
    ("pool", "flavor", "kind", "passes"),
    [
        (Pool("p", allowed_kinds=("training",)), "gpu", "training", True),
        (Pool("p", allowed_kinds=("inference",)), "gpu", "training", False),
    ],
)
def test_pool_kind_filter_admits_only_allowed_workload_kinds(
    pool: Pool, flavor: str, kind: str, passes: bool
) -> None:
    shape = shape_of(req("r", flavor, kind=kind), FLAVOR[flavor])
    assert (pool_kind(pool, shape) is None) is passes


@pytest.mark.parametrize(
    ("sharing", "flavor", "passes"),
    [
        ("exclusive", "gpu", True),
        ("vgpu", "gpu", True),
        ("mig", "gpu", True),
        ("exclusive", "v20", False),
        ("vgpu", "v20", True),
        ("mig", "v20", False),
        ("exclusive", "m1", False),
        ("vgpu", "m1", False),
        ("mig", "m1", True),
    ],
)
def test_pool_sharing_filter_matches_flavor_kind_to_sharing_mode(
    sharing: str, flavor: str, passes: bool
) -> None:
    pool = Pool("p", sharing=sharing)  # type: ignore[arg-type]
    shape = shape_of(req("r", flavor), FLAVOR[flavor])
    assert (pool_sharing(pool, shape) is None) is passes


def test_schedulable_filter_rejects_cordoned_node() -> None:
    st, shape = state_and_shape(fleet(node("n1", schedulable=False), node("n2")), req("r"))
    assert "cordoned" in (node_schedulable(st, st.node_of["n1"], shape) or "")
    assert node_schedulable(st, st.node_of["n2"], shape) is None


@pytest.mark.parametrize(
    ("labels", "pool_selector", "request_selector", "passes"),
    [
        ((), (), (), True),
        ((("zone", "a"),), (), (("zone", "a"),), True),
        ((("zone", "b"),), (), (("zone", "a"),), False),
        ((), (("gpu", "yes"),), (), False),
        ((("gpu", "yes"),), (("gpu", "yes"),), (), True),
    ],
)
def test_label_filter_requires_pool_and_request_selectors(
    labels: tuple[tuple[str, str], ...],
    pool_selector: tuple[tuple[str, str], ...],
    request_selector: tuple[tuple[str, str], ...],
    passes: bool,
) -> None:
    snap = fleet(node("n", labels=labels), pools=(Pool("excl", node_selector=pool_selector),))
    st, shape = state_and_shape(snap, req("r", node_selector=request_selector))
    assert (node_labels(st, 0, shape) is None) is passes


@pytest.mark.parametrize(
    ("taints", "pool_taints", "tolerations", "passes"),
    [
        ((), (), (), True),
        ((Taint("gpu"),), (), (), False),
        ((Taint("gpu"),), (), ("gpu",), True),
        ((Taint("gpu"),), (Taint("gpu"),), (), True),
        ((Taint("soft", effect="PreferNoSchedule"),), (), (), True),
        ((Taint("evict", effect="NoExecute"),), (), (), False),
    ],
)
def test_taint_filter_requires_toleration_unless_pool_tolerates(
    taints: tuple[Taint, ...],
    pool_taints: tuple[Taint, ...],
    tolerations: tuple[str, ...],
    passes: bool,
) -> None:
    snap = fleet(node("n", taints=taints), pools=(Pool("excl", taints=pool_taints),))
    st, shape = state_and_shape(snap, req("r", tolerations=tolerations))
    assert (node_taints(st, 0, shape) is None) is passes


@pytest.mark.parametrize(
    ("flavor", "pinned", "node_model", "passes"),
    [
        ("gpu", None, "L4", True),
        ("gpu", "L4", "L4", True),
        ("gpu", "L4", "A100-80G", False),
        ("a100", None, "A100-80G", True),
        ("a100", None, "L4", False),
        ("a100", "L4", "L4", False),  # pin contradicts flavor: nothing matches
    ],
)
def test_gpu_model_filter_honours_flavor_model_and_pin(
    flavor: str, pinned: str | None, node_model: str, passes: bool
) -> None:
    st, shape = state_and_shape(
        fleet(node("n", model=node_model)), req("r", flavor, pinned_model=pinned)
    )
    assert (gpu_model(st, 0, shape) is None) is passes


def test_shared_node_filter_rejects_exclusive_request_on_occupied_node() -> None:
    snap = fleet(node("n"), allocations=[alloc("run", whole_claims("n", [0]))])
    st, shape = state_and_shape(snap, req("r", allow_shared_node=False))
    assert "node of its own" in (shared_node(st, 0, shape) or "")


def test_shared_node_filter_rejects_any_request_on_node_held_exclusively() -> None:
    snap = fleet(node("n"), allocations=[alloc("run", whole_claims("n", [0]), exclusive_node=True)])
    st, shape = state_and_shape(snap, req("r"))
    assert "exclusively" in (shared_node(st, 0, shape) or "")


def test_shared_node_filter_passes_shared_request_on_shared_node() -> None:
    snap = fleet(node("n"), allocations=[alloc("run", whole_claims("n", [0]))])
    st, shape = state_and_shape(snap, req("r"))
    assert shared_node(st, 0, shape) is None


@pytest.mark.parametrize(
    ("whole", "count", "passes"),
    [((), 8, True), ((0,), 8, False), ((0,), 7, True), ((0, 1, 2, 3), 4, True)],
)
def test_whole_capacity_filter_counts_free_cards(
    whole: tuple[int, ...], count: int, passes: bool
) -> None:
    st, shape = state_and_shape(fleet(node("n", whole=whole)), req("r", gpu_count=count))
    assert (capacity(st, 0, shape) is None) is passes


def test_vgpu_capacity_counts_only_fully_free_cards_for_whole_requests() -> None:
    snap = fleet(node("n", pool="vgpu", gpus=2, free_mem=[81_920, 71_680]))
    st, shape = state_and_shape(snap, req("r", gpu_count=2))
    assert capacity(st, 0, shape) is not None
    st, shape = state_and_shape(snap, req("r", gpu_count=1))
    assert fit_node(st, 0, shape, 1) == ((0, True, 0, 0, 0),)


@pytest.mark.parametrize(
    ("free_mem", "free_cores", "passes"),
    [
        ([20_480], [25], True),
        ([20_479], [100], False),
        ([81_920], [24], False),
        ([10_240, 20_480], [100, 100], True),
    ],
)
def test_vgpu_filter_rejects_device_without_enough_memory_or_cores(
    free_mem: list[int], free_cores: list[int], passes: bool
) -> None:
    snap = fleet(
        node("n", pool="vgpu", gpus=len(free_mem), free_mem=free_mem, free_cores=free_cores)
    )
    st, shape = state_and_shape(snap, req("r", "v20"))
    assert (capacity(st, 0, shape) is None) is passes


def test_vgpu_filter_rejects_vgpu_on_whole_allocated_card() -> None:
    st, shape = state_and_shape(fleet(node("n", pool="vgpu", gpus=1, whole=(0,))), req("r", "v20"))
    assert capacity(st, 0, shape) is not None


def test_vgpu_fit_does_not_split_a_share_across_two_devices() -> None:
    snap = fleet(node("n", pool="vgpu", gpus=2, free_mem=[10_240, 10_240]))
    st, shape = state_and_shape(snap, req("r", "v20"))
    assert capacity(st, 0, shape) is not None


@pytest.mark.parametrize(
    ("mask", "flavor", "passes"),
    [
        (0b0000000, "m7", True),
        (0b0000001, "m7", False),
        (0b0000001, "m4", False),  # 4g must start at slice 0
        (0b0001111, "m3", True),  # 3g fits at slice 4
        (0b1110000, "m3", True),  # 3g fits at slice 0
        (0b1111110, "m1", True),
        (0b1111111, "m1", False),
        (0b0101010, "m2", False),  # 2g needs an aligned pair
    ],
)
def test_mig_filter_requires_a_free_aligned_slice_of_the_profile(
    mask: int, flavor: str, passes: bool
) -> None:
    st, shape = state_and_shape(
        fleet(node("n", pool="mig", gpus=1, mig_masks=[mask])), req("r", flavor)
    )
    assert (capacity(st, 0, shape) is None) is passes


def test_mig_start_keeps_largest_block_free() -> None:
    # Slices 0-3 free, 4-6 used: a 1g at slice 3 leaves 0-2 free, where a 3g still fits;
    # the naive first start (0) would leave only a 2g.
    st, _ = state_and_shape(fleet(node("n", pool="mig", gpus=1, mig_masks=[0b1110000])), req("r"))
    assert mig_start(st, 0, "1g.10gb") == 3
    assert mig_start(st, 0, "1g.10gb", best=False) == 0


def test_mig_filter_rejects_mig_request_on_non_mig_pool() -> None:
    st, shape = state_and_shape(fleet(node("n", pool="vgpu", gpus=1)), req("r", "m1"))
    assert capacity(st, 0, shape) is not None
