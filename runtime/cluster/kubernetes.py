"""The `kubernetes` cluster backend: the official client talking to a real API server.

This is the only module of the project that loads the `kubernetes` package. It classifies client
errors (`classify_api_exception`), creates or adopts the objects `kubernetes_manifests` builds,
and lists and watches what runs, mapping it with `kubernetes_status`. It never retries on its
own (the Celery layer retries `TransientClusterError` with jittered backoff), except that an
expired list or watch is listed again (410 Gone).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import urllib3.exceptions
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from runtime.cluster import dra_manifests
from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster.base import ClusterError, PermanentClusterError, TransientClusterError
from runtime.cluster.kubernetes_custom import NamespacedCustomResource
from runtime.cluster.kubernetes_project_data import KubernetesProjectData
from runtime.cluster.kubernetes_status import (
    dra_gpus,
    foreign_gpu_usage,
    gang_status,
    is_gang,
    node_inventory,
    quantity,
    suspended_since,
    with_dra_gpus,
    with_failed_create,
    with_hami_assignment,
    workload_status,
)
from runtime.cluster.names import (
    ATTEMPT_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MAX_RUNTIME_ANNOTATION,
    REASON_ANNOTATION,
    REQUEST_LABEL,
    SUSPENDED_AT_ANNOTATION,
    SUSPENDED_REPLICAS_ANNOTATION,
    TERMINATE_REASON_ANNOTATION,
    workload_name,
)
from runtime.cluster.reports import (
    ClusterEvent,
    LogLine,
    NodeInventory,
    WorkloadEvent,
    WorkloadStatus,
)
from runtime.cluster.specs import RESUMABLE_KINDS, PrioritySpec, ProjectSpec, WorkloadSpec

log = logging.getLogger(__name__)

T = TypeVar("T")

TRANSIENT_STATUSES = frozenset({408, 409, 410, 425, 429, 500, 502, 503, 504})
LIST_PAGE_SIZE = 500

# What a client call can raise besides bugs; ValueError covers the client's (pydantic) models
# refusing a response body they did not expect.
CLIENT_ERRORS = (
    ApiException,
    urllib3.exceptions.HTTPError,
    OSError,
    k8s_config.ConfigException,
    ValueError,
)


# Errors -----------------------------------------------------------------------------------


def _status_details(exc: ApiException) -> tuple[str, str]:
    """The (reason, message) of the API's Status body, falling back to the HTTP reason."""
    reason, message = str(exc.reason or ""), ""
    if exc.body:
        try:
            body = json.loads(exc.body)
        except (TypeError, ValueError):
            message = str(exc.body)[:500]
        else:
            if isinstance(body, dict):
                reason = str(body.get("reason") or reason)
                message = str(body.get("message") or "")
    return reason, message


def _retry_after(exc: ApiException) -> float | None:
    headers = exc.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def classify_api_exception(exc: BaseException) -> ClusterError:
    """Map a client, transport or config error onto a transient or permanent `ClusterError`.

    Transient: timeouts, refused or dropped connections, 408/409 conflicts/410 Gone/429/5xx, and
    403 from a namespace that is being deleted. Permanent: everything the same request will hit
    again (400, 401, 403, 404, 422, TLS failures, a broken kubeconfig).
    """
    if isinstance(exc, ClusterError):
        return exc
    if isinstance(exc, ApiException):
        status = int(exc.status) if exc.status else None
        reason, message = _status_details(exc)
        text = f"Kubernetes API {status or '-'} {reason}: {message}".strip().rstrip(":")
        if status is None:
            return TransientClusterError(text, reason=reason)
        if status in TRANSIENT_STATUSES:
            return TransientClusterError(
                text, status=status, reason=reason, retry_after_seconds=_retry_after(exc)
            )
        if status == 403 and "being terminated" in message:
            return TransientClusterError(text, status=status, reason="NamespaceTerminating")
        return PermanentClusterError(text, status=status, reason=reason)
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(
        exc.reason, urllib3.exceptions.SSLError
    ):
        return PermanentClusterError(f"TLS to the API server failed: {exc.reason}", reason="TLS")
    if isinstance(exc, urllib3.exceptions.SSLError):
        return PermanentClusterError(f"TLS to the API server failed: {exc}", reason="TLS")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        # MaxRetryError, timeouts, NewConnectionError, ProtocolError, ConnectionRefusedError...
        return TransientClusterError(
            f"cannot reach the API server: {exc}", reason=type(exc).__name__
        )
    if isinstance(exc, k8s_config.ConfigException):
        return PermanentClusterError(f"Kubernetes client configuration: {exc}", reason="Config")
    if isinstance(exc, ValueError):
        return PermanentClusterError(f"unexpected API response: {exc}", reason="BadResponse")
    return PermanentClusterError(f"unexpected error: {exc!r}", reason=type(exc).__name__)


