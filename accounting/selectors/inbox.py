"""The lead's inbox: pending approvals and unanswered asks, each with its cost and quota impact.

Accounting composes it because the cost needs prices; the requests, asks and quota impact come
from the scheduling selectors, and the decisions go through the scheduling services.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings

from accounting.choices import HostResource
from accounting.models import Price, ResourcePrice, hourly_rates
from accounting.selectors.usage import price_in_force, resource_price_in_force
from scheduling.models import GpuRequest
from scheduling.selectors.approvals import approval_inbox, deferred_approvals, open_asks
from scheduling.selectors.quotas import QuotaImpact, queue_quota_impacts

HOURS_ASKED = {"extension": 1, "idle_exemption": 2}  # what the row offers to grant first


@dataclass(frozen=True, slots=True)
class InboxRow:
    """One thing waiting for the lead: an approval, or an ask for more time or an idle
    exemption on running work. Cost: per hour, and over the hours at stake (the request's max
    runtime for an approval, the default grant for an ask). None where the flavor is unpriced."""

    kind: str  # "approval", "extension" or "idle_exemption"
    request: GpuRequest
    impact: QuotaImpact | None
    cost_per_hour: Decimal | None
    cost_at_stake: Decimal | None
    hours_at_stake: Decimal
    currency: str
    asked_because: str = ""
    asked_at: datetime | None = None
    asked_by: Any = None
    is_deferred: bool = False

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.request.pk}"

    @property
    def seconds_at_stake(self) -> float:
        """The time at stake, for words ("3 min", "8 h"): an approval's whole max runtime,
        unrounded; an ask's grant."""
        if self.kind == "approval":
            return float(self.request.max_runtime_seconds)
        return float(self.hours_at_stake) * 3600


def _rate(
    request: GpuRequest,
    prices: dict[int, Price | None],
    host: dict[str, tuple[ResourcePrice | None, ResourcePrice | None]],
) -> tuple[Decimal | None, str]:
    """What the request costs an hour (GPU + its cores and memory), None if its flavor is
    unpriced."""
    if request.flavor_id not in prices:
        prices[request.flavor_id] = price_in_force(flavor=request.flavor)
    price = prices[request.flavor_id]
    if price is None:
        return None, settings.PORTAL_CURRENCY
    if "host" not in host:  # the CPU and memory prices in force, looked up once per inbox
        host["host"] = (
            resource_price_in_force(resource=HostResource.CPU),
            resource_price_in_force(resource=HostResource.MEMORY),
        )
    cpu_price, memory_price = host["host"]
    rate = hourly_rates(
        request=request,
        preemptible=request.is_preemptible,
        price=price,
        cpu_price=cpu_price,
        memory_price=memory_price,
    ).total
    return rate, price.currency


def lead_inbox(*, user: Any) -> list[InboxRow]:
    """Approvals first (oldest first, each with its quota impact after those above it),
    then asks (oldest first)."""
    prices: dict[int, Price | None] = {}
    host: dict[str, tuple[ResourcePrice | None, ResourcePrice | None]] = {}
    rows: list[InboxRow] = []
    deferred = _deferred_ids()
    pending = list(approval_inbox(user=user))
    impacts = queue_quota_impacts(gpu_requests=pending)
    for request in pending:
        rate, currency = _rate(request, prices, host)
        hours = Decimal(request.max_runtime_seconds) / 3600
        rows.append(
            InboxRow(
                kind="approval",
                request=request,
                impact=impacts[request.pk],
                cost_per_hour=rate,
                cost_at_stake=(rate * hours).quantize(Decimal("0.01")) if rate else None,
                hours_at_stake=hours.quantize(Decimal("0.1")),
                currency=currency,
                asked_because=request.needs_lead_approval_because,
                asked_at=request.created_at,
                asked_by=request.owner,
                is_deferred=request.pk in deferred,
            )
        )
    for ask in open_asks(user=user):
        rate, currency = _rate(ask.request, prices, host)
        hours = Decimal(HOURS_ASKED[ask.about])
        rows.append(
            InboxRow(
                kind=ask.about,
                request=ask.request,
                impact=None,
                cost_per_hour=rate,
                cost_at_stake=(rate * hours).quantize(Decimal("0.01")) if rate else None,
                hours_at_stake=hours,
                currency=currency,
                asked_because=ask.reason,
                asked_at=ask.asked_at,
                asked_by=ask.asked_by,
            )
        )
    return rows


def _deferred_ids() -> set[int]:
    return set(deferred_approvals().values_list("pk", flat=True))
