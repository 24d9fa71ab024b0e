"""Curated notebook profiles: admins manage them, the request form offers those a project may
start, and a tier that curates any runs notebooks of their images only."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import GpuRequest, Tier
from scheduling.models.catalog import NotebookProfile
from scheduling.services.notebook_profiles import create_notebook_profile
from tenants.errors import ForbiddenError
from tenants.models import AuditEvent
from tests.scheduling.helpers import request_body
from tests.scheduling.test_pages import form_data, login
from tests.scheduling.test_template_pages import selected
from tests.support.factories import api_submit
from tests.support.fleet import Fleet
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

CURATED = "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07"


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def dev_profile(org: Org, fleet: Fleet, **overrides: Any) -> NotebookProfile:
    """A PyTorch profile on the development tier, starting on half an L4."""
    fields: dict[str, Any] = {
        "name": "PyTorch",
        "image": CURATED,
        "description": "JupyterLab with PyTorch",
        "tiers": [Tier.objects.get(slug="dev")],
        "flavor": fleet.l4_12g,
        "gpu_count": 1,
    }
    return create_notebook_profile(actor=org.admin, **{**fields, **overrides})


def profile_form(tier: Tier, flavor: Any, **overrides: Any) -> dict[str, Any]:
    return {
        "name": "TensorFlow",
        "image": "quay.io/jupyter/tensorflow-notebook:2024-10-07",
        "description": "JupyterLab with TensorFlow",
        "tiers": [tier.pk],
        "flavor": flavor.pk,
        "gpu_count": "1",
        "is_active": "on",
        **overrides,
    }


# --- Managed by platform admins, audited ---------------------------------------------------


def test_the_admin_creates_edits_and_deletes_a_profile_each_audited(org: Org, fleet: Fleet) -> None:
    admin = _client(org.admin)
    dev = Tier.objects.get(slug="dev")
    assert (
        admin.post(reverse("manage-notebook-profiles"), profile_form(dev, fleet.l4_6g)).status_code
        == 302
    )
    profile = NotebookProfile.objects.get(name="TensorFlow")
    assert list(profile.tiers.all()) == [dev] and profile.flavor == fleet.l4_6g
    created = AuditEvent.objects.get(action="notebook_profile.created", target_id=str(profile.pk))
    assert created.data["fields"]["image"] == "quay.io/jupyter/tensorflow-notebook:2024-10-07"
    listing = admin.get(reverse("manage-notebook-profiles")).content.decode()
    assert "quay.io/jupyter/tensorflow-notebook:2024-10-07" in listing
    assert "L4 vGPU 6 GiB × 1" in listing

    edit = reverse("manage-notebook-profiles-edit", kwargs={"pk": profile.pk})
    new_image = "quay.io/jupyter/tensorflow-notebook:2025-01-06"
    assert admin.post(edit, profile_form(dev, fleet.l4_6g, image=new_image)).status_code == 302
    updated = AuditEvent.objects.get(action="notebook_profile.updated", target_id=str(profile.pk))
    assert updated.data["changes"]["image"] == [
        "quay.io/jupyter/tensorflow-notebook:2024-10-07",
        new_image,
    ]

    delete = reverse("manage-notebook-profiles-delete", kwargs={"pk": profile.pk})
    assert admin.post(delete).status_code == 302
    assert not NotebookProfile.objects.filter(pk=profile.pk).exists()
    assert AuditEvent.objects.filter(action="notebook_profile.deleted").exists()


def test_a_default_flavor_outside_the_profiles_tiers_is_a_form_error(
    org: Org, fleet: Fleet
) -> None:
    dev = Tier.objects.get(slug="dev")
    response = _client(org.admin).post(
        reverse("manage-notebook-profiles"), profile_form(dev, fleet.mig_1g)
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "in the Inference tier, not one of the profile" in page
    assert not NotebookProfile.objects.exists()


def test_an_image_reference_with_spaces_is_a_form_error(org: Org, fleet: Fleet) -> None:
    dev = Tier.objects.get(slug="dev")
    body = profile_form(dev, fleet.l4_6g, image="pytorch notebook")
    response = _client(org.admin).post(reverse("manage-notebook-profiles"), body)
    assert response.status_code == 400
    assert "Not an image reference" in response.content.decode()
    assert not NotebookProfile.objects.exists()


@pytest.mark.parametrize("persona", ["dev_a", "lead_a", "finance"])
def test_nobody_but_a_platform_admin_creates_or_edits_profiles(
    org: Org, fleet: Fleet, persona: str
) -> None:
    profile = dev_profile(org, fleet)
    client = _client(getattr(org, persona))
    dev = Tier.objects.get(slug="dev")
    assert client.get(reverse("manage-notebook-profiles")).status_code == 404
    created = client.post(reverse("manage-notebook-profiles"), profile_form(dev, fleet.l4_6g))
    assert created.status_code == 404
    for route in ("manage-notebook-profiles-edit", "manage-notebook-profiles-delete"):
        url = reverse(route, kwargs={"pk": profile.pk})
        assert client.get(url).status_code == 404
        assert client.post(url, profile_form(dev, fleet.l4_6g, image="evil:1")).status_code == 404
    profile.refresh_from_db()
    assert profile.image == CURATED
    assert list(NotebookProfile.objects.values_list("name", flat=True)) == ["PyTorch"]
    with pytest.raises(ForbiddenError):
        create_notebook_profile(
            actor=getattr(org, persona), name="Mine", image="mine:1", tiers=[dev]
        )


# --- The picker on the request form ------------------------------------------------------------


def test_the_form_offers_the_profiles_the_projects_tiers_allow(org: Org, fleet: Fleet) -> None:
    dev_profile(org, fleet)
    dev_profile(
        org,
        fleet,
        name="Big PyTorch",
        tiers=[Tier.objects.get(slug="training")],
        flavor=fleet.a100,
    )
    dev_profile(org, fleet, name="Retired", is_active=False)
    page = login("dev_a").get(reverse("gpu-request-new")).content.decode()
    picker = page[page.index('data-testid="profile-picker"') :]
    assert "PyTorch" in picker and CURATED in picker and "L4 vGPU 12 GiB × 1" in picker
    assert "Big PyTorch" in picker  # team A may use the training tier
    assert "Retired" not in picker
    theirs = login("dev_b").get(reverse("gpu-request-new")).content.decode()
    assert "Big PyTorch" not in theirs  # team B may not use the training tier
    assert "L4 vGPU 12 GiB × 1" in theirs


def test_picking_a_profile_fills_the_form_with_a_notebook_of_its_image(
    org: Org, fleet: Fleet
) -> None:
    profile = dev_profile(org, fleet, gpu_count=2)
    url = reverse("gpu-request-new") + f"?profile={profile.pk}&project={org.project_a.pk}"
    page = login("dev_a").get(url).content.decode()
    assert f'value="{CURATED}"' in page
    assert selected(page, "kind") == "notebook"
    assert selected(page, "flavor") == str(fleet.l4_12g.pk)
    assert 'name="gpu_count" value="2"' in page
    assert f'value="{profile.pk}" id="profile-{profile.pk}" checked' in page


def test_a_profile_the_project_may_not_use_fills_nothing(org: Org, fleet: Fleet) -> None:
    training = dev_profile(
        org, fleet, name="Big", tiers=[Tier.objects.get(slug="training")], flavor=fleet.a100
    )
    page = login("dev_b").get(reverse("gpu-request-new") + f"?profile={training.pk}")
    assert page.status_code == 200
    assert CURATED not in page.content.decode()


# --- Curated images only, once a tier has profiles ---------------------------------------------


def test_the_form_refuses_a_notebook_image_outside_the_tiers_curated_list(
    org: Org, fleet: Fleet
) -> None:
    dev_profile(org, fleet)
    client = login("dev_a")
    response = client.post(reverse("gpu-request-new"), form_data(org, fleet, image="evil/miner:1"))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-testid="error-image"' in page
    assert "run a curated image" in page and CURATED in page
    assert not GpuRequest.objects.exists()

    response = client.post(reverse("gpu-request-new"), form_data(org, fleet, image=CURATED))
    assert response.status_code == 302
    assert GpuRequest.objects.get().image == CURATED


def test_the_api_refuses_a_notebook_image_outside_the_curated_list(org: Org, fleet: Fleet) -> None:
    dev_profile(org, fleet)
    body = request_body(org.project_a, fleet.l4_12g, kind="notebook", command=[])
    answer = api_submit(org.dev_a, body | {"image": "evil/miner:1"}, status=400).json()
    refused = answer["error"]
    assert refused["code"] == "image_not_curated"
    assert "image" in refused["fields"]
    api_submit(org.dev_a, body | {"image": CURATED}, status=201)


def test_jobs_and_tiers_without_profiles_run_any_image(org: Org, fleet: Fleet) -> None:
    dev_profile(org, fleet)
    dev_profile(org, fleet, name="Retired", image="old/notebook:1", is_active=False)
    job = request_body(org.project_a, fleet.l4_12g, image="any/job:1")
    api_submit(org.dev_a, job, status=201)  # only notebooks are curated
    inference = request_body(
        org.project_a, fleet.mig_1g, kind="notebook", command=[], image="any/notebook:1"
    )
    api_submit(org.dev_a, inference, status=201)  # the inference tier curates none
    retired = request_body(
        org.project_a, fleet.l4_12g, kind="notebook", command=[], image="old/notebook:1"
    )
    api_submit(org.dev_a, retired, status=400)  # an inactive profile lets nothing through
