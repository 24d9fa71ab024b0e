"""What Kueue says about the portal's Jobs, read from its Workload objects (SCHEDULER=kueue).

Pure: Workload and LocalQueue objects as the API returns them (plain dicts) in, one `KueueView`
per portal Job out; `runtime/cluster/kubernetes_kueue.py` lists them,
`runtime/services/kueue_admission.py` writes the views onto requests.

A Workload is matched to its Job by the Job owner reference Kueue sets. Its state, first match
wins: Finished → finished; Evicted → evicted (preempted, deactivated, ...); Admitted → admitted;
otherwise pending, with the message of its QuotaReserved condition (why Kueue cannot reserve
quota: over the ClusterQueue's quota, borrowing limit, no flavor that fits).

The queue position is computed, not read: Kueue's visibility API (pending workloads) is served
by an aggregated API server, which not every cluster routes to. Pending Workloads are ordered per
ClusterQueue as BestEffortFIFO orders them: higher priority first, then older first (the name
breaks ties, which Kueue leaves open).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

KueueState = Literal["pending", "admitted", "evicted", "finished"]
# Kueue's preemption message: "Preempted to accommodate a workload (UID: …, JobUID: …) due to
# prioritization in the ClusterQueue; preemptor path: …; preemptee path: …".
_PREEMPTOR = re.compile(r"\(UID: (?P<uid>[^,]+), JobUID: [^)]*\) due to (?P<why>[^;]+)")
_PORTAL_JOB = re.compile(r"^gpr-(?P<request>[a-z0-9-]+)-a(?P<attempt>[0-9]+)$")

Manifest = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class KueueView:
    """Kueue's word on one Job: its state, Kueue's reason word and message, the ClusterQueue
    and, while pending, its place in that queue (1 = admitted next when quota frees)."""

    namespace: str
    job_name: str
    state: KueueState
    reason: str = ""
    message: str = ""
    cluster_queue: str = ""
    priority: int = 0
    position: int | None = None
    preempted_by_request: str | None = None
    admitted_at: datetime | None = None  # when Kueue admitted it (its Admitted condition)


def _conditions(workload: Manifest) -> dict[str, Mapping[str, Any]]:
    return {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or []}


def _is_true(conditions: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return conditions.get(kind, {}).get("status") == "True"


def _job_name(workload: Manifest) -> str | None:
    for owner in workload["metadata"].get("ownerReferences") or []:
        if owner.get("kind") == "Job" and str(owner.get("apiVersion", "")).startswith("batch/"):
            return str(owner["name"])
    return None


def request_of_job(job_name: str) -> str | None:
    """The portal request id a Job name (`gpr-<id>-a<attempt>`) belongs to, if it is one."""
    match = _PORTAL_JOB.match(job_name)
    return match["request"] if match else None


def _state(
    conditions: Mapping[str, Mapping[str, Any]], cluster_queue: str
) -> tuple[KueueState, str, str]:
    """(state, Kueue's reason word, the message to show) of one Workload."""
    if _is_true(conditions, "Finished"):
        finished = conditions["Finished"]
        return "finished", str(finished.get("reason", "")), str(finished.get("message", ""))
    if _is_true(conditions, "Evicted"):
        evicted = conditions["Evicted"]
        # The Preempted condition names the preemptor and why; Evicted says it was preempted.
        source = conditions["Preempted"] if _is_true(conditions, "Preempted") else evicted
        return "evicted", str(evicted.get("reason", "")), str(source.get("message", ""))
    if _is_true(conditions, "Admitted"):
        return "admitted", "Admitted", f"Admitted by Kueue in ClusterQueue {cluster_queue}."
    reserved = conditions.get("QuotaReserved")
    if reserved is None:
        return "pending", "Queued", f"Queued in Kueue's ClusterQueue {cluster_queue}."
    if reserved.get("status") == "True":
        return "pending", "QuotaReserved", "Quota reserved; waiting for Kueue's admission checks."
    return "pending", str(reserved.get("reason", "Pending")), str(reserved.get("message", ""))


def kueue_views(
    workloads: Iterable[Manifest], local_queues: Iterable[Manifest]
) -> dict[tuple[str, str], KueueView]:
    """One view per Job that has a Workload, keyed by (namespace, Job name)."""
    queue_of = {
        (q["metadata"]["namespace"], q["metadata"]["name"]): str(q["spec"].get("clusterQueue", ""))
        for q in local_queues
    }
    views: dict[tuple[str, str], KueueView] = {}
    job_of_uid: dict[str, str] = {}
    pending: dict[str, list[tuple[int, datetime, str, tuple[str, str]]]] = defaultdict(list)
    for workload in workloads:
        metadata = workload["metadata"]
        job_name = _job_name(workload)
        if job_name is None:
            continue
        namespace = str(metadata["namespace"])
        job_of_uid[str(metadata.get("uid", ""))] = job_name
        spec, status = workload.get("spec") or {}, workload.get("status") or {}
        admission = status.get("admission") or {}
        cluster_queue = str(
            admission.get("clusterQueue")
            or queue_of.get((namespace, str(spec.get("queueName", ""))), "")
        )
        conditions = _conditions(workload)
        state, reason, message = _state(conditions, cluster_queue)
        key = (namespace, job_name)
        priority = int(spec.get("priority") or 0)
        views[key] = KueueView(namespace, job_name, state, reason, message, cluster_queue, priority)
        if state == "admitted":
            admitted = conditions["Admitted"].get("lastTransitionTime")
            if admitted:
                views[key] = replace(views[key], admitted_at=datetime.fromisoformat(admitted))
        if state == "pending" and not _is_true(conditions, "QuotaReserved"):
            created = datetime.fromisoformat(str(metadata["creationTimestamp"]))
            pending[cluster_queue].append((-priority, created, str(metadata["name"]), key))
    for queued in pending.values():
        for position, (*_order, key) in enumerate(sorted(queued), start=1):
            views[key] = replace(views[key], position=position)
    for key, view in views.items():
        if view.state == "evicted":
            views[key] = _with_preemptor(view, job_of_uid)
    return views


def _with_preemptor(view: KueueView, job_of_uid: Mapping[str, str]) -> KueueView:
    """Name the portal request that preempted this one, when Kueue's message says which."""
    match = _PREEMPTOR.search(view.message)
    if match is None:
        return view
    request = request_of_job(job_of_uid.get(match["uid"], ""))
    if request is None:
        return view
    message = f"Kueue preempted it for request {request} ({match['why'].strip()})."
    return replace(view, message=message, preempted_by_request=request)
