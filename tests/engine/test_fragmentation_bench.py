"""The packing benchmark's code (bench/fragmentation.py) runs and measures what it says, small."""

from __future__ import annotations

import numpy as np

from bench.fragmentation import PLACERS, bursty_day, demand_ge, draw_requests, fill, mixed_fleet
from scheduling.engine.replay import replay
from scheduling.engine.types import Policy


def test_fill_stops_at_full_demand_and_never_allocates_more_than_the_fleet() -> None:
    fleet = mixed_fleet(3, 12)
    arrivals = draw_requests(np.random.default_rng(3), 6 * len(fleet.devices))
    capacity = float(len(fleet.devices))
    for placer in PLACERS:
        got = fill(fleet, arrivals, placer)
        arrived = sum(demand_ge(r) for r in arrivals[: got.arrived])
        assert arrived >= capacity and arrived - demand_ge(arrivals[got.arrived - 1]) < capacity
        assert 0 < got.allocated_ge <= capacity
        assert 0 < got.admitted <= got.arrived


def test_the_fleet_mixes_models_sharing_modes_and_host_resources() -> None:
    fleet = mixed_fleet(1, 40)
    assert {p.sharing for p in fleet.pools} == {"exclusive", "vgpu", "mig"}
    assert len({n.gpu_model for n in fleet.nodes}) >= 4
    assert all(n.cpu_millicores and n.memory_mib for n in fleet.nodes)
    reqs = draw_requests(np.random.default_rng(1), 400)
    shares = [r.vgpu_cores_percent for r in reqs if r.flavor.startswith("share-")]
    assert min(shares) == 10 and max(shares) == 100
    assert {r.gpu_count for r in reqs if r.flavor == "whole"} == {1, 2, 4, 8}
    assert any(r.pinned_model for r in reqs) and all(r.cpu_millicores > 0 for r in reqs)


def test_the_bursty_day_replays_with_departures_under_both_placers() -> None:
    fleet = mixed_fleet(2, 10)
    trace = bursty_day(fleet, 2, hours=2.0, load=1.0)
    assert trace.submissions
    for placer in PLACERS:
        res = replay(trace, policy=Policy(placer=placer), cycle_seconds=120.0)
        assert res.started > 0 and res.finished > 0
        assert 0 < res.utilisation <= 1
        assert res.stranded_gpu_hours >= 0
