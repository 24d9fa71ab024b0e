"""Writes of a request's life: submit, approve, reject, cancel, expire, resume.

Each service validates completely before it writes, runs in one transaction, moves the request
only through `lifecycle.transition()` and leaves audit events behind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from scheduling import approval, dispatch
from scheduling.choices import (
    CANCELLABLE_STATUSES,
    RESUMABLE_KINDS,
    FlavorKind,
    Priority,
    RequestStatus,
    SchedulerMode,
    WorkloadKind,
)
from scheduling.models import ApprovalRule, Cluster, Flavor, GpuRequest, gpu_equivalent_of
from scheduling.models.catalog import Tier
from scheduling.selectors.approvals import (
    DEFERRED_APPROVAL_ACTION,
    deferred_approvals,
    deferring_lead,
    team_leads,
)
from scheduling.selectors.catalog import PoolCapacity, pool_capacity, tier_allowed_for_project
from scheduling.selectors.notebooks import curated_images
from scheduling.selectors.pilots import pilot_refusal
from scheduling.selectors.quotas import quota_standing
from scheduling.selectors.scheduler_modes import request_scheduler_mode
from scheduling.services.blockers import approval_blocker
from scheduling.services.clusters import check_request_cluster
from scheduling.services.common import invalid_field, require_decider
from scheduling.services.lifecycle import (
    Move,
    create_through,
    end_allocation,
    record_request_event,
    transition,
    transition_through,
)
from scheduling.services.notifications import notify
from scheduling.services.project_data import ensure_home_volume, validate_secret_env
from tenants.errors import ConflictError, ForbiddenError
from tenants.models import Project, scope_of
from tenants.scope import Actor
from tenants.services.organisation import signed_in_user

IMAGE_REFERENCE = re.compile(
    r"^(?:(?:[a-zA-Z0-9-]+\.)*[a-zA-Z0-9-]+(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
MAX_COMMAND_ARGS = 256
MAX_ENV_VARS = 128
BLANK_NAME = "A request's name cannot be blank: give it a short label, such as resnet sweep 3."


def _validate_workload(
    *,
    image: str,
    command: list[str],
    env: dict[str, str],
    kind: str,
    flavor: Flavor,
    cluster: Cluster | None = None,
) -> None:
    if not IMAGE_REFERENCE.match(image) or len(image) > 255:
        raise invalid_field(
            "image", f"'{image}' is not a valid image reference (e.g. pytorch:2.4)."
        )
    if len(command) > MAX_COMMAND_ARGS:
        raise invalid_field("command", f"At most {MAX_COMMAND_ARGS} arguments.")
    if len(env) > MAX_ENV_VARS:
        raise invalid_field("env", f"At most {MAX_ENV_VARS} variables.")
    for name in env:
        if not ENV_NAME.match(name):
            raise invalid_field("env", f"'{name}' is not a valid environment variable name.")
    if not flavor.pool.allows_kind(kind):
        allowed = ", ".join(flavor.pool.allowed_kinds)
        raise invalid_field("kind", f"Pool {flavor.pool} runs only {allowed} workloads.")
    mode = request_scheduler_mode(flavor=flavor, cluster=cluster)
    if mode == SchedulerMode.KUEUE and kind != WorkloadKind.JOB:
        # Kueue admits suspended Jobs here; notebooks and services (Deployments) are not yet.
        where = (cluster or flavor.pool.cluster).name
        raise invalid_field(
            "kind",
            f"This portal runs batch jobs only under SCHEDULER=kueue: cluster {where} admits "
            "through Kueue (docs/kueue.md).",
        )


def _unit_equivalent(flavor: Flavor, *, memory_mib: int, cores_percent: int) -> Decimal:
    """GPU-equivalents of one unit of the request. A vGPU share counts as the part of the
    flavor's own share it asks (memory or cores, whichever is larger), so a quota of N units
    admits N shares of the flavor's size on any card (an L4 has 23,034 MiB, not 24 GiB)."""
    if flavor.kind != FlavorKind.VGPU:
        return gpu_equivalent_of(
            kind=flavor.kind,
            card_memory_mib=flavor.gpu_memory_mib,
            memory_mib=memory_mib,
            cores_percent=cores_percent,
            mig_profile=flavor.mig_profile,
        )
    part = max(
        Decimal(memory_mib) / Decimal(flavor.gpu_memory_mib),
        Decimal(cores_percent) / Decimal(flavor.gpu_cores_percent),
    )
    return min(Decimal(1), Decimal(flavor.gpu_equivalent) * part).quantize(Decimal("0.0001"))


