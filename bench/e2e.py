"""End-to-end benchmark on the test bed: the portal's whole path against kube-scheduler alone.

    .venv/bin/python -m bench.e2e                  # 2,000 + 500 requests, 313 kwok nodes x 8 GPUs
    .venv/bin/python -m bench.e2e --requests 200   # a quick run

One control plane (scripts/testbed: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok), one fleet of `ceil((N + M) / 8)` kwok nodes with 8 `nvidia.com/gpu` each
in the `a100-training` pool (N the burst, M the open loop's arrivals), then the two sides take
turns on the same nodes, in rounds (`--rounds`, 2): portal, direct, portal, direct. Both sides
create the same objects, batch/v1 Jobs of one pod each, so they differ only by the portal.

1. **portal** (each round from scratch): the product as deployed, on loopback. PostgreSQL
   database `portal_bench_e2e` (recreated, migrated, the demo organisation and fleet; the
   team's A100 quota raised to N + M), Redis db 12 as the broker, gunicorn (`portal.wsgi`, one
   sync worker per core) and two Celery workers as the Helm chart runs them, one per queue
   (portal/celery.py): the `celery` queue (launches, notifications; prefork `--concurrency 4`)
   and the `periodic` queue (the cycle, workload and inventory sync, the sweeps;
   `--concurrency 2`, with embedded beat) and the workload follower (`manage.py
   follow_workloads`, past its first round before the clients start; `--no-follower` leaves it
   out), with `CLUSTER_BACKEND=kubernetes` and the
   test bed's least-privilege `portal.kubeconfig`. The burst: 8 client threads each `POST
   /api/v1/requests/` (one whole A100 card, a developer's token) and then, as the team lead,
   `POST /api/v1/requests/<id>/approve/` (whole cards in the training tier need the lead), until N
   are approved. From then on only the worker acts: the approval queues a cycle, the cycle
   admits and queues launches, each launch task creates the Job, the Job controller its pod,
   kube-scheduler binds it to the node the engine chose (hostname selector), kwok runs it. Once
   the N pods run, the open loop: M more create + approve pairs arriving as a Poisson process at
   `--rate` a second, each on its own thread whatever the earlier ones are doing. The worker
   then stops, and the portal's Jobs and pods are deleted until none is left.
2. **direct**: the same Jobs straight through the API server, in a namespace of their own (no
   quota): each a copy of one of the portal's Jobs as the API server holds it, its pod's
   resources as admitted (the LimitRange defaults), with its tolerations, pool node selector,
   GPU-product affinity and priority class, minus the node pin, the portal's labels and the
   project's secrets and volumes: the Job controller and kube-scheduler alone. The burst from
   8 client threads, then the open loop at the same rate; then its Jobs are deleted.
3. **dra** (left out with `--no-dra`): as many kwok nodes again join with their 8 A100s
   published only as DRA devices (scripts/testbed/dra.py), and the direct side's Jobs ask for
   one card each through the ResourceClaimTemplate a DRA pool compiles to, one round:
   kube-scheduler and the resourceclaim controller alone (`e2e.dra_pods_per_second`).

Both sides are watched (one label-selected pod watch from a resourceVersion, no polling LISTs);
a pod counts once its phase is Running. A wait that ends before every pod of a side runs
(`--timeout`) ends the run with exit status 1 and one `incomplete` line saying which side and
how many, and no figures. Rate = the burst's pods / (its last Running - its first client
call), the mean of the rounds; the burst's latency = each request's approval (the API's answer;
for the direct side, the Job create's) to its pod Running: with N arriving at once it measures
how long the backlog takes to drain. The open loop's latency is the same span with requests
arriving one by one at a set rate onto a busy fleet: the latency a user sees. Pods stay running
(the kwok stages are copied with `pod-complete` delayed to an hour), so both sides hold the
same pods at the end. The time split is printed from the audit trail (queued, admitted,
launching), the watch (pod created, bound, running) and the workers' logs (task durations).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from bench.figures import emit, recreate_database
from runtime.cluster.base import WorkloadSpec
from runtime.cluster.dra_manifests import CLAIM_NAME, resource_claim_template
from runtime.cluster.gpu_models import gpu_products_for, merged_aliases
from scripts.testbed.cluster import (
    POOL_LABEL,
    STAGES_FILE,
    NodeShape,
    Testbed,
    hami_register,
    missing_binaries,
    whole_card_node,
)
from scripts.testbed.dra import DraCards
from scripts.testbed.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://portal:portal@127.0.0.1:5432/portal_bench_e2e"
DEFAULT_REDIS = "redis://127.0.0.1:6379/12"
POOL = "a100-training"
GPUS_PER_NODE = 8
DRA_POOL = "e2e-dra"
MANAGED = "app.kubernetes.io/managed-by=gpu-portal"
REQUEST_LABEL = "gpu-portal/request"
# Open loop: threads making the calls, enough that an arrival never waits for an earlier one.
OPEN_LOOP_THREADS = 64

NOTE = (
    "Both sides create batch/v1 Jobs of one pod each, in rounds portal, direct, portal, direct. "
    "portal: from the first POST /api/v1/requests/ to the last burst pod Running; includes the "
    "HTTP API (create + lead approval), the database, the broker, the scheduling cycle, the "
    "launch tasks (priority classes, namespace, quota, LimitRange, Job), the Job controller, "
    "kube-scheduler and kwok. direct: from the first Job create to the last burst pod Running; "
    "includes the API server's Job create, the Job controller, kube-scheduler and kwok. Burst "
    "latencies measure backlog drain; the open loop's (Poisson arrivals at `rate`/s) the "
    "latency of one request on a busy fleet. Both: one 2-core machine shared by every process; "
    "excluded: test-bed start, node registration, database seeding, inventory sync, server and "
    "worker start-up, deleting a side's Jobs, the portal's later status sync."
)


def log(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 2,000 values is the 1,980th)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def long_running_stages(directory: Path) -> Path:
    """The test bed's kwok stages with Job pods completing after an hour, not 1-3 s, so the
    portal's pods stay running like the direct side's bare pods."""
    text = STAGES_FILE.read_text()
    start = text.index("name: pod-complete")
    head, tail = text[:start], text[start:]
    tail = tail.replace("durationMilliseconds: 1000", "durationMilliseconds: 3600000", 1)
    # kwok reads a jitter below the duration as the delay itself: raise both.
    tail = tail.replace(
        "jitterDurationMilliseconds: 2000", "jitterDurationMilliseconds: 3600000", 1
    )
    path = directory / "kwok-stages-long.yaml"
    path.write_text(head + tail)
    return path


# Watching pods --------------------------------------------------------------------------------


class PodWatch:
    """One label-selected pod watch from a resourceVersion; records, per pod, the wall time it
    was first seen created, bound to a node and Running (raw JSON lines, no model objects)."""

    def __init__(self, core: Any, *, namespace: str | None, selector: str) -> None:
        self.core = core
        self.namespace = namespace
        self.selector = selector
        self.added: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.first_pod: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._changed = threading.Condition()
        page = self._list(limit=1)
        self.resource_version = page["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _list(self, **kwargs: Any) -> dict[str, Any]:
        if self.namespace:
            response = self.core.list_namespaced_pod(
                self.namespace, label_selector=self.selector, _preload_content=False, **kwargs
            )
        else:
            response = self.core.list_pod_for_all_namespaces(
                label_selector=self.selector, _preload_content=False, **kwargs
            )
        result: dict[str, Any] = json.loads(response.data)
        return result

    def _stream(self) -> Any:
        kwargs = {
            "label_selector": self.selector,
            "watch": True,
            "resource_version": self.resource_version,
            "allow_watch_bookmarks": True,
            "timeout_seconds": 3600,
            "_preload_content": False,
        }
        if self.namespace:
            return self.core.list_namespaced_pod(self.namespace, **kwargs)
        return self.core.list_pod_for_all_namespaces(**kwargs)

    def _run(self) -> None:
        while not self._stop.is_set():
            response = self._stream()
            buffer = b""
            try:
                for chunk in response.stream(amt=65536, decode_content=False):
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            self._event(json.loads(line))
                    if self._stop.is_set():
                        return
            except Exception as exc:  # noqa: BLE001 - reconnect from the last version
                if self._stop.is_set():
                    return
                log(f"pod watch reconnects after {exc!r}")
            finally:
                response.release_conn()

    def _event(self, event: dict[str, Any]) -> None:
        now = time.time()
        obj = event["object"]
        if event["type"] == "ERROR":
            raise RuntimeError(f"pod watch error: {obj}")
        self.resource_version = obj["metadata"]["resourceVersion"]
        if event["type"] in ("BOOKMARK", "DELETED"):
            return
        name = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        with self._changed:
            if name not in self.added:
                self.added[name] = now
                self.labels[name] = obj["metadata"].get("labels") or {}
                if self.first_pod is None:
                    self.first_pod = obj
            if obj["spec"].get("nodeName") and name not in self.bound:
                self.bound[name] = now
            if obj.get("status", {}).get("phase") == "Running" and name not in self.running:
                self.running[name] = now
                self._changed.notify_all()

    def wait_running(self, count: int, *, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.running) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 5.0))
        return True

    def stop(self) -> None:
        self._stop.set()


# The portal's side ----------------------------------------------------------------------------


def server_environment(url: str, redis_url: str, kubeconfig: Path) -> dict[str, str]:
    """What gunicorn, the worker and this process run with: production mode on loopback."""
    return {
        "DATABASE_URL": url,
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DEBUG": "false",
        "SECRET_KEY": "bench-e2e-only-" + "x" * 40,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        # The per-user creation limit (120/minute) would measure the throttle.
        "REQUEST_CREATE_RATE": "1000000/minute",
        "CONN_MAX_AGE": "60",
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "CLUSTER_BACKEND": "kubernetes",
        "KUBECONFIG": str(kubeconfig),
        # Idle reclaim and utilisation samples need DCGM, which kwok nodes do not have.
        "RECLAIM_INTERVAL_SECONDS": "3600",
        "SAMPLE_INTERVAL_SECONDS": "3600",
    }


def seed(requests: int) -> dict[str, Any]:
    """The demo organisation and fleet, the team's A100 quota raised to `requests` (the burst
    and the open loop), the demo's
    database-only nodes removed (the cluster's inventory replaces them), one token each for a
    developer and the team lead."""
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from scheduling.demo import seed_demo_fleet
    from scheduling.models import ApprovalRule, Flavor, Node, Quota
    from tenants.models import Project
    from tenants.services.organisation import seed_demo_organisation

    teams = seed_demo_organisation(password="bench")
    seed_demo_fleet(teams=teams)
    Node.objects.all().delete()
    flavor = Flavor.objects.get(slug="a100-80g")
    team = teams["vision"]
    Quota.objects.filter(team=team, flavor=flavor).update(guaranteed=requests, limit=requests)
    ApprovalRule.objects.filter(tier=flavor.pool.tier).update(lead_approves_whole_cards=True)
    users = get_user_model().objects
    project = Project.objects.filter(team=team).order_by("pk").first()
    assert project is not None
    return {
        "developer": AuthToken.objects.create(users.get(username="alice"))[1],
        "lead": AuthToken.objects.create(users.get(username="bob"))[1],
        "project": project.pk,
        "namespace": project.namespace,
        "flavor": flavor.pk,
    }


def ready_cluster(bed: Any) -> dict[str, int]:
    """The cluster's inventory read into the database, and the seeded projects as the portal
    leaves them once created and given their quota (the seed writes rows directly): their
    namespaces, quotas and the priority classes ready on the cluster. Returns the inventory's
    counts."""
    from runtime.cluster.kubernetes import KubernetesClusterBackend
    from runtime.services.execution import prepare_projects
    from runtime.services.inventory import apply_inventory
    from tenants.models import Project

    backend = KubernetesClusterBackend(kubeconfig=str(bed.portal_kubeconfig))
    counts = apply_inventory(backend.sync_inventory())
    project_ids = list(Project.objects.values_list("pk", flat=True))
    prepare_projects(project_ids=project_ids, backend=backend, cluster=None)
    return counts


def start_gunicorn(env: dict[str, str], port: int, workers: int) -> subprocess.Popen[bytes]:
    import urllib.request

    server = subprocess.Popen(  # noqa: S603 - our own argv
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "portal.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--worker-class",
            "sync",
            "--backlog",
            "2048",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()  # noqa: S310
            return server
        except OSError:
            time.sleep(0.3)
    stop_process(server)
    raise SystemExit("gunicorn did not answer /healthz within 60 s")


def start_worker(
    env: dict[str, str], log_path: Path, concurrency: int, *, queue: str, beat: bool
) -> subprocess.Popen[bytes]:
    """A Celery worker consuming `queue`, named after it; with `beat`, beat runs inside it."""
    schedule = log_path.parent / "beat-schedule"
    command = [
        sys.executable, "-m", "celery", "-A", "portal", "worker",
        "-Q", queue, "-n", f"{queue}@%h",
        *(["--beat", "--schedule", str(schedule)] if beat else []),
        "--loglevel", "info", "--concurrency", str(concurrency),
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip
    with log_path.open("ab") as out:
        worker = subprocess.Popen(  # noqa: S603 - our own argv
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return started(
        worker, lambda: " ready." in log_path.read_text(errors="replace"), log_path, "the worker"
    )


def start_follower(
    env: dict[str, str], log_path: Path, enabled: bool
) -> subprocess.Popen[bytes] | None:
    """The workload follower as the Helm chart runs it (`manage.py follow_workloads`), returned
    once it has followed every cluster for a round (its heartbeat is in the cache): a running
    portal's follower is past its start, so the users do not wait on it. None with `enabled`
    false (`--no-follower`), so the periodic sync moves every request."""
    if not enabled:
        return None
    from runtime.services.workload_follower import is_followed
    from scheduling.models import Cluster

    with log_path.open("ab") as out:
        follower = subprocess.Popen(  # noqa: S603 - our own argv
            [sys.executable, "manage.py", "follow_workloads"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    clusters = list(Cluster.objects.all())
    return started(
        follower, lambda: all(is_followed(c) for c in clusters), log_path, "the follower"
    )


def started(
    process: subprocess.Popen[bytes], ready: Callable[[], bool], log_path: Path, what: str
) -> subprocess.Popen[bytes]:
    """`process` once `ready()` says so, within 90 s; otherwise it is stopped and the run ends
    with the end of its log."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if ready():
            return process
        if process.poll() is not None:
            break
        time.sleep(0.3)
    stop_process(process)
    raise SystemExit(f"{what} did not start:\n{log_path.read_text()[-3000:]}")


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(10)


class Incomplete(Exception):  # noqa: N818 - a run's outcome, not a programming error
    """Not every pod of a side reached Running within the deadline: the run reports no figures."""


def poisson_offsets(count: int, rate: float, seed: int) -> list[float]:
    """Arrival times (seconds from the start) of `count` calls arriving at `rate` a second, the
    gaps exponential (a Poisson process), the same for the same seed."""
    rng = random.Random(seed)
    offsets, now = [], 0.0
    for _ in range(count):
        now += rng.expovariate(rate)
        offsets.append(now)
    return offsets


def open_loop(call: Callable[[int], None], offsets: Sequence[float]) -> float:
    """Make call(i) at offsets[i] seconds from now whatever the earlier calls are doing (open
    loop: arrivals do not wait for answers); returns the latest start behind its schedule."""
    lags: list[float] = []

    def arrive(index: int) -> None:
        delay = start + offsets[index] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        lags.append(max(0.0, time.monotonic() - start - offsets[index]))
        call(index)

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=OPEN_LOOP_THREADS) as pool:
        list(pool.map(arrive, range(len(offsets))))
    return max(lags, default=0.0)


