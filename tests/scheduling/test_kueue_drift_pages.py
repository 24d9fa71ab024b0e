"""For each Kueue-mode cluster the fleet page and /metrics say what its last policy check found."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.services.kueue_drift import record_check
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

DRIFT = "update ClusterQueue gpu-portal-team-b (spec.fairSharing.weight)"


def fleet_page(org: Org) -> str:
    client = Client()
    client.force_login(org.admin)
    return client.get(reverse("fleet-page")).content.decode()


def test_the_fleet_page_shows_drift_only_under_kueue(org: Org, settings: Any) -> None:
    record_check([DRIFT], applied=True)
    assert 'data-testid="kueue-policy"' not in fleet_page(org)
    settings.SCHEDULER = "kueue"
    page = fleet_page(org)
    assert "1 object differed from the portal's policy" in page
    assert DRIFT in page
    record_check([], applied=True)
    assert "In line with the portal's policy" in fleet_page(org)
    record_check([], applied=False, error="the cluster does not serve clusterqueues")
    assert "failed: the cluster does not serve clusterqueues" in fleet_page(org)


def test_metrics_count_the_drift_of_the_last_check(org: Org, settings: Any) -> None:
    settings.SCHEDULER = "kueue"
    record_check([DRIFT, "delete LocalQueue gpu-team-a-old/gpu-portal"], applied=True)
    body = Client().get(reverse("metrics")).content.decode()  # from loopback
    assert 'gpu_portal_kueue_policy_drift_objects{cluster="local"} 2.0' in body
    assert 'gpu_portal_kueue_policy_checked_timestamp_seconds{cluster="local"} ' in body
