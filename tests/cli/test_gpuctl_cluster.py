"""`gpuctl get` says which cluster a request was asked to run on, or that any may do."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from scheduling.models import NodePool
from tests.cli.conftest import Gpuctl
from tests.support.clusters import make_cluster
from tests.support.factories import GpuRequestFactory
from tests.support.fleet import make_fleet
from tests.support.personas import Org

pytestmark = pytest.mark.integration


def _field(table: str, name: str) -> str:
    line = next(line for line in table.splitlines() if line.startswith(f"{name} "))
    return line.split(None, 1)[1].strip()


def test_gpuctl_get_shows_the_requests_cluster(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    fleet = make_fleet(org)
    east = make_cluster(org.admin)
    pool = NodePool.objects.create(
        name="A100 east", slug="a100-east", tier=fleet.a100.pool.tier, cluster=east,
        sharing_mode=fleet.a100.pool.sharing_mode,
    )  # fmt: skip
    fleet.a100.other_pools.add(pool)
    pinned = GpuRequestFactory.create(
        project=org.project_a, flavor=fleet.a100, actor=org.dev_a, cluster=east
    )
    free = GpuRequestFactory.create(project=org.project_a, flavor=fleet.a100, actor=org.dev_a)
    gpuctl = logged_in("dev_a")
    shown = gpuctl("get", str(pinned.pk))
    assert shown.returncode == 0, shown.stderr
    assert _field(shown.stdout, "cluster") == "east"
    assert _field(gpuctl("get", str(free.pk)).stdout, "cluster") == "any (the scheduler chooses)"
    assert json.loads(gpuctl("get", str(free.pk), "-o", "json").stdout)["cluster"] is None
