"""The demo GPU fleet: one pool per sharing mode, their flavors, quotas and approval rules."""

from __future__ import annotations

from decimal import Decimal
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from scheduling.choices import FlavorKind, Placement, SharingMode, WorkloadKind
from scheduling.models import (
    POOL_LABEL,
    ApprovalRule,
    Flavor,
    GpuDevice,
    Node,
    NodePool,
    Quota,
    ReclaimPolicy,
    RequestTemplate,
    StorageQuota,
    Tier,
)
from scheduling.models.catalog import NotebookProfile
from tenants.demo import DemoSeeding
from tenants.models import Team

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}

# slug: (name, max runtime, cost rank, approval rule)
TIERS = {
    "dev": ("Development", 8 * 3600, 0, {"lead_approves_whole_cards": False}),
    "inference": ("Inference", 7 * 24 * 3600, 1, {"lead_approves_whole_cards": False}),
    "training": ("Training", 3 * 24 * 3600, 2, {"lead_approves_whole_cards": True}),
}

DEMO_RECLAIM = {
    "idle_threshold_percent": 5,
    "idle_window_seconds": 180,
    "notebook_idle_window_seconds": 240,
    "idle_warning_seconds": 90,
    "timeout_warning_seconds": 60,
    "pending_timeout_seconds": 300,
    # One Keep alive press holds the four-minute idle rule off for ten minutes.
    "notebook_keep_alive_seconds": 600,
}

POOLS: list[dict[str, Any]] = [
    {
        "slug": "a100-training",
        "name": "A100 training (whole cards)",
        "tier": "training",
        "sharing_mode": SharingMode.EXCLUSIVE,
        "scheduler_name": "default-scheduler",
        "placement": Placement.PORTAL,
        "allowed_kinds": [WorkloadKind.JOB],
        "gpu_model": "A100-80G",
        "memory_mib": 81920,
        "nodes": 2,
        "gpus_per_node": 8,
        # Host resources of a DGX A100-class node: 128 cores, 2 TiB.
        "cpu_millicores": 128_000,
        "host_memory_mib": 2 * 1024 * 1024,
        "mig_layouts": None,
    },
    {
        "slug": "h100-mig",
        "name": "H100 MIG (inference)",
        "tier": "inference",
        "sharing_mode": SharingMode.MIG,
        "scheduler_name": "default-scheduler",
        "placement": Placement.CLUSTER,
        "allowed_kinds": [],
        "gpu_model": "H100-80G",
        "memory_mib": 81920,
        "nodes": 1,
        "gpus_per_node": 8,
        # Host resources of a DGX H100-class node: 112 cores, 2 TiB.
        "cpu_millicores": 112_000,
        "host_memory_mib": 2 * 1024 * 1024,
        "mig_layouts": [{"1g.10gb": 7}] * 4 + [{"3g.40gb": 2}] * 4,
    },
    {
        "slug": "l4-vgpu",
        "name": "L4 vGPU (development)",
        "tier": "dev",
        "sharing_mode": SharingMode.VGPU,
        "scheduler_name": "hami-scheduler",
        "placement": Placement.PORTAL,
        "allowed_kinds": [],
        "gpu_model": "L4",
        "memory_mib": 24576,
        "nodes": 2,
        "gpus_per_node": 4,
        # A 4 x L4 inference server: 48 cores, 384 GiB.
        "cpu_millicores": 48_000,
        "host_memory_mib": 384 * 1024,
        "mig_layouts": None,
    },
]

# slug: (name, pool, kind, memory MiB, cores %, MIG profile, GPU-equivalent)
FLAVORS = {
    "a100-80g": ("A100 80 GB", "a100-training", FlavorKind.WHOLE, 81920, 100, "", "1"),
    "h100-1g10gb": ("H100 MIG 1g.10gb", "h100-mig", FlavorKind.MIG, 10240, 14, "1g.10gb", "0.1429"),
    "h100-3g40gb": ("H100 MIG 3g.40gb", "h100-mig", FlavorKind.MIG, 40960, 43, "3g.40gb", "0.4286"),
    "l4-12g": ("L4 vGPU 12 GiB", "l4-vgpu", FlavorKind.VGPU, 12288, 25, "", "0.5"),
    "l4-6g": ("L4 vGPU 6 GiB", "l4-vgpu", FlavorKind.VGPU, 6144, 25, "", "0.25"),
}

# slug: (default CPU millicores, default host memory MiB) of a request that names none: what the
# demo's CPU and memory prices charge. Small enough that a node full of the flavor still fits.
HOST_DEFAULTS = {
    "a100-80g": (8000, 64 * 1024),
    "h100-1g10gb": (1000, 8 * 1024),
    "h100-3g40gb": (4000, 32 * 1024),
    "l4-12g": (2000, 8 * 1024),
    "l4-6g": (2000, 8 * 1024),
}

