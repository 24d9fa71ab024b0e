"""End-to-end benchmark on the test bed: the portal's whole path against kube-scheduler alone.

    .venv/bin/python -m bench.e2e                  # 2,000 requests, 250 kwok nodes x 8 GPUs
    .venv/bin/python -m bench.e2e --requests 200   # a quick run

One control plane (scripts/testbed: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok), one fleet of `ceil(N / 8)` kwok nodes with 8 `nvidia.com/gpu` each in the
`a100-training` pool, then two sides one after the other on the same nodes:

1. **portal**: the product as deployed, on loopback. PostgreSQL database `portal_bench_e2e`
   (recreated, migrated, the demo organisation and fleet; the team's A100 quota raised to N),
   Redis db 12 as the broker, gunicorn (`portal.wsgi`, one sync worker per core) and two Celery
   workers as the Helm chart runs them, one per queue (portal/celery.py): the
   `celery` queue (launches, notifications; prefork `--concurrency 4`) and the `periodic` queue
   (the cycle, workload and inventory sync, the sweeps; `--concurrency 2`, with embedded beat),
   with `CLUSTER_BACKEND=kubernetes` and the test bed's least-privilege `portal.kubeconfig`.
   Client threads `POST /api/v1/requests/` (one whole A100 card each, a developer's token) and,
   as the team lead, `POST /api/v1/requests/<id>/approve/` (whole cards in the training tier need
   the lead; `--auto-approve` lets the tier's rule approve within the guaranteed quota instead).
   From then on only the worker acts: the approval queues a cycle, the cycle admits and queues
   launches, each launch task creates the Job, the Job controller its pod, kube-scheduler binds
   it to the node the engine chose (hostname selector), kwok runs it.
2. The worker stops; the portal's Jobs and pods are deleted and the bench waits until none is
   left, so the second side starts on an empty fleet.
3. **direct**: the same number of pods, created straight through the API server by the same
   number of client threads, in a namespace of their own (no quota), each a copy of one of the
   portal's own pods as admitted (resources with the LimitRange defaults, tolerations, pool node
   selector, GPU-product affinity, priority class) minus the node pin: kube-scheduler alone
   picks the node.
4. **dra** (left out with `--no-dra`): the direct pods are deleted, as many kwok nodes again
   join with their 8 A100s published only as DRA devices (scripts/testbed/dra.py), and the same
   number of pods ask for one card each through the ResourceClaimTemplate a DRA pool compiles
   to: kube-scheduler and the resourceclaim controller alone (`e2e.dra_pods_per_second`).

Both sides are watched (one label-selected pod watch from a resourceVersion, no polling LISTs);
a pod counts once its phase is Running. Rate = pods / (last Running - first client call);
latency = each request's approval (the API's answer) to its pod Running. Pods stay running (the
kwok stages are copied with `pod-complete` delayed to an hour), so the two sides hold the same
pods at the end. The time split is printed from the audit trail (queued, admitted, launching),
the watch (pod created, bound, running) and the workers' logs (task durations).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.api import free_port, recreate_database
from runtime.cluster.base import WorkloadSpec
from runtime.cluster.dra_manifests import CLAIM_NAME, resource_claim_template
from runtime.cluster.gpu_models import gpu_products_for, merged_aliases
from scripts.testbed.cluster import (
    POOL_LABEL,
    STAGES_FILE,
    NodeShape,
    Testbed,
    missing_binaries,
    whole_card_node,
)
from scripts.testbed.dra import DraCards

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://portal:portal@127.0.0.1:5432/portal_bench_e2e"
DEFAULT_REDIS = "redis://127.0.0.1:6390/12"
POOL = "a100-training"
GPUS_PER_NODE = 8
DIRECT_NAMESPACE = "e2e-direct"
DRA_POOL = "e2e-dra"
MANAGED = "app.kubernetes.io/managed-by=gpu-portal"
REQUEST_LABEL = "gpu-portal/request"

NOTE = (
    "portal: from the first POST /api/v1/requests/ to the last pod Running; includes the HTTP "
    "API (create + lead approval), the database, the broker, the scheduling cycle, the launch "
    "tasks (priority classes, namespace, quota, LimitRange, Job), the Job controller, "
    "kube-scheduler and kwok. direct: from the first pod create to the last pod Running; "
    "includes the API server's pod create, kube-scheduler and kwok. Both: one 2-core machine "
    "shared by every process; excluded: test-bed start, node registration, database seeding, "
    "inventory sync, server and worker start-up, the portal's later status sync."
)


def emit(metric: str, value: float, unit: str, **extra: Any) -> None:
    print(
        json.dumps({"metric": metric, "value": round(value, 3), "unit": unit, **extra}), flush=True
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


def seed(requests: int, *, auto_approve: bool) -> dict[str, Any]:
    """The demo organisation and fleet, the team's A100 quota raised to `requests`, the demo's
    database-only nodes removed (the cluster's inventory replaces them), one token each for a
    developer and the team lead."""
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from scheduling.demo import seed_demo_fleet
    from scheduling.models import ApprovalRule, Flavor, Node, Quota
    from tenants.models import Project
    from tenants.services import seed_demo_organisation

    teams = seed_demo_organisation(password="bench")
    seed_demo_fleet(teams=teams)
    Node.objects.all().delete()
    flavor = Flavor.objects.get(slug="a100-80g")
    team = teams["vision"]
    Quota.objects.filter(team=team, flavor=flavor).update(guaranteed=requests, limit=requests)
    ApprovalRule.objects.filter(tier=flavor.pool.tier).update(
        lead_approves_whole_cards=not auto_approve
    )
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
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if " ready." in log_path.read_text(errors="replace"):
            return worker
        if worker.poll() is not None:
            break
        time.sleep(0.3)
    stop_process(worker)
    raise SystemExit(f"the worker did not start:\n{log_path.read_text()[-3000:]}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(10)


def submit_and_approve(
    host: str, ids: dict[str, Any], count: int, clients: int, *, auto_approve: bool
) -> tuple[float, dict[int, float]]:
    """Each client thread creates requests and approves them as the lead, one after the other;
    returns the first call's start and, per request id, when its approval was answered."""
    import requests as http

    local = threading.local()
    approved: dict[int, float] = {}
    body = {
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

    def session() -> Any:
        if not hasattr(local, "session"):
            local.session = http.Session()
        return local.session

    def one(_: int) -> None:
        s = session()
        created = s.post(
            f"{host}/api/v1/requests/",
            json=body,
            headers={"Authorization": f"Token {ids['developer']}"},
            timeout=60,
        )
        if created.status_code != 201:
            raise RuntimeError(f"create answered {created.status_code}: {created.text[:300]}")
        pk = int(created.json()["id"])
        if auto_approve:
            if created.json()["status"] != "queued":
                raise RuntimeError(f"not auto-approved: {created.json()['status']}")
            approved[pk] = time.time()
            return
        answer = s.post(
            f"{host}/api/v1/requests/{pk}/approve/",
            json={},
            headers={"Authorization": f"Token {ids['lead']}"},
            timeout=60,
        )
        if answer.status_code != 200:
            raise RuntimeError(f"approve answered {answer.status_code}: {answer.text[:300]}")
        approved[pk] = time.time()

    started = time.time()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(one, range(count)))
    return started, approved


def audit_times(ids: list[int]) -> dict[str, dict[int, float]]:
    """When each request was queued, admitted and began launching, from the audit trail."""
    from tenants.models import AuditEvent

    times: dict[str, dict[int, float]] = {"queued": {}, "admitted": {}, "launching": {}}
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


def portal_side(
    bed: Testbed, options: argparse.Namespace, workdir: Path
) -> tuple[dict[str, float], dict[str, Any]]:
    from kubernetes import client as k8s

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
    recreate_database(url)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0)
    ids = seed(options.requests, auto_approve=options.auto_approve)
    from runtime.cluster.kubernetes import KubernetesClusterBackend
    from runtime.services.inventory import apply_inventory

    counts = apply_inventory(
        KubernetesClusterBackend(kubeconfig=str(bed.portal_kubeconfig)).sync_inventory()
    )
    log(f"inventory: {counts}")
    connections.close_all()

    # 2. The server and the workers, one per queue.
    port = free_port()
    host = f"http://127.0.0.1:{port}"
    server = start_gunicorn(env, port, options.web_workers)
    worker_log = workdir / "worker.log"
    periodic_log = workdir / "periodic-worker.log"
    worker = start_worker(env, worker_log, options.worker_concurrency, queue="celery", beat=False)
    periodic = start_worker(
        env, periodic_log, options.periodic_concurrency, queue="periodic", beat=True
    )
    core: Any = k8s.CoreV1Api(bed.api_client())
    watch = PodWatch(core, namespace=None, selector=MANAGED)
    try:
        # 3. Submit and approve; wait until every pod runs.
        load = os.getloadavg()[0]
        started, approved = submit_and_approve(
            host, ids, options.requests, options.clients, auto_approve=options.auto_approve
        )
        submit_seconds = time.time() - started
        log(f"portal: {len(approved)} requests submitted and approved in {submit_seconds:.1f}s")
        done = watch.wait_running(options.requests, timeout=options.timeout)
        log(
            f"portal: {len(watch.running)} of {options.requests} pods running "
            f"{time.time() - started:.1f}s after the first call" + ("" if done else " (timed out)")
        )
        # 4. How long the portal's own status sync takes to say so (not part of the rate).
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
        stop_process(periodic)
        stop_process(worker)
        stop_process(server)
        watch.stop()

    # 5. Where the time went.
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
    log(split("approved -> Running", approved, pod["running"]))
    for task, seconds in sorted(task_durations(worker_log, periodic_log).items()):
        log(
            f"task {task}: n={len(seconds)} total {sum(seconds):.1f}s "
            f"p50 {statistics.median(seconds):.3f}s max {max(seconds):.2f}s"
        )
    log(
        f"portal status sync: {seen_running} requests `running` in the database"
        + (f", {sync_lag:.1f}s after the last pod ran" if not math.isnan(sync_lag) else "")
    )
    latencies = [pod["running"][r] - approved[r] for r in approved if r in pod["running"]]
    last = max(watch.running.values())
    result = {
        "pods": len(watch.running),
        "seconds": last - started,
        "rate": len(watch.running) / (last - started),
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
        "sync_lag": sync_lag,
        "seen_running": seen_running,
        "submit_seconds": submit_seconds,
        "load": load,
    }
    assert watch.first_pod is not None
    return result, watch.first_pod


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


