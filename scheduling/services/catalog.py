"""Writes to the GPU catalogue: tiers, node pools, flavors, approval rules, reclaim policies and
team quotas. Platform admins make them; each write is validated as its model says and audited
with the fields it changed. Deleting what is still in use is refused (409), never cascaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction

from scheduling import dispatch
from scheduling.models import ApprovalRule, Flavor, NodePool, Quota, ReclaimPolicy, Tier
from scheduling.services.quotas import delete_quota, set_quota
from tenants.errors import ConflictError, DomainError
from tenants.models import Team
from tenants.scope import Actor
from tenants.services.organisation import (
    apply_changes,
    audit_value,
    delete_unused,
    known_fields,
    record_audit_event,
    require_platform_admin,
    save_valid,
)

TIER_FIELDS = frozenset(
    {"name", "slug", "description", "max_runtime_seconds", "rank"}
    | {"allowed_teams", "allowed_projects"}
    | {"max_cpu_millicores", "max_memory_mib", "max_shm_mib"}
    | {"preemption_grace_seconds"}
    | {"lends_unassigned"}
)
TIER_RELATIONS = ("allowed_teams", "allowed_projects")
NODE_POOL_FIELDS = frozenset(
    {
        "name",
        "slug",
        "tier",
        "cluster",
        "sharing_mode",
        "node_selector",
        "taints",
        "scheduler_name",
        "placement",
        "scoring",
        "allocation",
        "allowed_kinds",
        "short_reserve_fraction",
        "short_max_runtime_seconds",
        "is_pilot",
        "pilot_until",
        "pilot_teams",
    }
)
FLAVOR_FIELDS = frozenset(
    {
        "name",
        "slug",
        "pool",
        "other_pools",
        "kind",
        "gpu_model",
        "gpu_memory_mib",
        "gpu_cores_percent",
        "mig_profile",
        "gpu_equivalent",
        "is_active",
        "default_cpu_millicores",
        "default_memory_mib",
        "default_shm_mib",
    }
)
# What a request of the flavor asked for: fixed once there are requests.
FLAVOR_SHAPE_FIELDS = frozenset({"pool", "kind", "gpu_model", "gpu_memory_mib", "mig_profile"})
APPROVAL_RULE_FIELDS = frozenset(
    {
        "tier",
        "auto_approve_within_guaranteed",
        "auto_approve_max_priority",
        "lead_approves_whole_cards",
        "approval_ttl_hours",
    }
)
RECLAIM_POLICY_FIELDS = frozenset(
    {
        "idle_threshold_percent",
        "idle_window_seconds",
        "notebook_idle_window_seconds",
        "idle_warning_seconds",
        "idle_marks_preemptible",
        "reclaim_idle",
        "timeout_warning_seconds",
        "pending_timeout_seconds",
        "max_attempts",
        "notebook_keep_alive_seconds",
    }
)


def _differs(instance: Any, fields: dict[str, Any], names: Iterable[str]) -> bool:
    """Whether `fields` would change any of `names` on `instance` (checked before any is set)."""
    return any(name in fields and getattr(instance, name) != fields[name] for name in names)


def _audit(actor: Actor, action: str, target: Any, data: dict[str, Any], message: str = "") -> None:
    record_audit_event(actor=actor, action=action, target=target, data=data, message=message)


# Tiers


def _split_relations(fields: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    plain = {name: value for name, value in fields.items() if name not in TIER_RELATIONS}
    relations = {name: list(fields[name]) for name in TIER_RELATIONS if name in fields}
    return plain, relations


def _set_tier_relations(tier: Tier, relations: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Set the tier's allowed teams and projects; answer {name: [before, after]} as pk lists."""
    changed: dict[str, list[Any]] = {}
    for name, objects in relations.items():
        manager = getattr(tier, name)
        before = sorted(manager.values_list("pk", flat=True))
        after = sorted(obj.pk for obj in objects)
        if before != after:
            manager.set(objects)
            changed[name] = [before, after]
    return changed


@transaction.atomic
def create_tier(*, actor: Actor, **fields: Any) -> Tier:
    """A new tier; `allowed_teams` and `allowed_projects` take lists of objects."""
    require_platform_admin(actor, "create tiers")
    plain, relations = _split_relations(known_fields(fields, TIER_FIELDS))
    tier = Tier(**plain)
    save_valid(tier)
    _set_tier_relations(tier, relations)
    _audit(actor, "tier.created", tier, {"fields": audit_value(fields)})
    return tier