def closed_loop(call: Callable[[int], None], count: int, clients: int) -> None:
    """`clients` threads each making its next call as soon as its last one is answered."""
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(call, range(count)))


class Submitter:
    """One request's create and, as the team lead, its approval (one HTTP session per thread);
    `approved` says, per request id, when its approval was answered."""

    def __init__(self, host: str, ids: dict[str, Any]) -> None:
        self.host = host
        self.ids = ids
        self.approved: dict[int, float] = {}
        self._local = threading.local()
        self.body = {
            "project": ids["project"],
            "flavor": ids["flavor"],
            "gpu_count": 1,
            "kind": "job",
            "image": "registry.example.com/ml/pytorch:2.4",
            "command": ["python", "train.py"],
            "env": {"EPOCHS": "3"},
            "max_runtime_seconds": 3600,
            "priority": "normal",
            "reason": "end-to-end benchmark",
        }

    def __call__(self, _: int) -> None:
        import requests as http

        if not hasattr(self._local, "session"):
            self._local.session = http.Session()
        s = self._local.session
        created = s.post(
            f"{self.host}/api/v1/requests/",
            json=self.body,
            headers={"Authorization": f"Token {self.ids['developer']}"},
            timeout=60,
        )
        if created.status_code != 201:
            raise RuntimeError(f"create answered {created.status_code}: {created.text[:300]}")
        pk = int(created.json()["id"])
        answer = s.post(
            f"{self.host}/api/v1/requests/{pk}/approve/",
            json={},
            headers={"Authorization": f"Token {self.ids['lead']}"},
            timeout=60,
        )
        if answer.status_code != 200:
            raise RuntimeError(f"approve answered {answer.status_code}: {answer.text[:300]}")
        self.approved[pk] = time.time()


