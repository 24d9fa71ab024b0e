"""What a visitor can try at once on the demo: shared templates and curated notebook profiles
on the request form, and room for a project workspace."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from scheduling.models import RequestTemplate, StorageQuota
from scheduling.models.catalog import NotebookProfile

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(settings: Any) -> None:
    settings.DEMO_PASSWORD = "demo-test"
    settings.DEMO_HISTORY_DAYS = 0
    call_command("seed_demo")


def test_alice_starts_from_her_team_s_templates(seeded: None) -> None:
    alice = Client()
    assert alice.login(username="alice", password="demo-test")
    form = alice.get(reverse("gpu-request-new")).content.decode()
    assert "PyTorch notebook" in form and "Detector training, 1 A100" in form
    assert "ASR evaluation" not in form  # Speech's, not shared with Vision
    template = RequestTemplate.objects.get(name="PyTorch notebook")
    filled = alice.get(reverse("gpu-request-new"), {"template": template.pk}).content.decode()
    assert "jupyter/pytorch-notebook:2024-10-07" in filled


def test_each_demo_team_has_room_for_a_workspace(seeded: None) -> None:
    limits = dict(StorageQuota.objects.values_list("team__slug", "limit_gib"))
    assert limits["vision"] > 0 and limits["speech"] > 0


def test_alice_picks_a_curated_notebook_profile_and_it_runs(seeded: None) -> None:
    alice = Client()
    assert alice.login(username="alice", password="demo-test")
    form = alice.get(reverse("gpu-request-new")).content.decode()
    picker = form[form.index('data-testid="profile-picker"') : form.index("request-form")]
    for name in ("PyTorch on an L4 share", "TensorFlow on an L4 share", "PyTorch on an H100 slice"):
        assert name in picker
    profile = NotebookProfile.objects.get(name="TensorFlow on an L4 share")
    filled = alice.get(reverse("gpu-request-new"), {"profile": profile.pk}).content.decode()
    assert 'value="jupyter/tensorflow-notebook:2024-10-07"' in filled
    # The template's image is curated too: the demo's notebook story still submits.
    template = RequestTemplate.objects.get(name="PyTorch notebook")
    assert NotebookProfile.objects.filter(image=template.image, tiers__slug="dev").exists()