def _validate_curated_image(*, tier: Tier, kind: str, image: str) -> None:
    """A notebook in a tier with curated profiles runs one of their images (400 otherwise)."""
    if kind != WorkloadKind.NOTEBOOK:
        return
    allowed = curated_images(tier=tier)
    if allowed and image.strip() not in allowed:
        raise invalid_field(
            "image",
            f"Notebooks in the {tier} tier run a curated image: pick a notebook profile "
            f"({', '.join(sorted(allowed))}).",
            "image_not_curated",
        )


def _validate_shape(
    *,
    flavor: Flavor,
    capacity: PoolCapacity,
    gpu_count: int,
    kind: str,
    memory_mib: int,
    cores_percent: int,
) -> None:
    """The request must fit the pool's hardware, or it would wait forever."""
    if flavor.kind == FlavorKind.MIG:
        available = capacity.mig_slices_total.get(flavor.mig_profile, 0)
        if gpu_count > available:
            raise invalid_field(
                "gpu_count",
                f"Pool {flavor.pool} has {available} {flavor.mig_profile} slices in all; "
                f"{gpu_count} can never be given.",
            )
        return
    # Batch jobs may span nodes (all-or-nothing); notebooks and services live on one node.
    most = capacity.total_gpus if kind == WorkloadKind.JOB else capacity.max_gpus_per_node
    if gpu_count > most:
        where = "in all" if kind == WorkloadKind.JOB else "on any one node"
        raise invalid_field(
            "gpu_count",
            f"Pool {flavor.pool} has at most {most} {flavor.gpu_model} GPUs {where}; "
            f"{gpu_count} can never be given.",
        )
    if flavor.kind == FlavorKind.VGPU:
        if memory_mib > capacity.max_device_memory_mib:
            raise invalid_field(
                "gpu_memory_mib",
                f"No {flavor.gpu_model} in pool {flavor.pool} has {memory_mib} MiB; "
                f"the largest has {capacity.max_device_memory_mib} MiB.",
            )
        if not 1 <= cores_percent <= 100:
            raise invalid_field("gpu_cores_percent", "Cores are a percentage between 1 and 100.")


def _validate_host_fits(*, flavor: Flavor, capacity: PoolCapacity, host: HostResources) -> None:
    """A pod asking more CPU or memory than any node of the pool offers would wait forever."""
    for field, asked, most, unit in (
        ("cpu_millicores", host.cpu_millicores, capacity.max_node_cpu_millicores, "millicores"),
        ("memory_mib", host.memory_mib, capacity.max_node_memory_mib, "MiB"),
    ):
        if asked is not None and most is not None and asked > most:
            raise invalid_field(
                field,
                f"No node of pool {flavor.pool} offers {asked} {unit}; the largest has {most}.",
            )


@dataclass(frozen=True, slots=True)
class HostResources:
    """CPU, memory and /dev/shm of one request's pod (None: not set, the cluster's default)."""

    cpu_millicores: int | None
    memory_mib: int | None
    shm_mib: int | None


def resolve_host_resources(
    *, flavor: Flavor, cpu_millicores: int | None, memory_mib: int | None, shm_mib: int | None
) -> HostResources:
    """What was asked, else the flavor's defaults, checked against the tier's maximums (400)."""
    tier = flavor.pool.tier
    host = HostResources(
        cpu_millicores=cpu_millicores or flavor.default_cpu_millicores,
        memory_mib=memory_mib or flavor.default_memory_mib,
        shm_mib=shm_mib or flavor.default_shm_mib,
    )
    for field, unit, most in (
        ("cpu_millicores", "millicores", tier.max_cpu_millicores),
        ("memory_mib", "MiB", tier.max_memory_mib),
        ("shm_mib", "MiB", tier.max_shm_mib),
    ):
        value = getattr(host, field)
        if most is not None and value is not None and value > most:
            raise invalid_field(
                field,
                f"The {tier} tier allows at most {most} {unit} of {field.split('_')[0]} per "
                f"request; {value} asked.",
                "resource_limit_exceeded",
            )
    if host.shm_mib is not None and host.memory_mib is not None and host.shm_mib > host.memory_mib:
        raise invalid_field(
            "shm_mib",
            f"/dev/shm is memory: {host.shm_mib} MiB cannot exceed the request's "
            f"{host.memory_mib} MiB of memory.",
        )
    return host