def audit_times(
    ids: list[int], states: Sequence[str] = ("queued", "admitted", "launching")
) -> dict[str, dict[int, float]]:
    """When each request first reached each of `states` (by default: was queued, admitted and
    began launching), from the audit trail."""
    from tenants.models import AuditEvent

    times: dict[str, dict[int, float]] = {state: {} for state in states}
    rows = AuditEvent.objects.filter(
        action__in=[f"request.{s}" for s in times],
        target_type="GpuRequest",
        target_id__in=[str(i) for i in ids],
    ).values_list("action", "target_id", "occurred_at")
    for action, target, occurred in rows:
        bucket = times[action.removeprefix("request.")]
        pk = int(target)
        bucket[pk] = min(bucket.get(pk, math.inf), occurred.timestamp())
    return times


TASK_LINE = re.compile(r"Task ([\w.]+)\[[^\]]+\] succeeded in ([0-9.]+)s")


def task_durations(*log_paths: Path) -> dict[str, list[float]]:
    durations: dict[str, list[float]] = {}
    for log_path in log_paths:
        for match in TASK_LINE.finditer(log_path.read_text(errors="replace")):
            durations.setdefault(match.group(1), []).append(float(match.group(2)))
    return durations


def split(name: str, starts: dict[Any, float], ends: dict[Any, float]) -> str:
    gaps = [ends[k] - starts[k] for k in starts if k in ends]
    if not gaps:
        return f"{name}: none"
    return (
        f"{name}: p50 {statistics.median(gaps):.2f}s p99 {percentile(gaps, 0.99):.2f}s "
        f"max {max(gaps):.2f}s (n={len(gaps)})"
    )


def wait_all(watch: PodWatch, count: int, timeout: float, what: str, started: float) -> None:
    """Wait until `count` pods of `watch` run; Incomplete (no figures) if not in time."""
    done = watch.wait_running(count, timeout=timeout)
    log(
        f"{what}: {len(watch.running)} of {count} pods running {time.time() - started:.1f}s "
        "after the first call" + ("" if done else f" (not all within {timeout:.0f} s)")
    )
    if not done:
        raise Incomplete(
            f"{what}: {len(watch.running)} of {count} pods Running within {timeout:.0f} s"
        )


def side_figures(
    pods: dict[Any, float], started: float, starts: dict[Any, float], running: dict[Any, float]
) -> dict[str, float]:
    """The burst's rate over its own pods (first call to last Running) and each pod's latency
    from `starts` (approval answered, or create answered) to Running."""
    last = max(pods.values())
    latencies = [running[k] - starts[k] for k in starts if k in running]
    return {
        "pods": len(pods),
        "seconds": last - started,
        "rate": len(pods) / (last - started),
        "latencies": latencies,  # type: ignore[dict-item]
    }


