"""On the demo fleet, idle A100s nobody is guaranteed are lent; and the quota page, the lead's
dashboard, the API, `gpuctl quota` and the blocker sentence give the same figures in one
named unit."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from gpuctl.cli import quota_lines
from scheduling.choices import RequestStatus
from scheduling.models import Allocation, GpuRequest, Quota, Tier
from scheduling.services import cycle
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def a100_limit_of_eight(org: Org, fleet: Fleet) -> None:
    """Team A's A100 limit as 8 (the demo gives Vision 16): 4 of the 12 unassigned cards."""
    Quota.objects.filter(team=org.team_a, flavor=fleet.a100, project=None).update(limit=8)


def a100s(org: Org, fleet: Fleet, count: int, to: str = "running") -> GpuRequest:
    return GpuRequestFactory.create(
        project=org.project_a, flavor=fleet.a100, gpu_count=count, to=to
    )


def test_demo_lends_idle_a100s_beyond_the_guarantee_as_borrowed_work(
    org: Org, fleet: Fleet
) -> None:
    # Team A (Vision's place): 4 A100s guaranteed, limit 8, on 16 cards nobody else is
    # guaranteed. Its first 4 are its own; the next 4 are lent from the 12 unassigned.
    own = a100s(org, fleet, 4)
    lent = a100s(org, fleet, 4)
    assert not Allocation.objects.get(request=own).is_borrowed
    allocation = Allocation.objects.get(request=lent)
    assert allocation.is_borrowed and allocation.is_preemptible
    # Both count as the team's use; the borrowed part is what the page calls borrowed.
    assert "4 borrowed" in _quota_card(org, fleet)


def test_a_tier_that_does_not_lend_keeps_its_unassigned_cards(org: Org, fleet: Fleet) -> None:
    Tier.objects.filter(slug="training").update(lends_unassigned=False)
    a100s(org, fleet, 4)
    waiting = a100s(org, fleet, 4, to="queued")
    cycle.run_cycle()
    waiting.refresh_from_db()
    assert waiting.status == RequestStatus.QUEUED
    assert waiting.blocker["code"] == "borrowing_limit"
    assert waiting.blocker["message"] == (
        f"Team {org.team_a.name} uses 4 GPUs of {fleet.a100.name}, 4 guaranteed, and too "
        "little is free to borrow more: 0 idle in other teams' guarantees and every "
        f"{fleet.a100.name} card is guaranteed to a team or not lent by its tier; 4 needed."
    )


def _quota_card(org: Org, fleet: Fleet) -> str:
    client = Client()
    client.force_login(org.lead_a)
    page = client.get(reverse("quotas-page")).content.decode()
    start = page.index(f"{org.team_a.name} · {fleet.a100.name}")
    return page[start : page.index("</section>", start)]


def test_page_dashboard_api_cli_and_blocker_count_one_quota_alike(org: Org, fleet: Fleet) -> None:
    a100s(org, fleet, 4)
    a100s(org, fleet, 2)  # lent from the unassigned cards
    Tier.objects.filter(slug="training").update(lends_unassigned=False)
    waiting = a100s(org, fleet, 2, to="queued")
    cycle.run_cycle()
    waiting.refresh_from_db()
    assert waiting.status == RequestStatus.QUEUED

    card = _quota_card(org, fleet)
    assert "6 used · 2 queued · 2 borrowed · 4 guaranteed · limit 8" in card
    assert re.search(r'data-testid="quota-unit">GPUs<', card)

    client = Client()
    client.force_login(org.lead_a)
    home = client.get(reverse("home")).content.decode()
    rows = home[home.index('data-testid="lead-quota-rows"') :]
    row = re.search(rf"<tr><td>{org.team_a.name}</td><td>{fleet.a100.name}</td>(.*?)</tr>", rows)
    assert row is not None
    assert re.findall(r"<td[^>]*>([^<]+)</td>", row.group(1)) == ["6", "2", "2", "4", "8", "GPUs"]

    listed = api_client(org.lead_a).get(
        reverse("quota-list"), {"flavor": fleet.a100.pk, "team_level": True}
    )
    (api_row,) = listed.json()["results"]
    assert [api_row[k] for k in ("used", "queued", "borrowed", "guaranteed", "limit")] == [
        6,
        2,
        2,
        4,
        8,
    ]
    assert api_row["unit"] == "GPUs"

    (line,) = quota_lines([api_row], {org.team_a.pk: "a"}, {}, {fleet.a100.pk: "a100"})
    assert line == ["a", "(team)", "a100", 4, 8, 6, 2, 2, "GPUs"]

    assert waiting.blocker["message"].startswith(
        f"Team {org.team_a.name} uses 6 GPUs of {fleet.a100.name}, 4 guaranteed,"
    )
