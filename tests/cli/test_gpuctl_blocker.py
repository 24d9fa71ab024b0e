"""`gpuctl get` says what keeps a waiting request from starting, against a live portal."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gpuctl.cli import blocker_line
from tests.cli.conftest import Gpuctl
from tests.scheduling.test_blockers import run_cycle, submit, whole_pool
from tests.support.personas import Org

pytestmark = pytest.mark.integration


def test_blocker_line_reads_code_then_message() -> None:
    assert blocker_line({"code": "capacity", "message": "Pool p is full."}) == (
        "capacity: Pool p is full."
    )
    assert blocker_line({}) == "-"


def test_gpuctl_get_shows_the_blocker_of_a_waiting_request(
    logged_in: Callable[[str], Gpuctl], org: Org
) -> None:
    flavor = whole_pool(org, nodes=(4,), guaranteed=16, limit=16)
    submit(org, flavor, 4)
    waiting = submit(org, flavor, 2)
    run_cycle()
    gpuctl = logged_in("dev_a")
    as_table = gpuctl("get", str(waiting.pk))
    assert as_table.returncode == 0, as_table.stderr
    line = next(line for line in as_table.stdout.splitlines() if line.startswith("blocker "))
    assert line.split(None, 1)[1] == (
        f"capacity: Pool {flavor.pool.name} has too little free for the 2 GPU-eq it needs; it "
        "starts as running work ends."
    )
    as_json = json.loads(gpuctl("get", str(waiting.pk), "-o", "json").stdout)
    assert as_json["blocker"]["code"] == "capacity"
    assert as_json["blocker"]["detail"]["demand_ge"] == 2.0
