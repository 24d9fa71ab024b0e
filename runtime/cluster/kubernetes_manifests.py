"""Pure builders of the objects one launch creates, as API-shaped dicts: a Job; a Deployment,
its Service and its route (Ingress or HTTPRoute); a gang's headless Service and indexed Job; a DRA
workload's ResourceClaimTemplates.

No client, no I/O: a spec goes in, a dict comes out that can be sent as the body of a create
call, validated against the OpenAPI schema in tests, or printed for a human. The pod inside
comes from `pod_manifests`, a project's own objects from `project_manifests`; the calls are in
the `kubernetes_*` modules.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from runtime.cluster import dra_manifests
from runtime.cluster.kueue_objects import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from runtime.cluster.names import (
    ATTEMPT_LABEL,
    COMPLETION_INDEX_ANNOTATION,
    GANG_SIZE_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    REQUEST_LABEL,
    gang_host_name,
    notebook_secret_name,
    portal_route_name,
)
from runtime.cluster.pod_manifests import (
    HOSTNAME_LABEL,
    NOTEBOOK_TOKEN_KEY,
    pod_selector,
    pod_spec,
    template_metadata,
    uses_claim,
    workload_labels,
    workload_metadata,
)
from runtime.cluster.specs import WorkloadSpec

Manifest = dict[str, Any]

#: The rendezvous port of a gang's rank 0 (torchrun's default `--master-port`).
GANG_PORT = 29500

#: Finished Jobs stay this long so the sync loop can read their final status before the
#: ttl-after-finished controller deletes them (and their pods with them).
JOB_TTL_SECONDS_AFTER_FINISHED = 3600
#: The path of a workload host that goes to the portal (runtime.services.workload_access).
PORTAL_CALLBACK_PREFIX = "/_portal/"
GATEWAY_API_GROUP = "gateway.networking.k8s.io"
GATEWAY_API_VERSION = "v1"
HTTPROUTE_PLURAL = "httproutes"


def job_manifest(spec: WorkloadSpec) -> Manifest:
    """A batch/v1 Job that runs one pod once: no retries (`backoffLimit: 0`), because a failed
    or preempted attempt is retried by the portal as a new attempt with a new name.

    The Job controller counts `activeDeadlineSeconds` from the Job's start, not the pod's, so
    the deadline at creation leaves room for the wait for a node (`start_allowance_seconds`);
    once the pod runs, `set_deadline` makes it the max runtime from then.
    """
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "completions": 1,
        "parallelism": 1,
        "ttlSecondsAfterFinished": JOB_TTL_SECONDS_AFTER_FINISHED,
        "template": {
            "metadata": template_metadata(spec),
            "spec": pod_spec(spec, restart_policy="Never"),
        },
    }
    if spec.max_runtime_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds + spec.start_allowance_seconds
    metadata = workload_metadata(spec)
    if spec.queue_name is not None:
        # Kueue's: created suspended in its LocalQueue, resumed by Kueue once admitted (what
        # Kueue's webhook would otherwise do; docs/kueue.md).
        job_spec["suspend"] = True
        metadata["labels"][QUEUE_NAME_LABEL] = spec.queue_name
        if spec.priority_class_name:
            metadata["labels"][PRIORITY_CLASS_LABEL] = spec.priority_class_name
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def deployment_manifest(spec: WorkloadSpec) -> Manifest:
    """An apps/v1 Deployment with one replica for a notebook or an inference service.

    `Recreate` so a rollout never holds two GPU pods at once. No `activeDeadlineSeconds`: the API
    rejects it in ReplicaSet pod templates, and a pod killed by it would just be replaced; the
    portal's timeout reclaim enforces the max runtime (recorded in an annotation) instead.
    """
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": workload_metadata(spec),
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": pod_selector(spec)},
            "template": {
                "metadata": template_metadata(spec),
                "spec": pod_spec(spec, restart_policy="Always"),
            },
        },
    }


def service_manifest(spec: WorkloadSpec) -> Manifest:
    """A ClusterIP Service in front of a notebook (8888) or service (8080) Deployment."""
    port = spec.service_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": workload_metadata(spec),
        "spec": {
            "type": "ClusterIP",
            "selector": pod_selector(spec),
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def ingress_manifest(spec: WorkloadSpec) -> Manifest:
    """The networking.k8s.io/v1 Ingress that publishes a notebook or service at its route,
    behind ingress-nginx's external auth: every call is first checked by the portal
    (`auth-url`; 2xx passes, 401 redirects to `auth-signin`, 403 refuses)."""
    route = spec.route
    if route is None:
        raise ValueError("the workload has no route")
    metadata = workload_metadata(spec)
    annotations = {
        **metadata.get("annotations", {}),
        "nginx.ingress.kubernetes.io/auth-url": route.auth_url,
        "nginx.ingress.kubernetes.io/auth-signin": route.signin_url,
        # Notebooks hold kernels open over websockets for hours.
        "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
        "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
        "nginx.ingress.kubernetes.io/proxy-body-size": "100m",
        # What the check answers goes on to the pod: the user, and a notebook's token.
        "nginx.ingress.kubernetes.io/auth-response-headers": "X-Auth-Request-User, Authorization"
        if spec.notebook_token is not None
        else "X-Auth-Request-User",
    }
    path = route.path
    path_type = "Prefix"
    if route.strip_prefix:
        annotations["nginx.ingress.kubernetes.io/use-regex"] = "true"
        annotations["nginx.ingress.kubernetes.io/rewrite-target"] = "/$2"
        path = f"{route.path.rstrip('/')}(/|$)(.*)"
        path_type = "ImplementationSpecific"
    metadata["annotations"] = annotations
    rule: dict[str, Any] = {
        "http": {
            "paths": [
                {
                    "path": path,
                    "pathType": path_type,
                    "backend": {
                        "service": {"name": spec.name, "port": {"number": spec.service_port}}
                    },
                }
            ]
        }
    }
    if route.host:
        rule["host"] = route.host
    ingress_spec: dict[str, Any] = {"rules": [rule]}
    if route.ingress_class:
        ingress_spec["ingressClassName"] = route.ingress_class
    if route.tls_secret and route.host:
        ingress_spec["tls"] = [{"hosts": [route.host], "secretName": route.tls_secret}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": metadata,
        "spec": ingress_spec,
    }


def httproute_manifest(spec: WorkloadSpec) -> Manifest:
    """The Gateway API HTTPRoute (gateway.networking.k8s.io/v1) that publishes a notebook or
    service on the configured Gateway, for clusters routed by Gateway API instead of Ingress.

    The standard channel has no external-auth filter: the gateway's own policy (e.g. Envoy
    Gateway's SecurityPolicy extAuth, selecting routes by the portal's labels) must call the
    portal's check, whose URL is kept in an annotation. Services get their path prefix
    replaced by "/"; notebooks keep it (their base URL).
    """
    route = spec.route
    if route is None:
        raise ValueError("the workload has no route")
    metadata = workload_metadata(spec)
    metadata["annotations"] = {
        **metadata.get("annotations", {}),
        "gpu-portal/auth-url": route.auth_url,
        "gpu-portal/auth-signin": route.signin_url,
    }
    parent: dict[str, Any] = {
        "group": GATEWAY_API_GROUP,
        "kind": "Gateway",
        "name": route.gateway_name,
    }
    if route.gateway_namespace:
        parent["namespace"] = route.gateway_namespace
    if route.gateway_section:
        parent["sectionName"] = route.gateway_section
    rule: dict[str, Any] = {
        "matches": [{"path": {"type": "PathPrefix", "value": route.path.rstrip("/")}}],
        "backendRefs": [{"name": spec.name, "port": spec.service_port}],
    }
    if route.strip_prefix:
        rule["filters"] = [
            {
                "type": "URLRewrite",
                "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
            }
        ]
    route_spec: dict[str, Any] = {"parentRefs": [parent], "rules": [rule]}
    if route.host:
        route_spec["hostnames"] = [route.host]
    return {
        "apiVersion": f"{GATEWAY_API_GROUP}/{GATEWAY_API_VERSION}",
        "kind": "HTTPRoute",
        "metadata": metadata,
        "spec": route_spec,
    }


def route_manifest(spec: WorkloadSpec) -> Manifest:
    """The Ingress or the HTTPRoute of a routed workload, as its route says."""
    if spec.route is not None and spec.route.kind == "httproute":
        return httproute_manifest(spec)
    return ingress_manifest(spec)


def portal_route_manifests(spec: WorkloadSpec) -> list[Manifest]:
    """The workload host's `/_portal/` path to the portal, without the check (it is where the
    check's cookie is made): an ExternalName Service naming the portal's in-cluster host, and
    an Ingress (or HTTPRoute) of its own, since an Ingress's auth annotations cover all its
    paths. None when the route names no portal service."""
    route = spec.route
    if route is None or not route.portal_service_host:
        return []
    name = portal_route_name(spec.name)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**workload_metadata(spec), "name": name},
        "spec": {
            "type": "ExternalName",
            "externalName": route.portal_service_host,
            "ports": [
                {
                    "name": "http",
                    "port": route.portal_service_port,
                    "targetPort": route.portal_service_port,
                    "protocol": "TCP",
                }
            ],
        },
    }
    if route.kind == "httproute":
        body = httproute_manifest(spec)
        body["metadata"]["name"] = name
        for key in ("gpu-portal/auth-url", "gpu-portal/auth-signin"):
            body["metadata"]["annotations"].pop(key)
        body["spec"]["rules"] = [
            {
                "matches": [
                    {"path": {"type": "PathPrefix", "value": PORTAL_CALLBACK_PREFIX.rstrip("/")}}
                ],
                "backendRefs": [{"name": name, "port": route.portal_service_port}],
            }
        ]
        return [service, body]
    ingress = ingress_manifest(spec)
    ingress["metadata"]["name"] = name
    ingress["metadata"]["annotations"] = workload_metadata(spec).get("annotations", {})
    ingress["spec"]["rules"][0]["http"]["paths"] = [
        {
            "path": PORTAL_CALLBACK_PREFIX,
            "pathType": "Prefix",
            "backend": {"service": {"name": name, "port": {"number": route.portal_service_port}}},
        }
    ]
    return [service, ingress]


def notebook_secret_manifest(spec: WorkloadSpec) -> Manifest | None:
    """The Secret holding a notebook's Jupyter token (its pod reads it as JUPYTER_TOKEN)."""
    if spec.notebook_token is None:
        return None
    metadata = workload_metadata(spec)
    metadata["name"] = notebook_secret_name(spec.name)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "stringData": {NOTEBOOK_TOKEN_KEY: spec.notebook_token},
    }


