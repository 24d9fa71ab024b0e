"""The fleet settings pages: platform admins write through the audited services, nobody else."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounting.models import Price, ResourcePrice
from portal.manage import SECTIONS
from scheduling.models import Flavor, NodePool, Quota, ReclaimPolicy, Tier
from tenants.models import AuditEvent, Membership
from tests.scheduling.conftest import Fleet
from tests.support.cross_tenant import covers
from tests.support.personas import Org, make_user

pytestmark = pytest.mark.django_db

OBJECT_ROUTES = [
    route for section in SECTIONS.values() for route in (section.edit_route, section.delete_route)
] + ["manage-reclaim-policy-edit"]
LIST_ROUTES = ["manage", "manage-reclaim-policies"] + [s.list_route for s in SECTIONS.values()]


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _audited(action: str, target: Any) -> bool:
    return AuditEvent.objects.filter(
        action=action, target_type=type(target).__name__, target_id=str(target.pk)
    ).exists()


def _pool_form(tier: Tier, **overrides: Any) -> dict[str, Any]:
    return {
        "name": "Blackwell",
        "slug": "blackwell",
        "tier": tier.pk,
        "sharing_mode": "exclusive",
        "placement": "portal",
        "scoring": "binpack",
        "allocation": "device-plugin",
        "scheduler_name": "default-scheduler",
        "node_selector": '{"gpu": "b200"}',
        "taints": "[]",
        "allowed_kinds": "[]",
        "short_reserve_fraction": "0.2",
        "short_max_runtime_seconds": "3600",
        **overrides,
    }


def _flavor_form(pool: NodePool, **overrides: Any) -> dict[str, Any]:
    return {
        "name": "B200 180G",
        "slug": "b200-180g",
        "pool": pool.pk,
        "kind": "whole",
        "gpu_model": "B200",
        "gpu_memory_mib": "184320",
        "gpu_cores_percent": "100",
        "mig_profile": "",
        "gpu_equivalent": "1",
        "is_active": "on",
        **overrides,
    }


def test_admin_creates_edits_and_deletes_a_node_pool(org: Org, fleet: Fleet) -> None:
    admin = _client(org.admin)
    tier = Tier.objects.get(slug="training")
    response = admin.post(reverse("manage-pools"), _pool_form(tier))
    assert response.status_code == 302, response.content.decode()[-2000:]
    pool = NodePool.objects.get(slug="blackwell")
    assert pool.node_selector == {"gpu": "b200"} and pool.short_reserve_fraction == 0.2
    assert _audited("node_pool.created", pool)
    assert "Blackwell" in admin.get(reverse("manage-pools")).content.decode()

    edit = reverse("manage-pools-edit", kwargs={"pk": pool.pk})
    assert admin.get(edit).status_code == 200
    response = admin.post(edit, _pool_form(tier, name="Blackwell B200", scoring="spread"))
    assert response.status_code == 302
    pool.refresh_from_db()
    assert (pool.name, pool.scoring) == ("Blackwell B200", "spread")
    event = AuditEvent.objects.get(action="node_pool.updated", target_id=str(pool.pk))
    assert event.actor == org.admin and event.data["changes"]["scoring"] == ["binpack", "spread"]

    # Dynamic Resource Allocation: whole cards only.
    assert admin.post(edit, _pool_form(tier, allocation="dra")).status_code == 302
    assert NodePool.objects.get(pk=pool.pk).allocation == "dra"
    refused = admin.post(edit, _pool_form(tier, allocation="dra", sharing_mode="vgpu"))
    assert "whole cards only" in refused.content.decode()

    delete = reverse("manage-pools-delete", kwargs={"pk": pool.pk})
    assert "Delete node pool" in admin.get(delete).content.decode()
    assert admin.post(delete).status_code == 302
    assert not NodePool.objects.filter(pk=pool.pk).exists()
    assert AuditEvent.objects.filter(action="node_pool.deleted", target_id=str(pool.pk)).exists()


def test_admin_creates_edits_and_deletes_a_flavor(org: Org, fleet: Fleet) -> None:
    admin = _client(org.admin)
    pool = fleet.a100.pool
    assert admin.post(reverse("manage-flavors"), _flavor_form(pool)).status_code == 302
    flavor = Flavor.objects.get(slug="b200-180g")
    assert flavor.pool == pool and _audited("flavor.created", flavor)

    edit = reverse("manage-flavors-edit", kwargs={"pk": flavor.pk})
    response = admin.post(edit, _flavor_form(pool, is_active=""))  # unchecked box: not sent
    assert response.status_code == 302
    flavor.refresh_from_db()
    assert flavor.is_active is False and _audited("flavor.updated", flavor)

    response = admin.post(reverse("manage-flavors-delete", kwargs={"pk": flavor.pk}))
    assert response.status_code == 302
    assert not Flavor.objects.filter(pk=flavor.pk).exists()
    assert AuditEvent.objects.filter(action="flavor.deleted", target_id=str(flavor.pk)).exists()


def test_admin_adds_changes_and_removes_a_membership(org: Org) -> None:
    admin = _client(org.admin)
    newcomer = make_user("newcomer")
    body = {"user": newcomer.pk, "team": org.team_a.pk, "role": "developer"}
    assert admin.post(reverse("manage-memberships"), body).status_code == 302
    membership = Membership.objects.get(user=newcomer)
    assert (membership.team, membership.role) == (org.team_a, "developer")
    assert _audited("membership.created", membership)

    edit = reverse("manage-memberships-edit", kwargs={"pk": membership.pk})
    page = admin.get(edit).content.decode()
    assert 'name="user"' in page and "disabled" in page  # who and where are fixed
    # A disabled field's posted value is ignored: the membership stays in team A.
    response = admin.post(edit, {"user": org.admin.pk, "team": org.team_b.pk, "role": "team_lead"})
    assert response.status_code == 302
    membership.refresh_from_db()
    assert (membership.user, membership.team, membership.role) == (
        newcomer,
        org.team_a,
        "team_lead",
    )
    assert _audited("membership.changed", membership)

    delete = reverse("manage-memberships-delete", kwargs={"pk": membership.pk})
    assert admin.post(delete).status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert AuditEvent.objects.filter(
        action="membership.deleted", target_id=str(membership.pk)
    ).exists()


def test_admin_sets_a_members_fair_share_weight_on_the_membership_page(org: Org) -> None:
    admin = _client(org.admin)
    membership = Membership.objects.get(user=org.dev_a)
    edit = reverse("manage-memberships-edit", kwargs={"pk": membership.pk})
    assert 'name="fair_share_weight"' in admin.get(edit).content.decode()

    response = admin.post(edit, {"role": "developer", "fair_share_weight": "3"})
    assert response.status_code == 302
    membership.refresh_from_db()
    assert membership.fair_share_weight == 3
    event = AuditEvent.objects.get(action="membership.changed", target_id=str(membership.pk))
    assert event.data["changes"] == {"fair_share_weight": [1, 3]}
    assert event.actor == org.admin
    listing = admin.get(reverse("manage-memberships")).content.decode()
    assert "<th" in listing and "Weight" in listing


@pytest.mark.parametrize(
    ("weight", "error"),
    [
        ("0", "greater than or equal to 1"),
        ("101", "less than or equal to 100"),
        ("2.5", "whole number"),
        ("lots", "whole number"),
    ],
)
def test_a_weight_outside_1_to_100_is_a_form_error(org: Org, weight: str, error: str) -> None:
    membership = Membership.objects.get(user=org.dev_a)
    edit = reverse("manage-memberships-edit", kwargs={"pk": membership.pk})
    response = _client(org.admin).post(edit, {"role": "developer", "fair_share_weight": weight})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-testid="error-fair_share_weight"' in page and error in page
    membership.refresh_from_db()
    assert membership.fair_share_weight == 1
    assert not _audited("membership.changed", membership)


def test_an_organisation_role_keeps_weight_1_with_a_form_error(org: Org) -> None:
    membership = Membership.objects.get(user=org.finance)
    edit = reverse("manage-memberships-edit", kwargs={"pk": membership.pk})
    response = _client(org.admin).post(edit, {"role": "finance", "fair_share_weight": "5"})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-testid="error-fair_share_weight"' in page and "team memberships only" in page
    membership.refresh_from_db()
    assert membership.fair_share_weight == 1


@pytest.mark.parametrize("persona", ["dev_a", "lead_a", "finance"])
def test_only_platform_admins_get_the_pages(org: Org, fleet: Fleet, persona: str) -> None:
    client = _client(getattr(org, persona))
    for route in LIST_ROUTES:
        assert client.get(reverse(route)).status_code == 404, route
    pool = fleet.a100.pool
    for route in ("manage-pools-edit", "manage-pools-delete"):
        url = reverse(route, kwargs={"pk": pool.pk})
        assert client.get(url).status_code == 404, route
        assert client.post(url, _pool_form(pool.tier, name="mine")).status_code == 404, route
    assert client.post(reverse("manage-pools"), _pool_form(pool.tier)).status_code == 404
    tier = pool.tier
    reclaim = reverse("manage-reclaim-policy-edit", kwargs={"pk": tier.pk})
    assert client.post(reclaim, {"max_attempts": "9"}).status_code == 404
    pool.refresh_from_db()
    assert pool.name != "mine" and not NodePool.objects.filter(slug="blackwell").exists()
    assert not ReclaimPolicy.objects.filter(max_attempts=9).exists()
    nav = client.get(reverse("home")).content.decode()
    assert reverse("manage") not in nav


def test_the_admin_finds_the_pages_in_the_navigation(org: Org) -> None:
    page = _client(org.admin).get(reverse("home")).content.decode()
    assert f'href="{reverse("manage")}"' in page
    index = _client(org.admin).get(reverse("manage")).content.decode()
    for section in SECTIONS.values():
        assert reverse(section.list_route) in index


@covers(*OBJECT_ROUTES)
def test_another_teams_objects_are_404_to_a_lead(org: Org, fleet: Fleet) -> None:
    """A lead sees no other team's membership, project, team or quota: 404, as every page here."""
    lead = _client(org.lead_a)
    b_membership = Membership.objects.get(user=org.lead_b)
    b_quota = Quota.objects.filter(team=org.team_b, project=None).first()
    assert b_quota is not None
    for slug, target in [
        ("memberships", b_membership),
        ("projects", org.project_b),
        ("teams", org.team_b),
        ("quotas", b_quota),
    ]:
        for route in (SECTIONS[slug].edit_route, SECTIONS[slug].delete_route):
            url = reverse(route, kwargs={"pk": target.pk})
            assert lead.get(url).status_code == 404, route
            assert lead.post(url, {"role": "developer", "name": "taken"}).status_code == 404
    assert Membership.objects.get(pk=b_membership.pk).role == "team_lead"
    own = Membership.objects.get(user=org.dev_a)
    edit = reverse("manage-memberships-edit", kwargs={"pk": own.pk})
    assert lead.get(edit).status_code == 404  # the fleet settings are no page of a lead's


