"""A request on its way to running keeps its page current: the page asks whether the request
moved and reloads when it did, so a notebook's Open button appears without a manual reload."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from tests.scheduling.conftest import Fleet
from tests.scheduling.test_developer_pages import login
from tests.support.factories import GpuRequestFactory, admit, launch, report_running
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def queued_notebook(org: Org, fleet: Fleet) -> GpuRequest:
    notebook = GpuRequestFactory.create(
        actor=org.dev_a, project=org.project_a, flavor=fleet.l4_6g, kind="notebook"
    )
    notebook.refresh_from_db()
    assert notebook.status == RequestStatus.QUEUED  # the dev tier approves it at once
    return notebook


def test_the_page_watches_a_request_until_it_runs(org: Org, fleet: Fleet) -> None:
    notebook = queued_notebook(org, fleet)
    client = login(org.dev_a)
    page = client.get(reverse("gpu-request-page", args=[notebook.pk])).content.decode()
    watch = reverse("gpu-request-status-page", args=[notebook.pk])
    assert f'hx-get="{watch}?seen=queued"' in page

    still = client.get(watch, {"seen": "queued"})
    assert still.status_code == 204 and not still.has_header("HX-Refresh")

    admit(notebook)
    launch(notebook)
    moved = client.get(watch, {"seen": "queued"})
    assert moved.status_code == 200 and moved["HX-Refresh"] == "true"
    page = client.get(reverse("gpu-request-page", args=[notebook.pk])).content.decode()
    assert f'hx-get="{watch}?seen=launching"' in page

    report_running(notebook)
    page = client.get(reverse("gpu-request-page", args=[notebook.pk])).content.decode()
    assert 'data-testid="status-watch"' not in page  # running: nothing left to wait for
    assert client.get(watch, {"seen": "launching"})["HX-Refresh"] == "true"


def test_another_team_cannot_watch_a_request(org: Org, fleet: Fleet) -> None:
    notebook = queued_notebook(org, fleet)
    watch = reverse("gpu-request-status-page", args=[notebook.pk])
    assert login(org.dev_b).get(watch, {"seen": "queued"}).status_code == 404
    anonymous = Client().get(watch, {"seen": "queued"})
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]
    assert login(org.dev_a).get(watch, {"seen": "queued"}).status_code == 204