def gang_layout(spec: WorkloadSpec) -> tuple[int, int]:
    """A gang's (nodes, GPUs per node): one rank per node, each with the same count of cards."""
    return len(spec.gang), spec.gang[0].gpu_count


def gang_env(spec: WorkloadSpec) -> dict[str, str]:
    """The env every rank of a gang receives (docs/execution.md, "Gangs"): torchrun's
    arguments as its `PET_*` variables, so a plain `torchrun train.py` joins the gang, and
    the same facts under the names other launchers read. Rank 0's stable DNS name through the
    headless Service is the rendezvous; WORLD_SIZE counts processes (nodes x GPUs per node).
    The node's rank comes from the pod's completion index (`gang_rank_env`)."""
    nodes, per_node = gang_layout(spec)
    hosts = [f"{gang_host_name(spec.name, r)}.{spec.name}" for r in range(nodes)]
    master = f"{hosts[0]}.{spec.namespace}.svc"
    return {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(GANG_PORT),
        "WORLD_SIZE": str(nodes * per_node),
        "NNODES": str(nodes),
        "NPROC_PER_NODE": str(per_node),
        "GANG_HOSTS": ",".join(hosts),
        "PET_NNODES": str(nodes),
        "PET_NPROC_PER_NODE": str(per_node),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(GANG_PORT),
        "PET_RDZV_BACKEND": "static",
        "PET_RDZV_ENDPOINT": f"{master}:{GANG_PORT}",
    }