# The backend -------------------------------------------------------------------------------


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> k8s.ApiClient:
    """An ApiClient from an explicit kubeconfig, else the in-cluster service account, else the
    default kubeconfig (~/.kube/config)."""
    try:
        if kubeconfig:
            return k8s_config.new_client_from_config(config_file=kubeconfig, context=context)
        try:
            configuration = k8s.Configuration()
            k8s_config.load_incluster_config(client_configuration=configuration)
            return k8s.ApiClient(configuration)
        except k8s_config.ConfigException:
            return k8s_config.new_client_from_config(context=context)
    except (k8s_config.ConfigException, OSError) as exc:
        raise PermanentClusterError(f"cannot load Kubernetes configuration: {exc}") from exc


def api_client_from_kubeconfig_text(text: str) -> k8s.ApiClient:
    """An ApiClient from a kubeconfig held as text (a registered cluster's, unsealed), using its
    current context."""
    try:
        config = yaml.safe_load(text)
        if not isinstance(config, dict):
            raise k8s_config.ConfigException("the kubeconfig is not a YAML mapping")
        return k8s_config.new_client_from_config_dict(config)
    except (k8s_config.ConfigException, yaml.YAMLError, OSError) as exc:
        raise PermanentClusterError(f"cannot load the cluster's kubeconfig: {exc}") from exc


def _same_quantities(have: Mapping[str, Any] | None, want: Mapping[str, str]) -> bool:
    have = have or {}
    if set(have) != set(want):
        return False
    try:
        return all(quantity(str(have[k])) == quantity(want[k]) for k in want)
    except ValueError:
        return False


def _labels_of(obj: Any) -> Mapping[str, str]:
    metadata = getattr(obj, "metadata", None)
    return (metadata.labels if metadata is not None else None) or {}


def _resource_version(obj: Any) -> str | None:
    return obj.metadata.resource_version if obj.metadata is not None else None


def _workload_key(obj: Any) -> tuple[str, str, int] | None:
    """(namespace, request id, attempt) from an object's labels, or None if they are broken."""
    labels = _labels_of(obj)
    request_id, attempt = labels.get(REQUEST_LABEL), labels.get(ATTEMPT_LABEL)
    if not request_id or not attempt or not attempt.isdigit():
        return None
    try:
        workload_name(request_id, int(attempt))
    except ValueError:
        return None
    return str(obj.metadata.namespace), request_id, int(attempt)