def _approval_settings(flavor: Flavor) -> tuple[approval.RuleSettings, timedelta]:
    """The tier's approval rule (loaded with the flavor by the API) and how long approval waits."""
    try:
        rule: ApprovalRule | None = flavor.pool.tier.approval_rule
    except ApprovalRule.DoesNotExist:
        rule = None
    if rule is None:  # no rule configured: the lead decides everything
        return approval.RuleSettings(False, Priority.NORMAL, True), timedelta(hours=72)
    settings = approval.RuleSettings(
        rule.auto_approve_within_guaranteed,
        rule.auto_approve_max_priority,
        rule.lead_approves_whole_cards,
    )
    return settings, timedelta(hours=rule.approval_ttl_hours)


@dataclass(frozen=True, slots=True)
class SubmissionAdjustment:
    """What a policy of a higher layer asks of a new request (e.g. a team past its budget)."""

    force_preemptible: bool = False
    lead_approval_reason: str = ""
    note: str = ""
    # The blocker code of the request's wait for approval that this policy causes ("budget").
    blocker: str = ""


gpu_request_submitting = Signal()
"""Sent by `submit_gpu_request` before it writes, with `project`, `flavor`, `gpu_count`, `actor`.

Receivers return a `SubmissionAdjustment` or None. Accounting's budget policy connects here:
the layering lets accounting import scheduling, never the other way round, so scheduling
offers the hook and knows nothing of budgets. Receivers run inside the submit transaction.
"""


def _submission_adjustments(**facts: Any) -> list[SubmissionAdjustment]:
    replies: list[tuple[Any, object]] = list(
        gpu_request_submitting.send(sender=GpuRequest, **facts)
    )
    return [reply for _, reply in replies if isinstance(reply, SubmissionAdjustment)]


@dataclass(frozen=True, slots=True)
class SubmissionOutlook:
    """What a submission would meet, told before it is made: why a lead would have to approve
    it (empty: approved at once) and what a policy would change (e.g. made preemptible)."""

    lead_reasons: tuple[str, ...]
    notes: tuple[str, ...]


def preview_submission(
    *, actor: Actor, project: Project, flavor: Flavor, gpu_count: int, priority: str
) -> SubmissionOutlook:
    """The same approval rule and policies as `submit_gpu_request`, read without writing."""
    standing = quota_standing(project=project, flavor=flavor)
    if standing is None:
        return SubmissionOutlook((), ())
    adjustments = _submission_adjustments(
        project=project, flavor=flavor, gpu_count=gpu_count, actor=actor
    )
    rule, _ = _approval_settings(flavor)
    facts = approval.ApprovalFacts(
        priority=priority if priority in Priority.values else Priority.NORMAL,
        flavor_kind=flavor.kind,
        within_guaranteed=standing.fits_guaranteed(gpu_count),
        within_limit=standing.fits_limit(gpu_count),
    )
    reasons = approval.reasons_for_lead_approval(facts, rule)
    reasons += [a.lead_approval_reason for a in adjustments if a.lead_approval_reason]
    return SubmissionOutlook(tuple(reasons), tuple(a.note for a in adjustments if a.note))


@dataclass(frozen=True, slots=True)
class GpuRequestSpec:
    """What a submission asks for, as the API's serializer, the web form, a template or a
    resubmission hand it over; `check_submission` holds it against the portal's rules, once."""

    project: Project
    flavor: Flavor
    gpu_count: int
    image: str
    max_runtime_seconds: int
    kind: str = WorkloadKind.JOB
    command: list[str] | None = None
    env: dict[str, str] | None = None
    priority: str = Priority.NORMAL
    is_preemptible: bool = False
    allow_shared_node: bool = True
    reason: str = ""
    gpu_memory_mib: int | None = None
    gpu_cores_percent: int | None = None
    name: str = ""
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    shm_mib: int | None = None
    home_volume: bool = False
    secret_env: list[dict[str, str]] | None = None
    cluster: Cluster | None = None


