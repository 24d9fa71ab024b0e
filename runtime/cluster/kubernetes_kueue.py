"""The portal's Kueue objects on a real cluster: list them, apply them server-side, delete them;
and the Workloads Kueue makes of the portal's Jobs, read back (`KueueWorkloadReader`).

Writes use server-side apply under the portal's field manager, so a field someone else set on
the same object stays theirs unless the portal's policy sets it too (then the portal wins:
`force=True`, as an operator that owns its objects does).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from runtime.cluster.base import PermanentClusterError
from runtime.cluster.kubernetes_client import CLIENT_ERRORS, classify_api_exception
from runtime.cluster.kueue_objects import GROUP, KINDS, VERSION, Change, Manifest
from runtime.cluster.kueue_workloads import KueueView, kueue_views
from runtime.cluster.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE

FIELD_MANAGER = "gpu-portal"


class KueuePolicyClient:
    def __init__(self, api_client: k8s.ApiClient, *, request_timeout_seconds: float = 30.0):
        self.objects: Any = k8s.CustomObjectsApi(api_client)
        self._timeout = request_timeout_seconds

    def live_objects(self) -> list[Manifest]:
        """Every Kueue object carrying the portal's managed-by label."""
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
        found: list[Manifest] = []
        for kind, (plural, _namespaced) in KINDS.items():
            try:
                # One list across all namespaces, for namespaced kinds too.
                page = self.objects.list_cluster_custom_object(
                    GROUP, VERSION, plural, label_selector=selector, _request_timeout=self._timeout
                )
            except ApiException as exc:
                if exc.status == 404:
                    raise PermanentClusterError(
                        f"the cluster does not serve {plural}.{GROUP}/{VERSION}: install Kueue "
                        "(v0.17 or later) before choosing SCHEDULER=kueue"
                    ) from exc
                raise classify_api_exception(exc) from exc
            except CLIENT_ERRORS as exc:
                raise classify_api_exception(exc) from exc
            for item in page.get("items", []):
                item.setdefault("kind", kind)
                found.append(item)
        return found

    def apply(self, manifest: Manifest) -> None:
        plural, namespaced = KINDS[manifest["kind"]]
        name = manifest["metadata"]["name"]
        try:
            if namespaced:
                self.objects.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    manifest["metadata"]["namespace"],
                    plural,
                    name,
                    manifest,
                    field_manager=FIELD_MANAGER,
                    force=True,
                    _content_type="application/apply-patch+yaml",
                    _request_timeout=self._timeout,
                )
            else:
                self.objects.patch_cluster_custom_object(
                    GROUP,
                    VERSION,
                    plural,
                    name,
                    manifest,
                    field_manager=FIELD_MANAGER,
                    force=True,
                    _content_type="application/apply-patch+yaml",
                    _request_timeout=self._timeout,
                )
        except CLIENT_ERRORS as exc:
            raise classify_api_exception(exc) from exc

    def delete(self, change: Change) -> None:
        plural, namespaced = KINDS[change.kind]
        try:
            if namespaced:
                self.objects.delete_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    change.namespace,
                    plural,
                    change.name,
                    _request_timeout=self._timeout,
                )
            else:
                self.objects.delete_cluster_custom_object(
                    GROUP, VERSION, plural, change.name, _request_timeout=self._timeout
                )
        except ApiException as exc:
            if exc.status != 404:
                raise classify_api_exception(exc) from exc
        except CLIENT_ERRORS as exc:
            raise classify_api_exception(exc) from exc


class KueueWorkloadReader:
    """Kueue's view of every Job it manages: all Workloads and LocalQueues, two paged lists
    across namespaces (a queue position needs the whole ClusterQueue, not only the portal's)."""

    page_size = 500

    def __init__(self, api_client: k8s.ApiClient, *, request_timeout_seconds: float = 30.0):
        self.objects: Any = k8s.CustomObjectsApi(api_client)
        self._timeout = request_timeout_seconds

    def _list(self, plural: str) -> list[Manifest]:
        items: list[Manifest] = []
        token: str | None = None
        try:
            while True:
                page = self.objects.list_cluster_custom_object(
                    GROUP,
                    VERSION,
                    plural,
                    limit=self.page_size,
                    _continue=token,
                    _request_timeout=self._timeout,
                )
                items.extend(page.get("items", []))
                token = page.get("metadata", {}).get("continue")
                if not token:
                    return items
        except ApiException as exc:
            if exc.status == 404:
                raise PermanentClusterError(
                    f"the cluster does not serve {plural}.{GROUP}/{VERSION}: SCHEDULER=kueue "
                    "needs Kueue (v0.17 or later) installed"
                ) from exc
            raise classify_api_exception(exc) from exc
        except CLIENT_ERRORS as exc:
            raise classify_api_exception(exc) from exc

    def views(self) -> dict[tuple[str, str], KueueView]:
        """Kueue's view per (namespace, Job name); see `kueue_workloads.kueue_views`."""
        return kueue_views(self._list("workloads"), self._list("localqueues"))
