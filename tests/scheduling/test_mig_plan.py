"""The MIG layout planner: from the day's MIG demand, a suggested mig.config per MIG node, on an
admin page and an API endpoint; everyone else gets 404."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduling.engine.mig import MIG_GPUS, PlanNode, layout_fits, plan_mig_layouts
from scheduling.models import GpuRequest
from tests.scheduling.conftest import Fleet
from tests.support.factories import GpuRequestFactory
from tests.support.personas import Org, api_client


def test_the_planner_serves_the_demand_its_cards_can_hold_with_valid_layouts() -> None:
    nodes = [
        PlanNode("n1", "p", "H100-80G", ({"1g.10gb": 7},) * 2, "all-1g.10gb"),
        PlanNode("n2", "p", "H100-80G", ({"1g.10gb": 7},) * 2, "all-1g.10gb"),
    ]
    demand = {("p", "3g.40gb"): 4, ("p", "1g.10gb"): 10, ("p", "1g.5gb"): 1}
    plan = plan_mig_layouts(nodes, demand)
    served: dict[str, int] = {}
    for suggestion in plan.nodes:
        assert all(layout_fits(MIG_GPUS["H100-80G"], card) for card in suggestion.cards)
        for profile, count in suggestion.serves.items():
            served[profile] = served.get(profile, 0) + count
    assert served == {"3g.40gb": 4, "1g.10gb": 10}
    # Today's layouts serve no 3g.40gb: at least one node must change.
    assert any(s.changes for s in plan.nodes)
    # An A100-40GB profile on H100 cards: nothing here can serve it.
    assert plan.unserved == {("p", "1g.5gb"): 1}


def test_a_node_whose_layout_already_serves_the_demand_is_kept() -> None:
    node = PlanNode("n1", "p", "H100-80G", ({"1g.10gb": 7},) * 2, "all-1g.10gb")
    (suggestion,) = plan_mig_layouts([node], {("p", "1g.10gb"): 14}).nodes
    assert (suggestion.changes, suggestion.config) == (False, "all-1g.10gb")
    assert suggestion.serves == {"1g.10gb": 14}


def test_the_planner_suggests_nothing_without_demand() -> None:
    node = PlanNode("n1", "p", "H100-80G", ({"3g.40gb": 2},), "all-3g.40gb")
    (suggestion,) = plan_mig_layouts([node], {}).nodes
    assert not suggestion.changes and suggestion.serves == {}


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_admins_see_the_plan_for_the_days_waiting_mig_requests(org: Org, fleet: Fleet) -> None:
    # The demo node: 4 cards of 7 x 1g.10gb and 4 of 2 x 3g.40gb; 24 x 3g.40gb are wanted.
    for _ in range(12):
        GpuRequestFactory.create(project=org.project_a, flavor=fleet.mig_3g, gpu_count=2)
    old = GpuRequestFactory.create(project=org.project_a, flavor=fleet.mig_1g, gpu_count=1)
    GpuRequest.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(days=3), status="succeeded"
    )
    body = api_client(org.admin).get(reverse("mig-plan")).json()
    assert body["demand"] == [{"pool": "h100-mig", "profile": "3g.40gb", "instances": 24}]
    (node,) = body["nodes"]
    assert node["node"] == "h100-mig-1" and node["changes"]
    assert node["suggested_config"] == "all-3g.40gb"
    assert node["suggested_cards"] == [{"3g.40gb": 2}] * 8
    assert node["serves"] == {"3g.40gb": 16}
    assert body["unserved"] == [{"pool": "h100-mig", "profile": "3g.40gb", "instances": 8}]
    page = _client(org.admin).get(reverse("manage-mig-plan"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "all-3g.40gb" in html and "8 x (2 x 3g.40gb)" in html
    pool = fleet.mig_3g.pool.name  # the page names pools as people do; the API by slug
    assert f"{pool}: 8 x 3g.40gb" in html and "h100-mig:" not in html
    assert f"<td>{pool}</td>" in html


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["dev_a", "lead_a", "finance"])
def test_everyone_but_platform_admins_gets_404(org: Org, fleet: Fleet, persona: str) -> None:
    user = getattr(org, persona)
    assert api_client(user).get(reverse("mig-plan")).status_code == 404
    assert _client(user).get(reverse("manage-mig-plan")).status_code == 404
    assert api_client(None).get(reverse("mig-plan")).status_code == 401