def portal_side(
    bed: Testbed, options: argparse.Namespace, workdir: Path, round_no: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One round of the portal: a fresh database, server and workers; the burst, then the open
    loop; returns the figures and one of the portal's Jobs as the API server holds it."""
    from kubernetes import client as k8s

    side = f"portal round {round_no}"
    url = os.environ.get("BENCH_E2E_DATABASE_URL", DEFAULT_URL)
    redis_url = os.environ.get("BENCH_E2E_REDIS_URL", DEFAULT_REDIS)
    settings_env = server_environment(url, redis_url, bed.portal_kubeconfig)
    os.environ.update(settings_env)
    env = {
        **os.environ,
        **settings_env,
        "PYTHONPATH": str(ROOT),
        "SCHEDULING_CYCLE_SECONDS": str(options.cycle_seconds),
        "WORKLOAD_SYNC_SECONDS": str(options.sync_seconds),
    }

    # 1. A fresh database and broker, the organisation, the cluster's inventory.
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    connections.close_all()
    recreate_database(url)
    call_command("migrate", verbosity=0)
    ids = seed(options.requests + options.open_requests)
    log(f"{side}: inventory {ready_cluster(bed)}")
    connections.close_all()

    # 2. The server and the workers, one per queue.
    port = free_port()
    host = f"http://127.0.0.1:{port}"
    server = start_gunicorn(env, port, options.web_workers)
    worker_log = workdir / f"worker-{round_no}.log"
    periodic_log = workdir / f"periodic-worker-{round_no}.log"
    worker = start_worker(env, worker_log, options.worker_concurrency, queue="celery", beat=False)
    periodic = start_worker(
        env, periodic_log, options.periodic_concurrency, queue="periodic", beat=True
    )
    follower = start_follower(env, workdir / f"follower-{round_no}.log", options.follower)
    core: Any = k8s.CoreV1Api(bed.api_client())
    watch = PodWatch(core, namespace=None, selector=MANAGED)
    burst = Submitter(host, ids)
    arrivals = Submitter(host, ids)
    try:
        # 3. The burst: `clients` closed loops of create + approve; wait until every pod runs.
        load = os.getloadavg()[0]
        started = time.time()
        closed_loop(burst, options.requests, options.clients)
        submit_seconds = time.time() - started
        log(f"{side}: {options.requests} requests submitted and approved in {submit_seconds:.1f}s")
        wait_all(watch, options.requests, options.timeout, f"{side} burst", started)
        # 4. The open loop: requests arriving at `rate` a second on the running burst.
        open_started = time.time()
        lag = open_loop(
            arrivals, poisson_offsets(options.open_requests, options.rate, seed=round_no)
        )
        total = options.requests + options.open_requests
        wait_all(watch, total, options.timeout, f"{side} open loop", open_started)
        # 5. How long the portal's own status sync takes to say so (not part of the rate).
        from scheduling.models import GpuRequest

        sync_lag = math.nan
        last_running = max(watch.running.values(), default=time.time())
        deadline = time.monotonic() + options.sync_wait
        while time.monotonic() < deadline:
            seen = GpuRequest.objects.filter(status="running").count()
            if seen >= len(watch.running):
                sync_lag = time.time() - last_running
                break
            time.sleep(1.0)
        seen_running = GpuRequest.objects.filter(status="running").count()
    finally:
        stop_process(follower)
        stop_process(periodic)
        stop_process(worker)
        stop_process(server)
        watch.stop()

    # 6. Where the burst's time went.
    approved = burst.approved
    by_request = {int(watch.labels[n][REQUEST_LABEL]): n for n in watch.added}
    audit = audit_times(list(approved))
    pod = {k: {r: getattr(watch, k)[n] for r, n in by_request.items() if n in getattr(watch, k)}
           for k in ("added", "bound", "running")}  # fmt: skip
    log(split("approved -> admitted (cycle)", approved, audit["admitted"]))
    log(
        split(
            "admitted -> launching (launch task picked up)", audit["admitted"], audit["launching"]
        )
    )
    log(
        split(
            "launching -> pod created (launch task + Job controller)",
            audit["launching"],
            pod["added"],
        )
    )
    log(split("pod created -> bound (kube-scheduler)", pod["added"], pod["bound"]))
    log(split("bound -> Running (kwok)", pod["bound"], pod["running"]))
    log(split("burst approved -> Running", approved, pod["running"]))
    for task, seconds in sorted(task_durations(worker_log, periodic_log).items()):
        log(
            f"task {task}: n={len(seconds)} total {sum(seconds):.1f}s "
            f"p50 {statistics.median(seconds):.3f}s max {max(seconds):.2f}s"
        )
    log(
        f"{side} status sync: {seen_running} requests `running` in the database"
        + (f", {sync_lag:.1f}s after the last pod ran" if not math.isnan(sync_lag) else "")
    )
    result: dict[str, Any] = side_figures(
        {r: pod["running"][r] for r in approved}, started, approved, pod["running"]
    )
    opened = arrivals.approved
    result |= {
        "open_latencies": [pod["running"][r] - opened[r] for r in opened],
        "open_lag": lag,
        "submit_pairs_per_second": options.requests / submit_seconds,
        "submit_seconds": submit_seconds,
        "sync_lag": sync_lag,
        "seen_running": seen_running,
        "load": load,
    }
    assert watch.first_pod is not None
    meta = watch.first_pod["metadata"]
    batch: Any = k8s.BatchV1Api(bed.api_client())
    owner = next(o["name"] for o in meta["ownerReferences"] if o["kind"] == "Job")
    job = json.loads(
        batch.read_namespaced_job(owner, meta["namespace"], _preload_content=False).data
    )
    job["admitted_pod"] = watch.first_pod
    return result, job


# Between the sides ------------------------------------------------------------------------------


def deleting(call: Any, *args: Any, **kwargs: Any) -> None:
    """A collection delete; on a loaded bed the API server may answer 504 (or drop the
    connection) while it goes on deleting, so the caller's wait until none is left decides."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        call(*args, _preload_content=False, **kwargs)
    except (ApiException, HTTPError) as error:
        log(f"collection delete answered {getattr(error, 'status', error)}; waiting for it")


def delete_jobs(bed: Testbed, namespace: str, selector: str | None = None) -> None:
    """Delete the namespace's Jobs (of `selector`) and their pods; wait until no pod is left, so
    that the next side starts on an empty fleet."""
    from kubernetes import client as k8s

    api = bed.api_client()
    batch: Any = k8s.BatchV1Api(api)
    core: Any = k8s.CoreV1Api(api)
    t0 = time.monotonic()
    deleting(
        batch.delete_collection_namespaced_job,
        namespace,
        label_selector=selector,
        propagation_policy="Background",
    )
    while True:
        deleting(
            core.delete_collection_namespaced_pod,
            namespace,
            label_selector=selector,
            grace_period_seconds=0,
        )
        left = json.loads(
            core.list_namespaced_pod(
                namespace, label_selector=selector, limit=1, _preload_content=False
            ).data
        )
        if not left["items"]:
            break
        if time.monotonic() - t0 > 300:
            raise RuntimeError(f"the pods in {namespace} were not deleted within 300 s")
        time.sleep(2.0)
    log(f"{namespace}: Jobs and pods deleted in {time.monotonic() - t0:.1f}s")


# The direct side --------------------------------------------------------------------------------


def direct_template(portal_job: dict[str, Any]) -> dict[str, Any]:
    """One of the portal's Jobs as the API server holds it, minus the portal: no node pin, no
    labels or selector tying it to the portal, a request or its Job controller; the pod's
    resources as admitted (with the project namespace's LimitRange defaults), since the direct
    side's namespace has none."""
    spec = json.loads(json.dumps(portal_job["spec"]))
    for key in ("selector", "manualSelector", "suspend"):
        spec.pop(key, None)
    pod_spec = spec["template"]["spec"]
    pod_spec["nodeSelector"] = {
        k: v
        for k, v in (pod_spec.get("nodeSelector") or {}).items()
        if k != "kubernetes.io/hostname"
    }
    admitted = portal_job["admitted_pod"]["spec"]["containers"]
    for container, as_admitted in zip(pod_spec["containers"], admitted, strict=True):
        container["resources"] = as_admitted.get("resources", {})
    # The portal's namespace objects (secrets, claims) do not exist in the direct namespace.
    pod_spec.pop("imagePullSecrets", None)
    pod_spec.pop("volumes", None)
    for container in pod_spec["containers"]:
        container.pop("volumeMounts", None)
        container.pop("envFrom", None)
    spec["template"]["metadata"] = {}
    return spec


def direct_side(
    bed: Testbed,
    options: argparse.Namespace,
    job_spec: dict[str, Any],
    *,
    side: str,
    seed: int,
    objects: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The same Jobs straight through the API server (the Job controller and kube-scheduler
    alone place their pods): the burst from `clients` threads, then the open loop; `objects`
    (namespaced, through the custom-objects API) are created in the side's namespace first.
    The namespace's Jobs are deleted before returning."""
    from kubernetes import client as k8s

    namespace = label = f"e2e-{side.replace(' ', '-')}"
    core: Any = k8s.CoreV1Api(bed.api_client())
    batch: Any = k8s.BatchV1Api(bed.api_client())
    core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False)
    bed.wait_default_service_account(namespace)
    for body in objects:
        group, _, version = body["apiVersion"].partition("/")
        plural = f"{body['kind'].lower()}s"
        k8s.CustomObjectsApi(bed.api_client()).create_namespaced_custom_object(
            group, version, namespace, plural, body, _preload_content=False
        )
    watch = PodWatch(core, namespace=namespace, selector=f"app={label}")
    calls: list[float] = []

    def creator(prefix: str, created: dict[str, float]) -> Callable[[int], None]:
        def create(index: int) -> None:
            name = f"{prefix}-{index:05d}"
            spec = json.loads(json.dumps(job_spec))
            spec["template"]["metadata"] = {"labels": {"app": label}}
            t0 = time.time()
            batch.create_namespaced_job(
                namespace,
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": name, "labels": {"app": label}},
                    "spec": spec,
                },
                _preload_content=False,
            )
            created[name] = now = time.time()
            calls.append(now - t0)

        return create

    burst: dict[str, float] = {}
    opened: dict[str, float] = {}
    load = os.getloadavg()[0]
    try:
        started = time.time()
        closed_loop(creator("burst", burst), options.requests, options.clients)
        log(f"{side}: {options.requests} Jobs created in {time.time() - started:.1f}s")
        wait_all(watch, options.requests, options.timeout, f"{side} burst", started)
        open_started = time.time()
        lag = open_loop(
            creator("open", opened),
            poisson_offsets(options.open_requests, options.rate, seed=seed),
        )
        total = options.requests + options.open_requests
        wait_all(watch, total, options.timeout, f"{side} open loop", open_started)
    finally:
        watch.stop()
    log(
        f"{side} Job create call (API server): p50 {statistics.median(calls):.3f}s "
        f"p99 {percentile(calls, 0.99):.3f}s"
    )
    # The Job controller names each pod's Job in its `job-name` label.
    job_of = {n: watch.labels[n].get("job-name", "") for n in watch.added}
    pod = {k: {job_of[n]: t for n, t in getattr(watch, k).items()}
           for k in ("added", "bound", "running")}  # fmt: skip
    log(split(f"{side} Job created -> pod created (Job controller)", burst, pod["added"]))
    log(split(f"{side} pod created -> bound (kube-scheduler)", pod["added"], pod["bound"]))
    log(split(f"{side} bound -> Running (kwok)", pod["bound"], pod["running"]))
    delete_jobs(bed, namespace)
    result: dict[str, Any] = side_figures(
        {j: pod["running"][j] for j in burst}, started, burst, pod["running"]
    )
    result |= {
        "open_latencies": [pod["running"][j] - opened[j] for j in opened],
        "open_lag": lag,
        "load": load,
    }
    return result


# The DRA side ------------------------------------------------------------------------------------


def dra_node(name: str) -> NodeShape:
    """A node like `whole_card_node`, its 8 A100s published as DRA devices instead."""
    return NodeShape(
        name=name,
        pool=DRA_POOL,
        resources={},
        dra_cards=DraCards(GPUS_PER_NODE, "NVIDIA A100-SXM4-80GB", 80),
    )


def dra_claim_template() -> dict[str, Any]:
    """The claim template the portal compiles for one whole A100 placed by kube-scheduler."""
    spec = WorkloadSpec(
        request_id="e2e",
        attempt=1,
        team_slug="bench",
        project_slug="bench",
        namespace="e2e-dra",
        kind="job",
        image="bench",
        sharing="exclusive",
        gpu_count=1,
        gpu_products=gpu_products_for("A100-80G", merged_aliases()),
        allocation="dra",
    )
    return resource_claim_template(spec, {"app": "e2e-dra"})


def dra_template(direct_job: dict[str, Any], template_name: str) -> dict[str, Any]:
    """The direct side's Job asking for its card through the claim template: no
    nvidia.com/gpu, no GPU-product affinity (the claim selects the model), the DRA pool."""
    job = json.loads(json.dumps(direct_job))
    spec = job["template"]["spec"]
    spec.pop("affinity", None)
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), POOL_LABEL: DRA_POOL}
    spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": template_name}]
    for container in spec["containers"]:
        resources = container.setdefault("resources", {})
        for kind in ("limits", "requests"):
            resources.get(kind, {}).pop("nvidia.com/gpu", None)
        resources["claims"] = [{"name": CLAIM_NAME}]
    return job


