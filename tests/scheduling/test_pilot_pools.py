"""Pilot pools: only the pilot teams may submit to a pilot's flavors until its last day, after
which the pool serves every team of its tier; admins set the pilot on the pool form."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.models import GpuRequest, NodePool
from scheduling.selectors.pilots import pilot_in_force, pilot_refusal
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def pilot(org: Org, fleet: Fleet) -> NodePool:
    """The L4 vGPU pool, a pilot for team A for ten more days."""
    pool = fleet.l4_12g.pool
    pool.is_pilot = True
    pool.pilot_until = timezone.localdate() + timedelta(days=10)
    pool.save()
    pool.pilot_teams.set([org.team_a])
    return pool


def submit(org: Org, fleet: Fleet, persona: str) -> object:
    user = getattr(org, persona)
    project = org.project_a if persona.endswith("_a") else org.project_b
    return api_client(user).post(
        reverse("gpu-request-list"), request_body(project, fleet.l4_12g), format="json"
    )


def test_a_pilot_team_submits_to_the_pilot_pool(org: Org, fleet: Fleet, pilot: NodePool) -> None:
    response = submit(org, fleet, "dev_a")
    assert response.status_code == 201, response.content  # type: ignore[attr-defined]


def test_another_team_is_refused_with_a_clear_400(org: Org, fleet: Fleet, pilot: NodePool) -> None:
    response = submit(org, fleet, "dev_b")
    assert response.status_code == 400  # type: ignore[attr-defined]
    error = response.json()["error"]  # type: ignore[attr-defined]
    assert error["code"] == "pilot_only"
    assert "is a pilot for other teams until" in error["fields"]["flavor"]
    assert not GpuRequest.objects.filter(team=org.team_b).exists()


def test_after_its_last_day_the_pool_widens_to_its_tier(
    org: Org, fleet: Fleet, pilot: NodePool
) -> None:
    today = timezone.localdate()
    assert pilot_in_force(pilot, today=pilot.pilot_until or today)
    assert not pilot_in_force(pilot, today=(pilot.pilot_until or today) + timedelta(days=1))
    pilot.pilot_until = today - timedelta(days=1)
    pilot.save()
    assert submit(org, fleet, "dev_b").status_code == 201  # type: ignore[attr-defined]


def test_a_pilot_without_end_date_lasts_and_a_cleared_mark_opens_it(
    org: Org, fleet: Fleet, pilot: NodePool
) -> None:
    pilot.pilot_until = None
    pilot.save()
    far = date(2099, 1, 1)
    assert pilot_refusal(pool=pilot, team=org.team_b, today=far) is not None
    pilot.is_pilot = False
    pilot.save()
    assert pilot_refusal(pool=pilot, team=org.team_b, today=far) is None


def test_the_request_form_shows_the_refusal_on_the_flavor(
    org: Org, fleet: Fleet, pilot: NodePool
) -> None:
    client = Client()
    client.force_login(org.dev_b)
    data = {
        "name": "notebook",
        "project": org.project_b.pk,
        "flavor": fleet.l4_12g.pk,
        "gpu_count": 1,
        "kind": "notebook",
        "image": "jupyter/base-notebook:2024.1",
        "command": "start-notebook.sh",
        "env": "",
        "max_runtime_hours": "2",
        "priority": "normal",
        "allow_shared_node": "on",
        "reason": "exploration",
    }
    response = client.post(reverse("gpu-request-new"), data)
    html = response.content.decode()
    assert 'data-testid="error-flavor"' in html
    assert "is a pilot for other teams" in html
    assert not GpuRequest.objects.exists()


def test_admin_sets_the_pilot_on_the_pool_form(org: Org, fleet: Fleet) -> None:
    pool = fleet.l4_12g.pool
    client = Client()
    client.force_login(org.admin)
    url = reverse("manage-pools-edit", kwargs={"pk": pool.pk})
    page = client.get(url).content.decode()
    for name in ("is_pilot", "pilot_until", "pilot_teams"):
        assert f'name="{name}"' in page
    body = {
        "name": pool.name,
        "slug": pool.slug,
        "tier": pool.tier_id,
        "sharing_mode": pool.sharing_mode,
        "placement": pool.placement,
        "scoring": pool.scoring,
        "scheduler_name": pool.scheduler_name,
        "node_selector": json.dumps(pool.node_selector),
        "taints": json.dumps(pool.taints),
        "allowed_kinds": json.dumps(pool.allowed_kinds),
        "short_reserve_fraction": str(pool.short_reserve_fraction),
        "short_max_runtime_seconds": str(pool.short_max_runtime_seconds),
        "allocation": pool.allocation,
        "is_pilot": "on",
        "pilot_until": "2027-01-31",
        "pilot_teams": [org.team_a.pk],
    }
    if 'name="cluster"' in page:
        body["cluster"] = pool.cluster_id
    response = client.post(url, body)
    assert response.status_code == 302, response.content.decode()[:2000]
    pool.refresh_from_db()
    assert pool.is_pilot
    assert pool.pilot_until == date(2027, 1, 31)
    assert list(pool.pilot_teams.all()) == [org.team_a]
    listing = client.get(reverse("manage-pools")).content.decode()
    assert "Team A until 2027-01-31" in listing
