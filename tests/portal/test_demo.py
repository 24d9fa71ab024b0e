"""The demo organisation behaves as the README promises."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import call_command
from django.urls import reverse

from scheduling.models import Flavor, GpuRequest, NodePool
from tenants.models import Project
from tests.support.personas import api_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings: Any) -> None:
    settings.DEMO_PASSWORD = "demo-test"
    call_command("seed_demo")
    call_command("seed_demo")  # idempotent


def user(name: str) -> Any:
    return get_user_model().objects.get(username=name)


def test_seed_has_every_role_and_all_three_sharing_modes(demo: None) -> None:
    assert get_user_model().objects.count() == 6
    assert user("alice").check_password("demo-test")
    assert set(NodePool.objects.values_list("sharing_mode", flat=True)) == {
        "exclusive",
        "mig",
        "vgpu",
    }
    assert Project.objects.count() == 4
    assert Flavor.objects.filter(prices__isnull=False).distinct().count() == Flavor.objects.count()


def test_demo_story_auto_approval_lead_approval_and_isolation(
    demo: None, django_capture_on_commit_callbacks: Any
) -> None:
    detection = Project.objects.get(slug="detection")
    alice = api_client(user("alice"))
    body = {
        "project": detection.pk,
        "gpu_count": 1,
        "image": "pytorch/pytorch:2.4.0",
        "max_runtime_seconds": 3600,
    }
    vgpu = alice.post(
        reverse("gpu-request-list"),
        {
            **body,
            "flavor": Flavor.objects.get(slug="l4-12g").pk,
            "kind": "notebook",
            "image": "jupyter/pytorch-notebook:2024-10-07",  # the demo's curated notebooks
        },
        format="json",
    )
    assert vgpu.json()["status"] == "queued"

    with django_capture_on_commit_callbacks(execute=True):
        training = alice.post(
            reverse("gpu-request-list"),
            {**body, "flavor": Flavor.objects.get(slug="a100-80g").pk, "gpu_count": 4},
            format="json",
        ).json()
    assert training["status"] == "pending_approval"
    assert [message.to for message in mail.outbox] == [["bob@example.com"]]

    approve = reverse("gpu-request-approve", kwargs={"pk": training["id"]})
    detail = reverse("gpu-request-detail", kwargs={"pk": training["id"]})
    assert api_client(user("dan")).post(approve, {}, format="json").status_code == 404
    assert api_client(user("carol")).get(detail).status_code == 404
    assert api_client(user("bob")).post(approve, {}, format="json").json()["status"] == "queued"
    assert GpuRequest.objects.get(pk=training["id"]).approved_by == user("bob")
