"""Policy replay against the live cycle, the `replay` command and the admin page."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.engine.replay import replay
from scheduling.models import Allocation, Flavor, GpuRequest, Tier
from scheduling.services import cycle
from scheduling.services.policy_replay import (
    PolicyFileError,
    compare_policies,
    load_policy_change,
    recorded_trace,
)
from scheduling.services.quotas import set_quota
from tenants.models import Project
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

CYCLE = 10
WINDOW = 1200


@dataclass(frozen=True)
class Arrival:
    offset: int
    team: str  # "a" or "b"
    flavor: str
    gpu_count: int
    runtime: int


def scenario() -> list[Arrival]:
    """Both teams over-asking for the 16 A100 cards, plus MIG and vGPU work, over 5 minutes."""
    out = []
    for i in range(16):
        out.append(Arrival(15 * i + 3, "ab"[i % 2], "a100-80g", 1 + (i * 7) % 4, 150 + 31 * i))
    for i in range(6):
        out.append(Arrival(40 * i + 7, "ab"[i % 2], "h100-1g10gb", 1, 200 + 61 * i))
        out.append(Arrival(45 * i + 5, "ba"[i % 2], "l4-12g", 1, 300 + 53 * i))
    return sorted(out, key=lambda a: (a.offset, a.flavor))


def equal_quotas(org: Org, fleet: Fleet) -> None:
    """Team B may use the A100s too; each team is guaranteed half of them and may borrow the
    other half while it is idle (borrowed work is preemptible)."""
    Tier.objects.get(slug="training").allowed_teams.add(org.team_b)
    for team in (org.team_a, org.team_b):
        set_quota(actor=org.admin, team=team, flavor=fleet.a100, guaranteed=8, limit=64)


def run_live(org: Org, start: datetime) -> list[tuple[str, float, tuple[str, ...]]]:
    """Play `scenario()` through `run_cycle` on the database, one cycle per 10 s tick; the
    test plays the cluster: admitted work starts at its tick and ends after its runtime."""
    projects: dict[str, Project] = {"a": org.project_a, "b": org.project_b}
    flavors = {f.slug: f for f in Flavor.objects.all()}
    arrivals = scenario()
    running: dict[int, tuple[datetime, int]] = {}
    runtime: dict[int, int] = {}
    starts: list[tuple[str, float, tuple[str, ...]]] = []
    for k in range(WINDOW // CYCLE + 1):
        now = start + timedelta(seconds=CYCLE * k)
        if (
            not arrivals
            and not running
            and not GpuRequest.objects.filter(status=RequestStatus.QUEUED).exists()
        ):
            break  # all done: later cycles would find nothing to do
        for pk, (began, ran) in list(running.items()):
            if began + timedelta(seconds=ran) <= now:
                ended = began + timedelta(seconds=ran)
                Allocation.objects.filter(request_id=pk, ended_at__isnull=True).update(
                    ended_at=ended, end_reason="succeeded"
                )
                GpuRequest.objects.filter(pk=pk).update(
                    status=RequestStatus.SUCCEEDED, finished_at=ended
                )
                del running[pk]
        while arrivals and start + timedelta(seconds=arrivals[0].offset) <= now:
            a = arrivals.pop(0)
            request = GpuRequestFactory.create(
                project=projects[a.team],
                flavor=flavors[a.flavor],
                gpu_count=a.gpu_count,
                max_runtime_seconds=2 * 3600,
                to="queued",
            )
            # Submitted, approved and queued at the scenario's time.
            at = start + timedelta(seconds=a.offset)
            GpuRequest.objects.filter(pk=request.pk).update(
                created_at=at, queued_at=at, approved_at=at if request.approved_at else None
            )
            runtime[request.pk] = a.runtime
        result = cycle.run_cycle(now=now.timestamp())
        for pk in result.preempted:
            running.pop(pk, None)
            GpuRequest.objects.filter(pk=pk).update(queued_at=now)  # requeued at this tick
        for pk in result.admitted:
            Allocation.objects.filter(request_id=pk, ended_at__isnull=True).update(started_at=now)
            GpuRequest.objects.filter(pk=pk).update(started_at=now)
            running[pk] = (now, runtime[pk])
            node_name = Allocation.objects.get(request_id=pk, ended_at__isnull=True).node_name
            starts.append((str(pk), now.timestamp(), tuple(node_name.split(","))))
    return starts


@pytest.fixture
def window_start() -> datetime:
    return (timezone.now() - timedelta(days=1)).replace(microsecond=0)


def test_replay_admits_what_the_live_cycle_admitted_on_the_same_policy(
    org: Org, fleet: Fleet, window_start: datetime
) -> None:
    equal_quotas(org, fleet)
    live = run_live(org, window_start)
    assert len(live) >= len(scenario())  # all of it ran, some of it after waiting

    trace = recorded_trace(days=WINDOW / 86_400, now=window_start + timedelta(seconds=WINDOW))
    assert trace.start == window_start.timestamp()
    result = replay(trace, policy=cycle.POLICY, cycle_seconds=CYCLE)

    assert [(s.request_id, s.at, s.node_ids) for s in result.starts] == live
    waited = [s for s in result.starts if s.at > trace.start + 60]
    assert waited, "the scenario should make work wait for capacity"
    assert result.preemptions, "borrowed A100 work should be reclaimed"


def record_history(org: Org, start: datetime, arrivals: list[Arrival]) -> None:
    """Requests as the database keeps them once they ran: queued at the arrival's time, run
    for its runtime (when they started in the record does not matter to the replay)."""
    projects: dict[str, Project] = {"a": org.project_a, "b": org.project_b}
    flavors = {f.slug: f for f in Flavor.objects.all()}
    for a in arrivals:
        request = GpuRequestFactory.create(
            project=projects[a.team],
            flavor=flavors[a.flavor],
            gpu_count=a.gpu_count,
            max_runtime_seconds=2 * 3600,
            to="queued",
        )
        at = start + timedelta(seconds=a.offset)
        GpuRequest.objects.filter(pk=request.pk).update(
            created_at=at,
            queued_at=at,
            approved_at=at if request.approved_at else None,
            started_at=at + timedelta(seconds=60),
            finished_at=at + timedelta(seconds=60 + a.runtime),
            status=RequestStatus.SUCCEEDED,
        )


def shared_quotas(org: Org, fleet: Fleet) -> None:
    """Each team is guaranteed 4 of the 16 A100 cards; the other 8 are nobody's and lent, as
    they free up, to the team with the lower weighted share (borrowed work is preemptible)."""
    Tier.objects.get(slug="training").allowed_teams.add(org.team_b)
    for team in (org.team_a, org.team_b):
        set_quota(actor=org.admin, team=team, flavor=fleet.a100, guaranteed=4, limit=64)


def weighting_team_b(org: Org, window_start: datetime) -> tuple[dict[str, float], ...]:
    """Replay a burst of 4-card A100 jobs from both teams, without and with team B weighted
    4:1; the teams' median waits and the number of preemptions of each replay."""
    burst = [Arrival(5 * i, "ab"[i % 2], "a100-80g", 4, 300) for i in range(12)]
    record_history(org, window_start, burst)
    trace = recorded_trace(days=WINDOW / 86_400, now=window_start + timedelta(seconds=WINDOW))
    change = load_policy_change("team_weights: {team-b: 4.0}", fleet=trace.fleet)
    comparison = compare_policies(trace=trace, change=change)
    assert comparison.changed is not None
    return tuple(
        {**dict(r.team_wait_p50), "preemptions": r.preemptions}
        for r in (comparison.current, comparison.changed)
    )


