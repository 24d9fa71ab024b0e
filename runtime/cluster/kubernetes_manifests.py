"""Pure builders of the Kubernetes objects the portal creates, as API-shaped dicts.

No client, no I/O: a spec goes in, a dict comes out that can be sent as the body of a create
call, validated against the OpenAPI schema in tests, or printed for a human. Keeping the shape
here and the calls in `kubernetes.py` means every field the portal sets is visible in one file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from runtime.cluster import dra_manifests
from runtime.cluster.gpu_models import GPU_PRODUCT_LABEL
from runtime.cluster.kueue_objects import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from runtime.cluster.names import (
    ATTEMPT_LABEL,
    GANG_SIZE_LABEL,
    KIND_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MAX_RUNTIME_ANNOTATION,
    OWNER_ANNOTATION,
    PROJECT_LABEL,
    RANK_LABEL,
    REASON_ANNOTATION,
    REQUEST_LABEL,
    REVISION_ANNOTATION,
    TEAM_LABEL,
    WORKLOAD_LABEL,
    gang_member_name,
)
from runtime.cluster.specs import (
    LimitRangeSpec,
    PrioritySpec,
    ProjectDataSpec,
    ProjectSpec,
    SecretSpec,
    Toleration,
    VolumeClaimSpec,
    WorkloadSpec,
)

Manifest = dict[str, Any]

QUOTA_NAME = "gpu-portal-quota"
LIMIT_RANGE_NAME = "gpu-portal-limits"
CONTAINER_NAME = "main"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
VGPU_MEMORY_RESOURCE = "nvidia.com/gpumem"
VGPU_CORES_RESOURCE = "nvidia.com/gpucores"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# HAMi's device selection: the pod asks for these cards (by UUID) and card types, and HAMi's
# scheduler records what it assigned (`UUID,type,memory,cores:` per card, `;` per container).
HAMI_USE_UUID_ANNOTATION = "nvidia.com/use-gpuuuid"
HAMI_USE_TYPE_ANNOTATION = "nvidia.com/use-gputype"
HAMI_ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
HAMI_TO_ALLOCATE_ANNOTATION = "hami.io/vgpu-devices-to-allocate"
HAMI_NODE_ANNOTATION = "hami.io/vgpu-node"
#: The rendezvous port of a gang's rank 0 (torchrun's default `--master-port`).
GANG_PORT = 29500

#: Finished Jobs stay this long so the sync loop can read their final status before the
#: ttl-after-finished controller deletes them (and their pods with them).
JOB_TTL_SECONDS_AFTER_FINISHED = 3600
TERMINATION_GRACE_SECONDS = 30
#: Pod Security level enforced in project namespaces: GPU workloads need no privileges, and
#: the device plugin injects devices, so `baseline` fits and blocks hostPath/privileged pods.
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"
POD_SECURITY_LEVEL = "baseline"
SHM_VOLUME = "dshm"
SHM_MOUNT_PATH = "/dev/shm"
GATEWAY_API_GROUP = "gateway.networking.k8s.io"
GATEWAY_API_VERSION = "v1"
HTTPROUTE_PLURAL = "httproutes"

# Quota names Kubernetes accepts without a domain: the standard compute/object resources.
_STANDARD_QUOTA_NAMES = frozenset(
    {
        "pods",
        "services",
        "services.loadbalancers",
        "services.nodeports",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "replicationcontrollers",
        "resourcequotas",
        "cpu",
        "memory",
        "ephemeral-storage",
    }
)


def project_labels(team_slug: str, project_slug: str) -> dict[str, str]:
    """Labels on every object of a project."""
    return {MANAGED_BY_LABEL: MANAGED_BY_VALUE, TEAM_LABEL: team_slug, PROJECT_LABEL: project_slug}


def selector_labels(request_id: str, attempt: int) -> dict[str, str]:
    """The labels that tie an object or pod to one attempt of one request."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        REQUEST_LABEL: request_id,
        ATTEMPT_LABEL: str(attempt),
    }


