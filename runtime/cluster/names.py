"""The names and labels the portal gives what it creates on a cluster.

Label keys and annotations on every portal object, and the rules for object names (a request's
workload, a gang's ranks, a project's namespace). Plain Python, like the rest of the backend
interface (`runtime.cluster.base`).
"""

from __future__ import annotations

import hashlib
import re

# Label keys and values the portal puts on every object it creates. `MANAGED_BY` + its value is
# the selector for sync and zombie detection, so it must never change.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpu-portal"
TEAM_LABEL = "gpu-portal/team"
PROJECT_LABEL = "gpu-portal/project"
REQUEST_LABEL = "gpu-portal/request"
ATTEMPT_LABEL = "gpu-portal/attempt"
KIND_LABEL = "gpu-portal/kind"
# The object name a Deployment's pods and Service are selected by. Not the attempt: a resumed
# attempt takes over the scaled-to-zero Deployment of an earlier one and relabels it.
WORKLOAD_LABEL = "gpu-portal/workload"
OWNER_ANNOTATION = "gpu-portal/owner"
REASON_ANNOTATION = "gpu-portal/launch-reason"
TERMINATE_REASON_ANNOTATION = "gpu-portal/terminate-reason"
#: On a preempted attempt's pods: by when (RFC 3339, UTC) they are killed; SIGTERM comes first.
PREEMPT_NOTICE_ANNOTATION = "gpu-portal/preempt-notice"
MAX_RUNTIME_ANNOTATION = "gpu-portal/max-runtime-seconds"
# Set while a reclaimed notebook or service is scaled to zero: the replicas to resume with, and
# when it was scaled down (ISO 8601, UTC) so zombie cleanup can apply the retention period.
SUSPENDED_REPLICAS_ANNOTATION = "gpu-portal/suspended-replicas"
SUSPENDED_AT_ANNOTATION = "gpu-portal/suspended-at"
# On each Job and pod of a gang (a job over several nodes): its rank, and how many ranks it has.
RANK_LABEL = "gpu-portal/rank"
GANG_SIZE_LABEL = "gpu-portal/gang-size"
# What the Job controller puts on each pod of an indexed Job (a gang's): the pod's index.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# On a project's Secrets: the portal's revision of the values, so an older copy is replaced.
REVISION_ANNOTATION = "gpu-portal/revision"

#: A request id becomes part of object names and label values, so it is limited to what both
#: accept; 40 characters leave room for the prefix and the attempt (a UUID is 36).
REQUEST_ID_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
MAX_ATTEMPT = 9999
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def is_dns_label(value: str) -> bool:
    """True when `value` is a DNS-1123 label (object names such as Jobs, namespaces)."""
    return bool(_DNS_LABEL.match(value))


def is_label_value(value: str) -> bool:
    """True when `value` is a valid Kubernetes label value."""
    return bool(_LABEL_VALUE.match(value))


def workload_name(request_id: str, attempt: int) -> str:
    """The deterministic name of a request's workload objects, e.g. `gpr-812-a1`.

    Deterministic so that a retried launch finds what an earlier try created instead of making a
    second workload. It is a DNS-1123 label that also starts with a letter, so it is valid for
    Jobs, Deployments and Services alike.
    """
    if not REQUEST_ID_PATTERN.match(request_id):
        raise ValueError(
            f"request id {request_id!r} must be 1-40 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    if not 1 <= attempt <= MAX_ATTEMPT:
        raise ValueError(f"attempt must be between 1 and {MAX_ATTEMPT}, not {attempt}")
    return f"gpr-{request_id}-a{attempt}"


def notebook_secret_name(name: str) -> str:
    """The Secret holding a notebook's Jupyter token, e.g. `gpr-812-a1-jupyter`."""
    return f"{name}-jupyter"


def portal_route_name(name: str) -> str:
    """The Service and route of a workload host's `/_portal/` path, e.g. `gpr-812-a1-portal`."""
    return f"{name}-portal"


def gang_member_name(name: str, rank: int) -> str:
    """The name of one rank of a gang workload `name` (its Job and pod hostname):
    `gpr-812-a1-r0`. At most 50 + 2 + 4 characters for ranks below 10,000."""
    return f"{name}-r{rank}"


def gang_host_name(name: str, rank: int) -> str:
    """The hostname the Job controller gives the pod of rank `rank` of the indexed Job `name`
    (`gpr-812-a1-0`); in the gang's headless Service it resolves as `<host>.<name>`."""
    return f"{name}-{rank}"


def project_namespace(team_slug: str, project_slug: str) -> str:
    """A default namespace name for a project, e.g. `gp-vision-detection`.

    Long slugs are cut and suffixed with a short hash so the name stays a unique DNS label.
    """
    raw = re.sub(r"[^a-z0-9-]+", "-", f"gp-{team_slug}-{project_slug}".lower()).strip("-")
    if len(raw) <= 63:
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{raw[:54].rstrip('-')}-{digest}"
