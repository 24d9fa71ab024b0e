"""The request list's fast rendering must say exactly what DRF's own rendering says."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework import serializers

from scheduling.api.serializers import GpuRequestSerializer
from scheduling.choices import Priority, RequestStatus, WorkloadKind
from scheduling.models import GpuRequest
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def drf_rendering(instance: GpuRequest) -> dict[str, Any]:
    """What DRF's Serializer.to_representation makes of the same instance."""
    serializer = GpuRequestSerializer(instance)
    return dict(serializers.ModelSerializer.to_representation(serializer, instance))


def as_json(data: Any) -> str:
    return json.dumps(data, sort_keys=False)


def a_request(org: Org, fleet: Fleet, **overrides: Any) -> GpuRequest:
    now = timezone.now()
    fields: dict[str, Any] = {
        "project": org.project_a,
        "team": org.team_a,
        "owner": org.dev_a,
        "flavor": fleet.l4_12g,
        "gpu_count": 2,
        "gpu_memory_mib": 12288,
        "gpu_cores_percent": 25,
        "kind": WorkloadKind.NOTEBOOK,
        "image": "registry.example.com/ml/pytorch:2.4",
        "command": ["python", "-c", "print('ü')"],
        "env": {"EPOCHS": "3", "NAME": "naïve"},
        "max_runtime_seconds": 7200,
        "priority": Priority.HIGH,
        "is_preemptible": True,
        "reason": "ablation",
        "gpu_equivalent": Decimal("1.0000"),
        "status": RequestStatus.RUNNING,
        "status_reason": "Running on node-1.",
        "needs_lead_approval_because": "whole cards",
        "approved_by": org.lead_a,
        "decision_comment": "ok",
        "approval_expires_at": now + timedelta(hours=72),
        "waiting_reason": "",
        "queue_position": 3,
        "attempt": 2,
        "idle_warned_at": now - timedelta(minutes=5),
        "idle_exempt_until": now + timedelta(hours=1, microseconds=17),
        "timeout_warned_at": None,
        "approved_at": now - timedelta(hours=2),
        "queued_at": now - timedelta(hours=2),
        "started_at": now - timedelta(hours=1),
        "finished_at": None,
    }
    fields.update(overrides)
    return GpuRequest.objects.create(**fields)


def test_every_field_of_a_stored_request_renders_as_drf_renders_it(org: Org, fleet: Fleet) -> None:
    stored = a_request(org, fleet)
    loaded = GpuRequest.objects.select_related("owner").get(pk=stored.pk)

    fast = GpuRequestSerializer(loaded).data
    assert list(fast) == list(drf_rendering(loaded))
    assert as_json(fast) == as_json(drf_rendering(loaded))
    assert fast["idle_exempt_until"].endswith("Z")
    assert fast["approved_by"] == org.lead_a.pk and fast["owner"] == "dev_a"


def test_a_fresh_instance_with_enum_members_and_nulls_renders_as_drf_renders_it(
    org: Org, fleet: Fleet
) -> None:
    fresh = a_request(
        org,
        fleet,
        status=RequestStatus.QUEUED,
        approved_by=None,
        gpu_memory_mib=None,
        idle_warned_at=None,
        queue_position=None,
    )
    assert isinstance(fresh.status, RequestStatus)  # not yet read back from the database

    assert as_json(GpuRequestSerializer(fresh).data) == as_json(drf_rendering(fresh))
    assert GpuRequestSerializer(fresh).data["status"] == "queued"


def test_outside_utc_datetimes_are_rendered_in_the_current_time_zone_like_drf(
    org: Org, fleet: Fleet
) -> None:
    loaded = GpuRequest.objects.get(pk=a_request(org, fleet).pk)
    with timezone.override("Asia/Shanghai"):
        fast = GpuRequestSerializer(loaded).data
        assert as_json(fast) == as_json(drf_rendering(loaded))
    assert fast["started_at"].endswith("+08:00")


def test_the_list_endpoint_answers_what_drf_would(org: Org, fleet: Fleet) -> None:
    for hours in range(3):
        a_request(org, fleet, started_at=timezone.now() - timedelta(hours=hours))

    body = api_client(org.dev_a).get(reverse("gpu-request-list")).json()

    expected = [
        drf_rendering(request)
        for request in GpuRequest.objects.filter(owner=org.dev_a)
        .select_related("owner")
        .order_by("-created_at", "-id")
    ]
    assert body["count"] == 3
    assert as_json(body["results"]) == as_json(expected)