# team: {flavor: (guaranteed, limit)}
QUOTAS = {
    "vision": {
        "a100-80g": (4, 16),
        "h100-1g10gb": (7, 14),
        "h100-3g40gb": (2, 4),
        "l4-12g": (8, 16),
        "l4-6g": (8, 16),
    },
    "speech": {"h100-1g10gb": (7, 14), "h100-3g40gb": (2, 4), "l4-12g": (8, 16), "l4-6g": (8, 16)},
}
TIERS_OF_TEAM = {"vision": ["dev", "inference", "training"], "speech": ["dev", "inference"]}


@transaction.atomic
def seed_demo_fleet(*, teams: dict[str, Team], seeding: DemoSeeding | None = None) -> None:
    """Make the demo tiers, pools, nodes, flavors and quotas that were never seeded.

    Each is made once (`tenants.demo`): a tier, pool, flavor, rule or quota a user changed,
    retired or deleted stays so.
    """
    record = seeding or DemoSeeding()
    tiers: dict[str, Tier] = {}
    for slug, (name, max_runtime, rank, rule) in TIERS.items():
        tier = record.get_or_create(
            f"tier:{slug}",
            Tier,
            slug=slug,
            defaults={"name": name, "max_runtime_seconds": max_runtime, "rank": rank},
        )
        if tier is None:
            continue
        tiers[slug] = tier
        record.get_or_create(f"approval-rule:{slug}", ApprovalRule, tier=tier, defaults=rule)
        # Short windows so that the demo shows idle reclamation within minutes.
        record.get_or_create(
            f"reclaim-policy:{slug}", ReclaimPolicy, tier=tier, defaults=DEMO_RECLAIM
        )
    for team_slug, tier_slugs in TIERS_OF_TEAM.items():
        for tier_slug in tier_slugs:
            key = f"tier-access:{tier_slug}/{team_slug}"
            if tier_slug not in tiers or team_slug not in teams:
                record.could_not(key, f"tier {tier_slug} or team {team_slug} is gone")
                continue
            record.once(key, Tier, partial(_allow, tiers[tier_slug], teams[team_slug]))

    pools: dict[str, NodePool] = {}
    for spec in POOLS:
        if spec["tier"] not in tiers:
            record.could_not(f"pool:{spec['slug']}", f"tier {spec['tier']} is gone")
            continue
        pool = record.get_or_create(
            f"pool:{spec['slug']}",
            NodePool,
            slug=spec["slug"],
            defaults={
                "name": spec["name"],
                "tier": tiers[spec["tier"]],
                "sharing_mode": spec["sharing_mode"],
                "scheduler_name": spec["scheduler_name"],
                "placement": spec["placement"],
                "allowed_kinds": spec["allowed_kinds"],
                "node_selector": {POOL_LABEL: spec["slug"]},
                "taints": [GPU_TAINT],
            },
        )
        if pool is None:
            continue
        pools[spec["slug"]] = pool
        for number in range(spec["nodes"]):
            name = f"{spec['slug']}-{number + 1}"
            node = record.get_or_create(
                f"node:{name}",
                Node,
                name=name,
                defaults={
                    "pool": pool,
                    "gpu_model": spec["gpu_model"],
                    "labels": {
                        POOL_LABEL: spec["slug"],
                        "nvidia.com/gpu.product": spec["gpu_model"],
                    },
                    "cpu_millicores": spec["cpu_millicores"],
                    "memory_mib": spec["host_memory_mib"],
                },
            )
            if node is None:
                continue
            for index in range(spec["gpus_per_node"]):
                layouts = spec["mig_layouts"]
                record.get_or_create(
                    f"gpu:{name}/{index}",
                    GpuDevice,
                    node=node,
                    index=index,
                    defaults={
                        "memory_mib": spec["memory_mib"],
                        "mig_layout": layouts[index] if layouts else {},
                    },
                )

    flavors: dict[str, Flavor] = {}
    for slug, (name, pool_slug, kind, memory, cores, profile, weight) in FLAVORS.items():
        if pool_slug not in pools:
            record.could_not(f"flavor:{slug}", f"pool {pool_slug} is gone")
            continue
        flavor = record.get_or_create(
            f"flavor:{slug}",
            Flavor,
            slug=slug,
            defaults={
                "name": name,
                "pool": pools[pool_slug],
                "kind": kind,
                "gpu_model": next(p["gpu_model"] for p in POOLS if p["slug"] == pool_slug),
                "gpu_memory_mib": memory,
                "gpu_cores_percent": cores,
                "mig_profile": profile,
                "gpu_equivalent": Decimal(weight),
                "default_cpu_millicores": HOST_DEFAULTS.get(slug, (None, None))[0],
                "default_memory_mib": HOST_DEFAULTS.get(slug, (None, None))[1],
            },
        )
        if flavor is not None:
            flavors[slug] = flavor
    for team_slug, amounts in QUOTAS.items():
        for flavor_slug, (guaranteed, limit) in amounts.items():
            key = f"quota:{team_slug}/{flavor_slug}"
            if team_slug not in teams or flavor_slug not in flavors:
                record.could_not(key, f"team {team_slug} or flavor {flavor_slug} is gone")
                continue
            record.get_or_create(
                key,
                Quota,
                team=teams[team_slug],
                project=None,
                flavor=flavors[flavor_slug],
                defaults={"guaranteed": guaranteed, "limit": limit},
            )
    if seeding is None:
        record.finish()


