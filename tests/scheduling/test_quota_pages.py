"""The quota page and the lead's dashboard count used, queued and borrowed the same way; the
split form keeps what was typed after an error."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import Allocation
from scheduling.selectors.quotas import quota_usage
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def login(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def test_quota_page_and_dashboard_count_alike(org: Org, fleet: Fleet) -> None:
    running = GpuRequestFactory.create(
        project=org.project_a, flavor=fleet.l4_6g, gpu_count=2, to="running"
    )
    Allocation.objects.filter(request=running).update(is_borrowed=True)
    GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g, gpu_count=3)  # queued
    usage = quota_usage({org.team_a.pk})[(org.team_a.pk, None, fleet.l4_6g.pk)]
    assert (usage.used, usage.queued, usage.borrowed) == (2, 3, 2)
    client = login(org.lead_a)
    quotas = client.get(reverse("quotas-page")).content.decode()
    assert "2 used · 3 queued · 2 borrowed" in quotas
    home = client.get(reverse("home")).content.decode()
    rows = home[home.index('data-testid="lead-quota-rows"') :]
    row = re.search(rf"<tr><td>{org.team_a.name}</td><td>{fleet.l4_6g.name}</td>(.*?)</tr>", rows)
    assert row is not None
    cells = re.findall(r'<td class="text-end">(\d+)</td>', row.group(1))
    assert cells[:3] == ["2", "3", "2"]


def test_split_error_keeps_what_was_typed(org: Org, fleet: Fleet) -> None:
    url = reverse("project-quota-set", args=[org.project_a.pk, fleet.l4_6g.pk])
    response = login(org.lead_a).post(url, {"guaranteed": "9", "limit": "4"})
    assert response.status_code == 400
    page = response.content.decode()
    key = f"{org.project_a.pk}-{fleet.l4_6g.pk}"
    assert 'data-testid="quota-error"' in page and "cannot exceed the limit" in page
    assert re.search(rf'id="g-{key}"[^>]*is-invalid[^>]*value="9"', page)
    assert re.search(rf'id="l-{key}"[^>]*value="4"', page)


def test_split_shows_current_values_in_their_own_columns(org: Org, fleet: Fleet) -> None:
    url = reverse("project-quota-set", args=[org.project_a.pk, fleet.l4_6g.pk])
    client = login(org.lead_a)
    assert client.post(url, {"guaranteed": "1", "limit": "3"}).status_code == 302
    page = client.get(reverse("quotas-page")).content.decode()
    key = f"{org.project_a.pk}-{fleet.l4_6g.pk}"
    assert re.search(rf'id="g-{key}" form="split-{key}"[^>]*value="1"', page)
    assert re.search(rf'id="l-{key}" form="split-{key}"[^>]*value="3"', page)
