"""Request names, saved templates (own and team), and submitting a finished request again."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from scheduling.models import RequestTemplate
from scheduling.services.templates import create_request_template
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.api_contract import ApiContract, World
from tests.support.cross_tenant import result_ids
from tests.support.factories import api_submit
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def template_body(world: World, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "PyTorch notebook",
        "team": world.org.team_a.pk,
        "is_shared": True,
        "flavor": world.fleet.l4_6g.pk,
        "kind": "notebook",
        "image": "registry.example.com/ml/notebook:2.4",
        "command": [],
        "env": {"EPOCHS": "3"},
        "gpu_count": 1,
        "max_runtime_seconds": 3600,
    }
    body.update(overrides)
    return body


def a_team_template_of_team_a(world: World) -> RequestTemplate:
    body = template_body(world)
    body.update(team=world.org.team_a, flavor=world.fleet.l4_6g)
    return create_request_template(actor=world.org.lead_a, **body)


TEMPLATES = ApiContract(
    basename="request-template",
    subject=a_team_template_of_team_a,
    audit="template",
    may_read={"admin", "lead_a", "dev_a"},
    may_create={"admin", "lead_a"},
    may_update={"admin", "lead_a"},
    may_delete={"admin", "lead_a"},
    create_body=lambda world: template_body(world, name="Big job", kind="job"),
    update_body={"image": "registry.example.com/ml/notebook:2.5"},
    list_filters=lambda world: [{"team": world.org.team_a.pk}, {"is_shared": True}],
)
test_templates_api_contract = TEMPLATES.tests()


def test_a_developer_saves_a_personal_template_only_they_see(org: Org, fleet: Fleet) -> None:
    world = World(org)
    body = template_body(world, is_shared=False, name="Mine")
    response = api_client(org.dev_a).post(reverse("request-template-list"), body, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["owner"] == "dev_a" and created["is_shared"] is False
    for user, sees in ((org.dev_a, True), (org.lead_a, False), (org.dev_b, False)):
        listing = api_client(user).get(reverse("request-template-list"))
        assert (created["id"] in result_ids(listing)) is sees, user
    detail = reverse("request-template-detail", args=[created["id"]])
    assert api_client(org.dev_b).get(detail).json()["error"]["code"] == "not_found"


def test_a_developer_may_not_share_a_template_with_the_team(org: Org, fleet: Fleet) -> None:
    world = World(org)
    response = api_client(org.dev_a).post(
        reverse("request-template-list"), template_body(world), format="json"
    )
    assert response.status_code == 403
    assert "lead" in response.json()["error"]["message"]
    assert not RequestTemplate.objects.exists()


def test_team_templates_are_listed_before_personal_ones(org: Org, fleet: Fleet) -> None:
    world = World(org)
    client = api_client(org.lead_a)
    url = reverse("request-template-list")
    client.post(url, template_body(world, is_shared=False, name="A mine"), format="json")
    client.post(url, template_body(world, name="Z team"), format="json")
    names = [row["name"] for row in client.get(url).json()["results"]]
    assert names == ["Z team", "A mine"]


def test_a_request_keeps_its_name(org: Org, fleet: Fleet) -> None:
    body = request_body(org.project_a, fleet.l4_6g, name="  resnet sweep 3 ")
    created = api_submit(org.dev_a, body).json()
    assert created["name"] == "resnet sweep 3"
    listed = api_client(org.dev_a).get(reverse("gpu-request-list")).json()["results"]
    assert listed[0]["name"] == "resnet sweep 3"


def test_resubmit_submits_a_finished_request_again(org: Org, fleet: Fleet) -> None:
    body = request_body(org.project_a, fleet.l4_6g, name="sweep", env={"SEED": "7"})
    first = api_submit(org.dev_a, body).json()
    client = api_client(org.dev_a)
    url = reverse("gpu-request-resubmit", args=[first["id"]])
    refused = client.post(url, {}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "not_finished"
    client.post(reverse("gpu-request-cancel", args=[first["id"]]), {}, format="json")
    response = client.post(url, {}, format="json")
    assert response.status_code == 201, response.content
    again = response.json()
    assert again["id"] != first["id"] and again["status"] == "queued"
    for field in ("name", "project", "flavor", "image", "command", "env", "max_runtime_seconds"):
        assert again[field] == first[field], field
