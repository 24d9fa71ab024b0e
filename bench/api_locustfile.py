"""Locust scenario for `bench.api`: which calls a simulated API client makes, and how often.

The fixture (BENCH_API_FIXTURE, written by bench.api) holds one entry per API user: its token,
its projects, the flavor it may request and the ids of requests it can see. BENCH_API_SCENARIO
picks the mix: `mixed` (70 % list, 20 % detail, 10 % create), or one call only (`list`,
`create`, `summary`, `baseline`) to measure that call's throughput on its own.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from typing import Any

from locust import FastHttpUser, constant, task

with open(os.environ["BENCH_API_FIXTURE"], encoding="utf-8") as _fixture:
    FIXTURE: list[dict[str, Any]] = json.load(_fixture)
SCENARIO = os.environ.get("BENCH_API_SCENARIO", "mixed")
WEIGHTS = {
    "mixed": {"list": 70, "detail": 20, "create": 10},
    "list": {"list": 1},
    "create": {"create": 1},
    "summary": {"summary": 1},
    "baseline": {"baseline": 1},
}[SCENARIO]
_identities = itertools.cycle(FIXTURE)


class ApiClient(FastHttpUser):
    """One signed-in API client calling back to back (no think time: closed-loop throughput)."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.identity = next(_identities)
        self.headers = {"Authorization": f"Token {self.identity['token']}"}
        self.rng = random.Random(self.identity["token"])

    def _get(self, url: str, name: str) -> None:
        with self.client.get(url, headers=self.headers, name=name, catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    @task(WEIGHTS.get("list", 0))
    def list_requests(self) -> None:
        page = self.rng.randint(1, self.identity["pages"])
        self._get(f"/api/v1/requests/?page={page}", "list")

    @task(WEIGHTS.get("detail", 0))
    def request_detail(self) -> None:
        self._get(f"/api/v1/requests/{self.rng.choice(self.identity['request_ids'])}/", "detail")

    @task(WEIGHTS.get("create", 0))
    def create_request(self) -> None:
        body = {
            "project": self.rng.choice(self.identity["project_ids"]),
            "flavor": self.identity["flavor_id"],
            "gpu_count": 1,
            "kind": "job",
            "image": "registry.example.com/train:1",
            "command": ["python", "train.py"],
            "max_runtime_seconds": 3600,
        }
        with self.client.post(
            "/api/v1/requests/", json=body, headers=self.headers, name="create", catch_response=True
        ) as r:
            if r.status_code != 201:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    @task(WEIGHTS.get("summary", 0))
    def summary(self) -> None:
        self._get("/api/v1/requests/summary/", "summary")

    @task(WEIGHTS.get("baseline", 0))
    def baseline(self) -> None:
        page = self.rng.randint(1, self.identity["pages"])
        self._get(f"/bench/baseline/requests/?page={page}", "baseline")
