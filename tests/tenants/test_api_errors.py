"""Every error under /api/ answers the one error shape, whatever DEBUG says."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client

from tests.support.personas import Org, api_client
from tests.tenants.urls_failing import SECRET

pytestmark = pytest.mark.django_db

DEBUG_MODES = [pytest.param(True, id="debug-on"), pytest.param(False, id="debug-off")]


def assert_error_shape(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "fields"}
    assert body["error"]["code"] == code
    assert len(response.content) == int(response.get("Content-Length", len(response.content)))
    return body["error"]


@pytest.mark.parametrize("debug", DEBUG_MODES)
def test_unknown_api_path_answers_404_in_the_error_shape(debug: bool, settings: Any) -> None:
    settings.DEBUG = debug
    response = Client().get("/api/v1/no-such-thing/")
    error = assert_error_shape(response, 404, "not_found")
    assert error["message"] == "Not found."


@pytest.mark.parametrize("debug", DEBUG_MODES)
def test_unknown_api_path_answers_404_to_a_signed_in_caller(
    debug: bool, settings: Any, org: Org
) -> None:
    settings.DEBUG = debug
    response = api_client(org.dev_a).get("/api/v1/no-such-thing/")
    assert_error_shape(response, 404, "not_found")


@pytest.mark.parametrize("debug", DEBUG_MODES)
@pytest.mark.parametrize("path", ["/api/v1/failing/", "/api/v1/failing-plain/"])
def test_unexpected_exception_answers_500_in_the_error_shape_and_is_logged(
    path: str, debug: bool, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.DEBUG = debug
    settings.ROOT_URLCONF = "tests.tenants.urls_failing"
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = Client(raise_request_exception=False).get(path)
    error = assert_error_shape(response, 500, "server_error")
    assert "logged" in error["message"]
    assert SECRET not in response.content.decode()
    assert "Traceback" not in response.content.decode()
    logged = [record for record in caplog.records if record.exc_info]
    assert logged and logged[0].exc_info is not None
    assert SECRET in str(logged[0].exc_info[1])


def test_unexpected_exception_still_reaches_the_test_client(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.tenants.urls_failing"
    with pytest.raises(RuntimeError, match="secret-internal-detail"):
        Client().get("/api/v1/failing/")


@pytest.mark.parametrize("debug", DEBUG_MODES)
def test_wrong_method_on_a_plain_api_view_answers_405_in_the_error_shape(
    debug: bool, settings: Any
) -> None:
    settings.DEBUG = debug
    # Signing in accepts POST only.
    response = Client().get("/api/v1/auth/token/")
    assert_error_shape(response, 405, "method_not_allowed")


@pytest.mark.parametrize("debug", DEBUG_MODES)
def test_pages_outside_the_api_keep_their_html(debug: bool, settings: Any) -> None:
    settings.DEBUG = debug
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