def test_raising_a_teams_weight_shortens_its_wait(
    org: Org, fleet: Fleet, window_start: datetime
) -> None:
    """Both teams ask for far more A100 cards than there are: the cards no team is guaranteed
    go to team B first when it is weighted 4:1."""
    shared_quotas(org, fleet)
    before, after = weighting_team_b(org, window_start)
    assert after["team-b"] < before["team-b"]
    assert after["team-a"] >= before["team-a"]


def test_a_weight_does_not_take_capacity_another_team_is_guaranteed(
    org: Org, fleet: Fleet, window_start: datetime
) -> None:
    """The two guarantees cover every A100 card: whatever B's weight, a card A frees goes back
    to A's waiting work, without B borrowing it first only to be preempted."""
    equal_quotas(org, fleet)
    before, after = weighting_team_b(org, window_start)
    assert after == before
    assert after["preemptions"] == 0


def test_a_policy_naming_an_unknown_team_or_a_bad_value_is_refused(org: Org, fleet: Fleet) -> None:
    trace = recorded_trace(days=1, now=timezone.now())
    for text, says in [
        ("team_weights: {nobody: 2}", "no team 'nobody'"),
        ("team_weights: {team-a: -1}", "must be above 0"),
        ("short_reserve: {a100-training: 1.5}", "below 1"),
        ("scoring: {a100-training: random}", "binpack or spread"),
        ("preemption: maybe", "true or false"),
        ("quotas: [{team: team-a, flavor: nope, guaranteed: 1, limit: 2}]", "no flavor"),
        ("colour: blue", "Unknown policy key"),
        ("{not json", "neither valid JSON nor valid YAML"),
    ]:
        with pytest.raises(PolicyFileError, match=says):
            load_policy_change(text, fleet=trace.fleet)