def test_an_invalid_form_shows_its_errors_and_keeps_the_typed_values(
    org: Org, fleet: Fleet
) -> None:
    admin = _client(org.admin)
    body = _flavor_form(fleet.a100.pool, name="Typed name", gpu_cores_percent="150")
    response = admin.post(reverse("manage-flavors"), body)
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-testid="error-gpu_cores_percent"' in page
    assert 'value="Typed name"' in page and 'value="B200"' in page
    assert not Flavor.objects.filter(slug="b200-180g").exists()
    # A named model constraint comes back on the form too: a MIG flavor needs its profile.
    response = admin.post(reverse("manage-flavors"), _flavor_form(fleet.a100.pool, kind="mig"))
    assert response.status_code == 400
    assert "A MIG flavor needs a MIG profile." in response.content.decode()


def test_a_service_refusal_lands_on_the_field_it_names(org: Org, fleet: Fleet) -> None:
    """The form accepts any date; the price service refuses one in the past, on that field."""
    admin = _client(org.admin)
    past = timezone.localtime() - timedelta(days=2)
    body = {
        "flavor": fleet.a100.pk,
        "price_per_hour": "3.5000",
        "currency": "EUR",
        "effective_from": past.strftime("%Y-%m-%dT%H:%M"),
        "preemptible_multiplier": "1",
        "priority_multipliers": "{}",
    }
    before = Price.objects.count()
    response = admin.post(reverse("manage-prices"), body)
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-testid="error-effective_from"' in page and 'value="3.5000"' in page
    assert Price.objects.count() == before
    future = timezone.localtime() + timedelta(days=2)
    body["effective_from"] = future.strftime("%Y-%m-%dT%H:%M")
    assert admin.post(reverse("manage-prices"), body).status_code == 302
    price = Price.objects.get(flavor=fleet.a100, price_per_hour="3.5")
    assert _audited("price.created", price)
    edit = admin.get(reverse("manage-prices-edit", kwargs={"pk": price.pk})).content.decode()
    assert f'value="{body["effective_from"]}"' in edit  # as the date-time picker reads it