@dataclass(frozen=True, slots=True)
class CheckedSubmission:
    """A spec that passed every check made before the quota lock: the row to insert (not saved
    yet), what the policies of higher layers asked, the tier's rule, and the leads to ask when
    a lead must decide whatever the quota says (None: not read)."""

    request: GpuRequest
    adjustments: tuple[SubmissionAdjustment, ...]
    rule: approval.RuleSettings
    leads: list[Any] | None


@transaction.atomic
def submit_gpu_request(*, actor: Actor, spec: GpuRequestSpec) -> GpuRequest:
    """Validate and record a request; approve it at once when the tier's rule allows.

    1. Read and check everything the request names, before any lock (`check_submission`).
    2. Lock the team's quota rows for the flavor, check the quota and insert: the lock, held to
       the commit, covers only that (`record_submission`). 3. After the commit, one task sends
       the notice's email and webhook messages (`notify`).
    """
    return record_submission(actor=actor, checked=check_submission(actor=actor, spec=spec))


def check_submission(*, actor: Actor, spec: GpuRequestSpec) -> CheckedSubmission:
    """Hold `spec` against who may ask, the tier, the pool's hardware and the policies; build
    the row. Reads only, but for a notebook's home volume, made if it is missing."""
    project, flavor, gpu_count, kind = spec.project, spec.flavor, spec.gpu_count, spec.kind
    scope = scope_of(actor)
    if not (scope.is_member_of(project.team_id) or scope.is_platform_admin):
        raise ForbiddenError("forbidden", "Only members of the project's team may request GPUs.")
    if spec.name and not spec.name.strip():
        raise invalid_field("name", BLANK_NAME)
    command = spec.command or []
    env = spec.env or {}
    tier = flavor.pool.tier
    if not flavor.is_active:
        raise invalid_field("flavor", f"Flavor {flavor} is retired.")
    check_request_cluster(flavor=flavor, cluster=spec.cluster)
    if not tier_allowed_for_project(tier=tier, project=project):
        raise invalid_field("flavor", f"Project {project} may not use the {tier} tier.")
    refusal = pilot_refusal(pool=flavor.pool, team=project.team, today=timezone.localdate())
    if refusal is not None:
        raise invalid_field("flavor", refusal, "pilot_only")
    if spec.max_runtime_seconds > tier.max_runtime_seconds:
        raise invalid_field(
            "max_runtime_seconds",
            f"The {tier} tier allows at most {tier.max_runtime_seconds} seconds.",
        )
    _validate_workload(
        image=spec.image, command=command, env=env, kind=kind, flavor=flavor, cluster=spec.cluster
    )
    _validate_curated_image(tier=tier, kind=kind, image=spec.image)
    host = resolve_host_resources(
        flavor=flavor,
        cpu_millicores=spec.cpu_millicores,
        memory_mib=spec.memory_mib,
        shm_mib=spec.shm_mib,
    )
    secret_env = spec.secret_env or []
    validate_secret_env(project=project, secret_env=secret_env)
    clashes = sorted({ref["name"] for ref in secret_env} & set(env))
    if clashes:
        raise invalid_field("secret_env", f"{', '.join(clashes)} also set in env: choose one.")
    if spec.home_volume:
        if kind != WorkloadKind.NOTEBOOK:
            raise invalid_field("home_volume", "Home volumes are for notebooks.")
        ensure_home_volume(project=project, user=actor)
    if flavor.kind == FlavorKind.VGPU:
        memory_mib = spec.gpu_memory_mib or flavor.gpu_memory_mib
        cores_percent = spec.gpu_cores_percent or flavor.gpu_cores_percent
    else:
        if spec.gpu_memory_mib is not None or spec.gpu_cores_percent is not None:
            field = "gpu_memory_mib" if spec.gpu_memory_mib is not None else "gpu_cores_percent"
            raise invalid_field(field, "Memory and cores are chosen only for vGPU flavors.")
        memory_mib, cores_percent = flavor.gpu_memory_mib, flavor.gpu_cores_percent
    capacity = pool_capacity(flavor=flavor)
    _validate_shape(
        flavor=flavor,
        capacity=capacity,
        gpu_count=gpu_count,
        kind=kind,
        memory_mib=memory_mib,
        cores_percent=cores_percent,
    )
    _validate_host_fits(flavor=flavor, capacity=capacity, host=host)
    adjustments = tuple(
        _submission_adjustments(project=project, flavor=flavor, gpu_count=gpu_count, actor=actor)
    )
    rule, approval_ttl = _approval_settings(flavor)
    unit_equivalent = _unit_equivalent(flavor, memory_mib=memory_mib, cores_percent=cores_percent)
    request = GpuRequest(
        project=project,
        team=project.team,
        owner=signed_in_user(actor),
        flavor=flavor,
        name=spec.name.strip(),
        gpu_count=gpu_count,
        gpu_memory_mib=memory_mib if flavor.kind == FlavorKind.VGPU else None,
        gpu_cores_percent=cores_percent if flavor.kind == FlavorKind.VGPU else None,
        kind=kind,
        image=spec.image,
        command=command,
        env=env,
        max_runtime_seconds=spec.max_runtime_seconds,
        priority=spec.priority,
        is_preemptible=spec.is_preemptible or any(a.force_preemptible for a in adjustments),
        allow_shared_node=spec.allow_shared_node,
        cpu_millicores=host.cpu_millicores,
        memory_mib=host.memory_mib,
        shm_mib=host.shm_mib,
        home_volume=spec.home_volume,
        secret_env=secret_env,
        reason=spec.reason,
        cluster=spec.cluster,
        gpu_equivalent=unit_equivalent * gpu_count,
        approval_expires_at=timezone.now() + approval_ttl,
    )
    # Whom to ask is read now when a lead must decide whatever the quota says (a high priority,
    # a whole card, a budget); only a request above its guaranteed share learns it under the lock.
    within_quota = approval.ApprovalFacts(
        priority=spec.priority, flavor_kind=flavor.kind, within_guaranteed=True, within_limit=True
    )
    leads = None
    if approval.reasons_for_lead_approval(within_quota, rule) or _policy_reasons(adjustments):
        leads = team_leads(team=project.team)
    return CheckedSubmission(request=request, adjustments=adjustments, rule=rule, leads=leads)


