"""Which tiers a submission may use: the team must be allowed, and a project that lists tiers
may use only those."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scheduling.models import Tier
from scheduling.selectors.catalog import tier_allowed_for_project
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def tier_of(fleet: Fleet) -> Tier:
    return fleet.l4_12g.pool.tier


def test_a_project_listing_no_tier_may_use_every_tier_of_its_team(org: Org, fleet: Fleet) -> None:
    assert tier_allowed_for_project(tier=tier_of(fleet), project=org.project_a)


def test_a_team_not_allowed_the_tier_is_refused(org: Org, fleet: Fleet) -> None:
    tier = tier_of(fleet)
    tier.allowed_teams.remove(org.team_a)
    assert not tier_allowed_for_project(tier=tier, project=org.project_a)


def test_a_project_listing_tiers_may_use_only_those(org: Org, fleet: Fleet) -> None:
    tier = tier_of(fleet)
    other = fleet.a100.pool.tier
    assert other != tier
    other.allowed_projects.add(org.project_a)
    assert not tier_allowed_for_project(tier=tier, project=org.project_a)
    assert tier_allowed_for_project(tier=other, project=org.project_a)
    # Its sibling project lists nothing, so it keeps every tier of the team.
    assert tier_allowed_for_project(tier=tier, project=org.project_a2)

    tier.allowed_projects.add(org.project_a)
    assert tier_allowed_for_project(tier=tier, project=org.project_a)


def test_a_listed_tier_still_needs_the_team(org: Org, fleet: Fleet) -> None:
    tier = tier_of(fleet)
    tier.allowed_projects.add(org.project_a)
    tier.allowed_teams.remove(org.team_a)
    assert not tier_allowed_for_project(tier=tier, project=org.project_a)


def test_the_check_is_one_query(org: Org, fleet: Fleet) -> None:
    fleet.a100.pool.tier.allowed_projects.add(org.project_a)
    tier = tier_of(fleet)
    with CaptureQueriesContext(connection) as captured:
        tier_allowed_for_project(tier=tier, project=org.project_a)
    assert len(captured) == 1


def test_a_submission_to_a_tier_the_project_does_not_list_is_a_400(org: Org, fleet: Fleet) -> None:
    fleet.a100.pool.tier.allowed_projects.add(org.project_a)
    response = api_client(org.dev_a).post(
        reverse("gpu-request-list"), request_body(org.project_a, fleet.l4_12g), format="json"
    )
    assert response.status_code == 400, response.content
    assert "may not use the" in str(response.json())
