"""Classifying client errors into transient (retry with backoff) and permanent ones."""

from __future__ import annotations

import json

import pytest
import urllib3.connection
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException

from runtime.cluster.base import PermanentClusterError, TransientClusterError
from runtime.cluster.kubernetes import classify_api_exception


def api_error(status: int, reason: str = "", message: str = "") -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": status,
        }
    )
    return exc


@pytest.mark.parametrize(
    ("status", "reason", "kind"),
    [
        (400, "BadRequest", PermanentClusterError),
        (401, "Unauthorized", PermanentClusterError),
        (403, "Forbidden", PermanentClusterError),
        (404, "NotFound", PermanentClusterError),
        (409, "AlreadyExists", TransientClusterError),
        (409, "Conflict", TransientClusterError),
        (410, "Expired", TransientClusterError),
        (422, "Invalid", PermanentClusterError),
        (429, "TooManyRequests", TransientClusterError),
        (500, "InternalError", TransientClusterError),
        (502, "BadGateway", TransientClusterError),
        (503, "ServiceUnavailable", TransientClusterError),
        (504, "Timeout", TransientClusterError),
    ],
)
def test_api_status_codes(status: int, reason: str, kind: type) -> None:
    error = classify_api_exception(api_error(status, reason, "details here"))
    assert type(error) is kind
    assert error.status == status
    assert error.reason == reason
    assert "details here" in error.message


def test_invalid_object_keeps_the_servers_explanation() -> None:
    message = (
        'Job.batch "gpr-812-a1" is invalid: spec.template.spec.containers[0].image: Required value'
    )
    error = classify_api_exception(api_error(422, "Invalid", message))
    assert isinstance(error, PermanentClusterError)
    assert message in str(error)


def test_too_many_requests_carries_retry_after() -> None:
    exc = api_error(429, "TooManyRequests", "slow down")
    exc.headers = {"Retry-After": "3"}
    error = classify_api_exception(exc)
    assert isinstance(error, TransientClusterError)
    assert error.retry_after_seconds == 3.0


def test_forbidden_in_a_terminating_namespace_is_transient() -> None:
    message = (
        'jobs.batch "gpr-812-a1" is forbidden: unable to create new content in namespace '
        "gp-vision-detection because it is being terminated"
    )
    error = classify_api_exception(api_error(403, "Forbidden", message))
    assert isinstance(error, TransientClusterError)
    assert error.reason == "NamespaceTerminating"


def test_body_that_is_not_json_is_kept_as_the_message() -> None:
    exc = ApiException(status=502, reason="Bad Gateway")
    exc.body = "<html>upstream connect error</html>"
    error = classify_api_exception(exc)
    assert isinstance(error, TransientClusterError)
    assert "upstream connect error" in error.message


def test_api_exception_without_status_is_transient() -> None:
    assert isinstance(
        classify_api_exception(ApiException(reason="stream broke")), TransientClusterError
    )


def _pool() -> urllib3.HTTPConnectionPool:
    return urllib3.HTTPConnectionPool("api.cluster.example", 6443)


@pytest.mark.parametrize(
    "exc",
    [
        urllib3.exceptions.MaxRetryError(
            _pool(),
            "/api/v1/nodes",
            urllib3.exceptions.NewConnectionError(
                urllib3.connection.HTTPConnection("api.cluster.example", 6443), "Connection refused"
            ),
        ),
        urllib3.exceptions.ReadTimeoutError(_pool(), "/api/v1/nodes", "Read timed out."),
        urllib3.exceptions.ConnectTimeoutError(_pool(), "timed out"),
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError()),
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError("timed out"),
    ],
    ids=["max-retry-refused", "read-timeout", "connect-timeout", "protocol", "refused", "timeout"],
)
def test_transport_failures_are_transient(exc: BaseException) -> None:
    assert isinstance(classify_api_exception(exc), TransientClusterError)


@pytest.mark.parametrize(
    "exc",
    [
        urllib3.exceptions.MaxRetryError(
            _pool(), "/api/v1/nodes", urllib3.exceptions.SSLError("certificate verify failed")
        ),
        urllib3.exceptions.SSLError("certificate verify failed"),
        ConfigException("Invalid kube-config file. No configuration found."),
        ValueError("something unexpected"),
    ],
    ids=["max-retry-tls", "tls", "config", "unexpected"],
)
def test_configuration_and_tls_failures_are_permanent(exc: BaseException) -> None:
    assert isinstance(classify_api_exception(exc), PermanentClusterError)


def test_cluster_errors_pass_through_unchanged() -> None:
    error = TransientClusterError("already classified")
    assert classify_api_exception(error) is error
