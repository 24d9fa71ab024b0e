"""The real scheduling cycle on PostgreSQL: read, plan, write, for the product-shaped W-GPU-2k.

    .venv/bin/python -m bench.engine_db            # 2,000 nodes, 50,000 pending
    .venv/bin/python -m bench.engine_db --quick    # 10% fleet, 5,000 pending

The database named by BENCH_DATABASE_URL (default
postgres://portal:portal@127.0.0.1:5432/portal_bench_engine) is dropped and created again,
migrated, and loaded with `bench.product`'s rows by bulk_create (then ANALYZE).  The script checks
that `scheduling.selectors.snapshot.build_snapshot()` reads back exactly the snapshot the in-memory
benchmark plans, then runs `scheduling.services.cycle.run_cycle()` once, as a worker does, with
no launch callbacks: nothing is dispatched after the commit.

Figures (one JSON line each):

* engine.db_cycle_seconds      run_cycle(): snapshot read + plan + admissions, preemptions and
                               waiting reasons written and committed; the lease taken before
                               and released after are outside it
* engine.db_read_seconds / engine.db_plan_seconds / engine.db_write_seconds   its split
* engine.decisions_per_second  pending requests / engine.db_cycle_seconds
* engine.db_steady_cycle_seconds  the next run_cycle() after 1 % of the queue and 1 % of the
                               running set changed: after the cold cycle, admissions are marked
                               running (as their launches would) and cycles run until one
                               decides nothing new (at most 5, printed); then 1 % of the waiting
                               requests are cancelled, as many new ones queued, and 1 % of the
                               running requests succeed (their allocations end); the changes
                               themselves are outside the figure

Where the time goes is printed as well: statements by kind (verb and table), their count and the
time spent in the database driver, and the rest of each phase (Python).
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from bench.figures import emit, recreate_database
from scheduling.engine import planner

DEFAULT_URL = "postgres://portal:portal@127.0.0.1:5432/portal_bench_engine"


def load(fleet: Any) -> None:
    """Write the fleet's rows with bulk_create, keeping the generator's primary keys."""
    from django.contrib.auth import get_user_model
    from django.core.management.color import no_style
    from django.db import connection, transaction

    from bench import product
    from scheduling.models import (
        Allocation,
        Flavor,
        GpuDevice,
        GpuRequest,
        Node,
        NodePool,
        Quota,
        Tier,
    )
    from tenants.models import Project, Team

    batch = 2_000
    with transaction.atomic():
        owner = get_user_model().objects.create(username="bench-engine")
        Team.objects.bulk_create(
            Team(pk=i, name=slug, slug=slug) for i, slug in enumerate(fleet.teams, start=1)
        )
        Project.objects.bulk_create(
            Project(pk=i, team_id=i, name="main", slug=product.PROJECT_SLUG)
            for i in range(1, len(fleet.teams) + 1)
        )
        tiers = {
            rank: Tier.objects.create(name=f"rank {rank}", slug=f"rank-{rank}", rank=rank)
            for rank in sorted({p.tier_rank for p in fleet.pools})
        }
        pools = {
            p.slug: NodePool.objects.create(
                name=p.slug,
                slug=p.slug,
                tier=tiers[p.tier_rank],
                sharing_mode=p.sharing,
                node_selector={product.POOL_LABEL: p.slug},
                taints=[product.GPU_TAINT],
            )
            for p in fleet.pools
        }
        nodes = Node.objects.bulk_create(
            (
                Node(
                    pool=pools[n.pool],
                    name=n.name,
                    gpu_model=n.gpu_model,
                    labels=product.node_labels(n),
                )
                for n in fleet.nodes
            ),
            batch_size=batch,
        )
        memory = {n.name: n.card_memory_mib for n in fleet.nodes}
        GpuDevice.objects.bulk_create(
            (
                GpuDevice(node=n, index=i, memory_mib=memory[n.name])
                for n in nodes
                for i in range(8)
            ),
            batch_size=batch,
        )
        Flavor.objects.bulk_create(
            Flavor(
                pk=f.pk,
                name=f.slug,
                slug=f.slug,
                pool=pools[f.pool],
                kind=f.kind,
                gpu_model=f.gpu_model,
                gpu_memory_mib=f.memory_mib,
                gpu_cores_percent=f.cores_percent,
                mig_profile=f.mig_profile,
                gpu_equivalent=f.gpu_equivalent,
            )
            for f in fleet.flavors
        )
        Quota.objects.bulk_create(
            (
                Quota(team_id=q.team, flavor_id=q.flavor, guaranteed=q.guaranteed, limit=q.limit)
                for q in fleet.quotas
            ),
            batch_size=batch,
        )
        flavor = {f.pk: f for f in fleet.flavors}
        rows = [*fleet.running, *fleet.pending]

        def request(r: Any) -> GpuRequest:
            f = flavor[r.flavor]
            return GpuRequest(
                pk=r.pk,
                project_id=r.team,
                team_id=r.team,
                owner=owner,
                flavor_id=r.flavor,
                gpu_count=r.gpu_count,
                gpu_memory_mib=f.memory_mib if f.kind == "vgpu" else None,
                gpu_cores_percent=f.cores_percent if f.kind == "vgpu" else None,
                kind=r.kind,
                image="bench/engine:1",
                max_runtime_seconds=r.max_runtime_seconds,
                priority=r.priority,
                is_preemptible=r.is_preemptible,
                allow_shared_node=r.allow_shared_node,
                gpu_equivalent=r.gpu_equivalent,
                status="running" if r.allocation else "queued",
                attempt=1 if r.allocation else 0,
            )

        GpuRequest.objects.bulk_create((request(r) for r in rows), batch_size=batch)
        Allocation.objects.bulk_create(
            (
                Allocation(
                    request_id=r.pk,
                    attempt=1,
                    pool=pools[flavor[r.flavor].pool],
                    claims=list(r.allocation.claims),
                    is_borrowed=r.allocation.is_borrowed,
                    is_preemptible=r.allocation.is_preemptible,
                    node_name=",".join(sorted({c["node"] for c in r.allocation.claims})),
                    started_at=r.allocation.started_at,
                )
                for r in fleet.running
            ),
            batch_size=batch,
        )
        # created_at is auto_now_add, so bulk_create stamped "now": set the drawn submission times.
        table = GpuRequest._meta.db_table
        with connection.cursor() as cursor:
            for start in range(0, len(rows), 5_000):
                chunk = rows[start : start + 5_000]
                values = ", ".join(["(%s, %s)"] * len(chunk))
                cursor.execute(
                    f"UPDATE {table} AS r SET created_at = v.t "  # noqa: S608 - our own table
                    f"FROM (VALUES {values}) AS v(id, t) WHERE r.id = v.id",
                    [x for r in chunk for x in (r.pk, r.created_at)],
                )
            for statement in connection.ops.sequence_reset_sql(
                no_style(), [Team, Project, Flavor, GpuRequest]
            ):
                cursor.execute(statement)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def check_snapshot(expected: Any) -> None:
    """The snapshot read from the database is the one the in-memory benchmark plans."""
    from dataclasses import fields

    from scheduling.selectors.snapshot import build_snapshot

    got = build_snapshot()
    for f in fields(got):
        a, b = set(getattr(got, f.name)), set(getattr(expected, f.name))
        if a != b:
            raise SystemExit(
                f"snapshot read from the database differs in {f.name}: "
                f"{len(a - b)} rows only in the database, {len(b - a)} only in memory; "
                f"e.g. {sorted(map(repr, a - b))[:1]} vs {sorted(map(repr, b - a))[:1]}"
            )


def write_floor(snapshot: Any, plan: Any) -> tuple[float, int]:
    """The same writes as the cycle's step 3, issued in bulk, then rolled back.

    What a batched write would cost on this machine: lock the admitted rows (SELECT ... FOR
    UPDATE), move them in two UPDATEs (borrowed or not), insert their allocations and audit
    events with bulk_create; end the victims' allocations and requeue them (one UPDATE each,
    two events per victim); write every waiting reason and position with UPDATE ... FROM
    (VALUES ...) in chunks of 5,000.  Returns (seconds up to the last statement, statements);
    the commit's flush is not included.
    """
    from django.db import connection, transaction
    from django.db.models import F
    from django.utils import timezone

    from scheduling.models import Allocation, Flavor, GpuRequest
    from tenants.models import AuditEvent

    log = StatementLog()
    pool_of = dict(Flavor.objects.values_list("slug", "pool_id"))
    pending = {r.id: r for r in snapshot.pending}
    table = GpuRequest._meta.db_table
    t0 = time.perf_counter()
    with transaction.atomic(), connection.execute_wrapper(log):
        now = timezone.now()
        ids = [int(a.request_id) for a in plan.admissions]
        owners: dict[int, tuple[int, int, int]] = {}
        for start in range(0, len(ids), 5_000):
            owners.update(
                (pk, (team, project, attempt))
                for pk, team, project, attempt in GpuRequest.objects.select_for_update()
                .filter(pk__in=ids[start : start + 5_000], status="queued")
                .values_list("pk", "team_id", "project_id", "attempt")
            )
        for borrowed in (False, True):
            chosen = [int(a.request_id) for a in plan.admissions if a.borrowed == borrowed]
            GpuRequest.objects.filter(pk__in=chosen).update(
                status="admitted",
                status_reason="Admitted: capacity reserved, launching."
                + (" Runs on borrowed quota and may be preempted." if borrowed else ""),
                attempt=F("attempt") + 1,
                waiting_reason="",
                queue_position=None,
                updated_at=now,
            )
        Allocation.objects.bulk_create(
            (
                Allocation(
                    request_id=int(a.request_id),
                    attempt=owners[int(a.request_id)][2] + 1,
                    pool_id=pool_of[pending[a.request_id].flavor],
                    claims=[_claim(c) for c in a.placement],
                    is_borrowed=a.borrowed,
                    is_preemptible=a.preemptible,
                    node_name=",".join(a.node_ids),
                )
                for a in plan.admissions
            ),
            batch_size=2_000,
        )
        victims = [int(p.victim_id) for p in plan.preemptions]
        Allocation.objects.filter(request_id__in=victims, ended_at__isnull=True).update(
            ended_at=now, end_reason="preempted"
        )
        GpuRequest.objects.filter(pk__in=victims).update(
            status="queued", status_reason="Requeued after preemption.", updated_at=now
        )
        victim_owner = dict(
            (pk, (team, project))
            for pk, team, project in GpuRequest.objects.filter(pk__in=victims).values_list(
                "pk", "team_id", "project_id"
            )
        )
        events = [
            AuditEvent(
                action="request.admitted",
                target_type="GpuRequest",
                target_id=str(pk),
                team_id=team,
                project_id=project,
                message="Admitted: capacity reserved, launching.",
                data={"from": "queued", "to": "admitted"},
            )
            for pk, (team, project, _) in owners.items()
        ]
        for pk, (team, project) in victim_owner.items():
            for before, after in (("running", "preempted"), ("preempted", "queued")):
                events.append(
                    AuditEvent(
                        action=f"request.{after}",
                        target_type="GpuRequest",
                        target_id=str(pk),
                        team_id=team,
                        project_id=project,
                        data={"from": before, "to": after},
                    )
                )
        AuditEvent.objects.bulk_create(events, batch_size=2_000)
        with connection.cursor() as cursor:
            waiting = plan.waiting
            for start in range(0, len(waiting), 5_000):
                chunk = waiting[start : start + 5_000]
                values = ", ".join(["(%s, %s, %s)"] * len(chunk))
                cursor.execute(
                    f"UPDATE {table} AS r SET waiting_reason = v.reason, "  # noqa: S608
                    f"queue_position = v.position FROM (VALUES {values}) "
                    "AS v(id, reason, position) WHERE r.id = v.id AND r.status = 'queued'",
                    [x for w in chunk for x in (int(w.request_id), w.reason, w.position)],
                )
        seconds = time.perf_counter() - t0
        transaction.set_rollback(True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return seconds, sum(log.count.values())


def _claim(c: Any) -> dict[str, Any]:
    from scheduling.selectors.snapshot import claims_as_json

    return claims_as_json((c,))[0]


class StatementLog:
    """Counts statements and their driver time by verb and table (connection.execute_wrapper)."""

    def __init__(self) -> None:
        self.count: defaultdict[str, int] = defaultdict(int)
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            key = self.kind(sql)
            self.count[key] += 1
            self.seconds[key] += time.perf_counter() - t0

    @staticmethod
    def kind(sql: str) -> str:
        words = sql.split()
        verb = words[0].upper() if words else "?"
        table = "?"
        for marker in ("FROM", "INTO", "UPDATE"):
            if marker in words[: 200 if verb == "SELECT" else 4]:
                i = words.index(marker)
                if i + 1 < len(words):
                    table = words[i + 1].strip('"')
                    break
        if verb == "UPDATE" and len(words) > 1:
            table = words[1].strip('"')
        return f"{verb} {table}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10%% fleet, 5,000 pending")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profile", action="store_true", help="print the cycles' top functions")
    ap.add_argument("--no-floor", action="store_true", help="skip the bulk write floor")
    args = ap.parse_args()

    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["CELERY_BROKER_URL"] = "memory://"  # nothing is dispatched; keep it local anyway
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench import product
    from scheduling.models import Allocation, GpuRequest
    from scheduling.services import cycle

    scale: dict[str, float] = dict(scale=0.1, pending=5_000, teams=20) if args.quick else {}
    fleet = product.generate(seed=args.seed, **scale)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    call_command("migrate", verbosity=0)
    load(fleet)
    loaded = time.perf_counter() - t0
    print(
        f"workload W-GPU-2k product-shaped{' quick' if args.quick else ''}: {len(fleet.nodes)} "
        f"nodes, {len(fleet.running)} running, {len(fleet.pending)} pending, seed {args.seed}; "
        f"migrated and loaded into {urlparse(url).path.lstrip('/')} in {loaded:.1f} s; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    expected = product.snapshot(fleet)
    read_log = StatementLog()
    t0 = time.perf_counter()
    with connection.execute_wrapper(read_log):
        check_snapshot(expected)
    read_alone = time.perf_counter() - t0
    print(
        f"build_snapshot() reads back the in-memory benchmark's snapshot exactly; the read "
        f"alone: {read_alone:.3f} s with the comparison, {sum(read_log.count.values())} "
        f"statements, {sum(read_log.seconds.values()):.3f} s in the driver"
    )
    if not args.no_floor:
        floor_plan = planner.plan(expected, now=fleet.now, policy=cycle.POLICY)
        floor, floor_statements = write_floor(expected, floor_plan)
        emit(
            "engine.db_write_floor_seconds",
            floor,
            "s",
            f"write floor: the same writes in bulk statements ({floor_statements}), rolled "
            f"back: {floor:.3f} s (commit flush not included)",
        )

    log = StatementLog()
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    with connection.execute_wrapper(log):
        result = cycle.run_cycle(now=fleet.now)
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    assert result.ran, "the scheduling lease was held"

    admitted_rows = GpuRequest.objects.filter(status="admitted").count()
    reasons = GpuRequest.objects.filter(status="queued").exclude(waiting_reason="").count()
    new_allocations = Allocation.objects.filter(started_at__isnull=True).count()
    print(
        f"cycle: {len(result.admitted)} admitted ({admitted_rows} rows admitted, "
        f"{new_allocations} allocations created), {len(result.preempted)} preempted, "
        f"{result.waiting} waiting ({reasons} queued rows carry a waiting reason)"
    )
    pending = len(fleet.pending)
    emit(
        "engine.db_cycle_seconds",
        result.seconds,
        "s",
        f"database cycle: {result.seconds:.3f} s = read {result.read_seconds:.3f} + plan "
        f"{result.plan_seconds:.3f} + write {result.write_seconds:.3f} (target <= 5 s)",
    )
    emit("engine.db_read_seconds", result.read_seconds, "s", "")
    emit("engine.db_plan_seconds", result.plan_seconds, "s", "")
    emit("engine.db_write_seconds", result.write_seconds, "s", "")
    emit(
        "engine.decisions_per_second",
        pending / result.seconds,
        "decisions/s",
        f"decisions per second: {pending / result.seconds:,.0f} ({pending} pending / "
        f"{result.seconds:.3f} s, read and write included)",
    )
    db_total = sum(log.seconds.values())
    print(
        f"where the time goes: {sum(log.count.values())} statements, {db_total:.3f} s in the "
        f"driver (round trips and PostgreSQL); Python outside the driver "
        f"{result.seconds - db_total:.3f} s (of which the in-memory plan {result.plan_seconds:.3f})"
    )
    for key in sorted(log.seconds, key=lambda k: -log.seconds[k])[:12]:
        print(f"  {log.count[key]:7d} x {key:42s} {log.seconds[key]:8.3f} s")

    now = fleet.now
    for round_ in range(1, SETTLE_ROUNDS + 1):
        now += 30
        launch_admitted(now)
        settle = cycle.run_cycle(now=now)
        print(
            f"settling cycle {round_}: {len(settle.admitted)} admitted, {len(settle.preempted)} "
            f"preempted, {settle.seconds:.3f} s"
        )
        if not settle.preempted and not settle.admitted:
            break
    now += 30
    launch_admitted(now)
    changed = change_one_percent(now)
    steady_log = StatementLog()
    steady_profiler = None
    if args.profile:
        import cProfile

        steady_profiler = cProfile.Profile()
        steady_profiler.enable()
    with connection.execute_wrapper(steady_log):
        steady = cycle.run_cycle(now=now + 30)
    if steady_profiler is not None:
        import pstats

        steady_profiler.disable()
        pstats.Stats(steady_profiler).sort_stats("cumulative").print_stats(40)
    assert steady.ran, "the scheduling lease was held"
    emit(
        "engine.db_steady_cycle_seconds",
        steady.seconds,
        "s",
        f"steady cycle after {changed}: {steady.seconds:.3f} s = read {steady.read_seconds:.3f} "
        f"+ plan {steady.plan_seconds:.3f} + write {steady.write_seconds:.3f}; "
        f"{len(steady.admitted)} admitted, {len(steady.preempted)} preempted, "
        f"{sum(steady_log.count.values())} statements (target <= 1 s)",
    )
    for key in sorted(steady_log.seconds, key=lambda k: -steady_log.seconds[k])[:6]:
        print(f"  {steady_log.count[key]:7d} x {key:42s} {steady_log.seconds[key]:8.3f} s")


# The cold cycle's preemptions requeue their victims, which the next cycles place again (some by
# preempting in turn): the steady figure is measured once a cycle decides nothing new.
SETTLE_ROUNDS = 5


def launch_admitted(now: float) -> None:
    """Mark the admitted requests running, as their launches would."""
    from datetime import UTC, datetime

    from django.db import transaction

    from scheduling.choices import RequestStatus
    from scheduling.models import GpuRequest
    from scheduling.services.lifecycle import Move, transition_many

    with transaction.atomic():
        admitted = list(GpuRequest.objects.filter(status=RequestStatus.ADMITTED))
        launching = transition_many(admitted, Move(RequestStatus.LAUNCHING))
        at = datetime.fromtimestamp(now, tz=UTC)
        transition_many(launching, Move(RequestStatus.RUNNING), started_at=at)


def change_one_percent(now: float) -> str:
    """Change 1 % of the queue (cancel and arrive) and of the running set (succeed)."""
    from datetime import UTC, datetime

    from django.db import transaction

    from scheduling.choices import RequestStatus
    from scheduling.models import GpuRequest
    from scheduling.services.lifecycle import Move, end_allocation, transition_many

    at = datetime.fromtimestamp(now, tz=UTC)
    with transaction.atomic():
        queued = list(GpuRequest.objects.filter(status=RequestStatus.QUEUED).order_by("pk"))
        running = list(GpuRequest.objects.filter(status=RequestStatus.RUNNING).order_by("pk"))
        cancelled = queued[::100]
        transition_many(cancelled, Move(RequestStatus.CANCELLED), finished_at=at)
        arrivals = [_copy_as_new(r) for r in queued[50::100]]
        GpuRequest.objects.bulk_create(arrivals)
        finished = running[::100]
        for request in transition_many(finished, Move(RequestStatus.SUCCEEDED), finished_at=at):
            end_allocation(request, reason="succeeded")
    return (
        f"{len(cancelled)} queued cancelled, {len(arrivals)} queued arrived, "
        f"{len(finished)} running finished"
    )


def _copy_as_new(request: Any) -> Any:
    request.pk = None
    request.id = None
    request.queue_position = None
    request.queue_rank = None
    request.waiting_reason = ""
    request.waiting_code = ""
    return request


if __name__ == "__main__":
    main()