# Notebooks: 50 users opening a vGPU notebook at once -------------------------------------------

NOTEBOOK_POOL = "l4-vgpu"
NOTEBOOK_FLAVOR = "l4-6g"
# Three 6 GiB slices fit a 23,034 MiB card, four cards a node (demo_nodes' L4 shape), but the
# engine placed 11 on one node: a third of the slots spare, so that no notebook waits for room.
NOTEBOOKS_PER_NODE = 8
WORKLOAD_DOMAIN = "workloads.bench.test"
#: How often each user's client asks again (the API, then the route and the auth check).
OPEN_POLL_SECONDS = 0.5


def vgpu_node(name: str) -> NodeShape:
    """An L4 node shaped as the test bed's demo fleet has it: 4 cards HAMi splits 10 ways."""
    return NodeShape(
        name=name,
        pool=NOTEBOOK_POOL,
        resources={
            "nvidia.com/gpu": "40",
            "nvidia.com/gpumem": str(4 * 23034),
            "nvidia.com/gpucores": "400",
            "cpu": "48",
            "memory": "384Gi",
        },
        labels={"nvidia.com/gpu.product": "NVIDIA-L4"},
        annotations={"hami.io/node-nvidia-register": hami_register(4)},
    )


def notebook_nodes(notebooks: int) -> int:
    return math.ceil(notebooks / NOTEBOOKS_PER_NODE)