def _policy_reasons(adjustments: Sequence[SubmissionAdjustment]) -> list[str]:
    return [a.lead_approval_reason for a in adjustments if a.lead_approval_reason]


def record_submission(*, actor: Actor, checked: CheckedSubmission) -> GpuRequest:
    """Under the team's quota lock (the caller's transaction holds it to the commit): check the
    quota, insert the request queued or waiting for a lead, and tell the leads or the webhooks."""
    request, adjustments = checked.request, checked.adjustments
    project, flavor, gpu_count = request.project, request.flavor, request.gpu_count
    standing = quota_standing(project=project, flavor=flavor, lock=True)
    if standing is None:
        raise invalid_field("flavor", f"Team {project.team} has no quota for {flavor}.", "no_quota")
    if gpu_count > standing.max_ever:
        raise invalid_field(
            "gpu_count",
            f"The quota limit for {flavor} is {standing.max_ever}; "
            f"{gpu_count} can never be approved.",
            "quota_exceeded",
        )
    notes = [a.note for a in adjustments if a.note]
    submitted_data = {"policy": notes} if notes else {}
    facts = approval.ApprovalFacts(
        priority=request.priority,
        flavor_kind=flavor.kind,
        within_guaranteed=standing.fits_guaranteed(gpu_count),
        within_limit=standing.fits_limit(gpu_count),
    )
    lead_reasons = approval.reasons_for_lead_approval(facts, checked.rule)
    lead_reasons += _policy_reasons(adjustments)
    if lead_reasons:
        request.needs_lead_approval_because = "; ".join(lead_reasons)
        request.status_reason = f"Waiting for a team lead: {request.needs_lead_approval_because}."
        request.blocker = approval_blocker(
            lead_reasons=lead_reasons,
            policy_codes=[a.blocker for a in adjustments if a.lead_approval_reason],
        )
        create_through(request, actor=actor, data=submitted_data)
        leads = checked.leads
        notify(
            users=leads if leads is not None else team_leads(team=project.team),
            subject=f"GPU request {request.pk} needs your approval",
            body=f"{actor} asks for {gpu_count} × {flavor} in {project}: {request.status_reason}",
            event={"type": "request.pending_approval", "request": request.pk},
        )
    else:
        # Approved as it is recorded: the row is inserted queued, its three events at once.
        # The submitter is not emailed: the answer to the submission already says "queued".
        reason = "Approved automatically: within guaranteed quota."
        create_through(
            request,
            _approval_moves(actor=None, reason=reason),
            actor=actor,
            data=submitted_data,
        )
        _announce_approval(request, reason=reason, email_owner=False)
    return request