def test_deleting_what_is_in_use_shows_the_conflict(org: Org, fleet: Fleet) -> None:
    admin = _client(org.admin)
    pool = fleet.a100.pool
    response = admin.post(reverse("manage-pools-delete", kwargs={"pk": pool.pk}))
    assert response.status_code == 409
    assert 'data-testid="refusal"' in response.content.decode()
    assert f"Pool {pool}" in response.content.decode()
    assert NodePool.objects.filter(pk=pool.pk).exists()
    response = admin.post(reverse("manage-teams-delete", kwargs={"pk": org.team_a.pk}))
    assert response.status_code == 409
    assert "projects first" in response.content.decode()
    assert not AuditEvent.objects.filter(action__endswith=".deleted").exists()


def test_admin_sets_a_team_quota_and_a_tier_reclaim_policy(org: Org, fleet: Fleet) -> None:
    admin = _client(org.admin)
    quota = Quota.objects.filter(team=org.team_a, project=None, flavor=fleet.l4_6g).get()
    edit = reverse("manage-quotas-edit", kwargs={"pk": quota.pk})
    body = {"team": org.team_b.pk, "flavor": fleet.a100.pk, "guaranteed": "40", "limit": "60"}
    assert admin.post(edit, body).status_code == 302
    quota.refresh_from_db()
    assert (quota.team, quota.flavor, quota.guaranteed, quota.limit) == (
        org.team_a,
        fleet.l4_6g,
        40,
        60,
    )
    assert _audited("quota.set", quota)

    tier = Tier.objects.create(name="Batch", slug="batch")
    url = reverse("manage-reclaim-policy-edit", kwargs={"pk": tier.pk})
    assert "the defaults" in admin.get(url).content.decode()
    body = {
        "idle_threshold_percent": "3",
        "idle_window_seconds": "1200",
        "notebook_idle_window_seconds": "3600",
        "idle_warning_seconds": "600",
        "reclaim_idle": "on",
        "timeout_warning_seconds": "900",
        "pending_timeout_seconds": "1800",
        "max_attempts": "2",
    }
    assert admin.post(url, body | {"idle_warning_seconds": "9999"}).status_code == 400
    assert admin.post(url, body).status_code == 302
    policy = ReclaimPolicy.objects.get(tier=tier)
    assert (policy.idle_threshold_percent, policy.max_attempts) == (3, 2)
    assert policy.idle_marks_preemptible is False
    assert _audited("reclaim_policy.created", policy)


