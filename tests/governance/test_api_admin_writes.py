"""Platform admins write the catalogue and the price list through /api/v1/; nobody else does.

Each endpoint's ApiContract says who reads (everyone with a role) and who writes (platform
admins): developers, leads and finance get 403, a user with no role sees nothing (404). One
table adds what the contract does not say: the fields an admin's writes audit, an invalid body
(400) and an object still in use (409).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import models
from django.urls import reverse
from django.utils import timezone

from accounting.demo import seed_demo_prices
from accounting.models import Price, ResourcePrice
from scheduling.models import ApprovalRule, Flavor, NodePool, ReclaimPolicy, Tier
from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.support.api_contract import ApiContract
from tests.support.factories import (
    ApprovalRuleFactory,
    FlavorFactory,
    NodePoolFactory,
    PriceFactory,
    ReclaimPolicyFactory,
    TierFactory,
)
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db

Build = Callable[[Fleet], dict[str, Any]]


def _later(days: int = 7) -> str:
    return (timezone.now() + timedelta(days=days)).isoformat()


def _spare_tier() -> Tier:
    """A tier with neither approval rule nor reclaim policy, for those to be created on."""
    return Tier.objects.get_or_create(slug="spare", defaults={"name": "Spare"})[0]


@dataclass(frozen=True)
class Endpoint:
    basename: str
    model: type[models.Model]
    audit: str  # the audit actions' prefix: "<audit>.created" and so on
    create: Build
    change: dict[str, Any]
    invalid: Build
    invalid_field: str | None  # the field a 400 names, None when the message is general
    in_use: Callable[[Fleet], models.Model] | None = None
    in_use_code: str = ""
    created_action: str = "created"
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.basename


ENDPOINTS = [
    Endpoint(
        basename="tier",
        model=Tier,
        audit="tier",
        create=lambda fleet: {
            "name": "Batch",
            "slug": "batch",
            "max_runtime_seconds": 3600,
            "rank": 3,
            "allowed_teams": [fleet.a100.quotas.first().team_id],  # type: ignore[union-attr]
        },
        change={"rank": 4},
        invalid=lambda fleet: {"name": "Dev", "slug": "not a slug"},
        invalid_field="slug",
        in_use=lambda fleet: Tier.objects.get(slug="training"),
        in_use_code="tier_in_use",
    ),
    Endpoint(
        basename="pool",
        model=NodePool,
        audit="node_pool",
        create=lambda fleet: {
            "name": "B200 training",
            "slug": "b200",
            "tier": "training",
            "sharing_mode": "exclusive",
        },
        change={"short_reserve_fraction": 0.25},
        invalid=lambda fleet: {
            "name": "Odd",
            "slug": "odd",
            "tier": "training",
            "sharing_mode": "exclusive",
            "short_reserve_fraction": 2,
        },
        invalid_field="short_reserve_fraction",
        in_use=lambda fleet: fleet.a100.pool,
        in_use_code="node_pool_in_use",
    ),
    Endpoint(
        basename="flavor",
        model=Flavor,
        audit="flavor",
        create=lambda fleet: {
            "name": "A100 40G",
            "slug": "a100-40g",
            "pool": fleet.a100.pool.slug,
            "kind": "whole",
            "gpu_model": "A100-40G",
            "gpu_memory_mib": 40960,
            "gpu_equivalent": "1",
        },
        change={"is_active": False},
        # A model constraint the serializer does not know: the service's full_clean finds it.
        invalid=lambda fleet: {
            "name": "Slice",
            "slug": "slice",
            "pool": fleet.mig_1g.pool.slug,
            "kind": "mig",
            "gpu_model": "H100",
            "gpu_memory_mib": 10240,
            "gpu_equivalent": "0.1429",
        },
        invalid_field=None,
        in_use=lambda fleet: fleet.a100,
        in_use_code="flavor_in_use",
    ),
    Endpoint(
        basename="approval-rule",
        model=ApprovalRule,
        audit="approval_rule",
        create=lambda fleet: {"tier": _spare_tier().slug, "approval_ttl_hours": 24},
        change={"approval_ttl_hours": 12, "auto_approve_max_priority": "high"},
        invalid=lambda fleet: {"tier": _spare_tier().slug, "auto_approve_max_priority": "urgent"},
        invalid_field="auto_approve_max_priority",
    ),
    Endpoint(
        basename="reclaim-policy",
        model=ReclaimPolicy,
        audit="reclaim_policy",
        create=lambda fleet: {
            "tier": _spare_tier().slug,
            "idle_window_seconds": 900,
            "idle_warning_seconds": 120,
        },
        change={"max_attempts": 5},
        # The warning must come within the window: a named constraint, checked by the service.
        invalid=lambda fleet: {
            "tier": _spare_tier().slug,
            "idle_window_seconds": 60,
            "idle_warning_seconds": 600,
        },
        invalid_field=None,
    ),
    Endpoint(
        basename="price",
        model=Price,
        audit="price",
        create=lambda fleet: {
            "flavor": fleet.a100.pk,
            "price_per_hour": "2.7500",
            "effective_from": _later(),
        },
        change={"price_per_hour": "2.9000"},
        invalid=lambda fleet: {
            "flavor": fleet.a100.pk,
            "price_per_hour": "1",
            "effective_from": _later(),
            "priority_multipliers": {"urgent": "2"},
        },
        invalid_field="priority_multipliers",
        in_use=lambda fleet: Price.objects.get(flavor=fleet.a100),  # in effect since January
        in_use_code="price_in_effect",
    ),
    Endpoint(
        basename="resource-price",
        model=ResourcePrice,
        audit="resource_price",
        create=lambda fleet: {
            "resource": "memory",
            "price_per_hour": "0.00500000",
            "effective_from": _later(),
        },
        change={"price_per_hour": "0.00600000"},
        invalid=lambda fleet: {
            "resource": "cpu",
            "price_per_hour": "-0.01",
            "effective_from": _later(),
        },
        invalid_field="price_per_hour",
        in_use=lambda fleet: ResourcePrice.objects.get(resource="cpu"),  # the demo's, in effect
        in_use_code="price_in_effect",
    ),
]
WITH_A_ROLE = {"admin", "finance", "lead_a", "dev_a", "lead_b", "dev_b"}


def admins_write(
    endpoint: Endpoint, subject: Callable[[], models.Model], create: Callable[[], dict[str, Any]]
) -> Callable[..., None]:
    """The contract of a catalogue endpoint: `subject()` is an object nothing uses yet."""
    return ApiContract(
        basename=endpoint.basename,
        audit=endpoint.audit,
        subject=lambda world: subject(),
        may_read=WITH_A_ROLE,
        may_create={"admin"},
        may_update={"admin"},
        may_delete={"admin"},
        create_body=lambda world: create(),
        update_body=endpoint.change,
    ).tests()


TIER, POOL, FLAVOR, APPROVAL_RULE, RECLAIM_POLICY, PRICE, RESOURCE_PRICE = ENDPOINTS
test_tiers_api_contract = admins_write(
    TIER,
    TierFactory.create,
    lambda: {"name": "Batch", "slug": "batch", "max_runtime_seconds": 3600},
)
test_pools_api_contract = admins_write(
    POOL,
    NodePoolFactory.create,
    lambda: {
        "name": "B200",
        "slug": "b200",
        "tier": TierFactory.create().slug,
        "sharing_mode": "mig",
    },
)
test_flavors_api_contract = admins_write(
    FLAVOR,
    FlavorFactory.create,
    lambda: {
        "name": "A100 40G",
        "slug": "a100-40g",
        "pool": NodePoolFactory.create().slug,
        "kind": "whole",
        "gpu_model": "A100-40G",
        "gpu_memory_mib": 40960,
        "gpu_equivalent": "1",
    },
)
test_approval_rules_api_contract = admins_write(
    APPROVAL_RULE,
    ApprovalRuleFactory.create,
    lambda: {"tier": TierFactory.create(approval_rule=None).slug, "approval_ttl_hours": 24},
)
test_reclaim_policies_api_contract = admins_write(
    RECLAIM_POLICY,
    ReclaimPolicyFactory.create,
    lambda: {"tier": TierFactory.create().slug, "max_attempts": 2},
)
test_prices_api_contract = admins_write(
    PRICE,
    PriceFactory.create,
    lambda: {
        "flavor": FlavorFactory.create().pk,
        "price_per_hour": "2.7500",
        "effective_from": _later(),
    },
)


test_resource_prices_api_contract = admins_write(
    RESOURCE_PRICE,
    lambda: ResourcePrice.objects.create(
        resource="storage",
        price_per_hour=Decimal("0.0001"),
        effective_from=timezone.now() + timedelta(days=7),
    ),
    lambda: {"resource": "cpu", "price_per_hour": "0.03", "effective_from": _later()},
)


def test_a_negative_resource_price_is_400_with_a_message(org: Org, priced: Fleet) -> None:
    response = api_client(org.admin).post(
        reverse("resource-price-list"),
        {"resource": "storage", "price_per_hour": "-1", "effective_from": _later()},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"]["price_per_hour"] == "A price cannot be negative."
    assert not ResourcePrice.objects.filter(price_per_hour__lt=0).exists()


def test_an_unknown_resource_is_400(org: Org, priced: Fleet) -> None:
    response = api_client(org.admin).post(
        reverse("resource-price-list"),
        {"resource": "gpu", "price_per_hour": "1", "effective_from": _later()},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "resource" in response.json()["error"]["fields"]


@pytest.fixture
def priced(fleet: Fleet) -> Fleet:
    seed_demo_prices()
    return fleet


def _audit(action: str, obj_pk: Any) -> AuditEvent:
    return AuditEvent.objects.get(action=action, target_id=str(obj_pk))


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=str)
def test_admin_creates_changes_and_deletes_with_audit(
    org: Org, priced: Fleet, endpoint: Endpoint
) -> None:
    admin = api_client(org.admin)
    payload = endpoint.create(priced)
    response = admin.post(reverse(f"{endpoint.basename}-list"), payload, format="json")
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    created = _audit(f"{endpoint.audit}.{endpoint.created_action}", pk)
    assert created.actor == org.admin
    fields = created.data.get("fields") or created.data.get("changes")
    assert fields, created.data

    detail = reverse(f"{endpoint.basename}-detail", kwargs={"pk": pk})
    response = admin.patch(detail, endpoint.change, format="json")
    assert response.status_code == 200, response.content
    for name, value in endpoint.change.items():
        assert response.json()[name] == value
    changes = _audit(f"{endpoint.audit}.updated", pk).data["changes"]
    assert set(changes) == set(endpoint.change)

    response = admin.delete(detail)
    assert response.status_code == 204, response.content
    assert not endpoint.model._default_manager.filter(pk=pk).exists()
    assert _audit(f"{endpoint.audit}.deleted", pk).actor == org.admin


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=str)
def test_invalid_input_is_400_naming_the_field(org: Org, priced: Fleet, endpoint: Endpoint) -> None:
    before = endpoint.model._default_manager.count()
    response = api_client(org.admin).post(
        reverse(f"{endpoint.basename}-list"), endpoint.invalid(priced), format="json"
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["message"]
    if endpoint.invalid_field is not None:
        assert endpoint.invalid_field in error["fields"], error
    assert endpoint.model._default_manager.count() == before


@pytest.mark.parametrize(
    "endpoint", [endpoint for endpoint in ENDPOINTS if endpoint.in_use], ids=str
)
def test_deleting_what_is_in_use_is_409(org: Org, priced: Fleet, endpoint: Endpoint) -> None:
    assert endpoint.in_use is not None
    obj = endpoint.in_use(priced)
    response = api_client(org.admin).delete(
        reverse(f"{endpoint.basename}-detail", kwargs={"pk": obj.pk})
    )
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == endpoint.in_use_code
    assert endpoint.model._default_manager.filter(pk=obj.pk).exists()
    assert not AuditEvent.objects.filter(action=f"{endpoint.audit}.deleted").exists()


def test_a_price_in_effect_is_never_rewritten(org: Org, priced: Fleet) -> None:
    price = Price.objects.get(flavor=priced.a100)
    admin = api_client(org.admin)
    detail = reverse("price-detail", kwargs={"pk": price.pk})
    response = admin.patch(detail, {"price_per_hour": "9"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "price_in_effect"
    past = (timezone.now() - timedelta(days=1)).isoformat()
    response = admin.post(
        reverse("price-list"),
        {"flavor": priced.a100.pk, "price_per_hour": "9", "effective_from": past},
        format="json",
    )
    assert response.status_code == 400
    assert "effective_from" in response.json()["error"]["fields"]


def test_a_price_without_a_start_starts_now(org: Org, priced: Fleet) -> None:
    response = api_client(org.admin).post(
        reverse("price-list"), {"flavor": priced.l4_6g.pk, "price_per_hour": "0.30"}, format="json"
    )
    assert response.status_code == 201, response.content
    price = Price.objects.get(pk=response.json()["id"])
    assert timezone.now() - price.effective_from < timedelta(minutes=1)


def test_tier_access_lists_are_set_and_audited(org: Org, priced: Fleet) -> None:
    tier = Tier.objects.get(slug="dev")
    response = api_client(org.admin).patch(
        reverse("tier-detail", kwargs={"pk": tier.pk}),
        {"allowed_teams": [org.team_a.pk], "allowed_projects": [org.project_a.pk]},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert list(tier.allowed_teams.all()) == [org.team_a]
    assert list(tier.allowed_projects.all()) == [org.project_a]
    changes = _audit("tier.updated", tier.pk).data["changes"]
    assert changes["allowed_projects"] == [[], [org.project_a.pk]]


def test_a_second_reclaim_policy_for_a_tier_is_400(org: Org, priced: Fleet) -> None:
    response = api_client(org.admin).post(
        reverse("reclaim-policy-list"), {"tier": "dev", "max_attempts": 2}, format="json"
    )
    assert response.status_code == 400
    assert "tier" in response.json()["error"]["fields"]


def test_a_pool_with_nodes_is_refused_before_anything_is_deleted(org: Org, priced: Fleet) -> None:
    pool = priced.l4_6g.pool
    nodes = pool.nodes.count()
    assert nodes
    response = api_client(org.admin).delete(reverse("pool-detail", kwargs={"pk": pool.pk}))
    assert response.status_code == 409
    assert pool.nodes.count() == nodes
