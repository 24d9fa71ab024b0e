"""The kubernetes backend's reading of what runs: one workload's status, all of them, and a
watch of their pods, mapped by `kubernetes_status`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from typing import Any

from runtime.cluster import pod_manifests
from runtime.cluster.kubernetes_client import (
    CLIENT_ERRORS,
    KubernetesApi,
    classify_api_exception,
    workload_key,
)
from runtime.cluster.kubernetes_nodes import node_inventory
from runtime.cluster.kubernetes_status import (
    gang_status,
    is_gang,
    with_failed_create,
    with_hami_assignment,
    workload_status,
)
from runtime.cluster.names import workload_name
from runtime.cluster.reports import WorkloadEvent, WorkloadStatus

log = logging.getLogger(__name__)


class KubernetesSync(KubernetesApi):
    """Workload status for sync: read one, list all, watch for changes."""

    def get_workload(self, namespace: str, request_id: str, attempt: int) -> WorkloadStatus:
        name = workload_name(request_id, attempt)
        job = self._read_or_none(self.batch.read_namespaced_job, name, namespace)
        deployment = None
        if job is None:
            deployment = self._find_deployment(namespace, request_id, attempt)
        pods = self._list_all(
            self.core.list_namespaced_pod,
            namespace,
            label_selector=pod_manifests.workload_selector(request_id, attempt),
        )
        if job is not None and is_gang([job]):  # a gang's indexed Job
            return gang_status(
                namespace=namespace, request_id=request_id, attempt=attempt, jobs=[job], pods=pods
            )
        if job is None and deployment is None:
            jobs = self._list_all(
                self.batch.list_namespaced_job,
                namespace,
                label_selector=pod_manifests.workload_selector(request_id, attempt),
            )
            if is_gang([*jobs, *pods]):
                return gang_status(
                    namespace=namespace,
                    request_id=request_id,
                    attempt=attempt,
                    jobs=jobs,
                    pods=pods,
                )
        status = workload_status(
            namespace=namespace,
            request_id=request_id,
            attempt=attempt,
            job=job,
            deployment=deployment,
            pods=pods,
        )
        if job is not None and status.reason == "NoPod":
            # Why the Job controller made no pod is only said in an event (quota refusals).
            events = self._list_all(
                self.core.list_namespaced_event,
                namespace,
                field_selector=f"involvedObject.kind=Job,involvedObject.name={name},"
                "reason=FailedCreate",
            )
            status = with_failed_create(status, events)
        return self._with_device_indexes([with_hami_assignment(status, pods)])[0]

    def _with_device_indexes(self, statuses: list[WorkloadStatus]) -> list[WorkloadStatus]:
        """Map the cards HAMi assigned (UUIDs) onto the portal's device indexes, their
        positions in the node's HAMi registration; one node list for all of `statuses`."""
        names = {s.node_name for s in statuses if s.gpu_uuids and s.node_name}
        if not names:
            return statuses
        # One node by name when the workloads run on one (a single changed one is read alone).
        only = {"field_selector": f"metadata.name={next(iter(names))}"} if len(names) == 1 else {}
        registered = {
            inventory.name: [card.uuid for card in inventory.hami_devices]
            for inventory in map(node_inventory, self._list_all(self.core.list_node, **only))
        }
        out = []
        for status in statuses:
            cards = registered.get(status.node_name or "", [])
            if status.gpu_uuids and all(uuid in cards for uuid in status.gpu_uuids):
                status = replace(
                    status, device_indexes=tuple(cards.index(u) for u in status.gpu_uuids)
                )
            out.append(status)
        return out

    def list_workloads(
        self,
        namespaces: Sequence[str] | None = None,
        *,
        request_ids: Collection[str] | None = None,
    ) -> list[WorkloadStatus]:
        """Every portal workload (Jobs, Deployments and their pods), sorted by key; with
        `request_ids`, only theirs (a set-based label selector, up to
        REQUEST_IDS_PER_SELECTOR ids per list)."""
        # (list Jobs, list Deployments, list pods, positional arguments) per namespace scope.
        scopes: list[
            tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], tuple[str, ...]]
        ]
        if namespaces is None:
            scopes = [
                (
                    self.batch.list_job_for_all_namespaces,
                    self.apps.list_deployment_for_all_namespaces,
                    self.core.list_pod_for_all_namespaces,
                    (),
                )
            ]
        else:
            scopes = [
                (
                    self.batch.list_namespaced_job,
                    self.apps.list_namespaced_deployment,
                    self.core.list_namespaced_pod,
                    (ns,),
                )
                for ns in namespaces
            ]
        jobs: list[Any] = []
        deployments: list[Any] = []
        pods: list[Any] = []
        for selector in pod_manifests.workload_selectors(request_ids):
            for list_jobs, list_deployments, list_pods, args in scopes:
                jobs += self._list_all(list_jobs, *args, label_selector=selector)
                deployments += self._list_all(list_deployments, *args, label_selector=selector)
                pods += self._list_all(list_pods, *args, label_selector=selector)
        groups: dict[tuple[str, str, int], dict[str, Any]] = {}
        for kind, objects in (("job", jobs), ("deployment", deployments), ("pods", pods)):
            for obj in objects:
                key = workload_key(obj)
                if key is None:
                    log.warning("ignoring %s with broken portal labels", obj.metadata.name)
                    continue
                group = groups.setdefault(
                    key, {"job": None, "deployment": None, "pods": [], "jobs": []}
                )
                if kind == "pods":
                    group["pods"].append(obj)
                else:
                    group[kind] = obj
                if kind == "job":
                    group["jobs"].append(obj)
        statuses = []
        for (ns, request_id, attempt), group in sorted(groups.items()):
            if is_gang([*group["jobs"], *group["pods"]]):
                statuses.append(
                    gang_status(
                        namespace=ns,
                        request_id=request_id,
                        attempt=attempt,
                        jobs=group["jobs"],
                        pods=group["pods"],
                    )
                )
                continue
            status = workload_status(
                namespace=ns,
                request_id=request_id,
                attempt=attempt,
                job=group["job"],
                deployment=group["deployment"],
                pods=group["pods"],
            )
            statuses.append(with_hami_assignment(status, group["pods"]))
        return self._with_device_indexes(statuses)

    def _pods_resource_version(self) -> str:
        page = self._call(
            self.core.list_pod_for_all_namespaces,
            label_selector=pod_manifests.workload_selector(),
            limit=1,
        )
        return str(page.metadata.resource_version if page.metadata else "")

    def watch_workloads(
        self, resource_version: str | None = None, *, timeout_seconds: int = 300
    ) -> Iterator[WorkloadEvent]:
        """Stream pod changes of portal workloads as hints to re-read them (`get_workload`).

        Without a resource version, or when the server answers 410 Gone because ours is too
        old, it yields `resync` with a fresh version: the caller re-lists (`list_workloads`) and
        watches on from there. The iterator ends when the server closes the watch (after about
        `timeout_seconds`) or after a resync; the caller starts it again with the last version.
        """
        if resource_version is None:
            yield WorkloadEvent(type="resync", resource_version=self._pods_resource_version())
            return
        watcher = self._watch_factory()
        try:
            for event in watcher.stream(
                self.core.list_pod_for_all_namespaces,
                label_selector=pod_manifests.workload_selector(),
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=True,
                # A client-side bound too, so a connection that silently died cannot hang us.
                _request_timeout=timeout_seconds + self._timeout,
            ):
                event_type = event.get("type")
                obj = event.get("object")
                if event_type == "BOOKMARK" or not hasattr(obj, "metadata"):
                    version = watcher.resource_version or resource_version
                    yield WorkloadEvent(type="bookmark", resource_version=str(version))
                    continue
                key = workload_key(obj)
                if key is None:
                    continue
                yield WorkloadEvent(
                    type="deleted" if event_type == "DELETED" else "changed",
                    resource_version=str(obj.metadata.resource_version),
                    namespace=key[0],
                    request_id=key[1],
                    attempt=key[2],
                )
        except CLIENT_ERRORS as exc:
            error = classify_api_exception(exc)
            if error.status != 410:
                raise error from exc
            log.info("watch resource version %s expired; asking for a re-list", resource_version)
            yield WorkloadEvent(type="resync", resource_version=self._pods_resource_version())