def test_admin_turns_off_lending_of_a_tiers_unassigned_cards(org: Org, fleet: Fleet) -> None:
    admin = _client(org.admin)
    tier = Tier.objects.get(slug="training")
    assert tier.lends_unassigned  # on by default
    edit = reverse("manage-tiers-edit", kwargs={"pk": tier.pk})
    assert "Lend unassigned cards" in admin.get(edit).content.decode()
    form = {
        "name": tier.name,
        "slug": tier.slug,
        "max_runtime_seconds": tier.max_runtime_seconds,
        "rank": tier.rank,
        "allowed_teams": [t.pk for t in tier.allowed_teams.all()],
    }  # the checkbox left out: unticked
    response = admin.post(edit, form)
    assert response.status_code == 302, response.content.decode()[-2000:]
    tier.refresh_from_db()
    assert not tier.lends_unassigned
    event = AuditEvent.objects.get(action="tier.updated", target_id=str(tier.pk))
    assert event.data["changes"]["lends_unassigned"] == [True, False]


def test_cpu_memory_and_storage_prices_are_set_on_their_page(org: Org) -> None:
    admin = _client(org.admin)
    future = (timezone.localtime() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    body = {
        "resource": "storage",
        "price_per_hour": "-0.0001",
        "currency": "EUR",
        "effective_from": future,
    }
    response = admin.post(reverse("manage-resource-prices"), body)
    assert response.status_code == 400
    assert "A price cannot be negative." in response.content.decode()
    assert not ResourcePrice.objects.exists()
    body["price_per_hour"] = "0.000137"
    assert admin.post(reverse("manage-resource-prices"), body).status_code == 302
    price = ResourcePrice.objects.get(resource="storage")
    assert price.price_per_hour == Decimal("0.000137")
    assert _audited("resource_price.created", price)
    listing = admin.get(reverse("manage-resource-prices")).content.decode()
    assert "Storage (per GiB-hour of claimed volume)" in listing
    assert "0.00013700 EUR" in listing
    refused = _client(org.finance).post(reverse("manage-resource-prices"), body)
    assert refused.status_code in (403, 404)
    assert ResourcePrice.objects.count() == 1
