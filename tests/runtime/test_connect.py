"""Opening a notebook or service on its own host: /connect/, the one-use link and the
workload cookie, the proxy's auth check, `connect_url`, the simulated placeholder."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from redis.exceptions import ConnectionError as RedisConnectionError

from runtime.cluster.simulated import SimulatedCluster
from runtime.models import SimulatedWorkload
from runtime.services import execution, workload_access
from runtime.services.connect import workload_route
from scheduling.choices import RequestStatus
from scheduling.models import GpuRequest
from tenants.models import Membership
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


def workload_client(pk: int) -> Client:
    """A browser talking to the workload's own host (`<id>.workloads.localhost:8000`)."""
    return Client(HTTP_HOST=f"{pk}.{settings.WORKLOAD_DOMAIN}")


def signed_in_to(pk: int, user: Any) -> Client:
    """A browser that went through /connect/ and the callback: it holds the workload cookie."""
    browser = workload_client(pk)
    token = workload_access.mint_link_token(user=user, request_id=pk)
    landed = browser.get(workload_access.CALLBACK_PATH, {"token": token, "next": "/"})
    assert landed.status_code == 302, landed.content
    return browser


def auth_check(pk: int, cookie: str | None) -> Any:
    """The Ingress's call to the check, with the cookies the browser sent the workload host."""
    client = Client()
    if cookie is not None:
        client.cookies[workload_access.COOKIE_NAME] = cookie
    return client.get(reverse("workload-auth", kwargs={"pk": pk}))


@covers("workload-connect")
def test_open_sends_who_may_see_it_to_the_workload_host_with_a_one_use_link(
    org: Org, fleet: Fleet
) -> None:
    request = notebook(org, fleet)
    url = reverse("workload-connect", kwargs={"pk": request.pk})
    assert url == f"/connect/{request.pk}/"
    teammate = make_user("dev_a2", "developer", org.team_a)
    for user in (org.dev_a, org.lead_a, org.admin):
        opened = session(user).get(url, {"next": "/lab?x=1"})
        assert opened.status_code == 302
        target = urlsplit(opened["Location"])
        assert (target.scheme, target.netloc, target.path) == (
            "http",
            f"{request.pk}.workloads.localhost:8000",
            "/_portal/callback",
        )
        assert parse_qs(target.query)["next"] == ["/lab?x=1"]
        assert opened["Referrer-Policy"] == "no-referrer"
    for outsider in (teammate, org.dev_b, org.lead_b, org.finance):
        assert session(outsider).get(url).status_code == 404
    anonymous = session(None).get(url)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/?next=")
    # `next` is a path on the workload's host, never another host.
    opened = session(org.dev_a).get(url, {"next": "//evil.example/"})
    assert parse_qs(urlsplit(opened["Location"]).query)["next"] == ["/"]


def test_the_callback_sets_a_host_only_cookie_once(org: Org, fleet: Fleet) -> None:
    request = notebook(org, fleet)
    browser = workload_client(request.pk)
    token = workload_access.mint_link_token(user=org.lead_a, request_id=request.pk)
    landed = browser.get("/_portal/callback", {"token": token, "next": "/lab"})
    assert landed.status_code == 302 and landed["Location"] == "/lab"
    cookie = landed.cookies[workload_access.COOKIE_NAME]
    assert cookie["domain"] == ""  # host-only: no other host gets it
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
    assert cookie["max-age"] == settings.WORKLOAD_COOKIE_SECONDS
    assert "sessionid" not in landed.cookies and "csrftoken" not in landed.cookies
    # A replayed link (from a log, a proxy, the history) is refused.
    replay = workload_client(request.pk).get("/_portal/callback", {"token": token})
    assert replay.status_code == 403 and workload_access.COOKIE_NAME not in replay.cookies
    # A link for another workload does not work here.
    other = notebook(org, fleet)
    foreign = workload_access.mint_link_token(user=org.lead_a, request_id=other.pk)
    assert (
        workload_client(request.pk).get("/_portal/callback", {"token": foreign}).status_code == 403
    )


