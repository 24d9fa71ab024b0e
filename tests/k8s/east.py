"""A second cluster for the multi-cluster tests: the demo organisation and fleet on the local
cluster, plus `east` (a second test bed, registered with its kubeconfig) whose one pool also sells
the demo's A100 flavor."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_user_model

from scheduling.demo import seed_demo_fleet
from scheduling.models import Cluster, Flavor, GpuRequest, NodePool
from scripts.testbed.cluster import Testbed
from tenants.models import Project
from tenants.services.organisation import seed_demo_organisation
from tests.support.clusters import make_cluster
from tests.support.factories import GpuRequestFactory

EAST_POOL = "east-a100"
EAST_NODE = "east-a100-0"


def seed_with_east(east_bed: Testbed, *, scheduler: str = "portal") -> dict[str, Any]:
    """The organisation, the local fleet and the `east` cluster in `scheduler` mode, with a new
    project (so its namespace is new to both clusters)."""
    teams = seed_demo_organisation(password="x")
    seed_demo_fleet(teams=teams)
    users = get_user_model().objects
    east = make_cluster(
        users.get(username="root"),
        "east",
        kubeconfig_text=east_bed.portal_kubeconfig.read_text(),
        scheduler=scheduler,
    )
    a100 = Flavor.objects.get(slug="a100-80g")
    east_pool = NodePool.objects.create(
        name="East A100",
        slug=EAST_POOL,
        cluster=east,
        tier=a100.pool.tier,
        sharing_mode=a100.pool.sharing_mode,
        taints=a100.pool.taints,  # the test bed's GPU nodes carry the demo's GPU taint
    )
    a100.other_pools.add(east_pool)
    project = Project.objects.create(
        team=teams["vision"], slug=f"k{uuid.uuid4().hex[:8]}", name="Two clusters"
    )
    return {
        "east": east,
        "east_pool": east_pool,
        "local": Cluster.objects.get(slug="local"),
        "a100": a100,
        "project": project,
        "alice": users.get(username="alice"),
        "bob": users.get(username="bob"),
    }


def submit_a100(portal: dict[str, Any], cluster: Cluster | None) -> GpuRequest:
    """A 2-card A100 job of the portal's project, on `cluster` (None: the scheduler chooses),
    approved by the lead when the tier asks for it."""
    return GpuRequestFactory.create(
        project=portal["project"],
        flavor=portal["a100"],
        actor=portal["alice"],
        gpu_count=2,
        kind="job",
        cluster=cluster,
        to="queued",
    )
