"""Sealed secrets survive a key rotation: a value sealed with a retired key still opens, and after
`rotate_sealed_secrets` the retired key can go."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from django.core.management import CommandError, call_command

from scheduling.models import Cluster, ProjectSecret
from scheduling.sealing import SealError, seal, unseal
from scheduling.services.project_data import create_project_secret
from tenants.models import AuditEvent
from tests.support.clusters import kubeconfig_text, make_cluster
from tests.support.personas import Org

pytestmark = pytest.mark.django_db

OLD, NEW = "old sealing key", "new sealing key"


def test_a_value_sealed_with_a_retired_key_opens_and_new_values_use_the_first(
    settings: Any,
) -> None:
    settings.SECRET_SEALING_KEYS = [OLD]
    old_token = seal({"token": "t-1"})
    settings.SECRET_SEALING_KEYS = [NEW, OLD]
    assert unseal(old_token) == {"token": "t-1"}
    new_token = seal({"token": "t-2"})
    settings.SECRET_SEALING_KEYS = [NEW]
    assert unseal(new_token) == {"token": "t-2"}
    with pytest.raises(SealError):
        unseal(old_token)


def test_the_single_key_settings_still_open_what_they_sealed(settings: Any) -> None:
    settings.SECRET_SEALING_KEYS = []
    settings.PROJECT_SECRETS_KEY = OLD
    sealed_with_project_key = seal({"a": "1"})
    settings.PROJECT_SECRETS_KEY = ""
    sealed_with_secret_key = seal({"b": "2"})
    settings.SECRET_SEALING_KEYS = [NEW, OLD, settings.SECRET_KEY]
    assert unseal(sealed_with_project_key) == {"a": "1"}
    assert unseal(sealed_with_secret_key) == {"b": "2"}
    # A rotated SECRET_KEY keeps the values of the old one through Django's fallbacks.
    settings.SECRET_SEALING_KEYS = []
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a brand new django secret key"
    assert unseal(sealed_with_secret_key) == {"b": "2"}


def test_rotation_reseals_every_stored_value_so_the_retired_key_can_go(
    org: Org, settings: Any
) -> None:
    settings.SECRET_SEALING_KEYS = [OLD]
    with mock.patch("scheduling.dispatch.send"):
        secret = create_project_secret(
            actor=org.lead_a, project=org.project_a, name="hf", data={"token": "hf-123"}
        )
    cluster = make_cluster(org.admin)
    before = ProjectSecret.objects.get(pk=secret.pk).sealed_data

    settings.SECRET_SEALING_KEYS = [NEW, OLD]
    call_command("rotate_sealed_secrets")
    settings.SECRET_SEALING_KEYS = [NEW]

    after = ProjectSecret.objects.get(pk=secret.pk).sealed_data
    assert after != before
    assert unseal(after) == {"token": "hf-123"}
    kubeconfig = Cluster.objects.get(pk=cluster.pk).kubeconfig_sealed
    assert unseal(kubeconfig) == {"kubeconfig": kubeconfig_text()}
    event = AuditEvent.objects.get(action="secrets.resealed")
    assert event.data == {"resealed": 2, "unreadable": []}


def test_rotation_names_values_no_key_opens_and_leaves_them(org: Org, settings: Any) -> None:
    settings.SECRET_SEALING_KEYS = [OLD]
    with mock.patch("scheduling.dispatch.send"):
        secret = create_project_secret(
            actor=org.lead_a, project=org.project_a, name="hf", data={"token": "hf-123"}
        )
    settings.SECRET_SEALING_KEYS = [NEW]  # the old key was dropped before rotating
    with pytest.raises(CommandError, match=f"project secret {secret.pk}"):
        call_command("rotate_sealed_secrets")
    settings.SECRET_SEALING_KEYS = [OLD]
    assert unseal(ProjectSecret.objects.get(pk=secret.pk).sealed_data) == {"token": "hf-123"}
