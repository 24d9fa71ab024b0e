from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from scheduling.models import Allocation, UtilisationSample
from scheduling.services.requests import cancel_gpu_request
from tests.governance.conftest import Runner
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def url(name: str, pk: int) -> str:
    return reverse(name, kwargs={"pk": pk})


def test_lead_grants_an_idle_exemption_and_the_owner_sees_it(org: Org, running: Runner) -> None:
    request = running(minutes_ago=5)
    response = api_client(org.lead_a).post(
        url("gpu-request-idle-exemption", request.pk), {"hours": 2}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["idle_exempt_until"]


def test_lead_extends_the_runtime_within_the_tier_ceiling(org: Org, running: Runner) -> None:
    request = running(minutes_ago=5, max_runtime_seconds=3600)
    client = api_client(org.lead_a)
    response = client.post(url("gpu-request-extend", request.pk), {"seconds": 1800}, format="json")
    assert response.json()["max_runtime_seconds"] == 5400
    too_much = client.post(url("gpu-request-extend", request.pk), {"seconds": 86400}, format="json")
    assert too_much.status_code == 400
    assert "seconds" in too_much.json()["error"]["fields"]


def test_owner_asks_and_developers_cannot_grant(
    org: Org, running: Runner, django_capture_on_commit_callbacks: Any
) -> None:
    from django.core import mail

    request = running(minutes_ago=5)
    owner = api_client(org.dev_a)
    with django_capture_on_commit_callbacks(execute=True):
        asked = owner.post(
            url("gpu-request-ask-extension", request.pk), {"reason": "epoch 9 of 10"}, format="json"
        )
    assert asked.status_code == 200
    assert mail.outbox[-1].to == ["lead_a@example.com"]
    assert (
        owner.post(
            url("gpu-request-ask-idle-exemption", request.pk), {"reason": ""}, format="json"
        ).status_code
        == 400
    )
    granted = owner.post(url("gpu-request-extend", request.pk), {"seconds": 600}, format="json")
    assert granted.status_code == 403


def test_extension_of_finished_work_is_409(org: Org, running: Runner) -> None:

    request = running(minutes_ago=5)
    cancel_gpu_request(actor=org.dev_a, request=request)
    response = api_client(org.lead_a).post(
        url("gpu-request-extend", request.pk), {"seconds": 600}, format="json"
    )
    assert response.status_code == 409


def test_utilisation_timeline(org: Org, running: Runner) -> None:
    from django.utils import timezone

    request = running(minutes_ago=5)
    allocation = Allocation.objects.get(request=request)
    UtilisationSample.objects.create(
        allocation=allocation, sampled_at=timezone.now(), activity_percent=42.0, memory_used_mib=9
    )
    points = api_client(org.dev_a).get(url("gpu-request-utilisation", request.pk)).json()
    assert points[0]["activity_percent"] == 42.0 and points[0]["memory_used_mib"] == 9


def reclaimed(running: Runner, **kwargs: Any) -> Any:
    from runtime.services.reclaim import reclaim_request

    request = running(minutes_ago=5, **kwargs)
    assert reclaim_request(request, reason="Reclaimed: idle.", code="idle", evidence={})
    request.refresh_from_db()
    return request


def test_owner_resumes_a_reclaimed_notebook_with_the_same_settings(
    org: Org, running: Runner
) -> None:
    request = reclaimed(running, kind="notebook")
    assert request.finished_at is not None
    response = api_client(org.dev_a).post(url("gpu-request-resume", request.pk), {}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "queued" and body["finished_at"] is None
    assert body["image"] == request.image and body["attempt"] == 1  # the next admission makes 2


def test_a_reclaimed_batch_job_is_not_resumed(org: Org, running: Runner) -> None:
    request = reclaimed(running, kind="job")
    response = api_client(org.dev_a).post(url("gpu-request-resume", request.pk), {}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["fields"]["status"] == "reclaimed"
