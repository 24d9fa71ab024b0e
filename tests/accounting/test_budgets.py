"""Budgets: API roles and scoping, burn, alerts once per threshold and month, over-budget policy."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse

from accounting.choices import OverBudgetPolicy
from accounting.models import Budget
from accounting.selectors.budgets import exhausted_policy
from accounting.services.budgets import check_budget_burn
from scheduling import dispatch
from scheduling.choices import RequestStatus
from scheduling.services.notifications import send_out
from tenants.models import AuditEvent
from tests.accounting.test_api import usage
from tests.scheduling.conftest import Fleet
from tests.support.api_contract import ApiContract
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client

__all__ = ["usage"]

pytestmark = pytest.mark.django_db

# The `usage` fixture: team A spent 5.50 (2.5 GPU-hours) this month, team B 2.50 (1 GPU-hour).


def make_budget(org: Org, **fields: Any) -> Budget:
    values: dict[str, Any] = {"team": org.team_a, "unit": "money", "amount": Decimal("10")}
    values.update(fields)
    return Budget.objects.create(**values)


BUDGETS = ApiContract(
    basename="budget",
    subject=lambda world: make_budget(world.org),
    audit="budget",
    may_read={"admin", "finance", "lead_a"},  # dev_a: team budgets are for leads
    may_create={"admin", "lead_a"},
    may_update={"admin", "lead_a"},
    may_delete={"admin", "lead_a"},
    create_body=lambda world: {"team": world.org.team_a.pk, "unit": "gpu_hours", "amount": "3"},
    update_body={"amount": "20"},
    list_filters=lambda world: [{"team": world.org.team_a.pk}],
)
test_budgets_api_contract = BUDGETS.tests()


def create(user: Any, **body: Any) -> Any:
    return api_client(user).post(reverse("budget-list"), body, format="json")


def test_lead_creates_a_team_budget_and_sees_its_burn(org: Org, usage: Any) -> None:
    response = create(org.lead_a, team=org.team_a.pk, unit="money", amount="5.00")
    assert response.status_code == 201, response.content
    body = response.json()
    assert Decimal(body["spent"]) == Decimal("5.5")
    assert Decimal(body["percent_used"]) == Decimal("110.0")
    assert body["is_exhausted"] is True
    assert AuditEvent.objects.filter(action="budget.created", team=org.team_a).exists()


def test_project_budget_in_gpu_hours_counts_only_that_project(org: Org, usage: Any) -> None:
    response = create(
        org.lead_a, team=org.team_a.pk, project=org.project_a2.pk, unit="gpu_hours", amount="1"
    )
    assert response.status_code == 201, response.content
    assert Decimal(response.json()["spent"]) == Decimal("0.5")
    assert response.json()["is_exhausted"] is False


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"unit": "money", "amount": "-1"}, "amount"),
        ({"unit": "money", "amount": "0"}, "amount"),
        ({"unit": "yen", "amount": "1"}, "unit"),
        ({"unit": "money", "amount": "abc"}, "amount"),
        ({"unit": "money", "amount": "1", "over_budget_policy": "panic"}, "over_budget_policy"),
    ],
)
def test_bad_budget_input_is_400(org: Org, body: dict[str, Any], field: str) -> None:
    response = create(org.lead_a, team=org.team_a.pk, **body)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]


def test_a_second_budget_in_the_same_unit_is_400(org: Org) -> None:
    make_budget(org)
    response = create(org.lead_a, team=org.team_a.pk, unit="money", amount="3")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "duplicate"


def test_project_of_another_team_is_refused(org: Org) -> None:
    response = create(
        org.lead_a, team=org.team_a.pk, project=org.project_b.pk, unit="money", amount="3"
    )
    assert response.status_code == 400
    assert "project" in response.json()["error"]["fields"]


@pytest.mark.parametrize("who", ["dev_a", "finance"])
def test_developers_and_finance_cannot_manage_budgets(org: Org, who: str) -> None:
    user = getattr(org, who)
    assert create(user, team=org.team_a.pk, unit="money", amount="3").status_code == 403
    budget = make_budget(org, project=org.project_a)
    client = api_client(user)
    url = reverse("budget-detail", kwargs={"pk": budget.pk})
    assert client.patch(url, {"amount": "1"}, format="json").status_code == 403
    assert client.delete(url).status_code == 403
    assert Budget.objects.get(pk=budget.pk).amount == Decimal("10")


def test_lead_changes_and_deletes_a_budget(org: Org) -> None:
    budget = make_budget(org)
    client = api_client(org.lead_a)
    url = reverse("budget-detail", kwargs={"pk": budget.pk})
    response = client.patch(url, {"amount": "20", "over_budget_policy": "approval"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["amount"] == "20.00"
    assert response.json()["over_budget_policy"] == "approval"
    moved = client.patch(url, {"team": org.team_b.pk}, format="json")
    assert moved.status_code == 400
    assert client.delete(url).status_code == 204
    assert not Budget.objects.filter(pk=budget.pk).exists()


def test_who_reads_which_budgets(org: Org) -> None:
    team_budget = make_budget(org)
    project_budget = make_budget(org, project=org.project_a)
    other = make_budget(org, team=org.team_b)

    def ids(user: Any) -> set[int]:
        response = api_client(user).get(reverse("budget-list"))
        assert response.status_code == 200
        return {row["id"] for row in response.json()["results"]}

    assert ids(org.finance) == {team_budget.pk, project_budget.pk, other.pk}
    assert ids(org.admin) == {team_budget.pk, project_budget.pk, other.pk}
    assert ids(org.lead_a) == {team_budget.pk, project_budget.pk}
    assert ids(org.dev_a) == {project_budget.pk}
    assert ids(org.nobody) == set()
    assert api_client(None).get(reverse("budget-list")).status_code == 401


def test_alerts_fire_once_per_threshold_and_month(
    org: Org, usage: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    sent: list[tuple[list[str], str]] = []

    def send(task_name: str, *args: Any) -> None:
        if task_name == dispatch.SEND_NOTICES:  # the one task that fans the notices out
            send_out(notices=args[0])
        if task_name == dispatch.SEND_NOTIFICATION:
            sent.append((args[0], args[1]))

    monkeypatch.setattr(dispatch, "send", send)
    at_90 = make_budget(org, amount=Decimal("6.10"))  # 5.50 of 6.10 = 90 %
    over = make_budget(org, team=org.team_b, unit="gpu_hours", amount=Decimal("1"))  # 100 %
    make_budget(org, project=org.project_a2, amount=Decimal("100"))  # 0.5 %: nothing
    with django_capture_on_commit_callbacks(execute=True):
        assert check_budget_burn() == 3
    with django_capture_on_commit_callbacks(execute=True):
        assert check_budget_burn() == 0
    actions = sorted(
        (event.target_id, event.action)
        for event in AuditEvent.objects.filter(action__startswith="budget.alert")
    )
    assert actions == [
        (str(at_90.pk), "budget.alert_80"),
        (str(over.pk), "budget.alert_100"),
        (str(over.pk), "budget.alert_80"),
    ]
    assert sorted(sent) == [
        (["lead_a@example.com"], "Budget of Team A at 80 %"),
        (["lead_b@example.com"], "Budget of Team B at 100 %"),
        (["lead_b@example.com"], "Budget of Team B at 80 %"),
    ]


def test_within_budget_work_is_unchanged(org: Org, fleet: Fleet, usage: Any) -> None:
    make_budget(org, amount=Decimal("100"), over_budget_policy=OverBudgetPolicy.APPROVAL)
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    assert request.status == RequestStatus.QUEUED and not request.is_preemptible


def test_over_budget_notify_policy_changes_nothing(org: Org, fleet: Fleet, usage: Any) -> None:
    make_budget(org, amount=Decimal("5"))
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    assert request.status == RequestStatus.QUEUED and not request.is_preemptible


def test_over_budget_preemptible_only_forces_preemptible(
    org: Org, fleet: Fleet, usage: Any
) -> None:
    make_budget(org, amount=Decimal("5"), over_budget_policy=OverBudgetPolicy.PREEMPTIBLE_ONLY)
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    assert request.is_preemptible
    event = AuditEvent.objects.get(action="request.submitted", target_id=str(request.pk))
    assert event.data["policy"] == ["over budget: submitted as preemptible"]


def test_over_budget_approval_policy_waits_for_the_lead(org: Org, fleet: Fleet, usage: Any) -> None:
    make_budget(
        org,
        project=org.project_a,
        unit="gpu_hours",
        amount=Decimal("2"),
        over_budget_policy=OverBudgetPolicy.APPROVAL,
    )
    make_budget(org, amount=Decimal("5"), over_budget_policy=OverBudgetPolicy.PREEMPTIBLE_ONLY)
    assert exhausted_policy(project=org.project_a) == OverBudgetPolicy.APPROVAL  # strictest
    assert exhausted_policy(project=org.project_a2) == OverBudgetPolicy.PREEMPTIBLE_ONLY
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    assert request.status == RequestStatus.PENDING_APPROVAL
    assert "budget is used up" in request.needs_lead_approval_because


def test_only_the_teams_own_and_the_projects_budgets_bind_a_submission(
    org: Org, fleet: Fleet, usage: Any
) -> None:
    exhausted = {"amount": Decimal("1"), "over_budget_policy": OverBudgetPolicy.APPROVAL}
    make_budget(org, project=org.project_a2, **exhausted)  # a sibling project's
    make_budget(org, team=org.team_b, **exhausted)  # another team's
    make_budget(org, team=org.team_b, project=org.project_b, unit="gpu_hours", **exhausted)
    assert exhausted_policy(project=org.project_a) is None
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_6g)
    assert request.status == RequestStatus.QUEUED


def test_budget_list_query_count_stays_flat(org: Org, usage: Any) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = api_client(org.finance)
    client.get(reverse("me"))  # the token is verified once; later calls recall it from the cache

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(reverse("budget-list")).status_code == 200
        return len(captured)

    make_budget(org)
    few = queries()
    for project in (org.project_a, org.project_a2):
        make_budget(org, project=project)
        make_budget(org, project=project, unit="gpu_hours")
    make_budget(org, team=org.team_b)
    assert queries() == few
