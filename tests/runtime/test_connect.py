"""Opening a notebook or service: the proxy's auth check, `connect_url`, the simulated page."""

from __future__ import annotations

from typing import Any, cast

import pytest
from django.test import Client
from django.urls import reverse

from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution
from runtime.services.connect import workload_route
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client, make_user

pytestmark = pytest.mark.django_db


def notebook(org: Org, fleet: Fleet, **overrides: Any) -> GpuRequest:
    fields = {"project": org.project_a, "flavor": fleet.l4_6g, "kind": "notebook"}
    request = cast(GpuRequest, GpuRequestFactory(to="running", **{**fields, **overrides}))
    return request


def session(user: Any | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@covers("workload-auth")
def test_auth_check_lets_the_owner_lead_and_admin_in_and_keeps_everyone_else_out(
    org: Org, fleet: Fleet
) -> None:
    request = notebook(org, fleet)
    url = reverse("workload-auth", kwargs={"pk": request.pk})
    teammate = make_user("dev_a2", "developer", org.team_a)
    expected = {
        "dev_a": 200,  # the owner
        "lead_a": 200,  # the team's lead
        "admin": 200,  # a platform admin
        "dev_a2": 403,  # a developer of the same team who does not own it
        "dev_b": 403,  # another tenant
        "lead_b": 403,
        "finance": 403,
    }
    users = {**{name: getattr(org, name) for name in expected if name != "dev_a2"}}
    users["dev_a2"] = teammate
    seen = {name: session(user).get(url).status_code for name, user in users.items()}
    assert seen == expected
    assert session(None).get(url).status_code == 401  # the proxy sends the browser to sign in
    response = session(org.dev_a).get(url)
    assert response["X-Auth-Request-User"] == "dev_a"
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]


def test_auth_check_says_the_same_for_a_missing_id_and_for_a_job(org: Org, fleet: Fleet) -> None:
    """No existence oracle: another tenant's request and no request at all look the same."""
    job = cast(
        GpuRequest,
        GpuRequestFactory(to="running", project=org.project_a, flavor=fleet.l4_6g, kind="job"),
    )
    for pk in (job.pk, 999_999):
        url = reverse("workload-auth", kwargs={"pk": pk})
        assert session(org.dev_a).get(url).status_code == 403
        assert session(org.dev_b).get(url).status_code == 403
        assert session(None).get(url).status_code == 401


def test_connect_url_is_null_for_jobs_and_until_running(org: Org, fleet: Fleet) -> None:
    queued = GpuRequestFactory(
        to="queued", project=org.project_a, flavor=fleet.l4_6g, kind="notebook"
    )
    job = GpuRequestFactory(to="running", project=org.project_a, flavor=fleet.l4_6g, kind="job")
    running = notebook(org, fleet)
    client = api_client(org.dev_a)
    detail = lambda r: client.get(reverse("gpu-request-detail", kwargs={"pk": r.pk})).json()  # noqa: E731
    assert detail(queued)["connect_url"] is None
    assert detail(job)["connect_url"] is None
    body = detail(running)
    assert body["connect_url"] == f"http://testserver/w/{running.pk}/"
    listed = client.get(reverse("gpu-request-list")).json()["results"]
    assert {r["id"]: r["connect_url"] for r in listed}[running.pk] == body["connect_url"]
    # What sync saw of the pods is on the request too.
    assert body["node_names"] and body["pod_names"] == [] and body["exit_code"] is None


def test_connect_url_follows_an_absolute_base_url(org: Org, fleet: Fleet, settings: Any) -> None:
    settings.WORKLOAD_BASE_URL = "https://gpu.example.com/w/"
    running = notebook(org, fleet)
    body = api_client(org.lead_a).get(reverse("gpu-request-detail", kwargs={"pk": running.pk}))
    assert body.json()["connect_url"] == f"https://gpu.example.com/w/{running.pk}/"


def test_workload_route_points_the_ingress_at_the_portal(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    running = notebook(org, fleet)
    settings.WORKLOAD_BASE_URL = "https://gpu.example.com/w/"
    route = workload_route(running)
    assert route is not None
    assert route.host == "gpu.example.com" and route.path == f"/w/{running.pk}/"
    assert route.auth_url == f"https://gpu.example.com/auth/workloads/{running.pk}/"
    assert route.signin_url == "$scheme://$host/login/?next=$escaped_request_uri"
    assert not route.strip_prefix  # a notebook keeps its path as its base URL
    settings.PORTAL_INTERNAL_URL = "http://gpu-portal-web.gpu-portal.svc:8000"
    route = workload_route(running)
    assert route is not None and route.auth_url.startswith("http://gpu-portal-web.")
    settings.WORKLOAD_ROUTE = "none"
    assert workload_route(running) is None


@covers("simulated-workload")
def test_the_simulated_cluster_serves_a_placeholder_behind_the_same_check(
    org: Org, fleet: Fleet
) -> None:
    running = notebook(org, fleet)
    url = reverse("simulated-workload", kwargs={"pk": running.pk})
    assert url == f"/w/{running.pk}/"
    page = session(org.dev_a).get(url)
    assert page.status_code == 200
    assert f"Notebook of request {running.pk} (simulated)" in page.content.decode()
    assert session(org.lead_a).get(url).status_code == 200
    assert session(org.dev_b).get(url).status_code == 404
    anonymous = session(None).get(url)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/?next=")


def test_request_page_and_dashboard_offer_open_while_it_runs(org: Org, fleet: Fleet) -> None:
    running = notebook(org, fleet)
    page = session(org.dev_a).get(reverse("gpu-request-page", kwargs={"pk": running.pk}))
    assert f'href="/w/{running.pk}/"' in page.content.decode()
    home = session(org.dev_a).get(reverse("home"))
    assert f'href="/w/{running.pk}/"' in home.content.decode()


def test_a_simulated_notebook_runs_until_it_is_cancelled(
    org: Org, fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    running = notebook(org, fleet)
    fast = SimulatedCluster(speed=100_000)  # a job would have ended long ago at this speed
    SimulatedWorkload.objects.update(
        starts_at=running.created_at, ends_at=running.created_at, fails=False
    )
    execution.sync_workloads(backend=fast)
    running.refresh_from_db()
    assert running.status == RequestStatus.RUNNING
    with django_capture_on_commit_callbacks(execute=True):  # the termination task
        cancel = api_client(org.dev_a).post(
            reverse("gpu-request-cancel", kwargs={"pk": running.pk})
        )
    assert cancel.status_code == 200, cancel.content
    running.refresh_from_db()
    assert running.status == RequestStatus.CANCELLED
    assert not SimulatedWorkload.objects.filter(request_key=str(running.pk)).exists()
