"""What was made ready on a cluster is remembered in the database: a worker process that never
launched into a project does not ensure its namespace again, until the spec changes or the
record grows old."""

from __future__ import annotations

import weakref
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from runtime.models import EnsuredObject
from runtime.services import ensured
from runtime.services.ensured import EnsuredObjects, spec_digest
from runtime.services.propagation import project_spec
from scheduling.services.quotas import set_quota
from tenants.models import Project
from tests.support.factories import ready_flavor
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_process_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start as a new worker process does: what earlier tests' backends ensured is remembered
    in this process, while their database records were rolled back."""
    monkeypatch.setattr(ensured, "_ensured_by_backend", weakref.WeakKeyDictionary())


class Creations:
    """The `create` of each ensure, counted."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_a_spec_ensured_by_one_process_is_not_ensured_again_by_another() -> None:
    made = Creations()
    first, second = EnsuredObjects(cluster="local"), EnsuredObjects(cluster="local")
    assert first.ensure("project:gpu-a-b", {"quota": 8}, made) is True
    assert second.ensure("project:gpu-a-b", {"quota": 8}, made) is False
    assert made.count == 1
    # Another cluster has its own record.
    assert EnsuredObjects(cluster="cluster-2").ensure("project:gpu-a-b", {"quota": 8}, made)
    assert made.count == 2


def test_a_changed_spec_an_old_record_or_a_forgotten_one_is_ensured_again() -> None:
    made = Creations()
    EnsuredObjects(cluster="local").ensure("project:gpu-a-b", {"quota": 8}, made)
    assert EnsuredObjects(cluster="local").ensure("project:gpu-a-b", {"quota": 12}, made)
    assert made.count == 2

    EnsuredObject.objects.update(ensured_at=timezone.now() - timedelta(seconds=601))
    assert EnsuredObjects(cluster="local").ensure("project:gpu-a-b", {"quota": 12}, made)
    assert made.count == 3

    EnsuredObjects(cluster="local").forget("project:gpu-a-b")  # a launch met a 404
    assert EnsuredObjects(cluster="local").ensure("project:gpu-a-b", {"quota": 12}, made)
    assert made.count == 4


def test_a_project_created_or_given_a_quota_is_made_ready_after_the_commit(
    org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client(org.lead_a).post(
            reverse("project-list"),
            {"team": org.team_a.pk, "name": "Ready", "slug": "ready"},
            format="json",
        )
    assert response.status_code == 201, response.content
    project = Project.objects.get(pk=response.json()["id"])
    ready = EnsuredObject.objects.get(cluster="local", key=f"project:{project.namespace}")
    assert ready.digest == spec_digest(project_spec(project))
    assert EnsuredObject.objects.filter(cluster="local", key="priority-classes").exists()

    # A new quota of the team changes what the namespace holds: it is pushed again.
    flavor = ready_flavor(team=org.team_b)
    with django_capture_on_commit_callbacks(execute=True):
        set_quota(actor=org.admin, team=org.team_a, flavor=flavor, guaranteed=1, limit=3)
    before = ready.digest
    ready.refresh_from_db()
    assert project_spec(project).quota["requests.nvidia.com/gpu"] == 3
    assert before != ready.digest == spec_digest(project_spec(project))


def test_another_teams_lead_cannot_create_a_project_there(
    org: Org, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client(org.lead_b).post(
            reverse("project-list"),
            {"team": org.team_a.pk, "name": "Theirs", "slug": "theirs"},
            format="json",
        )
    assert response.status_code == 400, response.content  # not a team the lead may use
    assert "team" in response.json()["error"]["fields"]
    assert not EnsuredObject.objects.filter(key__startswith="project:").exists()
