"""`manage.py kueue_policy` against the real API server with Kueue's own CRDs: the compiled
objects pass Kueue's schemas, apply converges, and drift made outside the portal is named."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from runtime.tasks import reconcile_kueue_policy
from scheduling.models import Quota
from scheduling.services.kueue_drift import last_check
from scripts.testbed.cluster import Testbed
from tests.k8s.conftest import Admin
from tests.support.fleet import make_fleet
from tests.support.personas import Org

pytestmark = [pytest.mark.k8s, pytest.mark.django_db]

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"


@pytest.fixture(scope="session")
def kueue_crds(k8s_testbed: Testbed) -> None:
    from scripts.testbed.kueue import install_crds

    install_crds(k8s_testbed)


@pytest.fixture
def policy_cluster(kueue_crds: None, k8s_testbed: Testbed, settings: Any) -> Any:
    """The portal pointed at the test bed as its least-privilege user; no portal objects left."""
    settings.KUBECONFIG = str(k8s_testbed.portal_kubeconfig)
    settings.KUBE_CONTEXT = None
    from kubernetes import client as k8s

    objects: Any = k8s.CustomObjectsApi(k8s_testbed.api_client())
    yield objects
    for plural in (
        "localqueues",
        "clusterqueues",
        "cohorts",
        "resourceflavors",
        "workloadpriorityclasses",
    ):
        for item in objects.list_cluster_custom_object(GROUP, VERSION, plural)["items"]:
            meta = item["metadata"]
            if meta.get("namespace"):
                objects.delete_namespaced_custom_object(
                    GROUP, VERSION, meta["namespace"], plural, meta["name"]
                )
            else:
                objects.delete_cluster_custom_object(GROUP, VERSION, plural, meta["name"])


def kueue_policy(*args: str) -> list[str]:
    out = StringIO()
    call_command("kueue_policy", *args, stdout=out)
    return out.getvalue().splitlines()


def cluster_queue_quota(objects: Any, team: str, pool: str, resource: str) -> tuple[str, str]:
    queue = objects.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", f"gpu-portal-{team}")
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            if flavor["name"] != pool:
                continue
            for entry in flavor["resources"]:
                if entry["name"] == resource:
                    return str(entry["nominalQuota"]), str(entry["borrowingLimit"])
    raise AssertionError(f"{pool}/{resource} not in {team}'s ClusterQueue")


def test_diff_apply_converge_and_name_drift(
    policy_cluster: Any, org: Org, k8s_admin: Admin, settings: Any
) -> None:
    objects = policy_cluster
    make_fleet(org)

    planned = kueue_policy("--diff")
    assert "create ClusterQueue gpu-portal-team-a" in planned
    assert "create LocalQueue gpu-team-a-a-one/gpu-portal" in planned
    assert "create ResourceFlavor a100-training" in planned
    assert objects.list_cluster_custom_object(GROUP, VERSION, "clusterqueues")["items"] == []

    applied = kueue_policy("--apply")
    assert applied[-1] == f"applied {len(planned)} changes"
    # Team A holds the demo's Vision quotas: A100 4 guaranteed of 16; MIG 1g 7 of 14.
    assert cluster_queue_quota(objects, "team-a", "a100-training", "nvidia.com/gpu") == (
        "4",
        "12",
    )
    assert cluster_queue_quota(objects, "team-a", "h100-mig", "nvidia.com/mig-1g.10gb") == (
        "7",
        "7",
    )
    assert cluster_queue_quota(objects, "team-b", "a100-training", "nvidia.com/gpu") == ("0", "0")
    local = objects.get_namespaced_custom_object(
        GROUP, VERSION, "gpu-team-b-b-one", "localqueues", "gpu-portal"
    )
    assert local["spec"]["clusterQueue"] == "gpu-portal-team-b"
    assert kueue_policy("--diff") == ["no changes: the cluster's Kueue objects match the policy"]

    # Someone edits team B's queue by hand: the diff names the field, apply puts it back.
    objects.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "clusterqueues",
        "gpu-portal-team-b",
        [{"op": "replace", "path": "/spec/fairSharing/weight", "value": "5"}],
        _content_type="application/json-patch+json",
    )
    drift = kueue_policy("--diff")
    assert drift == ["update ClusterQueue gpu-portal-team-b (spec.fairSharing.weight)"]
    # The worker's periodic check finds it too, puts it back and tells the fleet page.
    settings.SCHEDULER = "kueue"
    assert reconcile_kueue_policy() == 1
    check = last_check()
    assert check is not None and check.differences == tuple(drift) and not check.error
    assert kueue_policy("--diff")[0].startswith("no changes")
    objects.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "clusterqueues",
        "gpu-portal-team-b",
        [{"op": "replace", "path": "/spec/fairSharing/weight", "value": "5"}],
        _content_type="application/json-patch+json",
    )

    # A lead moves a quota meanwhile; a project goes away.
    quota = Quota.objects.get(team=org.team_a, project=None, flavor__slug="a100-80g")
    quota.guaranteed, quota.limit = 6, 8
    quota.save()
    org.project_a2.delete()
    planned = kueue_policy("--diff")
    assert set(planned) == {
        "update ClusterQueue gpu-portal-team-a (spec.fairSharing.weight, "
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota, "
        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit)",
        "update ClusterQueue gpu-portal-team-b (spec.fairSharing.weight)",
        "delete LocalQueue gpu-team-a-a-two/gpu-portal",
    }
    kueue_policy("--apply")
    assert cluster_queue_quota(objects, "team-a", "a100-training", "nvidia.com/gpu") == ("6", "2")
    assert kueue_policy("--diff")[0].startswith("no changes")
