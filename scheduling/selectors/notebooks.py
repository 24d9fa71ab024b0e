"""Reads for notebooks: the curated profiles a project may start, and one's running servers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from scheduling.choices import RequestStatus, WorkloadKind
from scheduling.models.catalog import NotebookProfile, ReclaimPolicy, Tier
from scheduling.models.requests import GpuRequest
from scheduling.selectors.catalog import flavors_for_project, tier_allowed_for_project
from tenants.models import Project


def curated_images(*, tier: Tier) -> frozenset[str]:
    """The images of the tier's active profiles; empty when the tier curates none."""
    return frozenset(
        NotebookProfile.objects.filter(is_active=True, tiers=tier).values_list("image", flat=True)
    )


def profiles_for_project(*, project: Project | None) -> list[NotebookProfile]:
    """The active profiles the project may start: in a tier it may use and, when a profile
    names a flavor, with that flavor among those the project may use."""
    if project is None:
        return []
    usable_flavors = set(flavors_for_project(project=project).values_list("pk", flat=True))
    profiles = NotebookProfile.objects.filter(is_active=True).prefetch_related("tiers")
    chosen = []
    for profile in profiles.select_related("flavor", "flavor__pool__tier"):
        if profile.flavor_id is not None and profile.flavor_id not in usable_flavors:
            continue
        if any(
            tier_allowed_for_project(tier=tier, project=project) for tier in profile.tiers.all()
        ):
            chosen.append(profile)
    return chosen


def profile_body(profile: NotebookProfile) -> dict[str, Any]:
    """The request form's starting values for a profile: a notebook of its image and shape."""
    body: dict[str, Any] = {
        "name": profile.name,
        "kind": WorkloadKind.NOTEBOOK,
        "image": profile.image,
        "gpu_count": profile.gpu_count,
        "command": [],
    }
    if profile.flavor_id is not None:
        body["flavor"] = profile.flavor_id
    return body


@dataclass(frozen=True, slots=True)
class RunningServer:
    """One of the user's running notebooks, with how long Keep alive may push its idle rule."""

    request: GpuRequest
    exempt_until: datetime | None
    keep_alive_seconds: int

    @property
    def can_keep_alive(self) -> bool:
        return self.keep_alive_seconds > 0


def running_servers(*, user: Any) -> list[RunningServer]:
    """The user's own notebooks that are running or starting, newest first."""
    requests: QuerySet[GpuRequest] = (
        GpuRequest.objects.filter(
            owner_id=user.pk,
            kind=WorkloadKind.NOTEBOOK,
            status__in=(RequestStatus.RUNNING, RequestStatus.LAUNCHING),
        )
        .select_related("project", "flavor", "flavor__pool")
        .order_by("-created_at")
    )
    found = list(requests)
    tier_ids = {request.flavor.pool.tier_id for request in found}
    policies = {
        policy.tier_id: policy for policy in ReclaimPolicy.objects.filter(tier_id__in=tier_ids)
    }
    default = ReclaimPolicy()
    now = timezone.now()
    servers = []
    for request in found:
        policy = policies.get(request.flavor.pool.tier_id, default)
        exempt = request.idle_exempt_until
        servers.append(
            RunningServer(
                request=request,
                exempt_until=exempt if exempt and exempt > now else None,
                keep_alive_seconds=policy.notebook_keep_alive_seconds,
            )
        )
    return servers


def keep_alive_until(*, policy: ReclaimPolicy, now: datetime) -> datetime:
    """Where one Keep alive press puts the idle deadline: the policy's span from now."""
    return now + timedelta(seconds=policy.notebook_keep_alive_seconds)