def _approval_moves(*, actor: Actor | None, reason: str) -> list[Move]:
    return [
        Move(RequestStatus.APPROVED, reason, actor),
        Move(RequestStatus.QUEUED, "Waiting for the scheduler."),
    ]


def _approve(request: GpuRequest, *, actor: Actor, reason: str, comment: str = "") -> None:
    """Approve and queue; the caller holds the quota lock and has checked the limit."""
    transition_through(
        request,
        _approval_moves(actor=actor, reason=reason),
        approved_by=actor,
        decision_comment=comment,
    )
    _announce_approval(request, reason=reason, comment=comment)


def _announce_approval(
    request: GpuRequest, *, reason: str, comment: str = "", email_owner: bool = True
) -> None:
    dispatch.request_scheduling_cycle()
    notify(
        users=[request.owner] if email_owner else [],
        subject=f"GPU request {request.pk} approved",
        body=reason + (f"\n\n{comment}" if comment else ""),
        event={"type": "request.approved", "request": request.pk},
    )


def locked_for_decision(request: GpuRequest) -> GpuRequest:
    """The request read again and locked (its row only), with what a decision reads of it: its
    project, flavor, team and owner come in the same statement."""
    return (
        GpuRequest.objects.select_for_update(of=("self",))
        .select_related("project", "flavor", "team", "owner")
        .get(pk=request.pk)
    )


@transaction.atomic
def approve_gpu_request(*, actor: Actor, request: GpuRequest, comment: str = "") -> GpuRequest:
    """A lead's approval; refused (409) if it would take the project past its quota limit."""
    require_decider(actor, request)
    request = locked_for_decision(request)
    if request.status != RequestStatus.PENDING_APPROVAL:
        if request.status in (RequestStatus.APPROVED, RequestStatus.QUEUED):
            return request  # approved already: a repeated click changes nothing
        raise ConflictError(
            "illegal_transition",
            f"Request {request.pk} is {request.status}; only pending requests can be approved.",
            fields={"status": request.status},
        )
    standing = quota_standing(project=request.project, flavor=request.flavor, lock=True)
    if standing is None or not standing.fits_limit(request.gpu_count):
        left = standing.left_limit if standing else 0
        raise ConflictError(
            "quota_exceeded",
            f"Approving would exceed the {request.flavor} quota limit: {left} left, "
            f"{request.gpu_count} asked.",
        )
    _approve(request, actor=actor, reason=f"Approved by {actor}.", comment=comment)
    return request


@transaction.atomic
def reject_gpu_request(*, actor: Actor, request: GpuRequest, comment: str) -> GpuRequest:
    require_decider(actor, request)
    if not comment.strip():
        raise invalid_field("comment", "Say why the request is rejected.")
    transition(
        request,
        RequestStatus.REJECTED,
        actor=actor,
        reason=f"Rejected by {actor}: {comment}",
        approved_by=actor,
        decision_comment=comment,
    )
    notify(
        users=[request.owner],
        subject=f"GPU request {request.pk} rejected",
        body=comment,
        event={"type": "request.rejected", "request": request.pk},
    )
    return request


@transaction.atomic
def cancel_gpu_request(*, actor: Actor, request: GpuRequest, reason: str = "") -> GpuRequest:
    """The owner (or their lead) withdraws a request; a cancelled one stays cancelled."""
    scope = scope_of(actor)
    if request.owner_id != actor.pk and not scope.is_lead_of(request.team_id):
        raise ForbiddenError("forbidden", "Only the owner or the team lead may cancel a request.")
    if request.status not in CANCELLABLE_STATUSES and request.status != RequestStatus.CANCELLED:
        raise ConflictError(
            "illegal_transition",
            f"Request {request.pk} is {request.status}; it can no longer be cancelled.",
            fields={"status": request.status},
        )
    if transition(
        request,
        RequestStatus.CANCELLED,
        actor=actor,
        reason=reason or f"Cancelled by {actor}.",
    ):
        allocation = end_allocation(request, reason="cancelled")
        if allocation is not None:
            dispatch.request_termination(request.pk, allocation.attempt, "cancelled by the owner")
            dispatch.request_scheduling_cycle()
    return request