def test_a_link_expires_and_a_tampered_one_is_refused(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    request = notebook(org, fleet)
    token = workload_access.mint_link_token(user=org.dev_a, request_id=request.pk)
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert workload_access.redeem_link_token(tampered, request_id=request.pk).status == 401
    settings.WORKLOAD_LINK_SECONDS = -1  # every link is older than that
    assert workload_access.redeem_link_token(token, request_id=request.pk).status == 401


def test_another_teams_user_is_refused_even_with_a_link_in_hand(org: Org, fleet: Fleet) -> None:
    request = notebook(org, fleet)
    forged = workload_access.mint_link_token(user=org.dev_b, request_id=request.pk)
    refused = workload_client(request.pk).get("/_portal/callback", {"token": forged})
    assert refused.status_code == 403 and workload_access.COOKIE_NAME not in refused.cookies


@covers("workload-auth")
def test_auth_check_lets_the_cookie_in_for_its_own_workload_only(org: Org, fleet: Fleet) -> None:
    mine, other = notebook(org, fleet), notebook(org, fleet)
    cookie = workload_access.cookie_value(user=org.lead_a, request_id=mine.pk)
    allowed = auth_check(mine.pk, cookie)
    assert allowed.status_code == 200
    assert allowed["X-Auth-Request-User"] == "lead_a"
    assert allowed["Authorization"] == f"token {workload_access.notebook_token(mine.pk)}"
    assert "no-cache" in allowed["Cache-Control"] or "max-age=0" in allowed["Cache-Control"]
    assert auth_check(other.pk, cookie).status_code == 401  # 5's cookie does not open 6
    assert auth_check(mine.pk, None).status_code == 401
    assert auth_check(mine.pk, cookie[:-3] + "xyz").status_code == 401
    # The portal's own session is no credential for a workload.
    assert (
        session(org.lead_a).get(reverse("workload-auth", kwargs={"pk": mine.pk})).status_code == 401
    )
    # Who may not see it: 403, for a real id and a missing one alike.
    outsider = workload_access.cookie_value(user=org.dev_b, request_id=mine.pk)
    assert auth_check(mine.pk, outsider).status_code == 403
    missing = workload_access.cookie_value(user=org.dev_b, request_id=999_999)
    assert auth_check(999_999, missing).status_code == 403


def test_a_service_gets_no_token_from_the_check(org: Org, fleet: Fleet) -> None:
    service = notebook(org, fleet, kind="service")
    cookie = workload_access.cookie_value(user=org.dev_a, request_id=service.pk)
    allowed = auth_check(service.pk, cookie)
    assert allowed.status_code == 200 and "Authorization" not in allowed


def test_access_ends_at_the_next_call_once_the_user_loses_it(org: Org, fleet: Fleet) -> None:
    request = notebook(org, fleet)
    cookie = workload_access.cookie_value(user=org.lead_a, request_id=request.pk)
    assert auth_check(request.pk, cookie).status_code == 200
    Membership.objects.filter(user=org.lead_a, team=org.team_a).delete()  # left the team
    assert auth_check(request.pk, cookie).status_code == 403
    owner = workload_access.cookie_value(user=org.dev_a, request_id=request.pk)
    org.dev_a.set_password("a-new-password")
    org.dev_a.save()
    assert auth_check(request.pk, owner).status_code == 401  # a new password ends old cookies
    admin = workload_access.cookie_value(user=org.admin, request_id=request.pk)
    org.admin.is_active = False
    org.admin.save()
    assert auth_check(request.pk, admin).status_code == 401


def test_the_workload_host_serves_no_portal_page(org: Org, fleet: Fleet, settings: Any) -> None:
    request = notebook(org, fleet)
    settings.CLUSTER_BACKEND = "kubernetes"
    for path in ("/", "/login/", "/api/v1/requests/", "/admin/"):
        assert workload_client(request.pk).get(path).status_code == 404


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
    assert body["connect_url"] == f"http://testserver/connect/{running.pk}/"
    listed = client.get(reverse("gpu-request-list")).json()["results"]
    assert {r["id"]: r["connect_url"] for r in listed}[running.pk] == body["connect_url"]
    # What sync saw of the pods is on the request too.
    assert body["node_names"] and body["pod_names"] == [] and body["exit_code"] is None


def test_workload_route_puts_the_workload_on_its_own_host(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    running = notebook(org, fleet)
    settings.WORKLOAD_DOMAIN = "workloads.example.org"
    settings.PORTAL_URL = "https://gpu.example.com"
    route = workload_route(running)
    assert route is not None
    assert route.host == f"{running.pk}.workloads.example.org" and route.path == "/"
    assert route.auth_url == f"https://gpu.example.com/auth/workloads/{running.pk}/"
    assert route.signin_url == (
        f"https://gpu.example.com/connect/{running.pk}/?next=$escaped_request_uri"
    )
    assert (route.portal_service_host, route.portal_service_port) == ("gpu.example.com", 443)
    settings.PORTAL_INTERNAL_URL = "http://gpu-portal-web.gpu-portal.svc:8000"
    route = workload_route(running)
    assert route is not None and route.auth_url.startswith("http://gpu-portal-web.")
    assert (route.portal_service_host, route.portal_service_port) == (
        "gpu-portal-web.gpu-portal.svc",
        8000,
    )
    settings.WORKLOAD_ROUTE = "none"
    assert workload_route(running) is None


def test_the_simulated_cluster_serves_a_placeholder_on_the_workload_host(
    org: Org, fleet: Fleet, settings: Any
) -> None:
    running = notebook(org, fleet)
    settings.PORTAL_URL = "http://127.0.0.1:8000"
    anonymous = workload_client(running.pk).get("/tree")
    assert anonymous.status_code == 302
    assert anonymous["Location"] == f"http://127.0.0.1:8000/connect/{running.pk}/?next=%2Ftree"
    browser = signed_in_to(running.pk, org.lead_a)
    page = browser.get("/")
    assert page.status_code == 200
    text = page.content.decode()
    assert f"Notebook of request {running.pk} (simulated)" in text
    assert "lead_a" in text and workload_access.COOKIE_NAME in text
    assert page["Content-Security-Policy"].startswith("default-src 'none'")
    cookie = browser.cookies[workload_access.COOKIE_NAME].value
    assert cookie not in text  # names only, never values


def test_request_page_and_dashboard_offer_open_while_it_runs(org: Org, fleet: Fleet) -> None:
    running = notebook(org, fleet)
    page = session(org.dev_a).get(reverse("gpu-request-page", kwargs={"pk": running.pk}))
    assert f'href="/connect/{running.pk}/"' in page.content.decode()
    home = session(org.dev_a).get(reverse("home"))
    assert f'href="/connect/{running.pk}/"' in home.content.decode()


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


def test_the_callback_answers_503_when_the_cache_is_unreachable(
    org: Org, fleet: Fleet, monkeypatch: Any
) -> None:
    request = notebook(org, fleet)
    token = workload_access.mint_link_token(user=org.dev_a, request_id=request.pk)

    def unreachable(*args: Any, **kwargs: Any) -> bool:
        raise RedisConnectionError("connection refused")

    monkeypatch.setattr(workload_access.cache, "add", unreachable)
    answer = workload_client(request.pk).get("/_portal/callback", {"token": token})
    assert answer.status_code == 503 and workload_access.COOKIE_NAME not in answer.cookies
