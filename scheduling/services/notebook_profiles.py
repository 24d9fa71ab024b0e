"""Writes of the curated notebook profiles.

Platform admins make the profiles; each write is validated as the model says, checked across
rows (the default flavor lies in one of the profile's tiers) and audited with what changed. The
submit service holds notebooks to the curated images (`requests._validate_curated_image`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction

from scheduling.models.catalog import NotebookProfile, Tier
from scheduling.services.requests import IMAGE_REFERENCE
from tenants.errors import DomainError
from tenants.scope import Actor
from tenants.services.organisation import (
    apply_changes,
    audit_value,
    known_fields,
    record_audit_event,
    require_platform_admin,
    save_valid,
)

NOTEBOOK_PROFILE_FIELDS = frozenset(
    {"name", "image", "description", "tiers", "flavor", "gpu_count", "is_active"}
)


def _check_image(image: str) -> str:
    image = image.strip()
    if not IMAGE_REFERENCE.match(image):
        message = "Not an image reference: e.g. quay.io/jupyter/pytorch-notebook:cuda-2024-10-07."
        raise DomainError("invalid", message, fields={"image": message})
    return image


def _set_tiers(profile: NotebookProfile, tiers: Iterable[Tier] | None) -> dict[str, list[Any]]:
    """Set the tiers the profile may run on (at least one) and check its default flavor lies in
    one of them; answer {"tiers": [before, after]} as pk lists when they change."""
    before = sorted(profile.tiers.values_list("pk", flat=True))
    chosen = list(tiers) if tiers is not None else list(profile.tiers.all())
    if not chosen:
        raise DomainError(
            "invalid",
            "Choose the tiers the profile may run on.",
            fields={"tiers": "Choose at least one tier."},
        )
    flavor = profile.flavor
    if flavor is not None and flavor.pool.tier_id not in {tier.pk for tier in chosen}:
        message = f"{flavor} is in the {flavor.pool.tier} tier, not one of the profile's."
        raise DomainError("invalid", message, fields={"flavor": message})
    after = sorted(tier.pk for tier in chosen)
    if before == after:
        return {}
    profile.tiers.set(chosen)
    return {"tiers": [before, after]}


@transaction.atomic
def create_notebook_profile(*, actor: Actor, **fields: Any) -> NotebookProfile:
    """A new profile; `tiers` takes a list of tiers."""
    require_platform_admin(actor, "create notebook profiles")
    plain = dict(known_fields(fields, NOTEBOOK_PROFILE_FIELDS))
    tiers = list(plain.pop("tiers", None) or [])
    plain["image"] = _check_image(plain.get("image", ""))
    profile = NotebookProfile(**plain)
    save_valid(profile)
    _set_tiers(profile, tiers)
    record_audit_event(
        actor=actor,
        action="notebook_profile.created",
        target=profile,
        data={"fields": audit_value({**plain, "tiers": tiers})},
    )
    return profile


@transaction.atomic
def update_notebook_profile(
    *, actor: Actor, notebook_profile: NotebookProfile, **fields: Any
) -> NotebookProfile:
    require_platform_admin(actor, "change notebook profiles")
    plain = dict(known_fields(fields, NOTEBOOK_PROFILE_FIELDS))
    tiers = plain.pop("tiers", None)
    if "image" in plain:
        plain["image"] = _check_image(plain["image"])
    changes = apply_changes(notebook_profile, plain)
    save_valid(notebook_profile)
    changes.update(_set_tiers(notebook_profile, tiers))
    record_audit_event(
        actor=actor,
        action="notebook_profile.updated",
        target=notebook_profile,
        data={"changes": changes},
    )
    return notebook_profile


@transaction.atomic
def delete_notebook_profile(*, actor: Actor, notebook_profile: NotebookProfile) -> None:
    """Delete a profile; notebooks already running keep their image."""
    require_platform_admin(actor, "delete notebook profiles")
    record_audit_event(
        actor=actor,
        action="notebook_profile.deleted",
        target=notebook_profile,
        data={"image": notebook_profile.image},
        message=notebook_profile.name,
    )
    notebook_profile.delete()
