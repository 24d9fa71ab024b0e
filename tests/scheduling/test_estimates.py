"""Estimated starts from the engine's forecast: written after cycles, shown on the request page,
in the API and on the request form (what-if), with a cross-tenant check of the what-if route."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client, TestCase
from django.urls import reverse
from django.utils import timezone

from scheduling import dispatch, tasks
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, Flavor, GpuRequest, NodePool
from scheduling.selectors.history import runtime_history
from scheduling.services import cycle, estimates
from scheduling.templatetags.estimate_tags import clock, wait_words
from tests.support.cross_tenant import covers
from tests.support.factories import (
    FlavorFactory,
    GpuDeviceFactory,
    GpuRequestFactory,
    NodeFactory,
    QuotaFactory,
    TierFactory,
)
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

HOUR = 3600


def whole_pool(org: Org, *, gpus: int = 4) -> Flavor:
    """A whole-card flavor of team A in a pool of its own: one node of `gpus` cards."""
    tier = TierFactory.create(allowed_teams=[org.team_a])
    flavor: Flavor = FlavorFactory.create(pool__tier=tier)
    node = NodeFactory.create(pool=flavor.pool, gpu_model=flavor.gpu_model)
    for index in range(gpus):
        GpuDeviceFactory.create(node=node, index=index, memory_mib=flavor.gpu_memory_mib)
    QuotaFactory.create(team=org.team_a, flavor=flavor, guaranteed=16, limit=16)
    return flavor


def submit(org: Org, flavor: Flavor, gpu_count: int, **fields: Any) -> GpuRequest:
    return GpuRequestFactory.create(
        project=org.project_a, flavor=flavor, gpu_count=gpu_count, to="queued", **fields
    )


def run_cycle() -> None:
    with TestCase.captureOnCommitCallbacks(execute=False):
        cycle.run_cycle()


def finished(org: Org, flavor: Flavor, *, ratio: float, declared: int = 4 * HOUR) -> None:
    """A run of dev_a that ended after `ratio` of its declared max runtime."""
    request = submit(org, flavor, 1, max_runtime_seconds=declared)
    ended = timezone.now() - timedelta(hours=1)
    GpuRequest.objects.filter(pk=request.pk).update(
        status=RequestStatus.SUCCEEDED,
        started_at=ended - timedelta(seconds=declared * ratio),
        finished_at=ended,
    )


def busy_then_waiting(org: Org, flavor: Flavor) -> tuple[GpuRequest, GpuRequest]:
    """The pool's 4 cards taken by one request (8 h declared), a second one waiting for them."""
    running = submit(org, flavor, 4, max_runtime_seconds=8 * HOUR)
    waiting = submit(org, flavor, 4, max_runtime_seconds=HOUR)
    run_cycle()
    running.refresh_from_db()
    waiting.refresh_from_db()
    # Admitted, or further where after-commit work runs at once (live-server tests).
    assert running.status in (RequestStatus.ADMITTED, RequestStatus.LAUNCHING)
    assert waiting.status == RequestStatus.QUEUED
    return running, waiting


def test_refresh_stores_the_estimate_and_its_interval_on_queued_requests(org: Org) -> None:
    flavor = whole_pool(org)
    running, waiting = busy_then_waiting(org, flavor)
    before = timezone.now()
    estimates.refresh_start_estimates()
    waiting.refresh_from_db()
    running.refresh_from_db()
    assert waiting.estimated_start_at is not None
    assert waiting.estimate_low_at is not None and waiting.estimate_high_at is not None
    assert waiting.estimate_low_at <= waiting.estimated_start_at <= waiting.estimate_high_at
    # No history: the running work takes its declared 8 h.
    expected = before + timedelta(hours=8)
    assert abs((waiting.estimated_start_at - expected).total_seconds()) < 120
    assert running.estimated_start_at is None


