"""A Prometheus HTTP API on loopback that answers from recorded series.

It holds, per metric, the answer Prometheus gives to the bare selector (every series with every
label), and answers the two query shapes the portal sends as Prometheus would: a selector with
`=~` matchers (fully anchored regular expressions; a missing label matches as ""), and
`group by (labels) (metric)`. Anything else is refused with Prometheus's error shape (400
`bad_data`). `fail_with(status)` makes it answer every query with that HTTP error.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

RECORDED = Path(__file__).parent.parent / "governance" / "prometheus"

_SELECTOR = re.compile(r"^(?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?P<matchers>[^}]*)\})?$")
_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)=~"([^"]*)"\s*$')
_GROUP = re.compile(r"^group by \((?P<labels>[^)]*)\) \((?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)\)$")


class FakePrometheus:
    """Recorded series behind a real HTTP server; `url` is its base address."""

    def __init__(self, series: dict[str, dict[str, Any]]) -> None:
        self.series = series
        self.queries: list[str] = []
        self.failure: int | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    @classmethod
    def recorded(cls, name: str) -> FakePrometheus:
        """The answers recorded in `tests/governance/prometheus/<name>.json`."""
        return cls(json.loads((RECORDED / f"{name}.json").read_text()))

    def fail_with(self, status: int | None) -> None:
        self.failure = status

    def answer(self, query: str) -> tuple[int, dict[str, Any]]:
        self.queries.append(query)
        if self.failure is not None:
            return self.failure, {"status": "error", "errorType": "unavailable", "error": "down"}
        if group := _GROUP.match(query):
            names = [name.strip() for name in group["labels"].split(",")]
            seen: dict[tuple[str, ...], dict[str, str]] = {}
            for item in self._result(group["metric"]):
                key = tuple(item["metric"].get(name, "") for name in names)
                seen[key] = {n: v for n, v in zip(names, key, strict=True) if v}
            return 200, self._vector([{"metric": m, "value": [0, "1"]} for m in seen.values()])
        if selector := _SELECTOR.match(query):
            matchers = []
            for text in filter(None, (selector["matchers"] or "").split(",")):
                matcher = _MATCHER.match(text)
                if matcher is None:
                    return 400, {"status": "error", "errorType": "bad_data", "error": text}
                matchers.append((matcher[1], re.compile(matcher[2])))
            return 200, self._vector(
                [
                    item
                    for item in self._result(selector["metric"])
                    if all(rx.fullmatch(item["metric"].get(n, "")) for n, rx in matchers)
                ]
            )
        return 400, {"status": "error", "errorType": "bad_data", "error": f"parse error: {query}"}

    def _result(self, metric: str) -> list[dict[str, Any]]:
        recorded = self.series.get(metric)
        return list(recorded["data"]["result"]) if recorded else []

    @staticmethod
    def _vector(result: list[dict[str, Any]]) -> dict[str, Any]:
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parsed = urlparse(self.path)
                if parsed.path != "/api/v1/query":
                    self.send_error(404)
                    return
                status, body = fake.answer(parse_qs(parsed.query).get("query", [""])[0])
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def serving(fake: FakePrometheus) -> Iterator[FakePrometheus]:
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
