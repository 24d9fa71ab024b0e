"""The request form's templates, its flavors by kind, and Clone and Resubmit on a request page."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from scheduling.models import GpuRequest, RequestTemplate
from scheduling.services.requests import cancel_gpu_request
from scheduling.services.templates import create_request_template
from tests.scheduling.test_pages import form_data, login
from tests.support.cross_tenant import covers
from tests.support.factories import GpuRequestFactory
from tests.support.fleet import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def team_template(org: Org, fleet: Fleet, *, name: str = "Team notebook") -> RequestTemplate:
    return create_request_template(
        actor=org.lead_a,
        team=org.team_a,
        is_shared=True,
        name=name,
        flavor=fleet.l4_12g,
        kind="notebook",
        image="registry.example.com/ml/notebook:2.4",
        command=["start-notebook.sh", "--port", "8888"],
        env={"MODE": "dev"},
        max_runtime_seconds=5400,
    )


def selected(page: str, field: str) -> str:
    select = re.search(rf'<select name="{field}".*?</select>', page, re.S)
    assert select, field
    match = re.search(r'<option value="([^"]*)"[^>]*selected', select.group(0))
    return match.group(1) if match else ""


def test_the_form_offers_the_team_templates_before_ones_own(org: Org, fleet: Fleet) -> None:
    team_template(org, fleet, name="Zeta team")
    create_request_template(
        actor=org.dev_a, team=org.team_a, name="Alpha mine", image="img:1", flavor=fleet.l4_6g
    )
    create_request_template(
        actor=org.lead_b, team=org.team_b, is_shared=True, name="B's", image="img:1"
    )
    page = login("dev_a").get(reverse("gpu-request-new")).content.decode()
    assert page.index("Team templates") < page.index("Zeta team") < page.index("My templates")
    assert page.index("My templates") < page.index("Alpha mine")
    assert "B&#x27;s" not in page and "B's" not in page


def test_choosing_a_template_fills_the_form(org: Org, fleet: Fleet) -> None:
    template = team_template(org, fleet)
    url = reverse("gpu-request-new") + f"?template={template.pk}"
    page = login("dev_a").get(url).content.decode()
    assert 'value="Team notebook"' in page
    assert 'value="registry.example.com/ml/notebook:2.4"' in page
    assert "start-notebook.sh --port 8888" in page
    assert 'value="1.5"' in page  # hours
    assert selected(page, "kind") == "notebook"
    assert selected(page, "flavor") == str(fleet.l4_12g.pk)


def test_another_teams_template_or_request_fills_nothing(org: Org, fleet: Fleet) -> None:
    template = team_template(org, fleet)
    theirs = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_12g, image="secret:1")
    client = login("dev_b")
    for query in (f"?template={template.pk}", f"?clone={theirs.pk}"):
        page = client.get(reverse("gpu-request-new") + query)
        assert page.status_code == 200
        text = page.content.decode()
        assert "notebook:2.4" not in text and "secret:1" not in text


def test_flavors_follow_the_chosen_kind(org: Org, fleet: Fleet) -> None:
    pool = fleet.a100.pool
    pool.allowed_kinds = ["job"]
    pool.save()
    client = login("dev_a")
    url = reverse("gpu-request-form-flavors")
    for kind, offered in (("job", True), ("notebook", False)):
        options = client.get(url, {"project": str(org.project_a.pk), "kind": kind}).content.decode()
        assert (f'value="{fleet.a100.pk}"' in options) is offered, kind
        assert f'value="{fleet.l4_12g.pk}"' in options
    kept = client.get(
        url, {"project": str(org.project_a.pk), "kind": "notebook", "flavor": str(fleet.l4_12g.pk)}
    ).content.decode()
    assert re.search(rf'value="{fleet.l4_12g.pk}" selected', kept)
    page = client.get(reverse("gpu-request-new") + f"?template={team_template(org, fleet).pk}")
    flavors = re.search(r'<select name="flavor".*?</select>', page.content.decode(), re.S)
    assert flavors is not None and f'value="{fleet.l4_12g.pk}"' in flavors.group(0)
    assert f'value="{fleet.a100.pk}"' not in flavors.group(0)


def test_the_form_submits_a_named_request(org: Org, fleet: Fleet) -> None:
    response = login("dev_a").post(reverse("gpu-request-new"), form_data(org, fleet, name="eda"))
    assert response.status_code == 302
    assert GpuRequest.objects.get().name == "eda"


def test_a_finished_request_offers_clone_and_resubmit(org: Org, fleet: Fleet) -> None:
    request = GpuRequestFactory.create(
        project=org.project_a, flavor=fleet.l4_12g, image="registry.example.com/x:1"
    )
    client = login("dev_a")
    page = client.get(reverse("gpu-request-page", args=[request.pk])).content.decode()
    assert 'data-testid="clone"' not in page and 'data-testid="resubmit"' not in page
    cancel_gpu_request(actor=org.dev_a, request=request)
    page = client.get(reverse("gpu-request-page", args=[request.pk])).content.decode()
    assert f"?clone={request.pk}" in page and 'data-testid="resubmit"' in page

    clone = client.get(reverse("gpu-request-new") + f"?clone={request.pk}").content.decode()
    assert 'value="registry.example.com/x:1"' in clone
    assert selected(clone, "flavor") == str(fleet.l4_12g.pk)
    assert selected(clone, "project") == str(org.project_a.pk)

    response = client.post(reverse("gpu-request-resubmit-page", args=[request.pk]))
    again = GpuRequest.objects.exclude(pk=request.pk).get()
    assert response.status_code == 302
    assert response["Location"] == reverse("gpu-request-page", args=[again.pk])
    assert (again.image, again.flavor, again.owner) == (request.image, request.flavor, org.dev_a)


@covers("gpu-request-resubmit-page")
def test_another_team_cannot_resubmit_from_the_page(org: Org, fleet: Fleet) -> None:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_12g)
    cancel_gpu_request(actor=org.dev_a, request=request)
    for username in ("dev_b", "lead_b"):
        url = reverse("gpu-request-resubmit-page", args=[request.pk])
        assert login(username).post(url).status_code == 404
    assert GpuRequest.objects.count() == 1


def test_a_request_is_saved_as_a_template_own_or_the_teams(org: Org, fleet: Fleet) -> None:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_12g, kind="notebook")
    url = reverse("gpu-request-save-template-page", args=[request.pk])
    page = login("dev_a").get(reverse("gpu-request-page", args=[request.pk])).content.decode()
    assert url in page and 'name="is_shared"' not in page  # only a lead shares with the team
    login("dev_a").post(url, {"name": "my notebook", "is_shared": "on"})
    assert not RequestTemplate.objects.exists()  # a developer may not share: refused
    login("dev_a").post(url, {"name": "my notebook"})
    login("lead_a").post(url, {"name": "team notebook", "is_shared": "on"})
    saved = {t.name: t for t in RequestTemplate.objects.all()}
    assert (saved["my notebook"].owner, saved["my notebook"].is_shared) == (org.dev_a, False)
    assert saved["team notebook"].is_shared and saved["team notebook"].team == org.team_a
    assert (saved["my notebook"].kind, saved["my notebook"].flavor) == ("notebook", fleet.l4_12g)


@covers("gpu-request-save-template-page")
def test_another_team_cannot_save_a_request_as_a_template(org: Org, fleet: Fleet) -> None:
    request = GpuRequestFactory.create(project=org.project_a, flavor=fleet.l4_12g)
    url = reverse("gpu-request-save-template-page", args=[request.pk])
    for username in ("dev_b", "lead_b"):
        assert login(username).post(url, {"name": "stolen"}).status_code == 404
    assert not RequestTemplate.objects.exists()
