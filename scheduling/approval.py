"""Whether a request is approved at once or waits for its team lead — a pure policy.

Each check returns None or the reason the lead must look; the rule's tier settings decide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduling.choices import PRIORITY_RANK, FlavorKind


@dataclass(frozen=True, slots=True)
class ApprovalFacts:
    priority: str
    flavor_kind: str
    within_guaranteed: bool
    within_limit: bool


@dataclass(frozen=True, slots=True)
class RuleSettings:
    auto_approve_within_guaranteed: bool
    auto_approve_max_priority: str
    lead_approves_whole_cards: bool


Check = Callable[[ApprovalFacts, RuleSettings], str | None]


def above_guaranteed(facts: ApprovalFacts, rule: RuleSettings) -> str | None:
    if not facts.within_guaranteed:
        return "above the guaranteed quota"
    return None


def auto_approval_disabled(facts: ApprovalFacts, rule: RuleSettings) -> str | None:
    if not rule.auto_approve_within_guaranteed:
        return "this tier approves every request by hand"
    return None


def priority_too_high(facts: ApprovalFacts, rule: RuleSettings) -> str | None:
    if PRIORITY_RANK[facts.priority] > PRIORITY_RANK[rule.auto_approve_max_priority]:
        return f"{facts.priority} priority"
    return None


def whole_cards(facts: ApprovalFacts, rule: RuleSettings) -> str | None:
    if rule.lead_approves_whole_cards and facts.flavor_kind == FlavorKind.WHOLE:
        return "whole cards in this tier"
    return None


CHECKS: tuple[Check, ...] = (
    above_guaranteed,
    auto_approval_disabled,
    priority_too_high,
    whole_cards,
)


def reasons_for_lead_approval(facts: ApprovalFacts, rule: RuleSettings) -> list[str]:
    """Every reason the team lead must approve; empty means approve at once."""
    return [reason for check in CHECKS if (reason := check(facts, rule)) is not None]