def pod_selector(spec: WorkloadSpec) -> dict[str, str]:
    """The Deployment's and Service's pod selector: by workload name, not attempt, because a
    selector is immutable and a resumed attempt relabels the Deployment it takes over."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        REQUEST_LABEL: spec.request_id,
        WORKLOAD_LABEL: spec.name,
    }


def workload_selector(request_id: str | None = None, attempt: int | None = None) -> str:
    """A label selector string for all portal workloads, or for one request (and attempt)."""
    parts = [f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"]
    if request_id is not None:
        parts.append(f"{REQUEST_LABEL}={request_id}")
    if attempt is not None:
        parts.append(f"{ATTEMPT_LABEL}={attempt}")
    return ",".join(parts)


def workload_labels(spec: WorkloadSpec) -> dict[str, str]:
    """Labels on the workload object and its pods: ours override any extra of the same key."""
    return {
        **spec.extra_labels,
        **project_labels(spec.team_slug, spec.project_slug),
        **selector_labels(spec.request_id, spec.attempt),
        WORKLOAD_LABEL: spec.name,
        KIND_LABEL: spec.kind,
    }


def workload_annotations(spec: WorkloadSpec) -> dict[str, str]:
    """Annotations that tie the object back to the portal request for a human reading it."""
    annotations = dict(spec.extra_annotations)
    if spec.owner:
        annotations[OWNER_ANNOTATION] = spec.owner
    if spec.reason:
        annotations[REASON_ANNOTATION] = spec.reason
    if spec.max_runtime_seconds is not None:
        annotations[MAX_RUNTIME_ANNOTATION] = str(spec.max_runtime_seconds)
    return annotations


def gpu_resource_limits(spec: WorkloadSpec) -> dict[str, str]:
    """The extended resources one container asks for, per sharing mode.

    Extended resources may not be overcommitted, so they go in `limits` only; Kubernetes copies
    them into `requests`, which is what ResourceQuota counts. A DRA pod asks for none: its
    cards come through its ResourceClaim.
    """
    if spec.gpu_count == 0 or spec.allocation == "dra":
        return {}
    if spec.sharing == "exclusive":
        return {GPU_RESOURCE: str(spec.gpu_count)}
    if spec.sharing == "vgpu":
        limits = {GPU_RESOURCE: str(spec.gpu_count)}
        if spec.vgpu_memory_mib is not None:
            limits[VGPU_MEMORY_RESOURCE] = str(spec.vgpu_memory_mib)
        if spec.vgpu_cores_percent is not None:
            limits[VGPU_CORES_RESOURCE] = str(spec.vgpu_cores_percent)
        return limits
    return {f"{MIG_RESOURCE_PREFIX}{spec.mig_profile}": str(spec.gpu_count)}


def _container_resources(spec: WorkloadSpec) -> dict[str, dict[str, str]]:
    limits = gpu_resource_limits(spec)
    requests: dict[str, str] = {}
    if spec.cpu is not None:
        # A limit too: the namespace's LimitRange would otherwise give a default limit that
        # may be lower than what was asked (and the pod would be refused).
        requests["cpu"] = spec.cpu
        limits["cpu"] = spec.cpu
    if spec.memory is not None:
        # Memory is not compressible: request and limit alike so the pod is never OOM-evicted
        # for using what it asked for.
        requests["memory"] = spec.memory
        limits["memory"] = spec.memory
    resources: dict[str, dict[str, str]] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    return resources


def _toleration(toleration: Toleration) -> dict[str, Any]:
    body: dict[str, Any] = {"key": toleration.key, "operator": toleration.operator}
    if toleration.operator == "Equal":
        body["value"] = toleration.value
    if toleration.effect is not None:
        body["effect"] = toleration.effect
    if toleration.toleration_seconds is not None:
        body["tolerationSeconds"] = toleration.toleration_seconds
    return body


def node_selector(spec: WorkloadSpec) -> dict[str, str]:
    """The pool's labels plus, when the portal placed the pod, the chosen node's hostname.

    A hostname selector rather than `spec.nodeName`: `nodeName` skips the scheduler, and with it
    resource fit checks, preemption and HAMi's device assignment.
    """
    selector = dict(spec.node_selector)
    if spec.node_name is not None:
        selector[HOSTNAME_LABEL] = spec.node_name
    return selector


def gpu_product_affinity(products: tuple[str, ...]) -> dict[str, Any]:
    """Required node affinity on the GPU product label: a node selector cannot say "one of",
    and one model has several product strings (SXM and PCIe cards, GFD and short names)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": list(products)}
                        ]
                    }
                ]
            }
        }
    }


