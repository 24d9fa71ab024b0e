"""The API's serializer and the web form hand the submit service one value: a GpuRequestSpec."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from scheduling.api.serializers import GpuRequestSerializer
from scheduling.forms import GpuRequestForm
from scheduling.models import Flavor
from scheduling.services.requests import GpuRequestSpec, submit_gpu_request
from tenants.models import Project
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.personas import Org

pytestmark = pytest.mark.django_db


def test_the_api_and_the_form_ask_for_the_same_request_with_the_same_spec(
    org: Org, fleet: Fleet
) -> None:
    body = request_body(org.project_a, fleet.l4_12g, name="resnet sweep 3", gpu_memory_mib=8192)
    serializer = GpuRequestSerializer(
        data=body, context={"request": SimpleNamespace(user=org.dev_a)}
    )
    assert serializer.is_valid(), serializer.errors
    form = GpuRequestForm(
        {
            **body,
            "command": "python train.py",
            "env": "EPOCHS=3",
            "max_runtime_hours": "1",
            "allow_shared_node": "on",
        },
        projects=Project.objects.visible_to(org.dev_a),
        flavors=Flavor.objects.all(),
    )
    assert form.is_valid(), form.errors
    expected = GpuRequestSpec(
        project=org.project_a,
        flavor=fleet.l4_12g,
        gpu_count=1,
        image="registry.example.com/ml/pytorch:2.4",
        max_runtime_seconds=3600,
        command=["python", "train.py"],
        env={"EPOCHS": "3"},
        reason="experiment",
        name="resnet sweep 3",
        gpu_memory_mib=8192,
        secret_env=[],
    )
    assert serializer.spec() == expected
    assert form.spec() == expected


def test_a_spec_is_recorded_as_it_asks(org: Org, fleet: Fleet) -> None:
    spec = GpuRequestSpec(
        project=org.project_a,
        flavor=fleet.l4_12g,
        gpu_count=2,
        image="registry.example.com/ml/pytorch:2.4",
        max_runtime_seconds=1800,
        command=["python", "train.py"],
        env={"EPOCHS": "3"},
        name="  sweep  ",
        gpu_memory_mib=8192,
    )
    request = submit_gpu_request(actor=org.dev_a, spec=spec)
    request.refresh_from_db()
    assert (request.project, request.team, request.owner) == (org.project_a, org.team_a, org.dev_a)
    assert (request.gpu_count, request.gpu_memory_mib, request.max_runtime_seconds) == (
        2,
        8192,
        1800,
    )
    assert (request.command, request.env, request.name) == (
        ["python", "train.py"],
        {"EPOCHS": "3"},
        "sweep",
    )
    assert request.gpu_cores_percent == fleet.l4_12g.gpu_cores_percent
