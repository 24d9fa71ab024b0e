"""A fake API server behind the client's HTTP layer, for faults a test cannot provoke without one.

It replaces `ApiClient.rest_client`, so every call still goes through the real client: URL
building, body serialisation, response deserialisation into V1 models and `ApiException` for
non-2xx answers. It knows just enough REST to hold objects by path (create, read, list with
equality label selectors and paging, replace, merge patch, delete, delete-collection) and has no
controllers, admission or defaulting: a real API server test-bed is for that.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client as k8s
from kubernetes.client.rest import RESTResponse

PLURALS = frozenset(
    {
        "pods",
        "jobs",
        "deployments",
        "services",
        "namespaces",
        "nodes",
        "resourcequotas",
        "limitranges",
        "priorityclasses",
    }
)


@dataclass
class Fault:
    """Answer the next matching request with `status` instead of serving it."""

    method: str
    path_pattern: str
    status: int
    reason: str = ""
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """JSON merge patch (RFC 7386): null deletes, dicts merge, everything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeApiServer:
    """In-memory objects keyed by API path, served through the real client."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        self.urls: list[str] = []
        self._version = 100
        self.username = "system:serviceaccount:gpu-portal:gpu-portal-worker"

    # Test helpers ----------------------------------------------------------------------------

    def api_client(self) -> k8s.ApiClient:
        api = k8s.ApiClient(k8s.Configuration())
        api.rest_client = self  # type: ignore[assignment]
        return api

    def put(self, path: str, obj: dict[str, Any]) -> None:
        """Seed an object as if a controller or another client had made it."""
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        self.objects[path] = obj

    def fail(self, method: str, path_pattern: str, status: int, **kwargs: Any) -> None:
        self.faults.append(Fault(method, path_pattern, status, **kwargs))

    def calls(self, method: str | None = None) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.requests if method is None or m == method]

    # The REST client interface the ApiClient calls -------------------------------------------

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> RESTResponse:
        parts = urlsplit(url)
        path = parts.path.rstrip("/")
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.requests.append((method, path))
        self.urls.append(f"{method} {path}?{parts.query}")
        for fault in self.faults:
            if fault.method == method and re.search(fault.path_pattern, path):
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
                return self._status(
                    fault.status, fault.reason, fault.message, headers=fault.headers
                )
        handler = getattr(self, f"_{method.lower()}")
        response: RESTResponse = handler(path, query, body)
        return response

    # Verbs -----------------------------------------------------------------------------------

    def _post(self, path: str, query: dict[str, str], body: dict[str, Any]) -> RESTResponse:
        if path.endswith("/selfsubjectreviews"):
            return self._ok(
                {**body, "status": {"userInfo": {"username": self.username}}}, status=201
            )
        if path.endswith("/selfsubjectaccessreviews"):
            return self._ok({**body, "status": {"allowed": True}}, status=201)
        name = body["metadata"]["name"]
        target = f"{path}/{name}"
        if target in self.objects:
            kind = body.get("kind", "object")
            return self._status(409, "AlreadyExists", f'{kind} "{name}" already exists')
        namespace = re.search(r"/namespaces/([^/]+)/", path)
        if namespace and f"/api/v1/namespaces/{namespace.group(1)}" not in self.objects:
            return self._status(404, "NotFound", f'namespaces "{namespace.group(1)}" not found')
        obj = copy.deepcopy(body)
        obj["metadata"].update(
            resourceVersion=self._next_version(),
            uid=f"uid-{len(self.objects)}",
            creationTimestamp="2026-12-01T10:00:00Z",
        )
        self.objects[target] = obj
        return self._ok(obj, status=201)

    def _get(self, path: str, query: dict[str, str], body: Any) -> RESTResponse:
        if path in self.objects:
            return self._ok(self.objects[path])
        resource = path.rsplit("/", 1)[-1]
        if resource not in PLURALS:
            return self._status(404, "NotFound", f"{path} not found")
        items = [obj for p, obj in sorted(self.objects.items()) if self._in_collection(p, path)]
        selector = query.get("labelSelector", "")
        items = [o for o in items if _matches(o["metadata"].get("labels") or {}, selector)]
        start = int(query.get("continue", "0") or 0)
        limit = int(query.get("limit", "0") or 0)
        page = items[start : start + limit] if limit else items[start:]
        metadata: dict[str, Any] = {"resourceVersion": str(self._version)}
        if limit and start + limit < len(items):
            metadata["continue"] = str(start + limit)
        return self._ok({"apiVersion": "v1", "kind": "List", "metadata": metadata, "items": page})

    def _put(self, path: str, query: dict[str, str], body: dict[str, Any]) -> RESTResponse:
        current = self.objects.get(path)
        if current is None:
            return self._status(404, "NotFound", f"{path} not found")
        wanted = body["metadata"].get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            return self._status(409, "Conflict", "the object has been modified")
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = self._next_version()
        self.objects[path] = obj
        return self._ok(obj)

    def _patch(self, path: str, query: dict[str, str], body: dict[str, Any]) -> RESTResponse:
        current = self.objects.get(path)
        if current is None:
            return self._status(404, "NotFound", f"{path} not found")
        _merge(current, body)
        current["metadata"]["resourceVersion"] = self._next_version()
        return self._ok(current)

    def _delete(self, path: str, query: dict[str, str], body: Any) -> RESTResponse:
        if path in self.objects:
            self.objects.pop(path)
            return self._status(200, "Success", "deleted")
        if path.rsplit("/", 1)[-1] in PLURALS:
            selector = query.get("labelSelector", "")
            for p in [p for p in self.objects if self._in_collection(p, path)]:
                if _matches(self.objects[p]["metadata"].get("labels") or {}, selector):
                    self.objects.pop(p)
            return self._status(200, "Success", "deleted")
        return self._status(404, "NotFound", f"{path} not found")

    # Plumbing --------------------------------------------------------------------------------

    @staticmethod
    def _in_collection(object_path: str, collection: str) -> bool:
        if object_path.rsplit("/", 1)[0] == collection:
            return True
        group, resource = collection.rsplit("/", 1)
        if "/namespaces/" in collection:
            return False
        return bool(
            re.fullmatch(rf"{re.escape(group)}/namespaces/[^/]+/{resource}/[^/]+", object_path)
        )

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    @staticmethod
    def _response(status: int, reason: str, payload: Any, headers: dict[str, str]) -> RESTResponse:
        raw = SimpleNamespace(
            status=status,
            reason=reason,
            data=json.dumps(payload).encode(),
            headers={"content-type": "application/json", **headers},
        )
        response = RESTResponse(raw)
        response.read()
        return response

    def _ok(self, obj: dict[str, Any], status: int = 200) -> RESTResponse:
        return self._response(status, "OK", obj, {})

    def _status(
        self, code: int, reason: str, message: str, headers: dict[str, str] | None = None
    ) -> RESTResponse:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Success" if code < 300 else "Failure",
            "reason": reason,
            "message": message,
            "code": code,
            "metadata": {},
        }
        return self._response(code, reason, body, headers or {})