def _allow(tier: Tier, team: Team) -> Tier:
    tier.allowed_teams.add(team)
    return tier


# What a visitor can try at once: each team's shared templates on the request form, and room
# for a project workspace.
STORAGE_GIB = {"vision": 500, "speech": 200}
TEMPLATES = {
    "vision": (
        "bob",
        [
            {
                "name": "PyTorch notebook",
                "description": "A quarter of an L4 with 12 GiB, JupyterLab with PyTorch.",
                "flavor": "l4-12g",
                "kind": WorkloadKind.NOTEBOOK,
                "image": "jupyter/pytorch-notebook:2024-10-07",
                "max_runtime_seconds": 4 * 3600,
            },
            {
                "name": "Detector training, 1 A100",
                "description": "A whole A100 80 GB for a training job (the lead approves it).",
                "flavor": "a100-80g",
                "kind": WorkloadKind.JOB,
                "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
                "command": ["python", "train.py", "--epochs", "10"],
                "max_runtime_seconds": 8 * 3600,
            },
        ],
    ),
    "speech": (
        "dan",
        [
            {
                "name": "ASR evaluation on a MIG slice",
                "description": "An H100 3g.40gb slice for a batch evaluation job.",
                "flavor": "h100-3g40gb",
                "kind": WorkloadKind.JOB,
                "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
                "command": ["python", "eval.py"],
                "max_runtime_seconds": 2 * 3600,
            },
        ],
    ),
}


# The curated notebook servers on the request form: (name, image, description, tiers, flavor).
# The development and inference tiers then run only these images as notebooks.
NOTEBOOK_PROFILES = [
    (
        "PyTorch on an L4 share",
        "jupyter/pytorch-notebook:2024-10-07",
        "JupyterLab with PyTorch on half an L4 (12 GiB).",
        ["dev", "inference"],
        "l4-12g",
    ),
    (
        "TensorFlow on an L4 share",
        "jupyter/tensorflow-notebook:2024-10-07",
        "JupyterLab with TensorFlow on a quarter of an L4 (6 GiB).",
        ["dev"],
        "l4-6g",
    ),
    (
        "PyTorch on an H100 slice",
        "jupyter/pytorch-notebook:2024-10-07",
        "JupyterLab with PyTorch on an H100 1g.10gb MIG slice.",
        ["inference"],
        "h100-1g10gb",
    ),
]


def _profile_tiers(profile: NotebookProfile, tiers: list[Tier]) -> NotebookProfile:
    profile.tiers.set(tiers)
    return profile


@transaction.atomic
def seed_demo_workbench(*, teams: dict[str, Team], seeding: DemoSeeding) -> None:
    """Make the demo teams' storage quotas and shared request templates that were never
    seeded (`tenants.demo`: what a user changed or deleted stays so)."""
    for team_slug, limit_gib in STORAGE_GIB.items():
        key = f"storage-quota:{team_slug}"
        if team_slug not in teams:
            seeding.could_not(key, f"team {team_slug} is gone")
            continue
        seeding.get_or_create(
            key, StorageQuota, team=teams[team_slug], defaults={"limit_gib": limit_gib}
        )
    for team_slug, (lead, templates) in TEMPLATES.items():
        owner = get_user_model().objects.filter(username=lead).first()
        for spec in templates:
            key = f"template:{team_slug}/{spec['name']}"
            flavor = Flavor.objects.filter(slug=spec["flavor"]).first()
            if team_slug not in teams or owner is None or flavor is None:
                seeding.could_not(key, f"team {team_slug}, {lead} or {spec['flavor']} is gone")
                continue
            seeding.get_or_create(
                key,
                RequestTemplate,
                team=teams[team_slug],
                name=spec["name"],
                defaults={
                    **{field: value for field, value in spec.items() if field != "flavor"},
                    "owner": owner,
                    "flavor": flavor,
                    "is_shared": True,
                },
            )
    for name, image, description, tier_slugs, flavor_slug in NOTEBOOK_PROFILES:
        key = f"notebook-profile:{name}"
        flavor = Flavor.objects.filter(slug=flavor_slug).first()
        tiers = list(Tier.objects.filter(slug__in=tier_slugs))
        if flavor is None or len(tiers) != len(tier_slugs):
            seeding.could_not(key, f"flavor {flavor_slug} or a tier of {tier_slugs} is gone")
            continue
        profile = seeding.get_or_create(
            key,
            NotebookProfile,
            name=name,
            defaults={"image": image, "description": description, "flavor": flavor},
        )
        if profile is not None:
            seeding.once(f"{key}/tiers", NotebookProfile, partial(_profile_tiers, profile, tiers))