def delete_portal_workloads(bed: Testbed, namespace: str) -> None:
    from kubernetes import client as k8s

    api = bed.api_client()
    batch: Any = k8s.BatchV1Api(api)
    core: Any = k8s.CoreV1Api(api)
    t0 = time.monotonic()
    deleting(
        batch.delete_collection_namespaced_job,
        namespace,
        label_selector=MANAGED,
        propagation_policy="Background",
    )
    while True:
        deleting(
            core.delete_collection_namespaced_pod,
            namespace,
            label_selector=MANAGED,
            grace_period_seconds=0,
        )
        left = json.loads(
            core.list_namespaced_pod(
                namespace, label_selector=MANAGED, limit=1, _preload_content=False
            ).data
        )
        if not left["items"]:
            break
        if time.monotonic() - t0 > 300:
            raise RuntimeError("the portal's pods were not deleted within 300 s")
        time.sleep(2.0)
    log(f"portal workloads deleted in {time.monotonic() - t0:.1f}s")


# The direct side --------------------------------------------------------------------------------


def direct_template(portal_pod: dict[str, Any]) -> dict[str, Any]:
    """One of the portal's pods as admitted, minus what ties it to a node, a Job or a request."""
    spec = json.loads(json.dumps(portal_pod["spec"]))
    for key in ("nodeName", "priority", "preemptionPolicy", "serviceAccount"):
        spec.pop(key, None)
    spec["nodeSelector"] = {
        k: v for k, v in (spec.get("nodeSelector") or {}).items() if k != "kubernetes.io/hostname"
    }
    return spec