@transaction.atomic
def update_tier(*, actor: Actor, tier: Tier, **fields: Any) -> Tier:
    require_platform_admin(actor, "change tiers")
    plain, relations = _split_relations(known_fields(fields, TIER_FIELDS))
    changes = apply_changes(tier, plain)
    save_valid(tier)
    changes.update(_set_tier_relations(tier, relations))
    _audit(actor, "tier.updated", tier, {"changes": changes})
    if changes:  # the change may unblock waiting work
        dispatch.request_scheduling_cycle()
    return tier


@transaction.atomic
def delete_tier(*, actor: Actor, tier: Tier) -> None:
    """Delete a tier without node pools (its approval rule and reclaim policy go with it)."""
    require_platform_admin(actor, "delete tiers")
    _audit(actor, "tier.deleted", tier, {}, message=tier.name)
    delete_unused(
        tier, code="tier_in_use", message=f"Tier {tier} still has node pools: move them first."
    )


# Node pools


@transaction.atomic
def create_node_pool(*, actor: Actor, **fields: Any) -> NodePool:
    require_platform_admin(actor, "create node pools")
    plain = known_fields(fields, NODE_POOL_FIELDS)
    pilot_teams = plain.pop("pilot_teams", None)
    pool = NodePool(**plain)
    save_valid(pool)
    if pilot_teams is not None:
        pool.pilot_teams.set(pilot_teams)
    _audit(actor, "node_pool.created", pool, {"fields": audit_value(fields)})
    return pool


@transaction.atomic
def update_node_pool(*, actor: Actor, node_pool: NodePool, **fields: Any) -> NodePool:
    require_platform_admin(actor, "change node pools")
    fields = known_fields(fields, NODE_POOL_FIELDS)
    if _differs(node_pool, fields, {"sharing_mode"}) and node_pool.flavors.exists():
        raise ConflictError(
            "node_pool_in_use",
            f"Pool {node_pool} has flavors of its sharing mode: remove them first.",
        )
    pilot_teams = fields.pop("pilot_teams", None)
    changes = apply_changes(node_pool, fields)
    save_valid(node_pool)
    if pilot_teams is not None:
        before = sorted(node_pool.pilot_teams.values_list("pk", flat=True))
        after = sorted(team.pk for team in pilot_teams)
        if before != after:
            node_pool.pilot_teams.set(pilot_teams)
            changes["pilot_teams"] = [before, after]
    _audit(actor, "node_pool.updated", node_pool, {"changes": changes})
    if changes:
        dispatch.request_scheduling_cycle()
    return node_pool


@transaction.atomic
def delete_node_pool(*, actor: Actor, node_pool: NodePool) -> None:
    """Delete an empty pool: one with nodes, flavors, allocations or usage is refused (409)."""
    require_platform_admin(actor, "delete node pools")
    if node_pool.nodes.exists():
        raise ConflictError(
            "node_pool_in_use", f"Pool {node_pool} still has nodes: drain and remove them first."
        )
    _audit(actor, "node_pool.deleted", node_pool, {}, message=node_pool.name)
    delete_unused(
        node_pool,
        code="node_pool_in_use",
        message=f"Pool {node_pool} still has flavors, allocations or usage.",
    )


# Flavors


def _set_other_pools(flavor: Flavor, pools: Iterable[NodePool] | None) -> dict[str, list[Any]]:
    """Set the other pools that hold the flavor's cards (another cluster's, say): each shares
    the flavor's pool's sharing mode. Answer {"other_pools": [before, after]} when they change."""
    if pools is None:
        return {}
    pools = list(pools)
    for pool in pools:
        if pool.pk == flavor.pool_id:
            raise DomainError(
                "invalid",
                f"{pool} is the flavor's own pool.",
                fields={"other_pools": f"{pool} is the flavor's own pool."},
            )
        if pool.sharing_mode != flavor.pool.sharing_mode:
            message = f"{pool} shares its cards otherwise than {flavor.pool}."
            raise DomainError("invalid", message, fields={"other_pools": message})
    before = sorted(flavor.other_pools.values_list("pk", flat=True))
    after = sorted(pool.pk for pool in pools)
    if before == after:
        return {}
    flavor.other_pools.set(pools)
    return {"other_pools": [before, after]}


@transaction.atomic
def create_flavor(*, actor: Actor, **fields: Any) -> Flavor:
    require_platform_admin(actor, "create flavors")
    plain = dict(known_fields(fields, FLAVOR_FIELDS))
    other_pools = plain.pop("other_pools", None)
    if other_pools is not None:
        fields["other_pools"] = other_pools = list(other_pools)
    flavor = Flavor(**plain)
    save_valid(flavor)
    _set_other_pools(flavor, other_pools)
    _audit(actor, "flavor.created", flavor, {"fields": audit_value(fields)})
    return flavor