def test_a_quota_change_is_counted_in_gpu_equivalents(org: Org, fleet: Fleet) -> None:
    trace = recorded_trace(days=1, now=timezone.now())
    text = json.dumps(
        {"quotas": [{"team": "team-a", "flavor": "l4-12g", "guaranteed": 4, "limit": 6}]}
    )
    (quota,) = load_policy_change(text, fleet=trace.fleet).quotas
    assert (quota.guaranteed, quota.limit) == (2.0, 3.0)  # l4-12g is half a card


def _small_history(org: Org, fleet: Fleet, window_start: datetime) -> None:
    equal_quotas(org, fleet)
    record_history(org, window_start, scenario())


def test_the_command_prints_both_policies_side_by_side(
    org: Org, fleet: Fleet, window_start: datetime, tmp_path: Path
) -> None:
    _small_history(org, fleet, window_start)
    policy = tmp_path / "policy.yaml"
    policy.write_text("team_weights: {team-a: 3.0}\npreemption: false\n")
    out = StringIO()
    call_command("replay", "--days", "2", "--policy", str(policy), stdout=out)
    text = out.getvalue()
    assert "submissions" in text.splitlines()[0]
    header = text.splitlines()[1].split()
    assert header == ["figure", "current", "changed"]
    assert "wait p50, tier Training" in text
    assert "GPU-equivalent utilisation" in text and "stranded GPU-hours" in text

    out = StringIO()
    call_command("replay", "--days", "2", "--policy", str(policy), "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["window"]["submissions"] == len(scenario())
    assert data["current"]["started"] == data["changed"]["started"]
    assert data["changed"]["preemptions"] == 0


def test_the_command_refuses_a_bad_policy_file(org: Org, fleet: Fleet, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text('{"team_weights": {"ghosts": 2}}')
    with pytest.raises(CommandError, match="no team 'ghosts'"):
        call_command("replay", "--days", "1", "--policy", str(policy), stdout=StringIO())
    with pytest.raises(CommandError, match="Cannot read the policy file"):
        call_command("replay", "--policy", str(tmp_path / "missing.yaml"), stdout=StringIO())


def _client(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def test_the_page_is_for_platform_admins_only(org: Org, fleet: Fleet) -> None:
    url = reverse("policy-replay-page")
    for user in (org.lead_a, org.dev_b, org.finance, org.nobody):
        assert _client(user).get(url).status_code == 404
        assert _client(user).post(url, {"days": "1"}).status_code == 404
    assert Client().get(url).status_code == 302  # to the login page
    page = _client(org.admin).get(url)
    assert page.status_code == 200
    assert b'data-testid="replay-form"' in page.content


def test_the_page_replays_and_compares(org: Org, fleet: Fleet, window_start: datetime) -> None:
    _small_history(org, fleet, window_start)
    page = _client(org.admin).post(
        reverse("policy-replay-page"), {"days": "2", "policy": "team_weights: {team-b: 2}"}
    )
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="replay-comparison"' in html
    assert "With your changes" in html and "wait p90, tier Training" in html


def test_a_bad_policy_on_the_page_is_a_form_error(org: Org, fleet: Fleet) -> None:
    page = _client(org.admin).post(
        reverse("policy-replay-page"), {"days": "1", "policy": "team_weights: [1, 2"}
    )
    assert page.status_code == 400
    html = page.content.decode()
    assert 'data-testid="policy-error"' in html and "neither valid JSON nor valid YAML" in html
    assert 'data-testid="replay-comparison"' not in html
    page = _client(org.admin).post(reverse("policy-replay-page"), {"days": "-3"})
    assert page.status_code == 400


def test_a_fleet_too_large_for_the_page_points_to_the_command(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("scheduling.services.policy_replay.PAGE_MAX_NODES", 1)
    page = _client(org.admin).post(reverse("policy-replay-page"), {"days": "1"})
    assert page.status_code == 400
    html = page.content.decode()
    assert 'data-testid="replay-error"' in html and "manage.py replay" in html