def pod_spec(spec: WorkloadSpec, *, restart_policy: str) -> dict[str, Any]:
    """The pod spec shared by Job and Deployment templates."""
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "resources": _container_resources(spec),
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    env = {**spec.env, **route_env(spec)}
    env_list: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    env_list += [
        {"name": ref.name, "valueFrom": {"secretKeyRef": {"name": ref.secret_name, "key": ref.key}}}
        for ref in sorted(spec.secret_env, key=lambda ref: ref.name)
        if ref.name not in env
    ]
    if env_list:
        container["env"] = env_list
    volumes, mounts = pod_volumes(spec)
    if mounts:
        container["volumeMounts"] = mounts
    if spec.kind != "job":
        container["ports"] = [
            {"name": "http", "containerPort": spec.service_port, "protocol": "TCP"}
        ]
    body: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "schedulerName": spec.scheduler_name,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        # User workloads have no business with the API server or with every Service's env vars.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    if spec.priority_class_name:
        body["priorityClassName"] = spec.priority_class_name
    selector = node_selector(spec)
    if selector:
        body["nodeSelector"] = selector
    if spec.gpu_products and not uses_claim(spec):
        # (A claim selects the model itself, from the devices' productName.)
        body["affinity"] = gpu_product_affinity(spec.gpu_products)
    if spec.tolerations:
        body["tolerations"] = [_toleration(t) for t in spec.tolerations]
    if volumes:
        body["volumes"] = volumes
    if spec.image_pull_secrets:
        body["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    if uses_claim(spec):
        body = dra_manifests.with_claim(body, spec)
    return body


def uses_claim(spec: WorkloadSpec) -> bool:
    """True when the pod gets its cards through a ResourceClaimTemplate (DRA pools)."""
    return spec.allocation == "dra" and spec.gpu_count > 0


def pod_volumes(spec: WorkloadSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts: the project's claims (workspace, home)
    and, when asked, a memory-backed /dev/shm of `shm_mib` (it counts against the memory
    limit, as any tmpfs does)."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for index, volume in enumerate(spec.volumes):
        name = f"data-{index}"
        volumes.append({"name": name, "persistentVolumeClaim": {"claimName": volume.claim_name}})
        mount: dict[str, Any] = {"name": name, "mountPath": volume.mount_path}
        if volume.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    if spec.shm_mib is not None:
        volumes.append(
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.shm_mib}Mi"}}
        )
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_MOUNT_PATH})
    return volumes, mounts


def _metadata(spec: WorkloadSpec) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": workload_labels(spec),
    }
    annotations = workload_annotations(spec)
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def hami_selection(spec: WorkloadSpec) -> dict[str, str]:
    """HAMi's selection annotations for a vGPU pod: the portal's cards by UUID and their type,
    so HAMi assigns the cards the engine planned with rather than choosing its own."""
    if spec.sharing != "vgpu" or not spec.gpu_uuids:
        return {}
    selection = {HAMI_USE_UUID_ANNOTATION: ",".join(spec.gpu_uuids)}
    if spec.gpu_types:
        selection[HAMI_USE_TYPE_ANNOTATION] = ",".join(sorted(set(spec.gpu_types)))
    return selection