def direct_side(
    bed: Testbed,
    options: argparse.Namespace,
    spec: dict[str, Any],
    *,
    side: str = "direct",
    objects: Sequence[dict[str, Any]] = (),
) -> dict[str, float]:
    """Pods straight through the API server, kube-scheduler alone placing them; `objects`
    (namespaced, through the custom-objects API) are created in the side's namespace first."""
    from kubernetes import client as k8s

    namespace, label = f"e2e-{side}", f"e2e-{side}"
    core: Any = k8s.CoreV1Api(bed.api_client())
    core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False)
    bed.wait_default_service_account(namespace)
    for body in objects:
        group, _, version = body["apiVersion"].partition("/")
        plural = f"{body['kind'].lower()}s"
        k8s.CustomObjectsApi(bed.api_client()).create_namespaced_custom_object(
            group, version, namespace, plural, body, _preload_content=False
        )
    watch = PodWatch(core, namespace=namespace, selector=f"app={label}")
    created: dict[str, float] = {}
    calls: list[float] = []

    def create(index: int) -> None:
        name = f"{side}-{index:05d}"
        t0 = time.time()
        core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": label}},
                "spec": spec,
            },
            _preload_content=False,
        )
        created[f"{namespace}/{name}"] = now = time.time()
        calls.append(now - t0)

    load = os.getloadavg()[0]
    try:
        started = time.time()
        with ThreadPoolExecutor(max_workers=options.clients) as pool:
            list(pool.map(create, range(options.requests)))
        log(f"{side}: {options.requests} pods created in {time.time() - started:.1f}s")
        done = watch.wait_running(options.requests, timeout=options.timeout)
        log(
            f"{side}: {len(watch.running)} pods running {time.time() - started:.1f}s after the "
            "first create" + ("" if done else " (timed out)")
        )
    finally:
        watch.stop()
    log(
        f"{side} create call (API server): p50 {statistics.median(calls):.3f}s "
        f"p99 {percentile(calls, 0.99):.3f}s"
    )
    log(split(f"{side} created -> bound (kube-scheduler)", watch.added, watch.bound))
    log(split(f"{side} bound -> Running (kwok)", watch.bound, watch.running))
    latencies = [watch.running[n] - created[n] for n in created if n in watch.running]
    last = max(watch.running.values())
    return {
        "pods": len(watch.running),
        "seconds": last - started,
        "rate": len(watch.running) / (last - started),
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
        "load": load,
    }


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