@transaction.atomic
def update_flavor(*, actor: Actor, flavor: Flavor, **fields: Any) -> Flavor:
    require_platform_admin(actor, "change flavors")
    fields = known_fields(fields, FLAVOR_FIELDS)
    if _differs(flavor, fields, FLAVOR_SHAPE_FIELDS) and flavor.gpu_requests.exists():
        raise ConflictError(
            "flavor_in_use",
            f"Requests were made for {flavor} as it is: add a new flavor for another shape.",
        )
    other_pools = fields.pop("other_pools", None)
    changes = apply_changes(flavor, fields)
    save_valid(flavor)
    changes.update(_set_other_pools(flavor, other_pools))
    _audit(actor, "flavor.updated", flavor, {"changes": changes})
    if changes:
        dispatch.request_scheduling_cycle()
    return flavor


@transaction.atomic
def delete_flavor(*, actor: Actor, flavor: Flavor) -> None:
    """Delete an unused flavor (its prices go with it); one with quotas, requests or usage: 409.

    A flavor that was used stays for the record: set `is_active` false to stop new requests.
    """
    require_platform_admin(actor, "delete flavors")
    in_use = f"Flavor {flavor} is in use: mark it inactive instead."
    if flavor.quotas.exists():
        raise ConflictError("flavor_in_use", f"{in_use} (teams have quotas of it)")
    _audit(actor, "flavor.deleted", flavor, {}, message=flavor.name)
    delete_unused(flavor, code="flavor_in_use", message=in_use)


# Approval rules


@transaction.atomic
def create_approval_rule(*, actor: Actor, **fields: Any) -> ApprovalRule:
    """The approval rule of a tier (one per tier)."""
    require_platform_admin(actor, "create approval rules")
    rule = ApprovalRule(**known_fields(fields, APPROVAL_RULE_FIELDS))
    save_valid(rule)
    _audit(actor, "approval_rule.created", rule, {"fields": audit_value(fields)})
    return rule


@transaction.atomic
def update_approval_rule(
    *, actor: Actor, approval_rule: ApprovalRule, **fields: Any
) -> ApprovalRule:
    require_platform_admin(actor, "change approval rules")
    changes = apply_changes(approval_rule, known_fields(fields, APPROVAL_RULE_FIELDS))
    save_valid(approval_rule)
    _audit(actor, "approval_rule.updated", approval_rule, {"changes": changes})
    return approval_rule


@transaction.atomic
def delete_approval_rule(*, actor: Actor, approval_rule: ApprovalRule) -> None:
    """Delete a tier's rule: its requests then follow the built-in defaults."""
    require_platform_admin(actor, "delete approval rules")
    _audit(actor, "approval_rule.deleted", approval_rule, {"tier": approval_rule.tier_id})
    approval_rule.delete()


# Reclaim policies


@transaction.atomic
def save_reclaim_policy(*, actor: Actor, tier: Tier, **fields: Any) -> ReclaimPolicy:
    """Create the tier's reclaim policy or change it; fields left out keep their value."""
    require_platform_admin(actor, "change reclaim policies")
    policy = ReclaimPolicy.objects.select_for_update().filter(tier=tier).first()
    created = policy is None
    if policy is None:
        policy = ReclaimPolicy(tier=tier)
    changes = apply_changes(policy, known_fields(fields, RECLAIM_POLICY_FIELDS))
    save_valid(policy)
    action = "reclaim_policy.created" if created else "reclaim_policy.updated"
    _audit(actor, action, policy, {"tier": tier.pk, "changes": changes})
    return policy


@transaction.atomic
def delete_reclaim_policy(*, actor: Actor, policy: ReclaimPolicy) -> None:
    """Remove a tier's reclaim policy: the tier then follows the built-in defaults."""
    require_platform_admin(actor, "delete reclaim policies")
    _audit(actor, "reclaim_policy.deleted", policy, {"tier": policy.tier_id})
    policy.delete()


# Team quotas (the team lead splits them over projects: scheduling.services.set_quota)


def set_team_quota(
    *, actor: Actor, team: Team, flavor: Flavor, guaranteed: int, limit: int
) -> Quota:
    """Create or change a team's quota of one flavor (platform admins); audited as quota.set."""
    require_platform_admin(actor, "set team quotas")
    return set_quota(actor=actor, team=team, flavor=flavor, guaranteed=guaranteed, limit=limit)


def delete_team_quota(*, actor: Actor, quota: Quota) -> None:
    """Remove a team's quota; refused (409) while projects hold parts of it."""
    require_platform_admin(actor, "delete team quotas")
    if quota.project_id is not None:
        raise DomainError("invalid", "This is a project's part of a quota, not a team quota.")
    delete_quota(actor=actor, quota=quota)