def _template_metadata(spec: WorkloadSpec) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": workload_labels(spec)}
    annotations = {**workload_annotations(spec), **hami_selection(spec)}
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def job_manifest(spec: WorkloadSpec) -> Manifest:
    """A batch/v1 Job that runs one pod once: no retries (`backoffLimit: 0`), because a failed
    or preempted attempt is retried by the portal as a new attempt with a new name."""
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "completions": 1,
        "parallelism": 1,
        "ttlSecondsAfterFinished": JOB_TTL_SECONDS_AFTER_FINISHED,
        "template": {
            "metadata": _template_metadata(spec),
            "spec": pod_spec(spec, restart_policy="Never"),
        },
    }
    if spec.max_runtime_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    metadata = _metadata(spec)
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
        "metadata": _metadata(spec),
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": pod_selector(spec)},
            "template": {
                "metadata": _template_metadata(spec),
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
        "metadata": _metadata(spec),
        "spec": {
            "type": "ClusterIP",
            "selector": pod_selector(spec),
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def route_env(spec: WorkloadSpec) -> dict[str, str]:
    """What a routed notebook or service reads to serve under its path, with no token of its
    own (the Ingress's auth check is the only door): `NB_PREFIX` (Kubeflow notebook images),
    `NOTEBOOK_ARGS` (Jupyter docker-stacks' start-notebook), `WORKLOAD_BASE_PATH` (anything).
    The portal's keys win over the user's."""
    if spec.route is None:
        return {}
    path = spec.route.path
    env = {"WORKLOAD_BASE_PATH": path}
    if spec.kind == "notebook":
        env["NB_PREFIX"] = path.rstrip("/")
        env["NOTEBOOK_ARGS"] = (
            f"--ServerApp.base_url={path} --ServerApp.token= --ServerApp.password= "
            "--ServerApp.allow_remote_access=True"
        )
    return env


def ingress_manifest(spec: WorkloadSpec) -> Manifest:
    """The networking.k8s.io/v1 Ingress that publishes a notebook or service at its route,
    behind ingress-nginx's external auth: every call is first checked by the portal
    (`auth-url`; 2xx passes, 401 redirects to `auth-signin`, 403 refuses)."""
    route = spec.route
    if route is None:
        raise ValueError("the workload has no route")
    metadata = _metadata(spec)
    annotations = {
        **metadata.get("annotations", {}),
        "nginx.ingress.kubernetes.io/auth-url": route.auth_url,
        "nginx.ingress.kubernetes.io/auth-signin": route.signin_url,
        # Notebooks hold kernels open over websockets for hours.
        "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
        "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
        "nginx.ingress.kubernetes.io/proxy-body-size": "100m",
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
    metadata = _metadata(spec)
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
        "metadata": _metadata(spec),
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
    routed = [route_manifest(spec)] if spec.route is not None else []
    return [*templates, deployment_manifest(spec), service_manifest(spec), *routed]


def namespace_manifest(spec: ProjectSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": spec.namespace,
            "labels": {
                **project_labels(spec.team_slug, spec.project_slug),
                POD_SECURITY_LABEL: POD_SECURITY_LEVEL,
            },
        },
    }


def quota_resource_name(name: str) -> str:
    """The ResourceQuota key for a portal quota resource.

    Kubernetes counts extended resources (anything with a domain, like `nvidia.com/gpu`) only
    under the `requests.` prefix, so a bare name gets it and `limits.` is refused.
    """
    if name in _STANDARD_QUOTA_NAMES or name.startswith("count/"):
        return name
    if name.startswith("limits."):
        if "/" in name:
            raise ValueError(f"quota {name!r}: extended resources only support requests.")
        return name
    if name.startswith("requests."):
        return name
    if "/" in name:
        return f"requests.{name}"
    raise ValueError(f"unknown quota resource {name!r}")


def quota_hard(quota: Mapping[str, int | str]) -> dict[str, str]:
    """The `spec.hard` map: normalised names and quantities as strings."""
    hard: dict[str, str] = {}
    for name, amount in quota.items():
        key = quota_resource_name(name)
        if key in hard:
            raise ValueError(f"quota names {key!r} twice")
        hard[key] = str(amount)
    return hard


def resource_quota_manifest(spec: ProjectSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": spec.namespace,
            "labels": project_labels(spec.team_slug, spec.project_slug),
        },
        "spec": {"hard": quota_hard(spec.quota)},
    }


def limit_range_limits(limit_range: LimitRangeSpec) -> list[dict[str, Any]]:
    item: dict[str, Any] = {"type": "Container"}
    if limit_range.default_limits:
        item["default"] = dict(limit_range.default_limits)
    if limit_range.default_requests:
        item["defaultRequest"] = dict(limit_range.default_requests)
    if limit_range.max_limits:
        item["max"] = dict(limit_range.max_limits)
    return [item]


def limit_range_manifest(spec: ProjectSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {
            "name": LIMIT_RANGE_NAME,
            "namespace": spec.namespace,
            "labels": project_labels(spec.team_slug, spec.project_slug),
        },
        "spec": {"limits": limit_range_limits(spec.limit_range)},
    }


def priority_class_manifest(spec: PrioritySpec) -> Manifest:
    body: Manifest = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": spec.name, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
        "value": spec.value,
        "preemptionPolicy": spec.preemption_policy,
        "globalDefault": False,
    }
    if spec.description:
        body["description"] = spec.description
    return body


def claim_manifest(data: ProjectDataSpec, claim: VolumeClaimSpec) -> Manifest:
    """A PersistentVolumeClaim of the project (its workspace or a home volume)."""
    spec: dict[str, Any] = {
        "accessModes": [claim.access_mode],
        "resources": {"requests": {"storage": f"{claim.size_gib}Gi"}},
    }
    if claim.storage_class:
        spec["storageClassName"] = claim.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim.name,
            "namespace": data.namespace,
            "labels": project_labels(data.team_slug, data.project_slug),
        },
        "spec": spec,
    }


def secret_manifest(data: ProjectDataSpec, secret: SecretSpec) -> Manifest:
    """A Secret of the project, its values as `stringData` (the API stores them encoded)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret.name,
            "namespace": data.namespace,
            "labels": project_labels(data.team_slug, data.project_slug),
            "annotations": {REVISION_ANNOTATION: str(secret.revision)},
        },
        "type": secret.type,
        "stringData": dict(secret.data),
    }
