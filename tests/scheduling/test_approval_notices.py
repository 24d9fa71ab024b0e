"""Who hears about an approval: the owner when a lead approved, and no one by email when the
submission was approved at once (its own answer says so); a webhook hears every approval."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling import dispatch
from scheduling.models import GpuRequest
from scheduling.services.notifications import send_out
from scheduling.services.requests import approve_gpu_request
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.factories import api_submit
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """The notices handed to the broker: (recipients, event) for an email, ("webhook <id>",
    event) for a webhook message."""
    sent: list[tuple[Any, dict[str, Any]]] = []

    def send(task_name: str, *args: Any) -> None:
        if task_name == dispatch.SEND_NOTICES:  # the one task that fans the notices out
            send_out(notices=args[0])
        if task_name == dispatch.SEND_NOTIFICATION:
            recipients, _subject, _body, event = args
            sent.append((recipients, event))
        if task_name == dispatch.SEND_WEBHOOK:
            webhook_id, _subject, _body, _link, event = args
            sent.append((f"webhook {webhook_id}", event))

    monkeypatch.setattr(dispatch, "send", send)
    return sent


def test_an_approval_at_submission_emails_no_one(
    org: Org, fleet: Fleet, queued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        body = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g)).json()
    assert body["status"] == "queued"
    assert queued == []


def test_a_webhook_still_hears_an_approval_at_submission(
    org: Org,
    fleet: Fleet,
    queued: list[Any],
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.NOTIFICATION_WEBHOOK_URL = "https://hooks.example.com/gpu-portal"
    with django_capture_on_commit_callbacks(execute=True):
        body = api_submit(org.dev_a, request_body(org.project_a, fleet.l4_12g)).json()
    assert queued == [("webhook None", {"type": "request.approved", "request": body["id"]})]


def test_a_leads_approval_emails_the_owner(
    org: Org, fleet: Fleet, queued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        body = api_submit(org.dev_a, request_body(org.project_a, fleet.a100)).json()
    assert body["status"] == "pending_approval"
    assert queued == [
        (["lead_a@example.com"], {"type": "request.pending_approval", "request": body["id"]})
    ]
    queued.clear()

    with django_capture_on_commit_callbacks(execute=True):
        approve_gpu_request(actor=org.lead_a, request=GpuRequest.objects.get(pk=body["id"]))
    assert queued == [(["dev_a@example.com"], {"type": "request.approved", "request": body["id"]})]
