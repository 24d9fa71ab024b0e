"""Peer benchmark: the real kube-scheduler against the portal's engine, same fleet, same requests.

    .venv/bin/python -m bench.peer                 # 500 kwok nodes x 8 GPUs, 4,000 one-GPU pods
    .venv/bin/python -m bench.peer --nodes 200 --pods 1600

kube-scheduler: the test bed (scripts/testbed) starts without the scheduler; N nodes carrying
`nvidia.com/gpu: 8` are registered through kwok, the pods (each `nvidia.com/gpu: 1`, tolerating
the GPU taint) are created while nothing can bind them, then kube-scheduler starts with its
client QPS raised to 5,000 (burst 10,000) so it is not measuring its rate limiter. Its rate is
pods / (last bind - first bind), from the pods' `PodScheduled` transition times (1 s resolution,
so one second is added to the span: that errs in the scheduler's favour). The wall time from the
scheduler's start (process start, informer sync included) is printed too.

engine: `scheduling.engine.plan` on a snapshot with the same nodes (one exclusive pool) and the
same requests (one team, quota large enough), median of --runs cycles.

Prints JSON lines: peer.kube_scheduler_pods_per_second, peer.engine_pods_per_second, peer.ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from scheduling.engine import (
    Flavor,
    GpuDevice,
    Node,
    Pool,
    Quota,
    Request,
    Snapshot,
    Taint,
    Team,
    plan,
)
from scripts.testbed.cluster import (
    GPU_TAINT,
    Testbed,
    TestbedError,
    missing_binaries,
    whole_card_node,
)

NAMESPACE = "peer-bench"
POOL = "peer-a100"


def _emit(metric: str, value: float, unit: str, **extra: Any) -> None:
    print(json.dumps({"metric": metric, "value": round(value, 3), "unit": unit, **extra}))


def pod_manifest(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"peer-{index:05d}", "labels": {"app": "peer-bench"}},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/ml/train:1.0",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "nodeSelector": {"gpu-portal/pool": POOL},
            "tolerations": [{**GPU_TAINT, "operator": "Equal"}],
            "restartPolicy": "Never",
        },
    }


def kube_scheduler_rate(nodes: int, gpus: int, pods: int) -> dict[str, float]:
    from kubernetes import client as k8s

    bed = Testbed(start_scheduler=False)
    try:
        bed.start(nodes=[])
        t0 = time.monotonic()
        bed.add_nodes(
            [whole_card_node(f"peer-{i:04d}", pool=POOL, gpus=gpus) for i in range(nodes)],
            timeout=600,
        )
        print(f"# {nodes} nodes Ready in {time.monotonic() - t0:.1f}s", file=sys.stderr)
        core: Any = k8s.CoreV1Api(bed.api_client())
        core.create_namespace({"metadata": {"name": NAMESPACE}}, _preload_content=False)
        bed.wait_default_service_account(NAMESPACE)
        t0 = time.monotonic()

        def create(index: int) -> None:
            core.create_namespaced_pod(NAMESPACE, pod_manifest(index), _preload_content=False)

        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(create, range(pods)))
        print(f"# {pods} pods created in {time.monotonic() - t0:.1f}s", file=sys.stderr)

        started = time.monotonic()
        bed.start_scheduler()
        bound: list[dict[str, Any]] = []
        while time.monotonic() - started < 1200:
            items = _list_pods(core)
            bound = [p for p in items if p["spec"].get("nodeName")]
            if len(bound) >= pods:
                break
            time.sleep(0.5)
        wall = time.monotonic() - started
        if len(bound) < pods:
            raise TestbedError(f"only {len(bound)} of {pods} pods were bound")
        times = sorted(
            datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")).timestamp()
            for p in bound
            for c in p["status"].get("conditions") or []
            if c["type"] == "PodScheduled" and c["status"] == "True"
        )
        span = times[-1] - times[0] + 1.0
        return {"rate": pods / span, "span": span, "wall": wall, "wall_rate": pods / wall}
    finally:
        bed.stop()


def _list_pods(core: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = None
    while True:
        response = core.list_namespaced_pod(
            NAMESPACE, limit=2000, _continue=token, _preload_content=False
        )
        page = json.loads(response.data)
        items += page["items"]
        token = page["metadata"].get("continue")
        if not token:
            return items


def engine_snapshot(nodes: int, gpus: int, pods: int) -> Snapshot:
    taint = Taint(key=GPU_TAINT["key"], value=GPU_TAINT["value"], effect="NoSchedule")
    return Snapshot(
        pools=(Pool(name=POOL, node_selector=(("gpu-portal/pool", POOL),), taints=(taint,)),),
        nodes=tuple(
            Node(
                id=f"peer-{i:04d}",
                pool=POOL,
                gpu_model="A100-80G",
                labels=(("gpu-portal/pool", POOL),),
                taints=(taint,),
            )
            for i in range(nodes)
        ),
        devices=tuple(
            GpuDevice(
                node_id=f"peer-{i:04d}", index=g, memory_total_mib=81920, memory_free_mib=81920
            )
            for i in range(nodes)
            for g in range(gpus)
        ),
        flavors=(Flavor(id="a100", kind="whole", gpu_model="A100-80G", memory_mib=81920),),
        teams=(Team(name="peer"),),
        quotas=(Quota(team="peer", flavor="a100", guaranteed=nodes * gpus, limit=nodes * gpus),),
        pending=tuple(
            Request(id=f"r{i}", team="peer", flavor="a100", submitted_at=1000.0 + i, gpu_count=1)
            for i in range(pods)
        ),
    )


def engine_rate(nodes: int, gpus: int, pods: int, runs: int) -> dict[str, float]:
    snapshot = engine_snapshot(nodes, gpus, pods)
    seconds: list[float] = []
    admitted = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        result = plan(snapshot, now=10_000.0)
        seconds.append(time.perf_counter() - t0)
        admitted = len(result.admissions)
    if admitted != pods:
        raise RuntimeError(f"the engine admitted {admitted} of {pods} requests")
    median = statistics.median(seconds)
    return {"rate": pods / median, "seconds": median}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peer")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=0, help="default: nodes x gpus (all fit)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    pods = args.pods or args.nodes * args.gpus
    if missing_binaries():
        print("test-bed binaries missing: run `make testbed` first", file=sys.stderr)
        return 2
    shape = {"nodes": args.nodes, "gpus_per_node": args.gpus, "pods": pods}
    engine = engine_rate(args.nodes, args.gpus, pods, args.runs)
    print(f"# engine: {pods} placements in {engine['seconds']:.3f}s", file=sys.stderr)
    kube = kube_scheduler_rate(args.nodes, args.gpus, pods)
    print(
        f"# kube-scheduler: {pods} binds over {kube['span']:.0f}s "
        f"(wall from process start {kube['wall']:.1f}s)",
        file=sys.stderr,
    )
    _emit("peer.kube_scheduler_pods_per_second", kube["rate"], "pods/s", **shape)
    _emit(
        "peer.kube_scheduler_wall_pods_per_second",
        kube["wall_rate"],
        "pods/s",
        note="from process start, informer sync included",
        **shape,
    )
    _emit("peer.engine_pods_per_second", engine["rate"], "pods/s", **shape)
    _emit("peer.ratio", engine["rate"] / kube["rate"], "x", target=10, **shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