def gang_rank_env() -> list[dict[str, Any]]:
    """The node's rank, read by the downward API from the completion index the Job controller
    gives each pod of an indexed Job (it also sets JOB_COMPLETION_INDEX itself)."""
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}
    return [{"name": name, "valueFrom": index} for name in ("NODE_RANK", "PET_NODE_RANK")]


def gang_service_manifest(spec: WorkloadSpec) -> Manifest:
    """The headless Service that gives every rank of a gang a DNS name (`<job>-<rank>.<job>`).

    Not-ready addresses are published: ranks must find rank 0 while they all start.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": workload_metadata(spec),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": pod_selector(spec),
            "ports": [
                {
                    "name": "rendezvous",
                    "port": GANG_PORT,
                    "targetPort": GANG_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


def gang_affinity(spec: WorkloadSpec, affinity: dict[str, Any] | None) -> dict[str, Any]:
    """`affinity` plus what makes a gang one rank per node: a required anti-affinity between
    the attempt's pods on the hostname, and, when the portal placed the gang, a required node
    affinity on its nodes (added to every term, so a GPU-product term still holds)."""
    body = dict(affinity or {})
    nodes = [m.node_name for m in spec.gang if m.node_name is not None]
    if nodes:
        pinned = {"key": HOSTNAME_LABEL, "operator": "In", "values": nodes}
        required = body.get("nodeAffinity", {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]}
        )
        terms = [
            {**term, "matchExpressions": [*term.get("matchExpressions", ()), pinned]}
            for term in required["nodeSelectorTerms"]
        ]
        body["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    body["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {
                    "matchLabels": {
                        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                        REQUEST_LABEL: spec.request_id,
                        ATTEMPT_LABEL: str(spec.attempt),
                    }
                },
                "topologyKey": HOSTNAME_LABEL,
            }
        ]
    }
    return body


def gang_job_manifest(spec: WorkloadSpec) -> Manifest:
    """The gang as one indexed Job: one pod per node (`completions` = `parallelism` = nodes),
    each with the per-node cards and the gang's env, all or nothing.

    Its pods are `<job>-<rank>` in the headless Service's subdomain. `backoffLimit: 0`: the
    first rank that fails fails the Job, and the Job controller stops the other ranks; the
    portal then stops the attempt and queues the whole gang again (a new attempt of every
    rank), never one pod on its own.
    """
    nodes, per_node = gang_layout(spec)
    member_spec = replace(
        spec, gpu_count=per_node, node_name=None, env={**spec.env, **gang_env(spec)}, gang=()
    )
    body = job_manifest(member_spec)
    job_spec = body["spec"]
    job_spec.update(completionMode="Indexed", completions=nodes, parallelism=nodes)
    template = job_spec["template"]
    for metadata in (body["metadata"], template["metadata"]):
        metadata["labels"][GANG_SIZE_LABEL] = str(nodes)
    pod = template["spec"]
    pod["subdomain"] = spec.name
    pod["affinity"] = gang_affinity(spec, pod.get("affinity"))
    container = pod["containers"][0]
    container["env"] = [*container.get("env", ()), *gang_rank_env()]
    container["ports"] = [{"name": "rendezvous", "containerPort": GANG_PORT, "protocol": "TCP"}]
    return body


def claim_template_manifests(spec: WorkloadSpec) -> list[Manifest]:
    """The ResourceClaimTemplate of a DRA workload (a gang's: the cards of one rank)."""
    if not uses_claim(spec):
        return []
    if spec.gang:
        # Every rank's pod makes its own claim from the one template: the per-node count.
        spec = replace(spec, gpu_count=gang_layout(spec)[1], node_name=None, gang=())
    return [dra_manifests.resource_claim_template(spec, workload_labels(spec))]


def workload_manifests(spec: WorkloadSpec) -> list[Manifest]:
    """Everything one launch creates, in creation order: a DRA workload's claim templates
    first (a pod whose template is missing waits), a gang's Service next (so its names
    resolve as soon as the pods start)."""
    templates = claim_template_manifests(spec)
    if spec.gang:
        return [*templates, gang_service_manifest(spec), gang_job_manifest(spec)]
    if spec.kind == "job":
        return [*templates, job_manifest(spec)]
    routed = [route_manifest(spec), *portal_route_manifests(spec)] if spec.route else []
    secret = notebook_secret_manifest(spec)
    token = [secret] if secret is not None else []
    return [*templates, *token, deployment_manifest(spec), service_manifest(spec), *routed]