def seed_notebook_users(count: int) -> dict[str, Any]:
    """The demo organisation and fleet, `count` developers of the vision team, each with an API
    token and a signed-in browser session (made here, not through the login form), and the
    team's vGPU quota raised to `count`."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )
    from knox.models import AuthToken

    from scheduling.demo import seed_demo_fleet
    from scheduling.models import Flavor, Node, NodePool, Quota
    from tenants.choices import Role
    from tenants.models import Membership, Project
    from tenants.services.organisation import seed_demo_organisation

    teams = seed_demo_organisation(password="bench")
    seed_demo_fleet(teams=teams)
    Node.objects.all().delete()
    # HAMi's scheduler is not on the test bed; kube-scheduler counts HAMi's extended resources
    # like any other (tests/k8s/test_backend_workloads.py), on the node the engine chose.
    NodePool.objects.filter(slug=NOTEBOOK_POOL).update(scheduler_name="default-scheduler")
    team = teams["vision"]
    flavor = Flavor.objects.get(slug=NOTEBOOK_FLAVOR)
    Quota.objects.filter(team=team, flavor=flavor).update(guaranteed=count, limit=count)
    project = Project.objects.filter(team=team).order_by("pk").first()
    assert project is not None
    store = import_module(settings.SESSION_ENGINE).SessionStore
    users = []
    for i in range(count):
        user = get_user_model().objects.create_user(f"nb{i:03d}", password=None)
        Membership.objects.create(user=user, team=team, role=Role.DEVELOPER)
        session = store()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        users.append({"token": AuthToken.objects.create(user)[1], "session": session.session_key})
    return {
        "users": users,
        "project": project.pk,
        "namespace": project.namespace,
        "flavor": flavor.pk,
        "session_cookie": settings.SESSION_COOKIE_NAME,
    }


class RouteWatch:
    """Whether a workload host has what ingress-nginx needs to send a call on: an Ingress rule
    for the host and a ready endpoint of the Service it names (asked of the API server)."""

    def __init__(self, api: Any, namespace: str) -> None:
        from kubernetes import client as k8s

        self.networking: Any = k8s.NetworkingV1Api(api)
        self.discovery: Any = k8s.DiscoveryV1Api(api)
        self.namespace = namespace

    def ready(self, host: str) -> bool:
        ingresses = json.loads(
            self.networking.list_namespaced_ingress(self.namespace, _preload_content=False).data
        )
        service = next(
            (
                path["backend"]["service"]["name"]
                for ingress in ingresses["items"]
                for rule in ingress["spec"].get("rules", [])
                if rule.get("host") == host
                for path in rule.get("http", {}).get("paths", [])
            ),
            None,
        )
        if service is None:
            return False
        slices = json.loads(
            self.discovery.list_namespaced_endpoint_slice(
                self.namespace,
                label_selector=f"kubernetes.io/service-name={service}",
                _preload_content=False,
            ).data
        )
        return any(
            (endpoint.get("conditions") or {}).get("ready")
            for s in slices["items"]
            for endpoint in s.get("endpoints") or []
        )


def callback_target(location: str) -> tuple[str, str]:
    """The workload host and the path + query of the link /connect/ redirects to."""
    parts = urlsplit(location)
    return parts.netloc, parts.path + ("?" + parts.query if parts.query else "")


class NotebookUser:
    """One user: create a vGPU notebook, then, every OPEN_POLL_SECONDS, what their browser
    does: read the request until the API offers its connect URL, follow it (/connect/ → the
    workload host's callback → the workload cookie), and call the workload host as the Ingress
    would: its route and a ready endpoint in the cluster, then the forward-auth check with the
    cookie, until it answers 200. `created` and `opened` hold the wall times, per request."""

    def __init__(self, host: str, ids: dict[str, Any], routes: RouteWatch, deadline: float):
        self.host = host
        self.ids = ids
        self.routes = routes
        self.deadline = deadline
        self.created: dict[int, float] = {}
        self.offered: dict[int, float] = {}
        self.routed: dict[int, float] = {}
        self.opened: dict[int, float] = {}

    def __call__(self, index: int) -> None:
        import requests as http

        user = self.ids["users"][index]
        s = http.Session()
        s.headers["Authorization"] = f"Token {user['token']}"
        answer = s.post(
            f"{self.host}/api/v1/requests/",
            json={
                "project": self.ids["project"],
                "flavor": self.ids["flavor"],
                "gpu_count": 1,
                "kind": "notebook",
                "image": "registry.example.com/ml/jupyter:2024.10",
                "max_runtime_seconds": 3600,
                "priority": "normal",
                "reason": "end-to-end benchmark: notebooks",
            },
            timeout=60,
        )
        if answer.status_code != 201:
            raise RuntimeError(f"create answered {answer.status_code}: {answer.text[:300]}")
        self.created[pk := int(answer.json()["id"])] = time.time()
        browser = {"Cookie": f"{self.ids['session_cookie']}={user['session']}"}
        connect, cookie = None, None
        while time.time() < self.deadline:
            if connect is None:
                connect = (
                    s.get(f"{self.host}/api/v1/requests/{pk}/", timeout=60)
                    .json()
                    .get("connect_url")
                )
                if connect is not None:
                    self.offered[pk] = time.time()
            if connect is not None and cookie is None:
                # The API gives it absolute (PORTAL_URL) or as a path.
                link = http.get(
                    urljoin(self.host + "/", connect),
                    headers=browser,
                    allow_redirects=False,
                    timeout=60,
                )
                if link.status_code != 302:
                    raise RuntimeError(f"/connect/ answered {link.status_code}")
                workload_host, path = callback_target(link.headers["Location"])
                callback = http.get(
                    self.host + path,
                    headers={"Host": workload_host},
                    allow_redirects=False,
                    timeout=60,
                )
                cookie = callback.cookies.get("gpu_portal_workload")
                if cookie is None:
                    raise RuntimeError(f"the callback answered {callback.status_code}, no cookie")
            if cookie is not None and (
                pk in self.routed or self.routes.ready(f"{pk}.{WORKLOAD_DOMAIN}")
            ):
                self.routed.setdefault(pk, time.time())
                auth = http.get(
                    f"{self.host}/auth/workloads/{pk}/",
                    headers={"Cookie": f"gpu_portal_workload={cookie}"},
                    timeout=60,
                )
                if auth.status_code == 200:
                    self.opened[pk] = time.time()
                    return
            time.sleep(OPEN_POLL_SECONDS)


def notebook_side(bed: Testbed, options: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """`--notebooks` users each create a vGPU notebook at once (one thread each) and open it;
    a fresh database, server and workers as the portal side has them, plus what a route needs
    (PORTAL_URL, the workload domain)."""
    url = os.environ.get("BENCH_E2E_DATABASE_URL", DEFAULT_URL)
    redis_url = os.environ.get("BENCH_E2E_REDIS_URL", DEFAULT_REDIS)
    port = free_port()
    host = f"http://127.0.0.1:{port}"
    settings_env = server_environment(url, redis_url, bed.portal_kubeconfig) | {
        "PORTAL_URL": host,
        "WORKLOAD_DOMAIN": WORKLOAD_DOMAIN,
        "WORKLOAD_SCHEME": "http",
        "WORKLOAD_ROUTE": "ingress",
    }
    os.environ.update(settings_env)
    env = {
        **os.environ,
        **settings_env,
        "PYTHONPATH": str(ROOT),
        "SCHEDULING_CYCLE_SECONDS": str(options.cycle_seconds),
        "WORKLOAD_SYNC_SECONDS": str(options.sync_seconds),
    }
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    connections.close_all()
    recreate_database(url)
    call_command("migrate", verbosity=0)
    ids = seed_notebook_users(options.notebooks)
    log(f"notebooks: inventory {ready_cluster(bed)}")
    connections.close_all()
    server = start_gunicorn(env, port, options.web_workers)
    worker_log = workdir / "worker-notebooks.log"
    periodic_log = workdir / "periodic-worker-notebooks.log"
    worker = start_worker(env, worker_log, options.worker_concurrency, queue="celery", beat=False)
    periodic = start_worker(
        env, periodic_log, options.periodic_concurrency, queue="periodic", beat=True
    )
    follower = start_follower(env, workdir / "follower-notebooks.log", options.follower)
    users = NotebookUser(
        host, ids, RouteWatch(bed.api_client(), ids["namespace"]), time.time() + options.timeout
    )
    load = os.getloadavg()[0]
    try:
        with ThreadPoolExecutor(max_workers=options.notebooks) as pool:
            list(pool.map(users, range(options.notebooks)))
    finally:
        stop_process(follower)
        stop_process(periodic)
        stop_process(worker)
        stop_process(server)
    if len(users.opened) < options.notebooks:
        raise Incomplete(
            f"notebooks: {len(users.opened)} of {options.notebooks} opened within "
            f"{options.timeout:.0f} s ({len(users.offered)} offered a connect URL, "
            f"{len(users.routed)} routed)"
        )
    log(split("notebook created -> connect URL offered (API)", users.created, users.offered))
    # The part before the offer, from the audit trail: the cycle, the launch queue, then the
    # launch, the pod and the status sync.
    audit = audit_times(list(users.created), ("admitted", "launching", "running"))
    log(split("notebook created -> admitted", users.created, audit["admitted"]))
    log(
        split(
            "admitted -> launching (launch task creating it)", audit["admitted"], audit["launching"]
        )
    )
    log(split("launching -> running (status sync)", audit["launching"], audit["running"]))
    log(split("connect URL offered -> route + ready endpoint", users.offered, users.routed))
    log(split("route ready -> forward-auth 200", users.routed, users.opened))
    for task, seconds in sorted(task_durations(worker_log, periodic_log).items()):
        log(
            f"task {task}: n={len(seconds)} total {sum(seconds):.1f}s "
            f"p50 {statistics.median(seconds):.3f}s max {max(seconds):.2f}s"
        )
    return {
        "spans": [users.opened[k] - users.created[k] for k in users.created],
        "load": load,
    }


def report_notebooks(figures: dict[str, Any], options: argparse.Namespace) -> None:
    spans = figures["spans"]
    emit(
        "e2e.notebook_open_p95_seconds",
        percentile(spans, 0.95),
        "s",
        target=8,
        p50=round(statistics.median(spans), 3),
        max=round(max(spans), 3),
        notebooks=options.notebooks,
        flavor=NOTEBOOK_FLAVOR,
        poll_seconds=OPEN_POLL_SECONDS,
        load_average=round(figures["load"], 2),
    )


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def report(
    portal: list[dict[str, Any]],
    direct: list[dict[str, Any]],
    dra: dict[str, Any] | None,
    options: argparse.Namespace,
    shape: dict[str, Any],
) -> None:
    """The figures of a finished run: rates as the rounds' mean (each round listed), latencies
    pooled over the rounds."""

    def rounds(sides: list[dict[str, Any]], key: str) -> list[float]:
        return [round(s[key], 2) for s in sides]

    def pooled(sides: list[dict[str, Any]], key: str) -> list[float]:
        return [x for s in sides for x in s[key]]

    portal_rate, direct_rate = mean(rounds(portal, "rate")), mean(rounds(direct, "rate"))
    emit(
        "e2e.portal_pods_per_second",
        portal_rate,
        "pods/s",
        rounds=rounds(portal, "rate"),
        seconds=rounds(portal, "seconds"),
        load_average=rounds(portal, "load"),
        **shape,
    )
    emit(
        "e2e.direct_pods_per_second",
        direct_rate,
        "pods/s",
        rounds=rounds(direct, "rate"),
        seconds=rounds(direct, "seconds"),
        load_average=rounds(direct, "load"),
        **shape,
    )
    emit(
        "e2e.ratio",
        portal_rate / direct_rate,
        "x",
        target=0.5,
        rounds=[round(p["rate"] / d["rate"], 3) for p, d in zip(portal, direct, strict=True)],
        **shape,
    )
    emit(
        "e2e.submit_pairs_per_second",
        mean(rounds(portal, "submit_pairs_per_second")),
        "pairs/s",
        target=40,
        clients=options.clients,
        rounds=rounds(portal, "submit_pairs_per_second"),
    )
    burst, direct_burst = pooled(portal, "latencies"), pooled(direct, "latencies")
    emit(
        "e2e.approval_to_running_p99_seconds",
        percentile(burst, 0.99),
        "s",
        scenario="burst",
        target=5,
        p50=round(statistics.median(burst), 3),
        **shape,
    )
    emit(
        "e2e.direct_create_to_running_p99_seconds",
        percentile(direct_burst, 0.99),
        "s",
        scenario="burst",
        p50=round(statistics.median(direct_burst), 3),
    )
    arrivals = {"rate": options.rate, "arrivals": options.open_requests}
    opened, direct_opened = pooled(portal, "open_latencies"), pooled(direct, "open_latencies")
    emit(
        "e2e.open_loop_approval_to_running_p99_seconds",
        percentile(opened, 0.99),
        "s",
        target=10,
        p50=round(statistics.median(opened), 3),
        max_arrival_lag=round(max(p["open_lag"] for p in portal), 2),
        **arrivals,
    )
    emit(
        "e2e.direct_open_loop_create_to_running_p99_seconds",
        percentile(direct_opened, 0.99),
        "s",
        p50=round(statistics.median(direct_opened), 3),
        max_arrival_lag=round(max(d["open_lag"] for d in direct), 2),
        **arrivals,
    )
    if dra is not None:
        emit(
            "e2e.dra_pods_per_second",
            dra["rate"],
            "pods/s",
            seconds=round(dra["seconds"], 1),
            load_average=round(dra["load"], 1),
            extended_resource_pods_per_second=round(direct_rate, 1),
            **shape,
        )
        emit(
            "e2e.dra_create_to_running_p99_seconds",
            percentile(dra["latencies"], 0.99),
            "s",
            p50=round(statistics.median(dra["latencies"]), 3),
        )
    emit(
        "e2e.portal_status_sync_lag_seconds",
        max(p["sync_lag"] for p in portal),
        "s",
        running_in_database=rounds(portal, "seen_running"),
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.e2e", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--requests", type=int, default=2000, help="the burst, per side")
    parser.add_argument("--clients", type=int, default=8, help="client threads on each side")
    parser.add_argument("--rate", type=float, default=5.0, help="open loop: arrivals a second")
    parser.add_argument("--open-requests", type=int, help="open loop: arrivals (requests / 4)")
    parser.add_argument("--rounds", type=int, default=2, help="portal, direct, ... rounds")
    parser.add_argument("--web-workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--worker-concurrency", type=int, default=4, help="the celery queue")
    parser.add_argument("--periodic-concurrency", type=int, default=2, help="the periodic queue")
    parser.add_argument("--no-dra", action="store_true", help="leave out the DRA side")
    parser.add_argument("--cycle-seconds", type=float, default=10.0, help="beat: the cycle")
    parser.add_argument("--sync-seconds", type=float, default=5.0, help="beat: workload sync")
    parser.add_argument(
        "--no-follower",
        dest="follower",
        action="store_false",
        help="leave out the workload follower: the periodic sync moves every request",
    )
    parser.add_argument("--timeout", type=float, default=1200.0, help="per wait, seconds")
    parser.add_argument("--sync-wait", type=float, default=120.0)
    parser.add_argument(
        "--notebooks", type=int, help="only the notebook scenario: this many users at once"
    )
    options = parser.parse_args()
    if options.notebooks:
        return notebooks_main(options)
    if options.open_requests is None:
        options.open_requests = max(1, options.requests // 4)
    if missing_binaries():
        log("test-bed binaries missing: run `make testbed` first")
        return 2
    nodes = math.ceil((options.requests + options.open_requests) / GPUS_PER_NODE)
    shape = {"requests": options.requests, "nodes": nodes, "gpus_per_node": GPUS_PER_NODE}
    workdir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    emit("e2e.load_average_before", os.getloadavg()[0], "runnable")
    bed = Testbed(stages_file=long_running_stages(workdir))
    portal: list[dict[str, Any]] = []
    direct: list[dict[str, Any]] = []
    dra: dict[str, Any] | None = None
    try:
        bed.start(nodes=[])
        t0 = time.monotonic()
        bed.add_nodes(
            [whole_card_node(f"e2e-{i:04d}", pool=POOL) for i in range(nodes)], timeout=600
        )
        log(f"{nodes} kwok nodes Ready in {time.monotonic() - t0:.1f}s")
        # The sides take turns on the same nodes (portal, direct, portal, direct), so a drift in
        # the machine's load falls on both.
        for round_no in range(1, options.rounds + 1):
            figures, job = portal_side(bed, options, workdir, round_no)
            portal.append(figures)
            delete_jobs(bed, job["metadata"]["namespace"], MANAGED)
            direct_job = direct_template(job)
            direct.append(
                direct_side(bed, options, direct_job, side=f"direct {round_no}", seed=round_no)
            )
        if not options.no_dra:
            t0 = time.monotonic()
            bed.add_nodes([dra_node(f"e2e-dra-{i:04d}") for i in range(nodes)], timeout=600)
            log(f"{nodes} kwok DRA nodes Ready, slices published, in {time.monotonic() - t0:.1f}s")
            claim = dra_claim_template()
            dra = direct_side(
                bed,
                options,
                dra_template(direct_job, claim["metadata"]["name"]),
                side="dra",
                seed=0,
                objects=[claim],
            )
    except Incomplete as incomplete:
        log(f"run incomplete, no figures: {incomplete}")
        print(json.dumps({"incomplete": str(incomplete), **shape}), flush=True)
        return 1
    finally:
        bed.stop()
    report(portal, direct, dra, options, shape)
    emit("e2e.load_average_after", os.getloadavg()[0], "runnable")
    print(json.dumps({"note": NOTE}), flush=True)
    log(f"worker logs: {workdir}")
    return 0


def notebooks_main(options: argparse.Namespace) -> int:
    """The notebook scenario on a test bed of its own (a separate invocation)."""
    if missing_binaries():
        log("test-bed binaries missing: run `make testbed` first")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="bench-e2e-notebooks-"))
    emit("e2e.load_average_before", os.getloadavg()[0], "runnable")
    bed = Testbed(stages_file=long_running_stages(workdir))
    try:
        bed.start(nodes=[])
        nodes = notebook_nodes(options.notebooks)
        bed.add_nodes([vgpu_node(f"e2e-l4-{i:03d}") for i in range(nodes)], timeout=600)
        figures = notebook_side(bed, options, workdir)
    except Incomplete as incomplete:
        log(f"run incomplete, no figures: {incomplete}")
        print(json.dumps({"incomplete": str(incomplete)}), flush=True)
        return 1
    finally:
        bed.stop()
    report_notebooks(figures, options)
    emit("e2e.load_average_after", os.getloadavg()[0], "runnable")
    log(f"worker logs: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