def test_history_of_shorter_runs_brings_the_estimate_forward(org: Org) -> None:
    flavor = whole_pool(org)
    for _ in range(20):
        finished(org, flavor, ratio=0.25)
    history = runtime_history()
    ratio = history.band_for(owner_id=org.dev_a.pk, flavor_id=flavor.pk).mid
    assert ratio < 0.5
    _, waiting = busy_then_waiting(org, flavor)
    estimates.refresh_start_estimates()
    waiting.refresh_from_db()
    assert waiting.estimated_start_at is not None
    wait = (waiting.estimated_start_at - timezone.now()).total_seconds()
    # The running request's 8 h declared, shortened by the history's ratio (not 8 h).
    assert wait == pytest.approx(8 * HOUR * ratio, abs=120)


def test_estimates_are_cleared_once_the_request_leaves_the_queue(org: Org) -> None:
    flavor = whole_pool(org)
    running, waiting = busy_then_waiting(org, flavor)
    estimates.refresh_start_estimates()
    GpuRequest.objects.filter(pk=running.pk).update(status=RequestStatus.CANCELLED)
    GpuRequest.objects.filter(pk=waiting.pk).update(status=RequestStatus.ADMITTED)
    estimates.refresh_start_estimates()
    waiting.refresh_from_db()
    assert (waiting.estimated_start_at, waiting.estimate_low_at, waiting.estimate_high_at) == (
        None,
        None,
        None,
    )


def test_the_cycle_task_queues_the_refresh_which_writes_the_fields(org: Org) -> None:
    flavor = whole_pool(org)
    submit(org, flavor, 4, max_runtime_seconds=8 * HOUR)
    waiting = submit(org, flavor, 4, max_runtime_seconds=HOUR)
    cache.delete("scheduling:estimates-queued")
    tasks.run_scheduling_cycle()  # tasks run inline in tests: the refresh runs after the cycle
    waiting.refresh_from_db()
    assert waiting.status == RequestStatus.QUEUED
    assert waiting.estimated_start_at is not None


def test_the_refresh_is_throttled_across_cycles(org: Org, monkeypatch: Any) -> None:
    sent: list[str] = []

    def send(name: str, *args: Any) -> bool:
        sent.append(name)
        return True

    monkeypatch.setattr(dispatch, "send", send)
    cache.delete(dispatch.ESTIMATES_QUEUED_KEY)
    dispatch.send_start_estimates()
    dispatch.send_start_estimates()
    assert sent == [dispatch.REFRESH_START_ESTIMATES]


def test_request_page_and_api_show_the_estimate(org: Org) -> None:
    flavor = whole_pool(org)
    _, waiting = busy_then_waiting(org, flavor)
    estimates.refresh_start_estimates()
    waiting.refresh_from_db()
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(reverse("gpu-request-page", args=[waiting.pk])).content.decode()
    assert "likely to start around" in page
    assert f"between {clock(waiting.estimate_low_at)} and" in page or (
        waiting.estimate_low_at == waiting.estimate_high_at
    )
    body = api_client(org.dev_a).get(f"/api/v1/requests/{waiting.pk}/").json()
    assert waiting.estimated_start_at is not None
    for field in ("estimated_start_at", "estimate_low_at", "estimate_high_at"):
        assert body[field] is not None
    assert body["estimated_start_at"].startswith(waiting.estimated_start_at.strftime("%Y-%m-%dT"))


def test_schema_documents_the_estimate_fields_read_only() -> None:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    props = schema["components"]["schemas"]["GpuRequest"]["properties"]
    for field in ("estimated_start_at", "estimate_low_at", "estimate_high_at"):
        assert props[field]["readOnly"] is True and props[field].get("nullable") is True
    answers = schema["paths"]["/api/v1/requests/what-if/"]["get"]["responses"]
    assert {"200", "400", "404"} <= set(answers)


