from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient
from rest_framework.throttling import ScopedRateThrottle, SimpleRateThrottle

from tenants.models import AuditEvent
from tests.scheduling.conftest import Fleet
from tests.scheduling.helpers import request_body
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def test_token_endpoint_is_rate_limited_with_retry_after(org: Org) -> None:
    client = APIClient()
    body = {"username": "dev_a", "password": "wrong"}
    statuses = [
        client.post(reverse("auth-token"), body, format="json").status_code for _ in range(12)
    ]
    assert statuses[:10] == [400] * 10
    throttled = client.post(reverse("auth-token"), body, format="json")
    assert throttled.status_code == 429
    assert int(throttled["Retry-After"]) > 0
    assert throttled.json()["error"]["code"] == "throttled"


def test_web_login_is_rate_limited_and_audited(org: Org) -> None:
    client = Client()
    for _ in range(10):
        client.post(reverse("login"), {"username": "dev_a", "password": "wrong"})
    response = client.post(reverse("login"), {"username": "dev_a", "password": "pw-dev_a"})
    assert response.status_code == 429 and response["Retry-After"] == "60"
    assert AuditEvent.objects.filter(action="auth.login_throttled").exists()


def test_request_creation_is_rate_limited_per_user(
    org: Org, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DRF reads the rates into a class attribute at import; monkeypatch puts the original back.
    rates = {**SimpleRateThrottle.THROTTLE_RATES, "request-create": "3/minute"}
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", rates)
    client = api_client(org.dev_a)
    url = reverse("gpu-request-list")
    codes = [
        client.post(url, request_body(org.project_a, fleet.l4_6g), format="json").status_code
        for _ in range(4)
    ]
    assert codes == [201, 201, 201, 429]
    assert client.get(url).status_code == 200  # reading is not limited
    other = api_client(org.dev_b)
    assert (
        other.post(url, request_body(org.project_b, fleet.l4_6g), format="json").status_code == 201
    )


def test_throttle_rates_are_the_settings_again(settings: Any) -> None:
    """The test above leaves no rate behind for the tests after it."""
    configured = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert configured == SimpleRateThrottle.THROTTLE_RATES
    assert "THROTTLE_RATES" not in vars(ScopedRateThrottle)


@pytest.mark.parametrize("route", ["usage", "chargeback"])
def test_report_exports_are_rate_limited_per_user_but_reading_is_not(
    org: Org, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rates = {**SimpleRateThrottle.THROTTLE_RATES, "export": "2/minute"}
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", rates)
    client = api_client(org.finance)
    url = reverse(route)
    codes = [client.get(url, {"export": "csv"}).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    throttled = client.get(url, {"export": "xlsx"})
    assert throttled.status_code == 429 and int(throttled["Retry-After"]) > 0
    assert throttled.json()["error"]["code"] == "throttled"
    assert client.get(url).status_code == 200  # the JSON report is not an export
    assert api_client(org.lead_a).get(url, {"export": "csv"}).status_code == 200
