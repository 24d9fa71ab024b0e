"""Pure builders of a workload's pod: labels and selectors, GPU resources, node selection,
volumes, environment and HAMi's card selection, shared by every object a launch creates.

No client, no I/O, like `kubernetes_manifests`, which puts these into Jobs and Deployments.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from runtime.cluster import dra_manifests
from runtime.cluster.gpu_models import GPU_PRODUCT_LABEL
from runtime.cluster.names import (
    ATTEMPT_LABEL,
    KIND_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MAX_RUNTIME_ANNOTATION,
    OWNER_ANNOTATION,
    PREEMPT_NOTICE_ANNOTATION,
    REASON_ANNOTATION,
    REQUEST_LABEL,
    WORKLOAD_LABEL,
    notebook_secret_name,
)
from runtime.cluster.project_manifests import project_labels
from runtime.cluster.specs import Toleration, WorkloadSpec

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
# A preemption's deadline reaches the containers as a file: the downward API projects the pod's
# `gpu-portal/preempt-notice` annotation into it (empty until the portal sets it), and
# `PREEMPT_NOTICE` names the file (env vars of a running container cannot change).
NOTICE_VOLUME = "gpu-portal-notice"
NOTICE_DIR = "/etc/gpu-portal/notice"
NOTICE_FILE = "preempt-deadline"
PREEMPT_NOTICE_ENV = "PREEMPT_NOTICE"
SHM_VOLUME = "dshm"
SHM_MOUNT_PATH = "/dev/shm"
#: Jupyter's own variable for its token (jupyter_server's `ServerApp.token`), and the key of the
#: notebook's Secret that holds it.
NOTEBOOK_TOKEN_ENV = "JUPYTER_TOKEN"
NOTEBOOK_TOKEN_KEY = "token"


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


# Request ids per set-based selector (`in (...)`): a list's URL stays a few hundred bytes.
REQUEST_IDS_PER_SELECTOR = 100


def workload_selectors(request_ids: Collection[str] | None = None) -> list[str]:
    """Label selectors that together select all portal workloads, or those of `request_ids`
    (`<request label> in (...)`, REQUEST_IDS_PER_SELECTOR ids each; none for no ids)."""
    if request_ids is None:
        return [workload_selector()]
    ids = sorted(set(request_ids))
    return [
        f"{workload_selector()},{REQUEST_LABEL} in ({','.join(chunk)})"
        for chunk in (
            ids[i : i + REQUEST_IDS_PER_SELECTOR]
            for i in range(0, len(ids), REQUEST_IDS_PER_SELECTOR)
        )
    ]


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
    env = {**spec.env, **route_env(spec), PREEMPT_NOTICE_ENV: f"{NOTICE_DIR}/{NOTICE_FILE}"}
    env_list: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    env_list += [
        {"name": ref.name, "valueFrom": {"secretKeyRef": {"name": ref.secret_name, "key": ref.key}}}
        for ref in sorted(spec.secret_env, key=lambda ref: ref.name)
        if ref.name not in env and ref.name != NOTEBOOK_TOKEN_ENV
    ]
    if spec.notebook_token is not None:
        # From the notebook's own Secret: the token is never a literal in the Deployment.
        env_list = [e for e in env_list if e["name"] != NOTEBOOK_TOKEN_ENV]
        secret_ref = {"name": notebook_secret_name(spec.name), "key": NOTEBOOK_TOKEN_KEY}
        env_list.append({"name": NOTEBOOK_TOKEN_ENV, "valueFrom": {"secretKeyRef": secret_ref}})
    if env_list:
        container["env"] = env_list
    volumes, mounts = pod_volumes(spec)
    if mounts:
        container["volumeMounts"] = mounts
    container["securityContext"] = container_security_context()
    if spec.kind != "job":
        container["ports"] = [
            {"name": "http", "containerPort": spec.service_port, "protocol": "TCP"}
        ]
    body: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "schedulerName": spec.scheduler_name,
        "terminationGracePeriodSeconds": spec.termination_grace_seconds,
        # User workloads have no business with the API server or with every Service's env vars.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(spec),
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


def pod_security_context(spec: WorkloadSpec) -> dict[str, Any]:
    """The pod's security context: the runtime's default seccomp profile; `fsGroup` so that
    the volumes belong to a group the image's user is in (100, `users`, in Jupyter images),
    changed only when the volume's root does not match already; and `runAsNonRoot` for the
    kinds whose images run as a numeric non-root user (an image that would run as root is
    then refused by the kubelet: the request fails with "container configuration is
    invalid")."""
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if spec.fs_group is not None:
        context["fsGroup"] = spec.fs_group
        context["fsGroupChangePolicy"] = "OnRootMismatch"
    if spec.run_as_non_root:
        context["runAsNonRoot"] = True
    return context


def container_security_context() -> dict[str, Any]:
    """No privilege escalation (setuid binaries, sudo) and no Linux capabilities."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def uses_claim(spec: WorkloadSpec) -> bool:
    """True when the pod gets its cards through a ResourceClaimTemplate (DRA pools)."""
    return spec.allocation == "dra" and spec.gpu_count > 0


def pod_volumes(spec: WorkloadSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts: the project's claims (workspace, home),
    when asked a memory-backed /dev/shm of `shm_mib` (it counts against the memory limit, as
    any tmpfs does), and the preemption notice (read-only)."""
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
    volumes.append(notice_volume())
    mounts.append({"name": NOTICE_VOLUME, "mountPath": NOTICE_DIR, "readOnly": True})
    return volumes, mounts


def notice_volume() -> dict[str, Any]:
    """The downward-API volume whose one file holds the pod's preemption deadline (RFC 3339)
    once the portal annotated it; the kubelet refreshes the file when the annotation changes."""
    field = f"metadata.annotations['{PREEMPT_NOTICE_ANNOTATION}']"
    return {
        "name": NOTICE_VOLUME,
        "downwardAPI": {"items": [{"path": NOTICE_FILE, "fieldRef": {"fieldPath": field}}]},
    }


def workload_metadata(spec: WorkloadSpec) -> dict[str, Any]:
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


def template_metadata(spec: WorkloadSpec) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": workload_labels(spec)}
    annotations = {**workload_annotations(spec), **hami_selection(spec)}
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def route_env(spec: WorkloadSpec) -> dict[str, str]:
    """What a routed notebook or service reads to serve under its path: `NB_PREFIX` (Kubeflow
    notebook images), `NOTEBOOK_ARGS` (Jupyter docker-stacks' start-notebook),
    `WORKLOAD_BASE_PATH` (anything). A notebook with a token reads it from `JUPYTER_TOKEN`
    (its Secret) and the Ingress adds it to every call that passed the portal's check; one
    without starts with none (the check is then the only door). The portal's keys win over
    the user's."""
    if spec.route is None:
        return {}
    path = spec.route.path
    env = {"WORKLOAD_BASE_PATH": path}
    if spec.kind == "notebook":
        env["NB_PREFIX"] = path.rstrip("/")
        token = "" if spec.notebook_token is not None else "--ServerApp.token= "
        env["NOTEBOOK_ARGS"] = (
            f"--ServerApp.base_url={path} {token}--ServerApp.password= "
            "--ServerApp.allow_remote_access=True"
        )
    return env