def test_what_if_on_the_form_names_each_flavor_with_its_wait(org: Org) -> None:
    flavor = whole_pool(org)
    busy_then_waiting(org, flavor)
    client = Client()
    client.force_login(org.dev_a)
    url = reverse("gpu-request-what-if-page")
    page = client.get(url, {"project": org.project_a.pk, "gpu_count": 1}).content.decode()
    assert f'data-flavor="{flavor.slug}"' in page
    # The 8 h run ends, the queued 4-card request (older) runs its hour, then this one.
    assert "in about 9 h" in page


def test_what_if_api_lists_flavors_and_hides_other_tenants_projects(org: Org) -> None:
    flavor = whole_pool(org)
    submit(org, flavor, 2, max_runtime_seconds=HOUR)
    run_cycle()
    own = api_client(org.dev_a).get(
        "/api/v1/requests/what-if/", {"project": org.project_a.pk, "gpu_count": 2}
    )
    assert own.status_code == 200, own.content
    rows = {row["flavor"]: row for row in own.json()}
    assert rows[flavor.pk]["wait_seconds"] == 0  # two cards are free now
    big = api_client(org.dev_a).get(
        "/api/v1/requests/what-if/", {"project": org.project_a.pk, "gpu_count": 4}
    )
    wait = {row["flavor"]: row for row in big.json()}[flavor.pk]["wait_seconds"]
    assert abs(wait - HOUR) < 120
    other = api_client(org.dev_b).get(
        "/api/v1/requests/what-if/", {"project": org.project_a.pk, "gpu_count": 1}
    )
    assert other.status_code == 404
    assert api_client(None).get("/api/v1/requests/what-if/", {"project": 1}).status_code in (
        401,
        403,
    )


def page_waits(client: Client, query: dict[str, Any]) -> dict[str, str]:
    """The form's what-if as {flavor slug: "in about 3 h"}."""
    page = client.get(reverse("gpu-request-what-if-page"), query).content.decode()
    rows = re.findall(r'data-flavor="([^"]+)">[^<]*<strong>([^<]+)</strong>', page)
    return dict(rows)


def api_waits(org: Org, query: dict[str, Any]) -> dict[str, str]:
    """The API's what-if in the same words, by flavor slug."""
    rows = api_client(org.dev_a).get("/api/v1/requests/what-if/", query).json()
    slugs = dict(Flavor.objects.values_list("pk", "slug"))
    return {slugs[row["flavor"]]: wait_words(row["wait_seconds"]) for row in rows}


def test_the_form_and_the_api_answer_the_same_question_alike(org: Org) -> None:
    flavor = whole_pool(org)
    busy_then_waiting(org, flavor)
    # A second flavor whose pool runs notebooks only: a job's what-if leaves it out.
    notebooks = whole_pool(org)
    NodePool.objects.filter(pk=notebooks.pool_id).update(allowed_kinds=["notebook"])
    client = Client()
    client.force_login(org.dev_a)
    for kind in ("job", "notebook"):
        asked = {"project": org.project_a.pk, "gpu_count": 4, "kind": kind}
        page = page_waits(client, {**asked, "max_runtime_hours": 1})
        api = api_waits(org, {**asked, "max_runtime_seconds": HOUR})
        assert page == api, kind
    assert set(page) == {flavor.slug, notebooks.slug}
    assert notebooks.slug not in api_waits(org, {"project": org.project_a.pk, "gpu_count": 4})