def dra_template(direct_spec: dict[str, Any], template_name: str) -> dict[str, Any]:
    """The direct side's pod asking for its card through the claim template: no
    nvidia.com/gpu, no GPU-product affinity (the claim selects the model), the DRA pool."""
    spec = json.loads(json.dumps(direct_spec))
    spec.pop("affinity", None)
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), POOL_LABEL: DRA_POOL}
    spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": template_name}]
    for container in spec["containers"]:
        resources = container.setdefault("resources", {})
        for kind in ("limits", "requests"):
            resources.get(kind, {}).pop("nvidia.com/gpu", None)
        resources["claims"] = [{"name": CLAIM_NAME}]
    return spec


def delete_direct_pods(bed: Testbed) -> None:
    """Empty the fleet again before the DRA side (the same pods would otherwise stay bound)."""
    from kubernetes import client as k8s

    core: Any = k8s.CoreV1Api(bed.api_client())
    t0 = time.monotonic()
    while True:
        deleting(core.delete_collection_namespaced_pod, DIRECT_NAMESPACE, grace_period_seconds=0)
        left = json.loads(
            core.list_namespaced_pod(DIRECT_NAMESPACE, limit=1, _preload_content=False).data
        )
        if not left["items"]:
            break
        if time.monotonic() - t0 > 300:
            raise RuntimeError("the direct side's pods were not deleted within 300 s")
        time.sleep(2.0)
    log(f"direct pods deleted in {time.monotonic() - t0:.1f}s")


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.e2e", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8, help="client threads on each side")
    parser.add_argument("--web-workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--worker-concurrency", type=int, default=4, help="the celery queue")
    parser.add_argument("--periodic-concurrency", type=int, default=2, help="the periodic queue")
    parser.add_argument("--no-dra", action="store_true", help="leave out the DRA side")
    parser.add_argument("--cycle-seconds", type=float, default=10.0, help="beat: the cycle")
    parser.add_argument("--sync-seconds", type=float, default=5.0, help="beat: workload sync")
    parser.add_argument("--auto-approve", action="store_true", help="the tier's rule approves")
    parser.add_argument("--timeout", type=float, default=1200.0, help="per side, seconds")
    parser.add_argument("--sync-wait", type=float, default=120.0)
    options = parser.parse_args()
    if missing_binaries():
        log("test-bed binaries missing: run `make testbed` first")
        return 2
    nodes = math.ceil(options.requests / GPUS_PER_NODE)
    shape = {"requests": options.requests, "nodes": nodes, "gpus_per_node": GPUS_PER_NODE}
    workdir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    emit("e2e.load_average_before", os.getloadavg()[0], "runnable")
    bed = Testbed(stages_file=long_running_stages(workdir))
    try:
        bed.start(nodes=[])
        t0 = time.monotonic()
        bed.add_nodes(
            [whole_card_node(f"e2e-{i:04d}", pool=POOL) for i in range(nodes)], timeout=600
        )
        log(f"{nodes} kwok nodes Ready in {time.monotonic() - t0:.1f}s")
        portal, pod = portal_side(bed, options, workdir)
        delete_portal_workloads(bed, pod["metadata"]["namespace"])
        direct_spec = direct_template(pod)
        direct = direct_side(bed, options, direct_spec)
        dra: dict[str, Any] | None = None
        if not options.no_dra:
            delete_direct_pods(bed)
            t0 = time.monotonic()
            bed.add_nodes([dra_node(f"e2e-dra-{i:04d}") for i in range(nodes)], timeout=600)
            log(f"{nodes} kwok DRA nodes Ready, slices published, in {time.monotonic() - t0:.1f}s")
            claim = dra_claim_template()
            dra = direct_side(
                bed,
                options,
                dra_template(direct_spec, claim["metadata"]["name"]),
                side="dra",
                objects=[claim],
            )
    finally:
        bed.stop()
    approval = "rule" if options.auto_approve else "lead"
    emit(
        "e2e.portal_pods_per_second",
        portal["rate"],
        "pods/s",
        approval=approval,
        seconds=round(portal["seconds"], 1),
        submit_seconds=round(portal["submit_seconds"], 1),
        load_average=round(portal["load"], 1),
        **shape,
    )
    emit(
        "e2e.direct_pods_per_second",
        direct["rate"],
        "pods/s",
        seconds=round(direct["seconds"], 1),
        load_average=round(direct["load"], 1),
        **shape,
    )
    emit("e2e.ratio", portal["rate"] / direct["rate"], "x", target=0.8, **shape)
    if dra is not None:
        emit(
            "e2e.dra_pods_per_second",
            dra["rate"],
            "pods/s",
            seconds=round(dra["seconds"], 1),
            load_average=round(dra["load"], 1),
            extended_resource_pods_per_second=round(direct["rate"], 1),
            **shape,
        )
        emit("e2e.dra_create_to_running_p99_seconds", dra["p99"], "s", p50=round(dra["p50"], 3))
    emit(
        "e2e.approval_to_running_p99_seconds",
        portal["p99"],
        "s",
        target=10,
        p50=round(portal["p50"], 3),
        **shape,
    )
    emit(
        "e2e.direct_create_to_running_p99_seconds", direct["p99"], "s", p50=round(direct["p50"], 3)
    )
    emit("e2e.portal_status_sync_lag_seconds", portal["sync_lag"], "s",
         running_in_database=portal["seen_running"])  # fmt: skip
    emit("e2e.load_average_after", os.getloadavg()[0], "runnable")
    print(json.dumps({"note": NOTE}), flush=True)
    log(f"worker logs: {workdir / 'worker.log'}, {workdir / 'periodic-worker.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
