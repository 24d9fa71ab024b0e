"""`gpuctl keep-alive` against a live portal: the owner holds a running notebook's idle reclaim
off (by its id or its name), and every refusal is one line that says why."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from knox.models import AuthToken

from scheduling.models import GpuRequest, ReclaimPolicy
from tests.cli.conftest import Gpuctl
from tests.support.factories import GpuRequestFactory, admit, launch, report_running
from tests.support.fleet import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.integration

KEEP_ALIVE_SECONDS = 1800


def notebook(org: Org, fleet: Fleet, name: str, *, team: str = "a", **fields: object) -> GpuRequest:
    """A running request (a notebook unless told), brought there as the live portal does: the
    test settings admit and launch right after a submission; the cluster's report is ours."""
    fields = {"kind": "notebook", **fields}
    project = org.project_a if team == "a" else org.project_b
    request = GpuRequestFactory.create(
        project=project, flavor=fleet.l4_12g, name=name, to="queued", **fields
    )
    request.refresh_from_db()
    if request.status == "queued":
        admit(request)
    if request.status == "admitted":
        launch(request)
    report_running(request)
    request.refresh_from_db()
    assert request.status == "running", request.status
    return request


def clock(moment: datetime) -> str:
    """What gpuctl prints for a moment: local "14:20", with the weekday when not today."""
    local = moment.astimezone()
    if local.date() == datetime.now().astimezone().date():
        return local.strftime("%H:%M")
    return local.strftime("%a %H:%M")


@pytest.fixture
def keep_alive_on(fleet: Fleet) -> None:
    ReclaimPolicy.objects.update(notebook_keep_alive_seconds=KEEP_ALIVE_SECONDS)


@pytest.mark.usefixtures("keep_alive_on")
def test_the_owner_keeps_a_notebook_alive_by_name_or_id(
    logged_in: Callable[[str], Gpuctl], org: Org, fleet: Fleet
) -> None:
    mine = notebook(org, fleet, "explore-coco")
    gpuctl = logged_in("dev_a")

    before = timezone.now()
    kept = gpuctl("keep-alive", "explore-coco")

    assert kept.returncode == 0, kept.stderr
    mine.refresh_from_db()
    assert mine.idle_exempt_until is not None
    held = mine.idle_exempt_until - before
    assert (
        timedelta(seconds=KEEP_ALIVE_SECONDS - 60)
        < held
        <= timedelta(seconds=KEEP_ALIVE_SECONDS + 60)
    )
    assert kept.stdout == (
        f"explore-coco kept alive: not reclaimed for idling before "
        f"{clock(mine.idle_exempt_until)}\n"
    )
    as_json = json.loads(gpuctl("keep-alive", str(mine.pk), "-o", "json").stdout)
    assert as_json["id"] == mine.pk and as_json["idle_exempt_until"]


@pytest.mark.usefixtures("keep_alive_on")
def test_keep_alive_refusals_are_one_line_that_says_why(
    logged_in: Callable[[str], Gpuctl], org: Org, fleet: Fleet
) -> None:
    theirs = notebook(org, fleet, "their-notebook", team="b")
    job = notebook(org, fleet, "train", kind="job")
    first_twin = notebook(org, fleet, "twin")
    twin = notebook(org, fleet, "twin")
    gpuctl = logged_in("dev_a")

    refusals = {
        # Another team's request: as the API says, not found (its existence is not told).
        (str(theirs.pk),): "Error: Not found.",
        ("their-notebook",): (
            "Error: No running notebook of yours named 'their-notebook': see "
            "`gpuctl ls --mine -s running`."
        ),
        ("nope",): (
            "Error: No running notebook of yours named 'nope': see `gpuctl ls --mine -s running`."
        ),
        (
            "twin",
        ): f"Error: 2 notebooks are named 'twin' ({first_twin.pk}, {twin.pk}): give the id.",
        (str(job.pk),): "Error: Keep alive is for notebooks.",
    }
    for args, says in refusals.items():
        refused = gpuctl("keep-alive", *args)
        assert refused.returncode == 1, args
        assert refused.stderr == says + "\n", (args, refused.stderr)
    assert gpuctl("keep-alive").returncode == 2  # no request named: click's usage error
    theirs.refresh_from_db()
    assert theirs.idle_exempt_until is None

    # The team's lead reads the notebook but only its owner keeps it alive.
    gpuctl.login("lead_a")
    by_lead = gpuctl("keep-alive", str(twin.pk))
    assert (by_lead.returncode, by_lead.stderr) == (
        1,
        "Error: Only the notebook's owner keeps it alive.\n",
    )

    # A stopped notebook, and a tier without Keep alive.
    gpuctl.login("dev_a")
    assert gpuctl("cancel", str(twin.pk)).returncode == 0
    stopped = gpuctl("keep-alive", str(twin.pk))
    assert stopped.returncode == 1
    assert re.fullmatch(
        rf"Error: Request {twin.pk} is \w+; only running work can be kept alive\.\n",
        stopped.stderr,
    ), stopped.stderr
    ReclaimPolicy.objects.update(notebook_keep_alive_seconds=0)
    off = gpuctl("keep-alive", str(first_twin.pk))
    assert off.returncode == 1
    assert re.fullmatch(
        r"Error: The .+ tier has no Keep alive: ask your team lead for an idle exemption\.\n",
        off.stderr,
    ), off.stderr


def test_a_revoked_token_says_to_log_in_again(
    logged_in: Callable[[str], Gpuctl], org: Org, fleet: Fleet
) -> None:
    mine = notebook(org, fleet, "explore-coco")
    gpuctl = logged_in("dev_a")
    AuthToken.objects.filter(user=org.dev_a).delete()
    for args in (("keep-alive", str(mine.pk)), ("notifications", "show")):
        revoked = gpuctl(*args)
        assert revoked.returncode == 1, args
        assert revoked.stderr.endswith(
            "The portal no longer accepts your token: run `gpuctl login`.\n"
        ), revoked.stderr
        assert len(revoked.stderr.splitlines()) == 1
