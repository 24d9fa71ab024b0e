"""The kubernetes backend's inventory: nodes, the GPUs of NVIDIA's DRA driver, and the GPUs
that pods the portal did not create hold."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from runtime.cluster import dra_manifests
from runtime.cluster.base import ClusterError
from runtime.cluster.kubernetes_client import LIST_PAGE_SIZE, KubernetesApi
from runtime.cluster.kubernetes_nodes import (
    dra_gpus,
    foreign_gpu_usage,
    foreign_host_usage,
    node_inventory,
    with_dra_gpus,
)
from runtime.cluster.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from runtime.cluster.reports import NodeInventory

log = logging.getLogger(__name__)


class KubernetesInventory(KubernetesApi):
    """Nodes and their GPUs, read for `sync_inventory`."""

    def sync_inventory(self) -> list[NodeInventory]:
        """Every node, with the GPU resources, CPU and memory that pods the portal did not
        create hold on it (bound, unfinished pods without the portal's label, from every
        namespace), and the GPUs the ResourceSlices of NVIDIA's DRA driver offer on it."""
        nodes = self._list_all(self.core.list_node)
        slices = dra_gpus(self._resource_slices())
        others = self._list_all(
            self.core.list_pod_for_all_namespaces,
            label_selector=f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}",
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
        )
        foreign = foreign_gpu_usage(others)
        host = foreign_host_usage(others)
        inventory = (
            replace(
                with_dra_gpus(node, slices.get(node.name)),
                foreign_usage={**foreign.get(node.name, {}), **host.get(node.name, {})},
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
