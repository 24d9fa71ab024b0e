"""A small client of the portal's REST API: one session, the token, the one error shape.

Every refusal of the API has the shape `{"error": {"code", "message", "fields"}}`; it becomes an
`ApiError` carrying that message, which the command line prints before exiting non-zero.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import requests

from gpuctl import __version__

TIMEOUT_SECONDS = 30.0


class ApiError(Exception):
    """The API refused or could not be reached; `message` is the API's own when it gave one."""

    def __init__(
        self, message: str, *, status: int = 0, code: str = "", fields: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.fields = fields or {}

    def __str__(self) -> str:
        """The API's message, one line; a refused field it does not name gets a line of its
        own (the fields of a conflict are the object's state, which the message says)."""
        lines = [self.message]
        for name, problem in self.fields.items():
            text = " ".join(problem) if isinstance(problem, list) else str(problem)
            if self.status == 409 or not text or text == self.message:
                continue
            if f"{name}: " not in self.message:
                lines.append(f"  {name}: {text}")
        return "\n".join(lines)


def error_of(response: requests.Response) -> ApiError:
    """The API's error as an `ApiError`; a body not in the error shape is quoted short."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        return ApiError(
            str(error.get("message") or f"HTTP {response.status_code}"),
            status=response.status_code,
            code=str(error.get("code", "")),
            fields=error.get("fields") or {},
        )
    text = response.text.strip()[:200]
    return ApiError(f"HTTP {response.status_code}: {text}", status=response.status_code)


def refused_token(error: ApiError) -> ApiError:
    """A sent token that the API refused (revoked, expired, or its user deactivated): say what
    to do about it."""
    return ApiError(
        f"{error.message} The portal no longer accepts your token: run `gpuctl login`.",
        status=error.status,
        code=error.code,
    )


class PortalClient:
    """Calls to `<url>/api/v1/...` with `Authorization: Token <token>` when there is one."""

    def __init__(self, url: str, token: str = "", *, timeout: float = TIMEOUT_SECONDS) -> None:
        if not url:
            raise ApiError("No portal URL: run `gpuctl login` or set GPUCTL_URL.")
        self.base = url.rstrip("/") + "/api/v1/"
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"gpuctl/{__version__}"
        self.session.headers["Accept"] = "application/json"
        if token:
            self.session.headers["Authorization"] = f"Token {token}"

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        stream: bool = False,
        timeout: float | None = None,
    ) -> requests.Response:
        url = path if path.startswith("http") else self.base + path.lstrip("/")
        try:
            response = self.session.request(
                method,
                url,
                params=params,
                json=body,
                stream=stream,
                timeout=self.timeout if timeout is None else timeout,
            )
        except requests.RequestException as error:
            raise ApiError(f"Cannot reach {self.base}: {error}") from error
        if response.status_code == 401 and "Authorization" in self.session.headers:
            raise refused_token(error_of(response))
        if response.status_code >= 400:
            raise error_of(response)
        return response

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params or None).json()

    def post(self, path: str, body: Any = None) -> Any:
        response = self.call("POST", path, body=body if body is not None else {})
        return response.json() if response.content else None

    def list_all(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """Every row of a paginated list, following `next` links."""
        rows: list[dict[str, Any]] = []
        page: Any = self.get(path, **params)
        while True:
            if isinstance(page, list):
                return rows + page
            rows.extend(page.get("results", []))
            if not page.get("next"):
                return rows
            page = self.call("GET", page["next"]).json()

    def text(self, path: str, **params: Any) -> str:
        response = self.call("GET", path, params=params or None)
        return response.text

    def stream_lines(self, path: str, **params: Any) -> Iterator[str]:
        """A streamed text answer, line by line, as the server sends them (no read timeout)."""
        response = self.call("GET", path, params=params or None, stream=True, timeout=None)
        with response:
            for line in response.iter_lines(decode_unicode=True):
                yield line if isinstance(line, str) else line.decode()

    def login(self, username: str, password: str) -> dict[str, Any]:
        """A new personal token for `username` (POST auth/token/), named after this machine:
        logging in again from it replaces its previous token instead of adding one."""
        self.session.headers.pop("Authorization", None)
        name = f"gpuctl on {socket.gethostname()}"[:64]
        answer: dict[str, Any] = self.post(
            "auth/token/", {"username": username, "password": password, "name": name}
        )
        return answer
