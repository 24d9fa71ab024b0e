"""Pipeline benchmark: admissions launched per second and status-sync lag, simulated backend.

    python -m bench.pipeline [--requests 1000]

Runs in one process with the portal's real cycle, launch and sync services, on a throw-away
SQLite database, or on BENCH_DATABASE_URL (an empty database it may fill, e.g. PostgreSQL).
Prints human-readable lines and one JSON line per figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta

from bench.figures import emit
from scheduling.services.requests import submit_gpu_request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=200)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["CELERY_BROKER_URL"] = "memory://"  # the services' follow-up tasks go nowhere
    os.environ["DATABASE_URL"] = os.environ.get(
        "BENCH_DATABASE_URL", f"sqlite:///{tempfile.mkdtemp()}/bench.sqlite3"
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_demo", verbosity=0)

    from django.utils import timezone

    from runtime.cluster.simulated import SimulatedCluster
    from runtime.models import SimulatedWorkload
    from runtime.services import execution
    from scheduling.choices import RequestStatus
    from scheduling.models import Flavor, GpuDevice, GpuRequest, Node, NodePool, Quota
    from scheduling.services import cycle
    from scheduling.services.requests import GpuRequestSpec
    from tenants.models import Project

    pool = NodePool.objects.get(slug="l4-vgpu")
    for number in range(args.nodes):
        node = Node.objects.create(name=f"bench-l4-{number}", pool=pool, gpu_model="L4")
        GpuDevice.objects.bulk_create(
            GpuDevice(node=node, index=i, memory_mib=24576) for i in range(8)
        )
    flavor = Flavor.objects.get(slug="l4-6g")
    Quota.objects.filter(flavor=flavor, project=None).update(guaranteed=100_000, limit=100_000)
    project = Project.objects.get(slug="detection")
    from django.contrib.auth import get_user_model

    alice = get_user_model().objects.get(username="alice")
    for _ in range(args.requests):
        submit_gpu_request(
            actor=alice,
            spec=GpuRequestSpec(
                project=project,
                flavor=flavor,
                gpu_count=1,
                image="pytorch:2.4",
                max_runtime_seconds=3600,
                kind="job",
            ),
        )
    backend = SimulatedCluster(speed=1.0)

    admitted: list[tuple[int, int]] = []
    started = time.perf_counter()
    result = cycle.run_cycle(on_admit=lambda r, a: admitted.append((r, a)))
    cycle_seconds = time.perf_counter() - started
    for request_id, attempt in admitted:
        execution.launch_request(request_id=request_id, attempt=attempt, backend=backend)
    pipeline_seconds = time.perf_counter() - started
    launched = GpuRequest.objects.filter(status=RequestStatus.LAUNCHING).count()

    # Every workload has started and runs on: one sync pass must carry all of them to running.
    now = timezone.now()
    SimulatedWorkload.objects.update(
        starts_at=now - timedelta(seconds=1), ends_at=now + timedelta(hours=1)
    )
    laps = []
    for _ in range(3):
        GpuRequest.objects.filter(status=RequestStatus.RUNNING).update(
            status=RequestStatus.LAUNCHING
        )
        lap = time.perf_counter()
        execution.sync_workloads(backend=backend)
        laps.append(time.perf_counter() - lap)
    running = GpuRequest.objects.filter(status=RequestStatus.RUNNING).count()

    vendor = django.db.connection.vendor
    print(f"database {vendor}; {args.requests} requests; {args.nodes * 8} extra L4 GPUs")
    print(f"cycle admitted {len(result.admitted)} in {cycle_seconds:.3f} s")
    print(f"cycle + launches: {launched} launched in {pipeline_seconds:.3f} s")
    print(f"sync pass over {running} live requests: median {statistics.median(laps):.3f} s")
    emit("pipeline.cycle_seconds", cycle_seconds, "s")
    emit("pipeline.admissions_launched_per_second", launched / pipeline_seconds, "1/s")
    emit("pipeline.sync_pass_seconds", statistics.median(laps), "s")
    emit("pipeline.sync_rows_per_second", running / statistics.median(laps), "1/s")
    if launched != args.requests:
        sys.exit(f"only {launched} of {args.requests} requests were launched")


if __name__ == "__main__":
    main()
