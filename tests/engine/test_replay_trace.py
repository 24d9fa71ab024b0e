"""The policy replay benchmark's trace offers every pool the load it states."""

from collections import defaultdict

import pytest

from bench.replay import build_trace


@pytest.mark.parametrize("load", [0.5, 0.8])
def test_every_pool_is_offered_the_stated_load(load: float) -> None:
    trace = build_trace(seed=7, scale=0.1, days=3.0, load=load)
    fleet = trace.fleet
    pool_of_node = {node.id: node.pool for node in fleet.nodes}
    capacity: dict[str, int] = defaultdict(int)
    for device in fleet.devices:
        capacity[pool_of_node[device.node_id]] += 1
    ge = {flavor.id: flavor.gpu_equivalent for flavor in fleet.flavors}
    work: dict[str, float] = defaultdict(float)
    for sub in trace.submissions:
        request = sub.request
        assert sub.runtime_seconds is not None
        work[request.pools[0]] += request.gpu_count * ge[request.flavor] * sub.runtime_seconds
    window = trace.end - trace.start
    offered = {pool: work[pool] / (capacity[pool] * window) for pool in capacity}
    assert set(offered) == set(work), "every pool gets submissions"
    for pool, value in offered.items():
        # Sampling noise of a small fleet; the drawing it replaced offered 0.29x to 1.75x.
        assert value == pytest.approx(load, rel=0.25), (pool, offered)
    times = [sub.queued_at for sub in trace.submissions]
    assert times == sorted(times)
    assert len({sub.request.id for sub in trace.submissions}) == len(trace.submissions)
