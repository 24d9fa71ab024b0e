"""Billing history keeps what it names: deleting a project, flavor, pool or team with usage is a
409 through the admin endpoints, never a 500, and the usage stays."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from accounting.models import DailyUsage, MonthlyUsage, TeamMonthlyUsage, UsageRecord
from scheduling.models import Flavor, GpuRequest, NodePool, Quota
from tenants.models import Project
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db
MONTH = date(2026, 1, 1)


def record_usage(*, project: Project, flavor: Flavor, pool: NodePool, owner: User) -> None:
    """One ledger row and its rollups, as the meter or `import_usage` would leave them."""
    key = {"team": project.team, "project": project, "flavor": flavor, "pool": pool}
    amounts = {"gpu_hours": Decimal(2), "cost": Decimal(5)}
    began = datetime(2026, 1, 5, 8, tzinfo=UTC)
    UsageRecord.objects.create(
        allocation_id=424242,
        period=MONTH,
        owner=owner,
        gpu_count=1,
        started_at=began,
        ended_at=began.replace(hour=10),
        seconds=Decimal(7200),
        **key,
        **amounts,
    )
    MonthlyUsage.objects.create(period=MONTH, **key, **amounts)
    DailyUsage.objects.create(day=began.date(), **key, **amounts)
    TeamMonthlyUsage.objects.create(
        period=MONTH, team=project.team, flavor=flavor, pool=pool, **amounts
    )


def assert_usage_kept() -> None:
    assert UsageRecord.objects.count() == 1
    assert MonthlyUsage.objects.count() == DailyUsage.objects.count() == 1
    assert TeamMonthlyUsage.objects.count() == 1


def test_a_project_with_usage_but_no_requests_is_refused_with_409(org: Org, fleet: Fleet) -> None:
    record_usage(project=org.project_a, flavor=fleet.a100, pool=fleet.a100.pool, owner=org.dev_a)
    GpuRequest.objects.filter(project=org.project_a).delete()  # history outlives requests

    response = api_client(org.admin).delete(
        reverse("project-detail", kwargs={"pk": org.project_a.pk})
    )

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "project_in_use"
    assert "usage" in response.json()["error"]["message"]
    assert Project.objects.filter(pk=org.project_a.pk).exists()
    assert_usage_kept()


def test_a_flavor_with_usage_is_refused_with_409(org: Org, fleet: Fleet) -> None:
    record_usage(project=org.project_a, flavor=fleet.a100, pool=fleet.a100.pool, owner=org.dev_a)
    Quota.objects.filter(flavor=fleet.a100).delete()  # quotas are refused on their own

    response = api_client(org.admin).delete(reverse("flavor-detail", kwargs={"pk": fleet.a100.pk}))

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "flavor_in_use"
    assert Flavor.objects.filter(pk=fleet.a100.pk).exists()
    assert_usage_kept()


def test_a_pool_with_usage_but_no_nodes_or_flavors_is_refused_with_409(
    org: Org, fleet: Fleet
) -> None:
    """Imported usage may name a pool that no flavor belongs to any more."""
    empty = NodePool.objects.create(
        name="retired", slug="retired", tier=fleet.a100.pool.tier, sharing_mode="exclusive"
    )
    record_usage(project=org.project_a, flavor=fleet.a100, pool=empty, owner=org.dev_a)

    response = api_client(org.admin).delete(reverse("pool-detail", kwargs={"pk": empty.pk}))

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "node_pool_in_use"
    assert "usage" in response.json()["error"]["message"]
    assert NodePool.objects.filter(pk=empty.pk).exists()
    assert_usage_kept()


def test_a_team_with_usage_is_refused_with_409(org: Org, fleet: Fleet) -> None:
    record_usage(project=org.project_a, flavor=fleet.a100, pool=fleet.a100.pool, owner=org.dev_a)

    response = api_client(org.admin).delete(reverse("team-detail", kwargs={"pk": org.team_a.pk}))

    assert response.status_code == 409  # its projects (kept by the usage) come first
    assert_usage_kept()


def test_a_user_with_usage_cannot_be_deleted(org: Org, fleet: Fleet) -> None:
    from django.db.models import ProtectedError

    record_usage(project=org.project_a, flavor=fleet.a100, pool=fleet.a100.pool, owner=org.dev_a)
    GpuRequest.objects.filter(owner=org.dev_a).delete()

    with pytest.raises(ProtectedError):
        org.dev_a.delete()
    assert_usage_kept()
