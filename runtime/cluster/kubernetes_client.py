"""The kubernetes backend's client: API errors, configuration, and the calls every part makes.

`classify_api_exception` maps client, transport and config errors onto transient or permanent
`ClusterError`s; `load_api_client` finds a cluster; `KubernetesApi` holds the API handles and
makes one call with the request timeout (`_call`), creates or adopts (`_create_or_read`) and
lists page by page (`_list_all`). It never retries on its own, except that an expired list is
listed again (410 Gone).

The API classes are imported here by name, not reached through `kubernetes.client`'s lazy
attributes, so that importing this module loads them and their models (about 2 s of CPU): a
Celery worker does so once, before it forks its pool (`runtime.signals.load_cluster_client`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, TypeVar

import urllib3.exceptions
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client import (
    AppsV1Api,
    AuthenticationV1Api,
    AuthorizationV1Api,
    BatchV1Api,
    CoreV1Api,
    CustomObjectsApi,
    NetworkingV1Api,
    RbacAuthorizationV1Api,
    SchedulingV1Api,
)
from kubernetes.client.exceptions import ApiException

from runtime.cluster import dra_manifests, pod_manifests
from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster.base import ClusterError, PermanentClusterError, TransientClusterError
from runtime.cluster.kubernetes_custom import NamespacedCustomResource
from runtime.cluster.names import ATTEMPT_LABEL, REQUEST_LABEL, workload_name

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


# Configuration -------------------------------------------------------------------------------


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


# Objects -------------------------------------------------------------------------------------


def labels_of(obj: Any) -> Mapping[str, str]:
    metadata = getattr(obj, "metadata", None)
    return (metadata.labels if metadata is not None else None) or {}


def workload_key(obj: Any) -> tuple[str, str, int] | None:
    """(namespace, request id, attempt) from an object's labels, or None if they are broken."""
    labels = labels_of(obj)
    request_id, attempt = labels.get(REQUEST_LABEL), labels.get(ATTEMPT_LABEL)
    if not request_id or not attempt or not attempt.isdigit():
        return None
    try:
        workload_name(request_id, int(attempt))
    except ValueError:
        return None
    return str(obj.metadata.namespace), request_id, int(attempt)


# The calls ----------------------------------------------------------------------------------


def _json_body(response: Any) -> dict[str, Any]:
    """The JSON body of a raw (`_preload_content=False`) answer; its connection goes back to the
    pool."""
    try:
        body: dict[str, Any] = json.loads(getattr(response, "data", None) or b"{}")
    finally:
        release = getattr(response, "release_conn", None)
        if callable(release):
            release()
    return body


class KubernetesApi:
    """The client's API handles and the calls every part of the backend makes through them:
    one request with the timeout and classified errors, create-or-adopt, paged lists, and the
    custom resources (ResourceClaimTemplates, HTTPRoutes) it handles like typed objects."""

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        api_client: k8s.ApiClient | None = None,
        request_timeout_seconds: float = 30.0,
        watch_factory: Callable[[], Any] = k8s_watch.Watch,
        portal_username: str | None = None,
    ) -> None:
        self.api_client = api_client or load_api_client(kubeconfig, context)
        self.core = CoreV1Api(self.api_client)
        self.batch = BatchV1Api(self.api_client)
        self.apps = AppsV1Api(self.api_client)
        self.scheduling = SchedulingV1Api(self.api_client)
        self.networking = NetworkingV1Api(self.api_client)
        self.rbac = RbacAuthorizationV1Api(self.api_client)
        self._timeout = request_timeout_seconds
        self._watch_factory = watch_factory
        # Who the API server knows the portal as; asked once (`portal_username`) when not given.
        self._portal_username = portal_username or None

    def portal_username(self) -> str:
        """The portal's own Kubernetes username (a ServiceAccount's is
        `system:serviceaccount:<namespace>:<name>`): as configured, else what the API server
        answers a SelfSubjectReview (which every authenticated identity may create), once."""
        if self._portal_username is None:
            review = self._call(
                AuthenticationV1Api(self.api_client).create_self_subject_review,
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
            user_info = review.status.user_info if review.status is not None else None
            username = user_info.username if user_info is not None else None
            if not username:
                raise PermanentClusterError(
                    "the API server did not say who the portal is (SelfSubjectReview); set "
                    "KUBERNETES_PORTAL_USERNAME",
                    reason="NoIdentity",
                )
            self._portal_username = str(username)
        return self._portal_username

    def may(self, verb: str, resource: str, namespace: str, *, group: str = "") -> bool:
        """Whether the portal may `verb` `resource` in `namespace` now (SelfSubjectAccessReview,
        which every authenticated identity may create)."""
        review = self._call(
            AuthorizationV1Api(self.api_client).create_self_subject_access_review,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {
                    "resourceAttributes": {
                        "namespace": namespace,
                        "verb": verb,
                        "group": group,
                        "resource": resource,
                    }
                },
            },
        )
        return bool(review.status is not None and review.status.allowed)

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

    def _read_secret_metadata(self, name: str, namespace: str, **kwargs: Any) -> Any:
        """A Secret's metadata only (PartialObjectMetadata): its values are not read back."""
        # Called through `_call`, which classifies errors and sets the timeout.
        response: Any = self.core.read_namespaced_secret(
            name,
            namespace,
            _preload_content=False,
            _headers={"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"},
            **kwargs,
        )
        meta = _json_body(response).get("metadata", {})
        return SimpleNamespace(
            metadata=SimpleNamespace(
                name=meta.get("name"),
                namespace=meta.get("namespace"),
                labels=meta.get("labels") or {},
                annotations=meta.get("annotations") or {},
                resource_version=meta.get("resourceVersion"),
                deletion_timestamp=meta.get("deletionTimestamp"),
            )
        )

    def _list_metadata(
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> list[dict[str, Any]]:
        """The metadata of each object a (one-page) list call selects, as JSON
        (PartialObjectMetadataList): no spec or status is sent, none deserialised."""
        response: Any = self._call(
            fn,
            *args,
            _preload_content=False,
            _headers={"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
            **kwargs,
        )
        return [item.get("metadata") or {} for item in _json_body(response).get("items") or []]

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

    @property
    def custom(self) -> CustomObjectsApi:
        return CustomObjectsApi(self.api_client)

    @property
    def claim_templates(self) -> NamespacedCustomResource:
        return NamespacedCustomResource(
            self.custom, dra_manifests.GROUP, dra_manifests.VERSION, dra_manifests.TEMPLATE_PLURAL
        )

    @property
    def httproutes(self) -> NamespacedCustomResource:
        return NamespacedCustomResource(
            self.custom,
            manifests.GATEWAY_API_GROUP,
            manifests.GATEWAY_API_VERSION,
            manifests.HTTPROUTE_PLURAL,
        )

    def _find_deployment(self, namespace: str, request_id: str, attempt: int) -> Any | None:
        """The Deployment serving this attempt: its own by name, else one it resumed (labelled
        with this attempt). One of that name relabelled to a later attempt is not this one's."""
        name = workload_name(request_id, attempt)
        found = self._read_or_none(self.apps.read_namespaced_deployment, name, namespace)
        if found is not None and workload_key(found) == (namespace, request_id, attempt):
            return found
        taken_over = self._list_all(
            self.apps.list_namespaced_deployment,
            namespace,
            label_selector=pod_manifests.workload_selector(request_id, attempt),
        )
        return taken_over[0] if taken_over else None