def test_a_what_if_asked_a_minute_later_gives_the_same_start(
    org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    flavor = whole_pool(org)
    for _ in range(20):
        finished(org, flavor, ratio=0.25)
    running = submit(org, flavor, 4, max_runtime_seconds=8 * HOUR)
    run_cycle()
    # The running work has lasted as long as every past run of its owner but 30 s.
    typical = runtime_history().band_for(owner_id=org.dev_a.pk, flavor_id=flavor.pk).mid
    asked_at = timezone.now()
    started = asked_at - timedelta(seconds=8 * HOUR * typical - 30)
    Allocation.objects.filter(request=running).update(started_at=started, admitted_at=started)
    query = {"project": org.project_a.pk, "gpu_count": 4}
    starts = []
    for later in (0, 60):
        clock_now = asked_at.timestamp() + later
        monkeypatch.setattr(estimates, "time", SimpleNamespace(time=lambda at=clock_now: at))
        rows = api_client(org.dev_a).get("/api/v1/requests/what-if/", query).json()
        starts.append(datetime.fromisoformat(rows[0]["estimated_start_at"]))
    # Not "now" and then hours away: about the same start (work that runs on past its
    # history is expected to end a little later with every minute it runs).
    assert abs((starts[1] - starts[0]).total_seconds()) <= 5 * 60
    assert starts[0] > asked_at + timedelta(minutes=30)


def test_a_newly_approved_request_shows_its_estimate_before_any_refresh(org: Org) -> None:
    flavor = whole_pool(org)
    _, waiting = busy_then_waiting(org, flavor)
    behind = submit(org, flavor, 4, max_runtime_seconds=HOUR)
    # No refresh has run since they were approved.
    assert waiting.estimated_start_at is None and behind.estimated_start_at is None
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(reverse("gpu-request-page", args=[waiting.pk])).content.decode()
    assert "likely to start around" in page
    waiting.refresh_from_db()
    assert waiting.estimated_start_at is not None
    # The running 8 h declared, then this one: as the refresh would say.
    wait = (waiting.estimated_start_at - timezone.now()).total_seconds()
    assert abs(wait - 8 * HOUR) < 120
    # `gpuctl get` reads the API, which does the same: the 8 h, then the hour of the first.
    body = api_client(org.dev_a).get(f"/api/v1/requests/{behind.pk}/").json()
    assert body["estimated_start_at"] is not None
    behind.refresh_from_db()
    assert behind.estimated_start_at is not None
    assert abs((behind.estimated_start_at - timezone.now()).total_seconds() - 9 * HOUR) < 120


def test_without_the_cache_a_new_request_waits_for_the_refresh(
    org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    flavor = whole_pool(org)
    _, waiting = busy_then_waiting(org, flavor)

    def down(*args: Any, **kwargs: Any) -> bool:
        raise ConnectionError("cache down")

    monkeypatch.setattr(estimates, "cache", SimpleNamespace(add=down))
    client = Client()
    client.force_login(org.dev_a)
    page = client.get(reverse("gpu-request-page", args=[waiting.pk]))
    assert page.status_code == 200 and "likely to start around" not in page.content.decode()
    estimates.refresh_start_estimates()
    page = client.get(reverse("gpu-request-page", args=[waiting.pk]))
    assert "likely to start around" in page.content.decode()


@covers("gpu-request-what-if-page", "gpu-request-what-if")
def test_what_if_fragment_shows_nothing_of_another_teams_project(org: Org) -> None:
    flavor = whole_pool(org)
    client = Client()
    client.force_login(org.dev_b)
    page = client.get(reverse("gpu-request-what-if-page"), {"project": org.project_a.pk})
    assert page.status_code == 200
    assert flavor.slug not in page.content.decode()


def test_wait_words_read_as_people_say_them() -> None:
    assert wait_words(30) == "now"
    assert wait_words(40 * 60) == "in about 40 min"
    assert wait_words(5 * HOUR) == "in about 5 h"
    assert wait_words(3 * 86400) == "in about 3 days"
    assert wait_words(None) == "not within the forecast"


def test_large_fleets_simulate_fewer_cycles_within_the_budget() -> None:
    from scheduling.engine.types import GpuDevice, Snapshot

    def snapshot(gpus: int) -> Snapshot:
        devices = tuple(GpuDevice(f"n{i // 8}", i % 8, 1, 1) for i in range(gpus))
        return Snapshot(pools=(), nodes=(), devices=devices, flavors=())

    assert estimates.steps_for(snapshot(16), 200) == 200
    assert estimates.steps_for(snapshot(8_000), 200) == 10
    assert estimates.steps_for(snapshot(1_000_000), 200) == 1
