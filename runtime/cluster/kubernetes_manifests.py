"""Pure builders of the objects one launch creates, as API-shaped dicts: a Job; a Deployment,
its Service and its route (Ingress or HTTPRoute); a gang's headless Service and rank Jobs; a DRA
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
    GANG_SIZE_LABEL,
    RANK_LABEL,
    gang_member_name,
    notebook_secret_name,
    portal_route_name,
)
from runtime.cluster.pod_manifests import (
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


def gang_env(spec: WorkloadSpec, rank: int) -> dict[str, str]:
    """What torchrun and MPI launchers read: rank 0's stable DNS name through the headless
    Service, the port, the world (one process group per node) and this pod's share."""
    size = len(spec.gang)
    hosts = [f"{gang_member_name(spec.name, r)}.{spec.name}" for r in range(size)]
    return {
        "MASTER_ADDR": f"{hosts[0]}.{spec.namespace}.svc",
        "MASTER_PORT": str(GANG_PORT),
        "WORLD_SIZE": str(size),
        "RANK": str(rank),
        "NODE_RANK": str(rank),
        "NNODES": str(size),
        "NPROC_PER_NODE": str(spec.gang[rank].gpu_count),
        "GANG_HOSTS": ",".join(hosts),
    }


def gang_service_manifest(spec: WorkloadSpec) -> Manifest:
    """The headless Service that gives every rank of a gang a DNS name (`<job>.<service>`).

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


def gang_job_manifest(spec: WorkloadSpec, rank: int) -> Manifest:
    """The Job of one rank: the member's cards on the member's node, the gang's env, and the
    pod's hostname and subdomain so that `<job>.<service>` resolves to it."""
    member = spec.gang[rank]
    member_spec = replace(
        spec,
        gpu_count=member.gpu_count,
        node_name=member.node_name,
        env={**spec.env, **gang_env(spec, rank)},
        gang=(),
    )
    body = job_manifest(member_spec)
    name = gang_member_name(spec.name, rank)
    body["metadata"]["name"] = name
    template = body["spec"]["template"]
    for metadata in (body["metadata"], template["metadata"]):
        metadata["labels"][RANK_LABEL] = str(rank)
        metadata["labels"][GANG_SIZE_LABEL] = str(len(spec.gang))
    template["spec"]["hostname"] = name
    template["spec"]["subdomain"] = spec.name
    for claim in template["spec"].get("resourceClaims", ()):
        claim["resourceClaimTemplateName"] = name  # the rank's own template (its own count)
    template["spec"]["containers"][0]["ports"] = [
        {"name": "rendezvous", "containerPort": GANG_PORT, "protocol": "TCP"}
    ]
    return body


def claim_template_manifests(spec: WorkloadSpec) -> list[Manifest]:
    """The ResourceClaimTemplates of a DRA workload: one, or one per rank of a gang (named
    after the rank, for that rank's cards on its node)."""
    if not uses_claim(spec):
        return []
    if not spec.gang:
        return [dra_manifests.resource_claim_template(spec, workload_labels(spec))]
    templates = []
    for rank, member in enumerate(spec.gang):
        member_spec = replace(spec, gpu_count=member.gpu_count, node_name=member.node_name, gang=())
        body = dra_manifests.resource_claim_template(member_spec, workload_labels(spec))
        body["metadata"]["name"] = gang_member_name(spec.name, rank)
        templates.append(body)
    return templates


def workload_manifests(spec: WorkloadSpec) -> list[Manifest]:
    """Everything one launch creates, in creation order: a DRA workload's claim templates
    first (a pod whose template is missing waits), a gang's Service next (so its names
    resolve as soon as the pods start)."""
    templates = claim_template_manifests(spec)
    if spec.gang:
        return [
            *templates,
            gang_service_manifest(spec),
            *(gang_job_manifest(spec, rank) for rank in range(len(spec.gang))),
        ]
    if spec.kind == "job":
        return [*templates, job_manifest(spec)]
    routed = [route_manifest(spec), *portal_route_manifests(spec)] if spec.route else []
    secret = notebook_secret_manifest(spec)
    token = [secret] if secret is not None else []
    return [*templates, *token, deployment_manifest(spec), service_manifest(spec), *routed]
