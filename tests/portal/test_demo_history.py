"""The seeded demo has a past: every role's dashboard and report has content at first sign-in."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import Count
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.models import BudgetAlert, Statement, UsageRecord
from accounting.selectors.usage import current_month
from portal.demo_history import HISTORY_MARKER
from scheduling.choices import FlavorKind, RequestStatus, WorkloadKind
from scheduling.models import Allocation, GpuRequest, UtilisationSample
from tenants.models import AuditEvent, Team
from tests.support.personas import api_client

pytestmark = pytest.mark.django_db
SEED_SECONDS: dict[str, float] = {}


@pytest.fixture
def history(settings: Any) -> None:
    settings.DEMO_PASSWORD = "demo-test"
    started = time.perf_counter()
    call_command("seed_demo", "--history-days", "90")
    SEED_SECONDS["first"] = time.perf_counter() - started


def user(name: str) -> Any:
    return get_user_model().objects.get(username=name)


def dashboard(username: str) -> dict[str, Any]:
    client = Client()
    client.force_login(user(username))
    response = client.get(reverse("home"))
    assert response.status_code == 200
    assert response.context is not None
    context: dict[str, Any] = response.context["dashboard"]
    return context


def test_history_has_every_kind_mode_and_outcome_for_both_teams(history: None) -> None:
    for team in Team.objects.filter(slug__in=["vision", "speech"]):
        requests = GpuRequest.objects.filter(team=team)
        assert {kind for kind in requests.values_list("kind", flat=True)} == set(WorkloadKind)
        modes = set(requests.values_list("flavor__kind", flat=True))
        expected = set(FlavorKind) if team.slug == "vision" else {FlavorKind.VGPU, FlavorKind.MIG}
        assert modes == expected
        statuses = set(requests.values_list("status", flat=True))
        assert {
            RequestStatus.SUCCEEDED,
            RequestStatus.FAILED,
            RequestStatus.CANCELLED,
            RequestStatus.RECLAIMED,
            RequestStatus.REJECTED,
        } <= statuses
    # Nothing of the past is still holding GPUs; two requests wait in the leads' inboxes.
    assert not Allocation.objects.active().exists()
    assert GpuRequest.objects.filter(status=RequestStatus.PENDING_APPROVAL).count() == 2
    # Every run was metered into the ledger, and the meter will not count it again.
    ran = Allocation.objects.filter(started_at__isnull=False)
    assert UsageRecord.objects.values("allocation").distinct().count() == ran.count()
    assert not ran.exclude(meter__is_final=True).exists()
    assert UtilisationSample.objects.exists()


def test_history_is_written_once_and_fast(history: None) -> None:
    assert SEED_SECONDS["first"] < 60
    counts = (GpuRequest.objects.count(), AuditEvent.objects.count(), UsageRecord.objects.count())
    call_command("seed_demo", "--history-days", "90")
    assert (
        GpuRequest.objects.count(),
        AuditEvent.objects.count(),
        UsageRecord.objects.count(),
    ) == counts
    assert AuditEvent.objects.filter(action=HISTORY_MARKER).count() == 1


def test_history_can_be_turned_off(settings: Any) -> None:
    settings.DEMO_HISTORY_DAYS = 0
    call_command("seed_demo")
    assert not GpuRequest.objects.exists()
    assert not AuditEvent.objects.filter(action=HISTORY_MARKER).exists()


def test_every_role_finds_its_dashboard_full_at_first_sign_in(history: None) -> None:
    board = dashboard("alice")
    assert board["efficiency"], "the efficiency chart reads the last 14 days' samples"
    assert any(dataset["data"] for dataset in board["efficiency_chart"]["datasets"])

    board = dashboard("bob")
    assert board["pending_approvals"] >= 1
    assert board["member_usage"]
    assert board["idle_waste_total"] > 0
    assert board["budgets"]
    assert board["burndown_chart"]["datasets"]

    board = dashboard("fiona")
    assert len(board["trend_chart"]["labels"]) >= 3
    assert {dataset["label"] for dataset in board["chart"]["datasets"]} == {"Speech", "Vision"}
    fiona = api_client(user("fiona"))
    usage = fiona.get(reverse("usage"), {"months": "3", "group_by": "team"}).json()
    assert {row["team"] for row in usage["results"] if float(row["cost"]) > 0} == {
        "Speech",
        "Vision",
    }


def test_closed_months_have_statements_and_budgets_fired_alerts(history: None) -> None:
    closed = set(Statement.objects.values_list("period", "team__slug"))
    months = {period for period, _ in closed}
    assert len(months) >= 2
    assert all(month < current_month() for month in months)
    assert closed == {(month, team) for month in months for team in ("vision", "speech")}
    response = api_client(user("fiona")).get(reverse("statement-list"))
    assert response.status_code == 200

    periods = set(BudgetAlert.objects.values_list("period", flat=True))
    assert len(periods) >= 2
    assert AuditEvent.objects.filter(action__startswith="budget.alert_").count() == (
        BudgetAlert.objects.count()
    )


def test_admin_sees_reclaims_this_month_and_the_audit_log_tells_the_story(history: None) -> None:
    board = dashboard("root")
    assert board["top_consumers"]
    assert {row["reason"] for row in board["reclaims"]} >= {"idle", "timeout"}
    actions = dict(
        AuditEvent.objects.values_list("action").annotate(n=Count("pk")).values_list("action", "n")
    )
    for action in (
        "request.approved",
        "request.rejected",
        "request.preempted",
        "reclaim.idle",
        "reclaim.idle_warning",
        "reclaim.timeout",
        "statement.closed",
    ):
        assert actions.get(action, 0) > 0, action
    root = api_client(user("root"))
    rejected = root.get(reverse("audit-event-list"), {"action": "request.rejected"}).json()
    assert rejected["results"]
    assert all(row["actor"] for row in rejected["results"])


PAGES = {
    "alice": ["home", "gpu-requests-page"],
    "bob": ["home", "gpu-requests-page", "approvals-page", "quotas-page", "audit-page"],
    "fiona": ["home", "budgets-page"],
    "root": ["home", "gpu-requests-page", "fleet-page", "audit-page"],
}


def test_every_role_s_pages_render_over_the_history(history: None) -> None:
    for username, names in PAGES.items():
        client = Client()
        client.force_login(user(username))
        for name in names:
            assert client.get(reverse(name)).status_code == 200, (username, name)


def test_the_inbox_is_not_empty_at_first_sign_in(history: None) -> None:
    from tenants.models import Notification

    for lead in ("bob", "dan"):
        asks = Notification.objects.visible_to(user(lead)).filter(kind="approval", read_at=None)
        assert asks.exists(), lead
        assert all(n.url == reverse("approvals-page") for n in asks)
    for developer in ("alice", "carol"):
        updates = Notification.objects.visible_to(user(developer)).filter(kind="update")
        decided = GpuRequest.objects.filter(
            owner=user(developer), status__in=[RequestStatus.SUCCEEDED, RequestStatus.REJECTED]
        ).order_by("created_at", "pk")
        last_three = {reverse("gpu-request-page", args=[r.pk]) for r in list(decided)[-3:]}
        assert len(last_three) == 3, developer
        assert {n.url for n in updates} == last_three, developer
        assert all(n.created_at < timezone.now() - timedelta(minutes=1) for n in updates)
    # Only the recipient sees a notice.
    assert not Notification.objects.visible_to(user("alice")).filter(kind="approval").exists()
