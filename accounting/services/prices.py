"""Writes to the price list (platform admins), each validated and audited.

A price is never rewritten once in effect: usage has been metered at it. A new price starts now
or later; a price that has not started yet may still be changed or withdrawn.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounting.models import Price, ResourcePrice
from tenants.errors import ConflictError, DomainError
from tenants.scope import Actor
from tenants.services.organisation import (
    apply_changes,
    audit_value,
    known_fields,
    record_audit_event,
    require_platform_admin,
    save_valid,
)

PRICE_FIELDS = frozenset(
    {
        "flavor",
        "price_per_hour",
        "currency",
        "effective_from",
        "preemptible_multiplier",
        "priority_multipliers",
    }
)


def _check_starts_ahead(effective_from: datetime, now: datetime) -> None:
    if effective_from < now:
        raise DomainError(
            "invalid",
            "A price starts now or later: usage already metered keeps the price it had.",
            fields={"effective_from": "in the past"},
        )


def _check_not_in_effect(price: Price | ResourcePrice, now: datetime, what: str) -> None:
    if price.effective_from <= now:
        raise ConflictError(
            "price_in_effect",
            f"This price is in effect since {price.effective_from:%Y-%m-%d %H:%M}: usage was "
            f"metered at it, so it cannot be {what}. Add a new price from a later date.",
        )


AnyPrice = Price | ResourcePrice


def _create(
    model: type[AnyPrice],
    allowed: frozenset[str],
    action: str,
    actor: Actor,
    fields: dict[str, Any],
) -> Any:
    """A new price from `effective_from` on (now when left out), audited as `<action>.created`."""
    require_platform_admin(actor, "set prices")
    now = timezone.now()
    fields = known_fields(fields, allowed)
    if fields.get("effective_from") is None:
        fields["effective_from"] = now
    else:
        _check_starts_ahead(fields["effective_from"], now)
    price = model(**fields)
    save_valid(price)
    record_audit_event(
        actor=actor, action=f"{action}.created", target=price, data={"fields": audit_value(fields)}
    )
    return price


def _update(
    price: AnyPrice, allowed: frozenset[str], action: str, actor: Actor, fields: dict[str, Any]
) -> None:
    """Change a price that has not started yet (409 once in effect), audited with the diff."""
    require_platform_admin(actor, "change prices")
    now = timezone.now()
    _check_not_in_effect(price, now, "changed")
    fields = known_fields(fields, allowed)
    if "effective_from" in fields:
        _check_starts_ahead(fields["effective_from"], now)
    changes = apply_changes(price, fields)
    save_valid(price)
    record_audit_event(
        actor=actor, action=f"{action}.updated", target=price, data={"changes": changes}
    )


def _delete(price: AnyPrice, action: str, actor: Actor, data: dict[str, Any]) -> None:
    """Withdraw a price that has not started yet (409 once in effect)."""
    require_platform_admin(actor, "delete prices")
    _check_not_in_effect(price, timezone.now(), "deleted")
    data = {**data, "price_per_hour": str(price.price_per_hour)}
    record_audit_event(
        actor=actor, action=f"{action}.deleted", target=price, message=str(price), data=data
    )
    price.delete()


@transaction.atomic
def create_price(*, actor: Actor, **fields: Any) -> Price:
    """A new price of a flavor from `effective_from` on (now when left out)."""
    price: Price = _create(Price, PRICE_FIELDS, "price", actor, fields)
    return price


@transaction.atomic
def update_price(*, actor: Actor, price: Price, **fields: Any) -> Price:
    """Change a price that has not started yet; one in effect is a 409."""
    _update(price, PRICE_FIELDS, "price", actor, fields)
    return price


@transaction.atomic
def delete_price(*, actor: Actor, price: Price) -> None:
    """Withdraw a price that has not started yet; one in effect is a 409."""
    _delete(price, "price", actor, {"flavor": price.flavor_id})


RESOURCE_PRICE_FIELDS = frozenset({"resource", "price_per_hour", "currency", "effective_from"})


@transaction.atomic
def create_resource_price(*, actor: Actor, **fields: Any) -> ResourcePrice:
    """A new CPU, memory or storage price from `effective_from` on (now when left out)."""
    price: ResourcePrice = _create(
        ResourcePrice, RESOURCE_PRICE_FIELDS, "resource_price", actor, fields
    )
    return price


@transaction.atomic
def update_resource_price(*, actor: Actor, price: ResourcePrice, **fields: Any) -> ResourcePrice:
    """Change a resource price that has not started yet; one in effect is a 409."""
    _update(price, RESOURCE_PRICE_FIELDS, "resource_price", actor, fields)
    return price


@transaction.atomic
def delete_resource_price(*, actor: Actor, price: ResourcePrice) -> None:
    """Withdraw a resource price that has not started yet; one in effect is a 409."""
    _delete(price, "resource_price", actor, {"resource": price.resource})
