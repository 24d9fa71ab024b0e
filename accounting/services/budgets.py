"""Budgets, the writes: create, change and delete (audited), the alerts, the submission policy.

Alerts at 80 % and 100 % fire once per budget, threshold and month (a unique row in
`BudgetAlert`); past 100 % the strictest `over_budget_policy` among the exhausted budgets of the
project's team shapes new work through scheduling's submission hook. The burn they read is in
`accounting.selectors.budgets`.
"""

from __future__ import annotations

import logging
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from accounting.choices import ALERT_THRESHOLDS_PERCENT, BudgetUnit, OverBudgetPolicy
from accounting.models import Budget, BudgetAlert
from accounting.selectors.budgets import exhausted_policy, spent_of, with_burn
from accounting.selectors.usage import current_month
from scheduling.services.notifications import notify
from scheduling.services.requests import SubmissionAdjustment
from tenants.choices import Role
from tenants.errors import DomainError, ForbiddenError
from tenants.models import Project, Team, scope_of
from tenants.scope import Actor
from tenants.services.organisation import apply_changes, record_audit_event

log = logging.getLogger(__name__)


def _require_budget_manager(actor: Actor, team: Team) -> None:
    if not scope_of(actor).is_lead_of(team.pk):
        raise ForbiddenError("forbidden", "Only the team's lead or a platform admin may do this.")


def _check_project(team: Team, project: Project | None) -> None:
    if project is not None and project.team_id != team.pk:
        message = "The project belongs to another team."
        raise DomainError("invalid", message, fields={"project": message})


def _conflict(error: IntegrityError) -> DomainError:
    message = "There is already a budget in this unit for it."
    return DomainError("duplicate", message, fields={"unit": message})


@transaction.atomic
def create_budget(
    *,
    actor: Actor,
    team: Team,
    unit: str,
    amount: Decimal,
    project: Project | None = None,
    over_budget_policy: str = OverBudgetPolicy.NOTIFY,
) -> Budget:
    _require_budget_manager(actor, team)
    _check_project(team, project)
    try:
        with transaction.atomic():
            budget = Budget.objects.create(
                team=team,
                project=project,
                unit=unit,
                amount=amount,
                over_budget_policy=over_budget_policy,
            )
    except IntegrityError as error:
        raise _conflict(error) from error
    record_audit_event(
        actor=actor,
        action="budget.created",
        target=budget,
        team=team,
        project=project,
        data={"unit": unit, "amount": str(amount), "policy": over_budget_policy},
    )
    return budget


UPDATABLE = ("unit", "amount", "over_budget_policy")


@transaction.atomic
def update_budget(*, actor: Actor, budget: Budget, **changes: Any) -> Budget:
    """Change amount, unit or policy; a budget stays with its team and project."""
    _require_budget_manager(actor, budget.team)
    for name in ("team", "project"):
        if name in changes and changes.pop(name) != getattr(budget, name):
            message = "A budget cannot move; delete it and create another."
            raise DomainError("invalid", message, fields={name: message})
    changes = {k: v for k, v in changes.items() if k in UPDATABLE}
    changed = apply_changes(budget, changes)
    try:
        with transaction.atomic():
            budget.save(update_fields=[*changes, "updated_at"])
    except IntegrityError as error:
        raise _conflict(error) from error
    record_audit_event(
        actor=actor,
        action="budget.updated",
        target=budget,
        team=budget.team,
        project=budget.project,
        data={"changes": changed},
    )
    return budget


@transaction.atomic
def delete_budget(*, actor: Actor, budget: Budget) -> None:
    _require_budget_manager(actor, budget.team)
    record_audit_event(
        actor=actor,
        action="budget.deleted",
        target=budget,
        team=budget.team,
        project=budget.project,
        message=str(budget),
    )
    budget.delete()


def _team_leads(team_id: int) -> list[Any]:
    return list(
        get_user_model().objects.filter(
            memberships__team_id=team_id, memberships__role=Role.TEAM_LEAD, is_active=True
        )
    )


def check_budget_burn(*, now: datetime | None = None) -> int:
    """Fire every alert due this month that has not fired yet; returns how many fired.

    Safe to run twice: the alert row is unique per budget, month and threshold, and the audit
    event and notice are written in the same transaction as that row.
    """
    month = current_month(now)
    fired = 0
    budgets = with_burn(Budget.objects.select_related("team", "project"), month=month)
    for budget in budgets:
        spent = spent_of(budget)
        for threshold in ALERT_THRESHOLDS_PERCENT:
            if spent * 100 < budget.amount * threshold:
                continue
            with transaction.atomic():
                _, created = BudgetAlert.objects.get_or_create(
                    budget=budget,
                    period=month,
                    threshold_percent=threshold,
                    defaults={"spent": spent},
                )
                if not created:
                    continue
                fired += 1
                _announce(budget, threshold=threshold, spent=spent, month=month)
    return fired


def _announce(budget: Budget, *, threshold: int, spent: Decimal, month: date) -> None:
    owner = budget.project or budget.team
    unit = "GPU-hours" if budget.unit == BudgetUnit.GPU_HOURS else budget.get_unit_display()
    message = (
        f"The {month:%Y-%m} budget of {owner} is at {threshold} %: "
        f"{spent.quantize(Decimal('0.01'))} of {budget.amount} {unit}."
    )
    if threshold >= 100:
        message += f" From now on: {budget.get_over_budget_policy_display().lower()}."
    record_audit_event(
        actor=None,
        action=f"budget.alert_{threshold}",
        target=budget,
        team=budget.team,
        project=budget.project,
        message=message,
        data={"period": f"{month:%Y-%m}", "spent": str(spent), "amount": str(budget.amount)},
    )
    notify(
        users=_team_leads(budget.team_id),
        subject=f"Budget of {owner} at {threshold} %",
        body=message,
        event={"type": "budget.alert", "budget": budget.pk, "threshold": threshold},
    )


# The submission policy -----------------------------------------------------------------------


def adjust_submission(sender: Any, *, project: Project, **_: Any) -> SubmissionAdjustment | None:
    """Receiver of `gpu_request_submitting`: apply the team's over-budget policy."""
    policy = exhausted_policy(project=project)
    if policy == OverBudgetPolicy.PREEMPTIBLE_ONLY:
        return SubmissionAdjustment(
            force_preemptible=True, note="over budget: submitted as preemptible"
        )
    if policy == OverBudgetPolicy.APPROVAL:
        return SubmissionAdjustment(
            lead_approval_reason="the budget is used up this month",
            note="over budget: needs lead approval",
            blocker="budget",
        )
    return None
