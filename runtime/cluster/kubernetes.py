"""The `kubernetes` cluster backend: the official client talking to a real API server.

`KubernetesClusterBackend` is composed of one part per sub-domain, each a `kubernetes_*` module
on `KubernetesApi` (`kubernetes_client`: error classification, configuration, the calls):
workloads (launch, terminate, deadline, scale to zero, resume), sync (status, lists, watch),
logs and events, inventory, projects (namespaces, quotas, PriorityClasses) and project data
(claims, Secrets). Only these modules load the `kubernetes` package. The backend never retries
on its own (the Celery layer retries `TransientClusterError` with jittered backoff), except that
an expired list or watch is listed again (410 Gone).
"""

from __future__ import annotations

from runtime.cluster.kubernetes_client import (
    CLIENT_ERRORS,
    api_client_from_kubeconfig_text,
    classify_api_exception,
    load_api_client,
)
from runtime.cluster.kubernetes_inventory import KubernetesInventory
from runtime.cluster.kubernetes_logs import KubernetesLogs
from runtime.cluster.kubernetes_project_data import KubernetesProjectData
from runtime.cluster.kubernetes_projects import KubernetesProjects
from runtime.cluster.kubernetes_sync import KubernetesSync
from runtime.cluster.kubernetes_workloads import KubernetesWorkloads

__all__ = [
    "CLIENT_ERRORS",
    "KubernetesClusterBackend",
    "api_client_from_kubeconfig_text",
    "classify_api_exception",
    "load_api_client",
]


class KubernetesClusterBackend(
    KubernetesWorkloads,
    KubernetesSync,
    KubernetesLogs,
    KubernetesInventory,
    KubernetesProjects,
    KubernetesProjectData,
):
    """`ClusterBackend` on a real cluster through the official client.

    Point it at a cluster with a kubeconfig path (and context), let it find the in-cluster
    service account, or hand it a ready `ApiClient` (tests, a test-bed API server).
    """
