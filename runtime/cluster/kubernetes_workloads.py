"""The kubernetes backend's workloads: launch (single pods and gangs, all or nothing),
terminate, a new deadline, scale to zero and resume."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from runtime.cluster import dra_manifests, pod_manifests
from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster.base import ClusterError, PermanentClusterError
from runtime.cluster.kubernetes_client import KubernetesApi, labels_of, workload_key
from runtime.cluster.kubernetes_nodes import HAMI_REGISTER_ANNOTATION, parse_hami_devices
from runtime.cluster.kubernetes_status import job_deadline_seconds, suspended_since
from runtime.cluster.names import (
    ATTEMPT_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MAX_RUNTIME_ANNOTATION,
    PREEMPT_NOTICE_ANNOTATION,
    REASON_ANNOTATION,
    SUSPENDED_AT_ANNOTATION,
    SUSPENDED_REPLICAS_ANNOTATION,
    TERMINATE_REASON_ANNOTATION,
    notebook_secret_name,
    portal_route_name,
    workload_name,
)
from runtime.cluster.specs import RESUMABLE_KINDS, WorkloadSpec

log = logging.getLogger(__name__)


class KubernetesWorkloads(KubernetesApi):
    """Create, adopt, change and delete the objects of one attempt."""

    def launch(self, spec: WorkloadSpec) -> str:
        """Create the Job, or the Deployment and Service; adopt on 409 AlreadyExists.

        A retry of the same request and attempt creates nothing new. An object of that name
        that the portal did not make for this attempt is a permanent error, never adopted. A
        notebook or service first resumes the scaled-to-zero Deployment of an earlier attempt;
        a first attempt has none, so its launch skips that lookup (one list call fewer).
        """
        if spec.sharing == "vgpu" and spec.device_indexes and not spec.gpu_uuids:
            spec = self._with_hami_cards(spec)
        if spec.kind in RESUMABLE_KINDS and spec.attempt > 1:
            resumed = self.resume(spec)
            if resumed is not None:
                return resumed
        if spec.gang:
            return self._launch_gang(spec)
        self._create_workload(spec, manifests.workload_manifests(spec))
        return spec.name

    def _launch_gang(self, spec: WorkloadSpec) -> str:
        """The headless Service and the indexed Job, all or nothing: when any create fails,
        everything of the attempt made or adopted so far is deleted again before the error is
        raised, so no rank ever waits alone for peers that will not come."""
        made: list[tuple[str, str]] = []
        try:
            self._create_workload(spec, manifests.workload_manifests(spec), made=made)
        except ClusterError:
            deleters: dict[str, Callable[..., Any]] = {
                "Job": self.batch.delete_namespaced_job,
                "Service": self.core.delete_namespaced_service,
                "ResourceClaimTemplate": self.claim_templates.delete,
            }
            with contextlib.suppress(ClusterError):
                for kind, name in reversed(made):
                    try:
                        self._write(
                            deleters[kind],
                            name,
                            spec.namespace,
                            propagation_policy="Background",
                            grace_period_seconds=0,
                        )
                    except ClusterError as exc:
                        if exc.status != 404:
                            raise
                self._delete_pods(spec.namespace, spec.request_id, spec.attempt, grace_seconds=0)
            log.warning("gang %s/%s not launched; rolled back %s", spec.namespace, spec.name, made)
            raise
        return spec.name

    def _with_hami_cards(self, spec: WorkloadSpec) -> WorkloadSpec:
        """`spec` with the UUIDs and types of its cards, read from the node's HAMi
        registration (the portal's device index is the card's position there). Without a
        registration for them the spec stays as it is, and HAMi chooses."""
        if spec.node_name is None:
            return spec
        # The node's metadata only: its registration is an annotation.
        nodes = self._list_metadata(
            self.core.list_node, field_selector=f"metadata.name={spec.node_name}"
        )
        annotations = (nodes[0].get("annotations") or {}) if nodes else {}
        cards = parse_hami_devices(annotations.get(HAMI_REGISTER_ANNOTATION, ""))
        if not cards or any(not 0 <= i < len(cards) for i in spec.device_indexes):
            log.warning(
                "no HAMi registration for cards %s of %s", spec.device_indexes, spec.node_name
            )
            return spec
        chosen = [cards[i] for i in spec.device_indexes]
        return replace(
            spec,
            gpu_uuids=tuple(card.uuid for card in chosen),
            gpu_types=tuple(card.model for card in chosen if card.model),
        )

    def _create_workload(
        self,
        spec: WorkloadSpec,
        bodies: Sequence[dict[str, Any]],
        *,
        made: list[tuple[str, str]] | None = None,
    ) -> None:
        """Create each object, or adopt it when this attempt made it before; `made` collects
        (kind, name) of each one that is now the attempt's."""
        creators: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
            "Job": (self.batch.create_namespaced_job, self.batch.read_namespaced_job),
            "Deployment": (
                self.apps.create_namespaced_deployment,
                self.apps.read_namespaced_deployment,
            ),
            "Service": (self.core.create_namespaced_service, self.core.read_namespaced_service),
            # A notebook's token: adopted by its metadata, its value never read back.
            "Secret": (self.core.create_namespaced_secret, self._read_secret_metadata),
            "Ingress": (
                self.networking.create_namespaced_ingress,
                self.networking.read_namespaced_ingress,
            ),
            "HTTPRoute": (self.httproutes.create, self.httproutes.read),
            "ResourceClaimTemplate": (self.claim_templates.create, self.claim_templates.read),
        }
        for body in bodies:
            create, read = creators[body["kind"]]
            existing = self._create_or_read(create, read, body)
            name = body["metadata"]["name"]
            if existing is None:
                log.info("created %s %s/%s", body["kind"], spec.namespace, name)
                if made is not None:
                    made.append((body["kind"], name))
                continue
            key = workload_key(existing)
            if labels_of(existing).get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE or key != (
                spec.namespace,
                spec.request_id,
                spec.attempt,
            ):
                raise PermanentClusterError(
                    f"{body['kind']} {spec.namespace}/{name} exists but does not belong "
                    f"to request {spec.request_id} attempt {spec.attempt}",
                    status=409,
                    reason="AlreadyExists",
                )
            if made is not None:
                made.append((body["kind"], name))
            if existing.metadata is not None and existing.metadata.deletion_timestamp:
                raise PermanentClusterError(
                    f"{body['kind']} {spec.namespace}/{name} is being deleted; "
                    "launch a new attempt instead",
                    status=409,
                    reason="Terminating",
                )
            log.info("adopted existing %s %s/%s", body["kind"], spec.namespace, name)

    def give_notice(self, namespace: str, request_id: str, attempt: int, *, deadline: str) -> int:
        """Merge-patch the preemption notice (the RFC 3339 `deadline`) onto the attempt's pods
        that are not terminating yet, every rank of a gang; their downward-API volume shows it
        to the containers as a file. Returns how many pods were told; none left counts as done.
        """
        patch = {"metadata": {"annotations": {PREEMPT_NOTICE_ANNOTATION: deadline}}}
        told = 0
        for pod in self._list_all(
            self.core.list_namespaced_pod,
            namespace,
            label_selector=pod_manifests.workload_selector(request_id, attempt),
        ):
            if pod.metadata.deletion_timestamp:
                continue  # already stopping: its notice (if any) stands
            try:
                self._write(
                    self.core.patch_namespaced_pod,
                    pod.metadata.name,
                    namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                )
            except ClusterError as exc:
                if exc.status != 404:
                    raise
                continue
            told += 1
        return told

    def terminate(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        reason: str,
        grace_seconds: int = 30,
    ) -> None:
        """Record why, delete the workload objects in the background, then its pods.

        Pods are deleted explicitly so `grace_seconds` applies to them (the garbage collector
        would use the pod's own grace period). Anything already gone counts as done.
        """
        name = workload_name(request_id, attempt)
        deployment = self._find_deployment(namespace, request_id, attempt)
        # A resumed attempt lives in the Deployment (and Service) of the attempt it took over.
        serving = str(deployment.metadata.name) if deployment is not None else name
        patch = {"metadata": {"annotations": {TERMINATE_REASON_ANNOTATION: reason[:1000]}}}
        targets: list[tuple[str, Callable[..., Any], Callable[..., Any] | None]] = [
            (name, self.batch.delete_namespaced_job, self.batch.patch_namespaced_job),
            (
                serving,
                self.apps.delete_namespaced_deployment,
                self.apps.patch_namespaced_deployment,
            ),
            (serving, self.core.delete_namespaced_service, None),
            (serving, self.networking.delete_namespaced_ingress, None),
            (serving, self.httproutes.delete, None),
        ]
        if deployment is not None:  # its host's /_portal/ route and a notebook's token
            targets += [
                (portal_route_name(serving), self.core.delete_namespaced_service, None),
                (portal_route_name(serving), self.networking.delete_namespaced_ingress, None),
                (portal_route_name(serving), self.httproutes.delete, None),
                (notebook_secret_name(serving), self.core.delete_namespaced_secret, None),
            ]
        for name, delete, annotate in targets:
            try:
                if annotate is not None:
                    self._write(
                        annotate,
                        name,
                        namespace,
                        patch,
                        _content_type="application/merge-patch+json",
                    )
                self._write(
                    delete,
                    name,
                    namespace,
                    propagation_policy="Background",
                    grace_period_seconds=grace_seconds,
                )
            except ClusterError as exc:
                if exc.status != 404:
                    raise
        # A gang launched by an earlier version: one Job per rank, named after the rank (an
        # indexed Job and its headless Service went above).
        ranks = self._list_all(
            self.batch.list_namespaced_job,
            namespace,
            label_selector=pod_manifests.workload_selector(request_id, attempt),
        )
        for job in ranks:
            if job.metadata.name == name:
                continue
            try:
                self._write(
                    self.batch.patch_namespaced_job,
                    job.metadata.name,
                    namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                )
                self._write(
                    self.batch.delete_namespaced_job,
                    job.metadata.name,
                    namespace,
                    propagation_policy="Background",
                    grace_period_seconds=grace_seconds,
                )
            except ClusterError as exc:
                if exc.status != 404:
                    raise
        self._delete_pods(namespace, request_id, attempt, grace_seconds=grace_seconds)
        # DRA: the attempt's claim template (a gang's: one for every rank). Its claims belong to
        # the pods and go with them.
        self._delete_claim_templates(namespace, request_id, attempt, grace_seconds=grace_seconds)
        log.info("terminated %s/%s: %s", namespace, name, reason)

    def _delete_claim_templates(
        self, namespace: str, request_id: str, attempt: int, *, grace_seconds: int
    ) -> None:
        """Delete the attempt's claim templates; a cluster without the resource.k8s.io/v1 API
        (404), or a role without it (403) on a cluster with no DRA pool, has none."""
        try:
            self._write(
                self.custom.delete_collection_namespaced_custom_object,
                dra_manifests.GROUP,
                dra_manifests.VERSION,
                namespace,
                dra_manifests.TEMPLATE_PLURAL,
                label_selector=pod_manifests.workload_selector(request_id, attempt),
                propagation_policy="Background",
                grace_period_seconds=grace_seconds,
            )
        except ClusterError as exc:
            if exc.status not in (403, 404):
                raise
            if exc.status == 403:
                log.warning("may not delete ResourceClaimTemplates in %s: %s", namespace, exc)

    def set_deadline(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        max_runtime_seconds: int,
        running_since: datetime | None = None,
    ) -> None:
        """Merge-patch `activeDeadlineSeconds` (mutable on a Job) and the max-runtime
        annotation onto the attempt's Jobs, every rank of a gang; a Deployment has no deadline
        and only its annotation changes. The Job controller counts the deadline from the Job's
        `startTime`, so it becomes the seconds from that start to `running_since` (rounded up)
        plus the max runtime (`job_deadline_seconds`)."""
        annotations = {MAX_RUNTIME_ANNOTATION: str(max_runtime_seconds)}
        jobs = self._list_all(
            self.batch.list_namespaced_job,
            namespace,
            label_selector=pod_manifests.workload_selector(request_id, attempt),
        )
        for job in jobs:
            deadline = job_deadline_seconds(
                job, max_runtime_seconds=max_runtime_seconds, running_since=running_since
            )
            try:
                self._write(
                    self.batch.patch_namespaced_job,
                    job.metadata.name,
                    namespace,
                    {
                        "metadata": {"annotations": annotations},
                        "spec": {"activeDeadlineSeconds": deadline},
                    },
                    _content_type="application/merge-patch+json",
                )
            except ClusterError as exc:
                if exc.status != 404:
                    raise
        deployment = None if jobs else self._find_deployment(namespace, request_id, attempt)
        if deployment is not None:
            try:
                self._write(
                    self.apps.patch_namespaced_deployment,
                    str(deployment.metadata.name),
                    namespace,
                    {"metadata": {"annotations": annotations}},
                    _content_type="application/merge-patch+json",
                )
            except ClusterError as exc:
                if exc.status != 404:
                    raise
        log.info(
            "max runtime of %s/%s is now %s s",
            namespace,
            workload_name(request_id, attempt),
            max_runtime_seconds,
        )

    def scale_to_zero(self, namespace: str, request_id: str, attempt: int, *, reason: str) -> bool:
        """Scale a notebook's or service's Deployment to zero, keeping it and its Service; a
        Job (or nothing) is terminated instead. Pods are deleted at once, as in `terminate`,
        so the GPUs are free when this returns rather than after the ReplicaSet catches up."""
        deployment = self._find_deployment(namespace, request_id, attempt)
        if deployment is None:
            self.terminate(namespace, request_id, attempt, reason=reason)
            return False
        name = str(deployment.metadata.name)
        annotations = dict(deployment.metadata.annotations or {})
        recorded = annotations.get(SUSPENDED_REPLICAS_ANNOTATION)
        replicas = recorded or str(max(1, deployment.spec.replicas or 0))
        patch = {
            "metadata": {
                "annotations": {
                    SUSPENDED_REPLICAS_ANNOTATION: replicas,
                    SUSPENDED_AT_ANNOTATION: annotations.get(SUSPENDED_AT_ANNOTATION)
                    if recorded
                    else datetime.now(UTC).isoformat(timespec="seconds"),
                    TERMINATE_REASON_ANNOTATION: reason[:1000],
                }
            },
            "spec": {"replicas": 0},
        }
        self._write(
            self.apps.patch_namespaced_deployment,
            name,
            namespace,
            patch,
            _content_type="application/merge-patch+json",
        )
        self._delete_pods(namespace, request_id, attempt, grace_seconds=30)
        log.info("scaled %s/%s to zero (kept %s replicas): %s", namespace, name, replicas, reason)
        return True

    def resume(self, spec: WorkloadSpec) -> str | None:
        """Relabel the newest scaled-to-zero Deployment of an earlier attempt as `spec.attempt`,
        re-place it as `spec` says (the engine may have chosen another node) and scale it back
        to the recorded replicas. Its Service selects by workload name, so it follows."""
        candidates = self._list_all(
            self.apps.list_namespaced_deployment,
            spec.namespace,
            label_selector=pod_manifests.workload_selector(spec.request_id),
        )
        mine = [d for d in candidates if workload_key(d) is not None]
        for deployment in mine:
            key = workload_key(deployment)
            if key is not None and key[2] == spec.attempt:
                # This attempt's own (a launch adopts it), or one it took over already.
                return (
                    None if deployment.metadata.name == spec.name else str(deployment.metadata.name)
                )
        suspended = sorted(
            (
                d
                for d in mine
                if suspended_since(d) is not None
                and (workload_key(d) or ("", "", 0))[2] < spec.attempt
            ),
            key=lambda d: (workload_key(d) or ("", "", 0))[2],
        )
        if not suspended:
            return None
        deployment = suspended[-1]
        name = str(deployment.metadata.name)
        annotations = deployment.metadata.annotations or {}
        replicas = int(annotations.get(SUSPENDED_REPLICAS_ANNOTATION) or 1)
        template = deployment.spec.template.spec
        old_selector = dict(template.node_selector or {}) if template is not None else {}
        new_selector = pod_manifests.node_selector(spec)
        attempt_label = {ATTEMPT_LABEL: str(spec.attempt)}
        patch = {
            "metadata": {
                "labels": attempt_label,
                "annotations": {
                    SUSPENDED_REPLICAS_ANNOTATION: None,
                    SUSPENDED_AT_ANNOTATION: None,
                    TERMINATE_REASON_ANNOTATION: None,
                    REASON_ANNOTATION: spec.reason or None,
                },
            },
            "spec": {
                "replicas": replicas,
                "template": {
                    "metadata": {
                        "labels": attempt_label,
                        # HAMi's card selection follows the new placement (null: none).
                        "annotations": {
                            pod_manifests.HAMI_USE_UUID_ANNOTATION: None,
                            pod_manifests.HAMI_USE_TYPE_ANNOTATION: None,
                            **pod_manifests.hami_selection(spec),
                        },
                    },
                    "spec": {
                        # Merge patch: keys the new placement drops are removed with null.
                        "nodeSelector": {
                            **{key: None for key in old_selector if key not in new_selector},
                            **new_selector,
                        },
                        "affinity": pod_manifests.gpu_product_affinity(spec.gpu_products)
                        if spec.gpu_products and not pod_manifests.uses_claim(spec)
                        else None,
                        "priorityClassName": spec.priority_class_name,
                    },
                },
            },
        }
        if pod_manifests.uses_claim(spec):
            # DRA: this attempt's template (the new placement's cards), and the pods use it.
            self._create_workload(spec, manifests.claim_template_manifests(spec))
            patch["spec"]["template"]["spec"]["resourceClaims"] = [  # type: ignore[index]
                {
                    "name": dra_manifests.CLAIM_NAME,
                    "resourceClaimTemplateName": dra_manifests.claim_template_name(spec),
                }
            ]
        self._write(
            self.apps.patch_namespaced_deployment,
            name,
            spec.namespace,
            patch,
            _content_type="application/merge-patch+json",
        )
        if pod_manifests.uses_claim(spec) and name != spec.name:
            try:  # the earlier attempt's template, now unused
                self._write(self.claim_templates.delete, name, spec.namespace)
            except ClusterError as exc:
                if exc.status != 404:
                    raise
        log.info(
            "resumed %s/%s as attempt %s (%s replicas)",
            spec.namespace,
            name,
            spec.attempt,
            replicas,
        )
        return name

    def _delete_pods(
        self, namespace: str, request_id: str, attempt: int, *, grace_seconds: int
    ) -> None:
        try:
            self._write(
                self.core.delete_collection_namespaced_pod,
                namespace,
                label_selector=pod_manifests.workload_selector(request_id, attempt),
                grace_period_seconds=grace_seconds,
            )
        except ClusterError as exc:
            if exc.status != 404:
                raise
