"""The developer's running notebooks on the home page: "Stop my server" and "Keep alive", and the
idle reclaim pass that waits for a kept-alive notebook."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.choices import RequestStatus
from scheduling.models import Allocation, ReclaimPolicy
from scheduling.services.governance import grant_idle_exemption, keep_notebook_alive
from tenants.errors import ForbiddenError
from tenants.models import AuditEvent
from tests.governance.conftest import Runner
from tests.governance.test_reclaim import add_samples, enforce
from tests.support.cross_tenant import covers
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _keep_alive_span(seconds: int) -> None:
    ReclaimPolicy.objects.update(notebook_keep_alive_seconds=seconds)


def test_the_home_page_shows_my_running_notebooks_with_stop_and_keep_alive(
    running: Runner, org: Org
) -> None:
    _keep_alive_span(3600)
    notebook = running(kind="notebook", name="explore-coco", image="jupyter/pytorch:1")
    running(kind="job", name="train-resnet")
    page = _client(org.dev_a).get(reverse("home")).content.decode()
    servers = page[page.index('data-testid="my-servers"') : page.index("Running and queued")]
    assert "explore-coco" in servers and "jupyter/pytorch:1" in servers
    assert "train-resnet" not in servers  # a job is no server
    assert reverse("gpu-request-keep-alive-page", args=[notebook.pk]) in servers
    assert reverse("gpu-request-cancel-page", args=[notebook.pk]) in servers
    assert "Yes, stop it" in servers and "csrfmiddlewaretoken" in servers
    assert "for 1 h from when you press it" in servers
    lead_page = _client(org.lead_b).get(reverse("home")).content.decode()
    assert "explore-coco" not in lead_page


def test_the_owner_keeps_a_notebook_alive_and_sees_until_when(running: Runner, org: Org) -> None:
    _keep_alive_span(3600)
    notebook = running(kind="notebook", name="explore-coco")
    client = _client(org.dev_a)
    before = timezone.now()
    response = client.post(
        reverse("gpu-request-keep-alive-page", args=[notebook.pk]), {"next": "home"}, follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("home")
    notebook.refresh_from_db()
    assert notebook.idle_exempt_until is not None
    held = notebook.idle_exempt_until - before
    assert timedelta(minutes=59) < held <= timedelta(minutes=61)
    page = response.content.decode()
    assert "Kept alive: not reclaimed for idling before" in page
    assert AuditEvent.objects.filter(action="request.kept_alive", target_id=str(notebook.pk))
    request_page = client.get(reverse("gpu-request-page", args=[notebook.pk])).content.decode()
    assert "Kept alive by its owner" in request_page  # its history
    assert "Exempt from idle reclamation until" in request_page
    assert reverse("gpu-request-keep-alive-page", args=[notebook.pk]) in request_page
    back = client.post(reverse("gpu-request-keep-alive-page", args=[notebook.pk]))
    assert back["Location"] == reverse("gpu-request-page", args=[notebook.pk])


def test_the_api_keeps_a_notebook_alive_for_its_owner_only(running: Runner, org: Org) -> None:
    _keep_alive_span(1800)
    notebook = running(kind="notebook")
    url = reverse("gpu-request-keep-alive", kwargs={"pk": notebook.pk})
    assert api_client(org.dev_b).post(url).status_code == 404
    assert api_client(org.lead_a).post(url).status_code == 403
    answer = api_client(org.dev_a).post(url)
    assert answer.status_code == 200
    notebook.refresh_from_db()
    assert answer.json()["idle_exempt_until"] is not None
    assert notebook.idle_exempt_until is not None
    assert (
        timedelta(minutes=29) < notebook.idle_exempt_until - timezone.now() <= timedelta(minutes=30)
    )


def test_keep_alive_never_shortens_the_leads_longer_exemption(running: Runner, org: Org) -> None:
    _keep_alive_span(3600)
    notebook = running(kind="notebook")
    grant_idle_exemption(actor=org.lead_a, request=notebook, hours=8)
    granted = notebook.idle_exempt_until
    keep_notebook_alive(actor=org.dev_a, request=notebook)
    notebook.refresh_from_db()
    assert notebook.idle_exempt_until == granted


def test_the_owner_stops_their_server_from_the_home_page(running: Runner, org: Org) -> None:
    notebook = running(kind="notebook", name="explore-coco")
    response = _client(org.dev_a).post(
        reverse("gpu-request-cancel-page", args=[notebook.pk]), {"next": "home"}, follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("home")
    assert "explore-coco stopped." in response.content.decode()
    notebook.refresh_from_db()
    assert notebook.status == RequestStatus.CANCELLED
    assert not Allocation.objects.active().filter(request=notebook).exists()


@covers("gpu-request-keep-alive-page")
def test_another_teams_user_gets_404_and_changes_nothing(running: Runner, org: Org) -> None:
    notebook = running(kind="notebook")
    client = _client(org.dev_b)
    for route in ("gpu-request-keep-alive-page", "gpu-request-cancel-page"):
        assert client.post(reverse(route, args=[notebook.pk]), {"next": "home"}).status_code == 404
    notebook.refresh_from_db()
    assert notebook.status == RequestStatus.RUNNING and notebook.idle_exempt_until is None


def test_only_the_owner_keeps_a_notebook_alive(running: Runner, org: Org) -> None:
    notebook = running(kind="notebook")
    response = _client(org.lead_a).post(
        reverse("gpu-request-keep-alive-page", args=[notebook.pk]), follow=True
    )
    assert "Only the notebook&#x27;s owner keeps it alive." in response.content.decode()
    notebook.refresh_from_db()
    assert notebook.idle_exempt_until is None


def test_keep_alive_is_for_running_notebooks_of_tiers_that_allow_it(
    running: Runner, org: Org
) -> None:
    job = running(kind="job")
    with pytest.raises(Exception, match="Keep alive is for notebooks"):
        keep_notebook_alive(actor=org.dev_a, request=job)
    _keep_alive_span(0)
    notebook = running(kind="notebook")
    with pytest.raises(ForbiddenError, match="ask your team lead"):
        keep_notebook_alive(actor=org.dev_a, request=notebook)
    page = _client(org.dev_a).get(reverse("home")).content.decode()
    assert reverse("gpu-request-keep-alive-page", args=[notebook.pk]) not in page
    assert reverse("gpu-request-cancel-page", args=[notebook.pk]) in page


def test_idle_reclaim_waits_for_a_kept_alive_notebook_then_warns_before_reclaiming(
    running: Runner, org: Org
) -> None:
    """Idle past its hour-long window, a kept-alive notebook is left alone for the span; after
    it, the owner is warned first and the notebook reclaimed only after the warning."""
    _keep_alive_span(3600)
    notebook = running(kind="notebook", minutes_ago=90)
    add_samples(notebook, minutes=80, activity=0.0)
    keep_notebook_alive(actor=org.dev_a, request=notebook)
    now = timezone.now()
    assert enforce(now + timedelta(minutes=30)) == {}
    assert enforce(now + timedelta(minutes=59)) == {}
    after = now + timedelta(minutes=61)
    add_samples(notebook, minutes=60, activity=0.0, until=after)
    assert enforce(after) == {"idle_warned": 1}
    notebook.refresh_from_db()
    assert notebook.status == RequestStatus.RUNNING
    assert enforce(after + timedelta(minutes=11)) == {"idle_reclaimed": 1}
    notebook.refresh_from_db()
    assert notebook.status == RequestStatus.RECLAIMED


def test_an_idle_notebook_nobody_keeps_alive_is_reclaimed(running: Runner) -> None:
    notebook = running(kind="notebook", minutes_ago=90)
    add_samples(notebook, minutes=80, activity=0.0)
    now = timezone.now()
    assert enforce(now) == {"idle_warned": 1}
    assert enforce(now + timedelta(minutes=11)) == {"idle_reclaimed": 1}
