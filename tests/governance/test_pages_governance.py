from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Allocation, GpuRequest, UtilisationSample
from tests.governance.conftest import Runner
from tests.support.cross_tenant import covers
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def login(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=f"pw-{username}")
    return client


def test_request_page_shows_the_activity_chart_and_idle_warning(org: Org, running: Runner) -> None:
    request = running(minutes_ago=5)
    UtilisationSample.objects.create(
        allocation=Allocation.objects.get(request=request),
        sampled_at=timezone.now(),
        activity_percent=1.5,
        memory_used_mib=300,
    )
    GpuRequest.objects.filter(pk=request.pk).update(idle_warned_at=timezone.now())
    page = login("dev_a").get(reverse("gpu-request-page", args=[request.pk])).content.decode()
    assert 'id="request-activity"' in page and "1.5" in page
    assert 'data-testid="idle-warning"' in page
    assert "Ask for more time" in page and "Extend the max runtime" not in page


def test_lead_extends_from_the_request_page(org: Org, running: Runner) -> None:
    request = running(minutes_ago=5, max_runtime_seconds=3600)
    url = reverse("gpu-request-govern-page", args=[request.pk, "extend"])
    login("lead_a").post(url, {"amount": "1.5", "text": "final epoch"})
    request.refresh_from_db()
    assert request.max_runtime_seconds == 3600 + 5400


def test_bad_amount_is_a_message_not_an_error(org: Org, running: Runner) -> None:
    request = running(minutes_ago=5)
    url = reverse("gpu-request-govern-page", args=[request.pk, "idle-exemption"])
    response = login("lead_a").post(url, {"amount": "lots"}, follow=True)
    assert response.status_code == 200
    assert "Give a number" in response.content.decode()


@covers("gpu-request-govern-page")
def test_other_team_cannot_govern_a_request(org: Org, running: Runner) -> None:
    request = running(minutes_ago=5, max_runtime_seconds=3600)
    for action in ("extend", "idle-exemption", "ask-extension"):
        url = reverse("gpu-request-govern-page", args=[request.pk, action])
        assert login("lead_b").post(url, {"amount": "2", "text": "x"}).status_code == 404
    request.refresh_from_db()
    assert request.max_runtime_seconds == 3600 and request.idle_exempt_until is None


def test_fleet_page_shows_allocation_and_stranded_capacity(org: Org, running: Runner) -> None:
    running(minutes_ago=5)  # one L4 6 GiB share on a 24 GiB card: 18 GiB still usable
    page = login("admin").get(reverse("fleet-page")).content.decode()
    assert "l4-vgpu" in page and "a100-training" in page
    assert login("lead_a").get(reverse("fleet-page")).status_code == 404


def test_fleet_overview_counts_stranded_vgpu_memory(org: Org, running: Runner) -> None:
    from scheduling.selectors.fleet import fleet_overview

    running(minutes_ago=5, gpu_memory_mib=20480)  # leaves 4 GiB: less than a 6 GiB share
    l4 = next(p for p in fleet_overview() if p.pool == "l4-vgpu")
    assert l4.stranded_gpu_equivalents == pytest.approx(4096 / 24576, abs=1e-3)
    assert l4.allocated_gpu_equivalents > 0