class KubernetesClusterBackend(KubernetesProjectData):
    """`ClusterBackend` on a real cluster through the official client.

    Point it at a cluster with a kubeconfig path (and context), let it find the in-cluster
    service account, or hand it a ready `ApiClient` (tests, a test-bed API server).
    """

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        api_client: k8s.ApiClient | None = None,
        request_timeout_seconds: float = 30.0,
        watch_factory: Callable[[], Any] = k8s_watch.Watch,
    ) -> None:
        self.api_client = api_client or load_api_client(kubeconfig, context)
        self.core = k8s.CoreV1Api(self.api_client)
        self.batch = k8s.BatchV1Api(self.api_client)
        self.apps = k8s.AppsV1Api(self.api_client)
        self.scheduling = k8s.SchedulingV1Api(self.api_client)
        self.networking = k8s.NetworkingV1Api(self.api_client)
        self._timeout = request_timeout_seconds
        self._watch_factory = watch_factory

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One API call with the request timeout; client errors become `ClusterError`s."""
        try:
            return fn(*args, _request_timeout=self._timeout, **kwargs)
        except CLIENT_ERRORS as exc:
            raise classify_api_exception(exc) from exc

    def _write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """A create, replace, patch or delete whose answer the backend does not need.

        The raw response is drained instead of deserialised: the API answers deletes with
        either the object or a Status, and the client's strict models reject the one they do
        not expect (a Status for a deleted Service, for instance). Errors still raise.
        """
        response = self._call(fn, *args, _preload_content=False, **kwargs)
        getattr(response, "data", None)
        release = getattr(response, "release_conn", None)
        if callable(release):
            release()

    def _read_or_none(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return self._call(fn, *args)
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise

    def _create_or_read(
        self, create: Callable[..., Any], read: Callable[..., T], body: dict[str, Any]
    ) -> T | None:
        """Create `body`; on 409 AlreadyExists read and return the existing object instead.

        None means it was created. Create first rather than read first: one call in the common
        case and no window between the read and the create.
        """
        name = body["metadata"]["name"]
        namespace = body["metadata"].get("namespace")
        scope = (namespace,) if namespace else ()
        try:
            # Strict: the server refuses unknown fields instead of silently dropping them.
            self._write(create, *scope, body, field_validation="Strict")
            return None
        except ClusterError as exc:
            if exc.status != 409:
                raise
        return self._call(read, name, *scope)

    # Inventory and cluster-wide objects ------------------------------------------------------

    def sync_inventory(self) -> list[NodeInventory]:
        """Every node, with the GPU resources that pods the portal did not create hold on it
        (bound, unfinished pods without the portal's label, from every namespace), and the GPUs
        the ResourceSlices of NVIDIA's DRA driver offer on it."""
        nodes = self._list_all(self.core.list_node)
        slices = dra_gpus(self._resource_slices())
        others = self._list_all(
            self.core.list_pod_for_all_namespaces,
            label_selector=f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}",
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
        )
        foreign = foreign_gpu_usage(others)
        inventory = (
            replace(
                with_dra_gpus(node, slices.get(node.name)),
                foreign_usage=foreign.get(node.name, {}),
            )
            for node in map(node_inventory, nodes)
        )
        return sorted(inventory, key=lambda n: n.name)

    def _resource_slices(self) -> list[dict[str, Any]]:
        """The ResourceSlices of NVIDIA's DRA driver; none on a cluster without the
        resource.k8s.io/v1 API (404) or where the portal may not list them (403)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        try:
            while True:
                page: Any = self._call(
                    self.custom.list_cluster_custom_object,
                    dra_manifests.GROUP,
                    dra_manifests.VERSION,
                    "resourceslices",
                    field_selector=f"spec.driver={dra_manifests.DRIVER}",
                    limit=LIST_PAGE_SIZE,
                    _continue=token,
                )
                items.extend(page.get("items") or [])
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    return items
        except ClusterError as exc:
            if exc.status not in (403, 404):
                raise
            log.info("no ResourceSlices read (%s): DRA pools show no GPUs", exc.status)
            return []

    def ensure_priority_classes(self, specs: Sequence[PrioritySpec]) -> None:
        """Create the classes; converge one whose value or policy drifted by re-creating it.

        Both fields are immutable, so drift means delete-and-create; only classes carrying the
        portal's label are touched, a same-named foreign class is a permanent error. Running
        pods keep their resolved priority through the gap.
        """
        for spec in specs:
            body = manifests.priority_class_manifest(spec)
            existing = self._create_or_read(
                self.scheduling.create_priority_class, self.scheduling.read_priority_class, body
            )
            if existing is None:
                continue
            if existing.value == spec.value and existing.preemption_policy in (
                None,
                spec.preemption_policy,
            ):
                continue
            if _labels_of(existing).get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
                raise PermanentClusterError(
                    f"PriorityClass {spec.name} exists with value {existing.value} and is not "
                    "managed by the portal; rename the portal's class or remove it",
                    status=409,
                    reason="AlreadyExists",
                )
            log.info(
                "re-creating PriorityClass %s: value %s → %s", spec.name, existing.value, spec.value
            )
            self._write(self.scheduling.delete_priority_class, spec.name)
            self._write(self.scheduling.create_priority_class, body)

    def ensure_project(self, spec: ProjectSpec) -> None:
        """Namespace, ResourceQuota and LimitRange for a project; adopts and converges."""
        # 1. The namespace: adopt an existing one by adding the portal's labels.
        ns_body = manifests.namespace_manifest(spec)
        namespace = self._create_or_read(
            self.core.create_namespace, self.core.read_namespace, ns_body
        )
        if namespace is not None:
            if namespace.status is not None and namespace.status.phase == "Terminating":
                raise TransientClusterError(
                    f"namespace {spec.namespace} is being deleted", reason="NamespaceTerminating"
                )
            have = _labels_of(namespace)
            # Ownership labels are ours to set; a Pod Security level an admin chose stays.
            want = {
                k: v
                for k, v in ns_body["metadata"]["labels"].items()
                if k != manifests.POD_SECURITY_LABEL or k not in have
            }
            if any(have.get(k) != v for k, v in want.items()):
                patch = {"metadata": {"labels": want}}
                self._write(
                    self.core.patch_namespace,
                    spec.namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                )
        # 2. The quota: replace it when its hard limits differ from the portal's.
        quota_body = manifests.resource_quota_manifest(spec)
        quota = self._create_or_read(
            self.core.create_namespaced_resource_quota,
            self.core.read_namespaced_resource_quota,
            quota_body,
        )
        if quota is not None and not _same_quantities(
            quota.spec.hard if quota.spec else None, quota_body["spec"]["hard"]
        ):
            quota_body["metadata"]["resourceVersion"] = _resource_version(quota)
            self._write(
                self.core.replace_namespaced_resource_quota,
                manifests.QUOTA_NAME,
                spec.namespace,
                quota_body,
            )
        # 3. The limit range: the same, or gone when the project has no defaults.
        if spec.limit_range.is_empty:
            try:
                self._write(
                    self.core.delete_namespaced_limit_range,
                    manifests.LIMIT_RANGE_NAME,
                    spec.namespace,
                )
            except ClusterError as exc:
                if exc.status != 404:
                    raise
            return
        limits_body = manifests.limit_range_manifest(spec)
        limit_range = self._create_or_read(
            self.core.create_namespaced_limit_range,
            self.core.read_namespaced_limit_range,
            limits_body,
        )
        if limit_range is not None and not self._same_limits(
            limit_range, limits_body["spec"]["limits"]
        ):
            limits_body["metadata"]["resourceVersion"] = _resource_version(limit_range)
            self._write(
                self.core.replace_namespaced_limit_range,
                manifests.LIMIT_RANGE_NAME,
                spec.namespace,
                limits_body,
            )

    def _same_limits(self, existing: k8s.V1LimitRange, want: list[dict[str, Any]]) -> bool:
        have = self.api_client.sanitize_for_serialization(
            (existing.spec.limits if existing.spec else None) or []
        )
        if len(have) != len(want):
            return False
        for have_item, want_item in zip(have, want, strict=True):
            if have_item.get("type") != want_item.get("type"):
                return False
            for key in ("default", "defaultRequest", "max"):
                if not _same_quantities(have_item.get(key), want_item.get(key, {})):
                    return False
        return True

    # Workloads -------------------------------------------------------------------------------

    def launch(self, spec: WorkloadSpec) -> str:
        """Create the Job, or the Deployment and Service; adopt on 409 AlreadyExists.

        A retry of the same request and attempt creates nothing new. An object of that name
        that the portal did not make for this attempt is a permanent error, never adopted. A
        notebook or service first resumes the scaled-to-zero Deployment of an earlier attempt.
        """
        if spec.sharing == "vgpu" and spec.device_indexes and not spec.gpu_uuids:
            spec = self._with_hami_cards(spec)
        if spec.kind in RESUMABLE_KINDS:
            resumed = self.resume(spec)
            if resumed is not None:
                return resumed
        if spec.gang:
            return self._launch_gang(spec)
        self._create_workload(spec, manifests.workload_manifests(spec))
        return spec.name

    def _launch_gang(self, spec: WorkloadSpec) -> str:
        """The headless Service and one Job per rank, all or nothing: when any create fails,
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
        nodes = self._list_all(
            self.core.list_node, field_selector=f"metadata.name={spec.node_name}"
        )
        cards = node_inventory(nodes[0]).hami_devices if nodes else ()
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
            key = _workload_key(existing)
            if _labels_of(existing).get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE or key != (
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
        # A gang's ranks: one Job each, named after the rank (its headless Service went above).
        ranks = self._list_all(
            self.batch.list_namespaced_job,
            namespace,
            label_selector=manifests.workload_selector(request_id, attempt),
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
        # DRA: the attempt's claim templates (a gang has one per rank). Their claims belong to
        # the pods and go with them.
        self._delete_claim_templates(namespace, request_id, attempt, grace_seconds=grace_seconds)
        log.info("terminated %s/%s: %s", namespace, name, reason)

    # DRA claim templates (resource.k8s.io/v1) ---------------------------------------------------

    @property
    def claim_templates(self) -> NamespacedCustomResource:
        return NamespacedCustomResource(
            self.custom, dra_manifests.GROUP, dra_manifests.VERSION, dra_manifests.TEMPLATE_PLURAL
        )

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
                label_selector=manifests.workload_selector(request_id, attempt),
                propagation_policy="Background",
                grace_period_seconds=grace_seconds,
            )
        except ClusterError as exc:
            if exc.status not in (403, 404):
                raise
            if exc.status == 403:
                log.warning("may not delete ResourceClaimTemplates in %s: %s", namespace, exc)

    def _find_deployment(self, namespace: str, request_id: str, attempt: int) -> Any | None:
        """The Deployment serving this attempt: its own by name, else one it resumed (labelled
        with this attempt). One of that name relabelled to a later attempt is not this one's."""
        name = workload_name(request_id, attempt)
        found = self._read_or_none(self.apps.read_namespaced_deployment, name, namespace)
        if found is not None and _workload_key(found) == (namespace, request_id, attempt):
            return found
        taken_over = self._list_all(
            self.apps.list_namespaced_deployment,
            namespace,
            label_selector=manifests.workload_selector(request_id, attempt),
        )
        return taken_over[0] if taken_over else None

    def set_deadline(
        self, namespace: str, request_id: str, attempt: int, *, max_runtime_seconds: int
    ) -> None:
        """Merge-patch `activeDeadlineSeconds` (mutable on a Job) and the max-runtime
        annotation onto the attempt's Jobs, every rank of a gang; a Deployment has no deadline
        and only its annotation changes. The Job controller counts the deadline from the Job's
        `startTime`, so the work now ends at start + `max_runtime_seconds`."""
        annotations = {MAX_RUNTIME_ANNOTATION: str(max_runtime_seconds)}
        jobs = self._list_all(
            self.batch.list_namespaced_job,
            namespace,
            label_selector=manifests.workload_selector(request_id, attempt),
        )
        for job in jobs:
            try:
                self._write(
                    self.batch.patch_namespaced_job,
                    job.metadata.name,
                    namespace,
                    {
                        "metadata": {"annotations": annotations},
                        "spec": {"activeDeadlineSeconds": max_runtime_seconds},
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
            label_selector=manifests.workload_selector(spec.request_id),
        )
        mine = [d for d in candidates if _workload_key(d) is not None]
        for deployment in mine:
            key = _workload_key(deployment)
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
                and (_workload_key(d) or ("", "", 0))[2] < spec.attempt
            ),
            key=lambda d: (_workload_key(d) or ("", "", 0))[2],
        )
        if not suspended:
            return None
        deployment = suspended[-1]
        name = str(deployment.metadata.name)
        annotations = deployment.metadata.annotations or {}
        replicas = int(annotations.get(SUSPENDED_REPLICAS_ANNOTATION) or 1)
        template = deployment.spec.template.spec
        old_selector = dict(template.node_selector or {}) if template is not None else {}
        new_selector = manifests.node_selector(spec)
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
                            manifests.HAMI_USE_UUID_ANNOTATION: None,
                            manifests.HAMI_USE_TYPE_ANNOTATION: None,
                            **manifests.hami_selection(spec),
                        },
                    },
                    "spec": {
                        # Merge patch: keys the new placement drops are removed with null.
                        "nodeSelector": {
                            **{key: None for key in old_selector if key not in new_selector},
                            **new_selector,
                        },
                        "affinity": manifests.gpu_product_affinity(spec.gpu_products)
                        if spec.gpu_products and not manifests.uses_claim(spec)
                        else None,
                        "priorityClassName": spec.priority_class_name,
                    },
                },
            },
        }
        if manifests.uses_claim(spec):
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
        if manifests.uses_claim(spec) and name != spec.name:
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
                label_selector=manifests.workload_selector(request_id, attempt),
                grace_period_seconds=grace_seconds,
            )
        except ClusterError as exc:
            if exc.status != 404:
                raise

    def get_workload(self, namespace: str, request_id: str, attempt: int) -> WorkloadStatus:
        name = workload_name(request_id, attempt)
        job = self._read_or_none(self.batch.read_namespaced_job, name, namespace)
        deployment = None
        if job is None:
            deployment = self._find_deployment(namespace, request_id, attempt)
        pods = self._list_all(
            self.core.list_namespaced_pod,
            namespace,
            label_selector=manifests.workload_selector(request_id, attempt),
        )
        if job is None and deployment is None:
            jobs = self._list_all(
                self.batch.list_namespaced_job,
                namespace,
                label_selector=manifests.workload_selector(request_id, attempt),
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
        # One node by name when a single workload is read (sync reads them one by one).
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

    def list_workloads(self, namespaces: Sequence[str] | None = None) -> list[WorkloadStatus]:
        """Every portal workload (Jobs, Deployments and their pods), sorted by key."""
        selector = manifests.workload_selector()
        jobs: list[Any] = []
        deployments: list[Any] = []
        pods: list[Any] = []
        if namespaces is None:
            jobs = self._list_all(self.batch.list_job_for_all_namespaces, label_selector=selector)
            deployments = self._list_all(
                self.apps.list_deployment_for_all_namespaces, label_selector=selector
            )
            pods = self._list_all(self.core.list_pod_for_all_namespaces, label_selector=selector)
        else:
            for ns in namespaces:
                jobs += self._list_all(self.batch.list_namespaced_job, ns, label_selector=selector)
                deployments += self._list_all(
                    self.apps.list_namespaced_deployment, ns, label_selector=selector
                )
                pods += self._list_all(self.core.list_namespaced_pod, ns, label_selector=selector)
        groups: dict[tuple[str, str, int], dict[str, Any]] = {}
        for kind, objects in (("job", jobs), ("deployment", deployments), ("pods", pods)):
            for obj in objects:
                key = _workload_key(obj)
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

    # Logs and events ---------------------------------------------------------------------------

    def read_logs(
        self,
        namespace: str,
        request_id: str,
        attempt: int,
        *,
        tail: int = 100,
        follow: bool = False,
        since: datetime | None = None,
    ) -> Iterator[LogLine]:
        """The main container's log of each pod of the attempt (`pods/log`, with timestamps),
        merged by time. A pod whose container has not started yet has no lines (the API answers
        400). `follow` streams the newest pod only, until the pod ends or the server has been
        silent for the client timeout."""
        pods = _newest_last(
            self._list_all(
                self.core.list_namespaced_pod,
                namespace,
                label_selector=manifests.workload_selector(request_id, attempt),
            )
        )
        options: dict[str, Any] = {"container": manifests.CONTAINER_NAME, "timestamps": True}
        if tail:
            options["tail_lines"] = tail
        if since is not None:
            elapsed = (datetime.now(UTC) - since).total_seconds()
            options["since_seconds"] = max(1, math.ceil(elapsed) + 1)
        lines: list[LogLine] = []
        for pod in pods:
            name = str(pod.metadata.name)
            try:
                text = self._call(self.core.read_namespaced_pod_log, name, namespace, **options)
            except ClusterError as exc:
                if exc.status in (400, 404):
                    continue  # not started yet, or gone meanwhile
                raise
            lines.extend(_log_line(name, raw) for raw in str(text or "").splitlines())
        if since is not None:
            lines = [line for line in lines if line.at is None or line.at > since]
        lines.sort(key=lambda line: line.at or datetime.min.replace(tzinfo=UTC))
        yield from lines[-tail:] if tail else lines
        if follow and pods:
            yield from self._follow_log(namespace, str(pods[-1].metadata.name))

    def _follow_log(self, namespace: str, pod: str) -> Iterator[LogLine]:
        response: Any = self._call(
            self.core.read_namespaced_pod_log,
            pod,
            namespace,
            container=manifests.CONTAINER_NAME,
            timestamps=True,
            follow=True,
            since_seconds=1,
            _preload_content=False,
        )
        pending = b""
        try:
            for chunk in response.stream(4096):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for raw in complete:
                    yield _log_line(pod, raw.decode("utf-8", "replace"))
        except CLIENT_ERRORS as exc:
            log.info("log stream of %s/%s ended: %s", namespace, pod, exc)
        finally:
            response.release_conn()

    def list_events(self, namespace: str, request_id: str, attempt: int) -> list[ClusterEvent]:
        """Events of the namespace about the attempt's objects: its Job or Deployment (a
        resumed attempt's is an earlier attempt's), their ReplicaSets, rank Jobs and pods, all
        named after the workload."""
        name = workload_name(request_id, attempt)
        names = {name}
        deployment = self._find_deployment(namespace, request_id, attempt)
        if deployment is not None:
            names.add(str(deployment.metadata.name))
        events = []
        for event in self._list_all(self.core.list_namespaced_event, namespace):
            involved = event.involved_object
            obj_name = str(involved.name or "") if involved is not None else ""
            if not any(obj_name == n or obj_name.startswith(f"{n}-") for n in names):
                continue
            events.append(
                ClusterEvent(
                    at=event.last_timestamp
                    or event.event_time
                    or event.first_timestamp
                    or (event.metadata.creation_timestamp if event.metadata else None),
                    type=str(event.type or "Normal"),
                    reason=str(event.reason or ""),
                    message=str(event.message or ""),
                    object_kind=str(involved.kind or ""),
                    object_name=obj_name,
                    count=int(event.count or 1),
                )
            )
        events.sort(key=lambda e: e.at or datetime.min.replace(tzinfo=UTC))
        return events

    def _list_all(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """All items of a list call, page by page; restarts once if a continue token expires."""
        for restart in (False, True):
            items: list[Any] = []
            token: str | None = None
            try:
                while True:
                    page = self._call(fn, *args, limit=LIST_PAGE_SIZE, _continue=token, **kwargs)
                    items.extend(page.items or [])
                    token = page.metadata._continue if page.metadata else None
                    if not token:
                        return items
            except ClusterError as exc:
                if exc.status != 410 or restart:
                    raise
                log.info("list continue token expired; listing again from the start")
        raise AssertionError("unreachable")

    def _pods_resource_version(self) -> str:
        page = self._call(
            self.core.list_pod_for_all_namespaces,
            label_selector=manifests.workload_selector(),
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
                label_selector=manifests.workload_selector(),
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
                key = _workload_key(obj)
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


def _newest_last(pods: Sequence[Any]) -> list[Any]:
    def created(pod: Any) -> str:
        stamp = pod.metadata.creation_timestamp if pod.metadata else None
        return stamp.isoformat() if stamp else ""

    return sorted(pods, key=lambda pod: (created(pod), str(pod.metadata.name)))


def _log_line(pod: str, raw: str) -> LogLine:
    """A `pods/log` line asked for with timestamps: RFC 3339 (nanoseconds), a space, the text."""
    stamp, _, text = raw.partition(" ")
    try:
        seconds, _, fraction = stamp.rstrip("Z").partition(".")
        at = datetime.fromisoformat(f"{seconds}.{(fraction or '0')[:6]}").replace(tzinfo=UTC)
    except ValueError:
        return LogLine(pod=pod, text=raw)
    return LogLine(pod=pod, text=text, at=at)