def expire_stale_approvals(*, now: Any = None) -> int:
    """Pending requests nobody decided on within their tier's approval time expire."""
    now = now or timezone.now()
    expired = 0
    stale = GpuRequest.objects.filter(
        status=RequestStatus.PENDING_APPROVAL, approval_expires_at__lt=now
    )
    for request in stale.select_related("team", "project", "owner"):
        with transaction.atomic():
            if transition(
                request, RequestStatus.EXPIRED, actor=None, reason="Nobody approved it in time."
            ):
                expired += 1
                notify(
                    users=[request.owner],
                    subject=f"GPU request {request.pk} expired",
                    body="No team lead approved the request in time; submit it again if needed.",
                    event={"type": "request.expired", "request": request.pk},
                )
    return expired


@transaction.atomic
def approve_when_quota_frees(*, actor: Actor, request: GpuRequest, comment: str = "") -> GpuRequest:
    """A lead's approval of a request its quota cannot hold yet: approved at once if it fits,
    else it stays pending, marked, and `approve_deferred_requests` approves it (as this lead)
    as soon as the team's work frees enough quota. The quota limit is never passed."""
    require_decider(actor, request)
    request = locked_for_decision(request)
    if request.status != RequestStatus.PENDING_APPROVAL:
        return approve_gpu_request(actor=actor, request=request, comment=comment)
    standing = quota_standing(project=request.project, flavor=request.flavor, lock=True)
    if standing is not None and standing.fits_limit(request.gpu_count):
        _approve(request, actor=actor, reason=f"Approved by {actor}.", comment=comment)
        return request
    if deferring_lead(request) is None:
        record_request_event(
            request,
            actor=actor,
            action=DEFERRED_APPROVAL_ACTION,
            message=comment or "Approved to run when quota frees.",
        )
        notify(
            users=[request.owner],
            subject=f"GPU request {request.pk} will be approved when quota frees",
            body=f"{actor} approved it to run as soon as your team's work frees quota. {comment}",
            event={"type": "request.approval_deferred", "request": request.pk},
        )
    return request


def approve_deferred_requests() -> int:
    """Approve, oldest first, the requests leads approved to run when quota frees and that
    fit now; each in its own transaction under the quota lock. How many were approved."""
    approved = 0
    for request in deferred_approvals().select_related("project", "flavor", "team"):
        lead = deferring_lead(request)
        if lead is None or not scope_of(lead).is_lead_of(request.team_id):
            continue
        try:
            approve_gpu_request(actor=lead, request=request, comment="Approved when quota freed.")
        except ConflictError:
            continue
        approved += 1
    return approved


@transaction.atomic
def resume_gpu_request(*, actor: Actor, request: GpuRequest) -> GpuRequest:
    """A reclaimed notebook or service goes back to the queue with the same settings."""
    scope = scope_of(actor)
    if request.owner_id != actor.pk and not scope.is_lead_of(request.team_id):
        raise ForbiddenError("forbidden", "Only the owner or the team lead may resume a request.")
    if request.status != RequestStatus.RECLAIMED or request.kind not in RESUMABLE_KINDS:
        raise ConflictError(
            "illegal_transition",
            f"Request {request.pk} is a {request.kind} in state {request.status}; only reclaimed "
            "notebooks and services can be resumed.",
            fields={"status": request.status},
        )
    standing = quota_standing(project=request.project, flavor=request.flavor, lock=True)
    if standing is None or not standing.fits_limit(request.gpu_count):
        raise ConflictError(
            "quota_exceeded", f"Resuming would exceed the {request.flavor} quota limit."
        )
    transition(
        request,
        RequestStatus.QUEUED,
        actor=actor,
        reason=f"Resumed by {actor}.",
        idle_warned_at=None,
        idle_exempt_until=None,
        timeout_warned_at=None,
    )
    dispatch.request_scheduling_cycle()
    return request
