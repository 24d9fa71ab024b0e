"""The audit page names each object as people know it and shows what an edit changed."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from accounting.services.budgets import create_budget, update_budget
from scheduling.models import Quota, Tier
from scheduling.services.catalog import save_reclaim_policy, update_node_pool
from scheduling.services.project_data import set_storage_quota
from scheduling.services.quotas import set_quota
from scheduling.services.templates import create_request_template, update_request_template
from tenants.choices import Role
from tenants.models import AuditEvent, Membership
from tenants.services.organisation import change_membership, update_team
from tenants.services.webhooks import create_webhook, update_webhook
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def _client(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def _rows(html: str) -> list[str]:
    body = html.split('data-testid="audit-table"')[1].split("</table>")[0]
    return body.split('data-testid="audit-row"')[1:]


def test_a_refused_page_view_names_the_user_not_a_lazy_object(org: Org, fleet: Fleet) -> None:
    theirs = GpuRequestFactory.create(project=org.project_b, flavor=fleet.l4_12g)
    url = reverse("gpu-request-page", kwargs={"pk": theirs.pk})
    assert _client(org.dev_a).get(url).status_code == 404
    event = AuditEvent.objects.get(action="access.not_found")
    assert (event.target_type, event.target_id) == ("User", str(org.dev_a.pk))
    page = _client(org.admin).get(reverse("audit-page"), {"action": "access."})
    (row,) = _rows(page.content.decode())
    assert "User dev_a" in row and "lazy" not in row.lower()


def test_an_edit_shows_the_objects_name_and_its_changes_old_to_new(org: Org, fleet: Fleet) -> None:
    pool = fleet.a100.pool
    old_name = pool.name
    update_node_pool(actor=org.admin, node_pool=pool, name="A100 big")
    page = _client(org.admin).get(reverse("audit-page"), {"action": "node_pool.updated"})
    (row,) = _rows(page.content.decode())
    obj = row.split('data-testid="audit-object"')[1].split("</td>")[0]
    assert "Pool A100 big" in obj and f"#{pool.pk}" in obj
    changes = row.split('data-testid="audit-changes"')[1].split("</ul>")[0]
    assert f"{old_name} → A100 big" in changes and "Name:" in changes


def _edits(org: Org, fleet: Fleet) -> dict[str, tuple[Callable[[], object], list[str]]]:
    """Each kind of audited edit: the change to make, and the lines its audit row must show."""
    pool = fleet.a100.pool
    other_tier = Tier.objects.exclude(pk=pool.tier_id).first()
    assert other_tier is not None
    quota = Quota.objects.filter(team=org.team_a, project=None, flavor=fleet.a100).get()
    membership = Membership.objects.get(user=org.dev_a, team=org.team_a)
    webhook = create_webhook(actor=org.admin, name="ops", url="https://hooks.example.com/x")
    budget = create_budget(actor=org.admin, team=org.team_a, unit="gpu_hours", amount=Decimal(100))
    set_storage_quota(actor=org.admin, team=org.team_a, limit_gib=100)
    template = create_request_template(
        actor=org.dev_a, team=org.team_a, name="nb", flavor=fleet.l4_12g, image="python:3.12"
    )
    policy = save_reclaim_policy(actor=org.admin, tier=pool.tier, idle_window_seconds=600)
    return {
        "node_pool.updated": (
            lambda: update_node_pool(actor=org.admin, node_pool=pool, tier=other_tier),
            [f"Tier: {pool.tier.name} → {other_tier.name}"],
        ),
        "quota.set": (
            lambda: set_quota(
                actor=org.admin,
                team=org.team_a,
                flavor=fleet.a100,
                guaranteed=quota.guaranteed,
                limit=quota.limit + 1,
            ),
            [f"Limit: {quota.limit} → {quota.limit + 1}"],
        ),
        "webhook.updated": (
            lambda: update_webhook(actor=org.admin, webhook=webhook, is_active=False),
            ["Active: yes → no"],
        ),
        "budget.updated": (
            lambda: update_budget(actor=org.admin, budget=budget, amount=Decimal(250)),
            ["Amount: 100 → 250"],
        ),
        "storage_quota.set": (
            lambda: set_storage_quota(actor=org.admin, team=org.team_a, limit_gib=200),
            ["Limit (GiB): 100 → 200"],
        ),
        "membership.changed": (
            lambda: change_membership(actor=org.admin, membership=membership, role=Role.TEAM_LEAD),
            ["Role: Developer → Team lead"],
        ),
        "team.updated": (
            lambda: update_team(actor=org.admin, team=org.team_b, name="Speech Lab"),
            [f"Name: {org.team_b.name} → Speech Lab"],
        ),
        "template.updated": (
            lambda: update_request_template(actor=org.dev_a, template=template, name="nb2"),
            ["Name: nb → nb2"],
        ),
        "reclaim_policy.updated": (
            lambda: save_reclaim_policy(actor=org.admin, tier=policy.tier, idle_window_seconds=900),
            ["Idle window (seconds): 600 → 900"],
        ),
    }


def test_every_kind_of_edit_shows_its_changes(org: Org, fleet: Fleet) -> None:
    edits = _edits(org, fleet)
    for edit, _ in edits.values():
        edit()
    client = _client(org.admin)
    for action, (_, lines) in edits.items():
        page = client.get(reverse("audit-page"), {"action": action})
        rows = _rows(page.content.decode())
        assert rows, action
        assert 'data-testid="audit-changes"' in rows[0], action
        changes = rows[0].split('data-testid="audit-changes"')[1].split("</ul>")[0]
        text = " ".join(re.sub(r"<[^>]+>", "", changes).split())
        for line in lines:
            assert line in text, (action, text)
