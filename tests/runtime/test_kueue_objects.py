"""The portal's policy as Kueue objects (pure compiler) and the difference with a cluster's copy."""

from __future__ import annotations

import copy
from decimal import Decimal

import pytest

from runtime.cluster.kueue_objects import (
    KueuePolicy,
    PoolFlavor,
    TeamQueue,
    changes,
    compile_objects,
    quantity_value,
    resource_groups,
)

GPU = "nvidia.com/gpu"
MIG_1G = "nvidia.com/mig-1g.10gb"
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def policy() -> KueuePolicy:
    return KueuePolicy(
        pools=[
            PoolFlavor("a100", {"gpu-portal/pool": "a100"}, (TAINT,)),
            PoolFlavor("h100-mig", {"gpu-portal/pool": "h100-mig"}, (TAINT,)),
            PoolFlavor("l4", {"gpu-portal/pool": "l4"}, (TAINT,)),
        ],
        teams=[
            TeamQueue(
                "vision", Decimal("0.75"), {("a100", GPU): (4, 8), ("h100-mig", MIG_1G): (7, 14)}
            ),
            TeamQueue("speech", Decimal("0.25"), {("l4", GPU): (8, 16)}),
        ],
        project_namespaces={"gpu-vision-cv": "vision", "gpu-speech-asr": "speech"},
        priorities={"gpu-portal-low": 100, "gpu-portal-high": 10000},
        pool_resources={
            "a100": frozenset({GPU}),
            "h100-mig": frozenset({MIG_1G}),
            "l4": frozenset({GPU, "nvidia.com/gpumem"}),
        },
    )


def by_kind(kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in compile_objects(policy()) if o["kind"] == kind}


def test_pools_that_share_a_resource_share_a_group_and_no_resource_is_covered_twice() -> None:
    groups = resource_groups(policy().pool_resources)
    assert groups == [
        (["nvidia.com/gpu", "nvidia.com/gpumem"], ["a100", "l4"]),
        (["nvidia.com/mig-1g.10gb"], ["h100-mig"]),
    ]
    covered = [r for resources, _ in groups for r in resources]
    assert len(covered) == len(set(covered))


def test_a_team_queue_has_guaranteed_as_nominal_and_the_rest_of_its_limit_to_borrow() -> None:
    queue = by_kind("ClusterQueue")["gpu-portal-vision"]["spec"]
    assert queue["cohortName"] == "gpu-portal"
    assert queue["fairSharing"] == {"weight": "0.75"}
    assert queue["namespaceSelector"] == {"matchLabels": {"gpu-portal/team": "vision"}}
    gpu_group = queue["resourceGroups"][0]
    assert gpu_group["coveredResources"] == [GPU, "nvidia.com/gpumem"]
    a100, l4 = gpu_group["flavors"]
    assert a100 == {
        "name": "a100",
        "resources": [
            {"name": GPU, "nominalQuota": "4", "borrowingLimit": "4"},
            {"name": "nvidia.com/gpumem", "nominalQuota": "0", "borrowingLimit": "0"},
        ],
    }
    # Every flavor of a group lists every resource of the group, with nothing where it has none.
    assert [r["nominalQuota"] for r in l4["resources"]] == ["0", "0"]
    mig = queue["resourceGroups"][1]["flavors"][0]["resources"][0]
    assert (mig["nominalQuota"], mig["borrowingLimit"]) == ("7", "7")


def test_flavors_cohort_local_queues_and_priorities() -> None:
    assert by_kind("ResourceFlavor")["l4"]["spec"] == {
        "nodeLabels": {"gpu-portal/pool": "l4"},
        "nodeTaints": [TAINT],
    }
    assert set(by_kind("Cohort")) == {"gpu-portal"}
    local = [o for o in compile_objects(policy()) if o["kind"] == "LocalQueue"]
    assert {(o["metadata"]["namespace"], o["spec"]["clusterQueue"]) for o in local} == {
        ("gpu-vision-cv", "gpu-portal-vision"),
        ("gpu-speech-asr", "gpu-portal-speech"),
    }
    assert by_kind("WorkloadPriorityClass")["gpu-portal-high"]["value"] == 10000
    for manifest in compile_objects(policy()):
        assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-portal"


def test_objects_are_applied_referenced_first() -> None:
    kinds = [o["kind"] for o in compile_objects(policy())]
    assert kinds.index("ResourceFlavor") < kinds.index("ClusterQueue") < kinds.index("LocalQueue")
    assert kinds.index("Cohort") < kinds.index("ClusterQueue")


def test_a_name_kubernetes_refuses_is_an_error_before_the_cluster_sees_it() -> None:
    bad = KueuePolicy(
        pools=[PoolFlavor("A100_pool")], teams=[], project_namespaces={}, priorities={}
    )
    with pytest.raises(ValueError, match="A100_pool"):
        compile_objects(bad)


def as_served(manifest: dict) -> dict:
    """What the API server returns: defaults filled in, metadata grown."""
    served = copy.deepcopy(manifest)
    served["metadata"].update(uid="1", resourceVersion="7", generation=1)
    if served["kind"] == "ClusterQueue":
        served["spec"]["flavorFungibility"] = {"whenCanBorrow": "MayStopSearch"}
        first = served["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
        first["nominalQuota"] = int(first["nominalQuota"])  # another spelling of the same amount
    served["status"] = {"conditions": []}
    return served


def test_a_cluster_holding_the_policy_shows_no_change_despite_defaults_and_status() -> None:
    desired = compile_objects(policy())
    assert changes(desired, [as_served(m) for m in desired]) == []


def test_drift_create_update_and_delete_are_each_named() -> None:
    desired = compile_objects(policy())
    live = [as_served(m) for m in desired if m["metadata"]["name"] != "gpu-portal-low"]
    queue = next(m for m in live if m["metadata"]["name"] == "gpu-portal-speech")
    queue["spec"]["resourceGroups"][0]["flavors"][1]["resources"][0]["nominalQuota"] = "20"
    stale = as_served(desired[-1])
    stale["metadata"]["namespace"] = "gpu-vision-gone"
    live.append(stale)
    found = {(c.action, c.kind, c.namespace, c.name): c for c in changes(desired, live)}
    assert set(found) == {
        ("create", "WorkloadPriorityClass", "", "gpu-portal-low"),
        ("update", "ClusterQueue", "", "gpu-portal-speech"),
        ("delete", "LocalQueue", "gpu-vision-gone", "gpu-portal"),
    }
    update = found[("update", "ClusterQueue", "", "gpu-portal-speech")]
    assert update.fields == ("spec.resourceGroups[0].flavors[1].resources[0].nominalQuota",)
    assert str(update).startswith("update ClusterQueue gpu-portal-speech (spec.resourceGroups")


def test_a_quantity_kueue_respells_is_no_change() -> None:
    desired = compile_objects(policy())
    live = [as_served(m) for m in desired]
    for manifest in live:
        if manifest["kind"] == "ClusterQueue":
            weight = Decimal(manifest["spec"]["fairSharing"]["weight"])
            manifest["spec"]["fairSharing"]["weight"] = f"{int(weight * 1000)}m"
    assert changes(desired, live) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [("602m", "0.602"), ("4", "4"), (4, "4"), ("1Ki", "1024"), ("1e3", "1000"), ("x", None)],
)
def test_quantity_value(value: object, expected: str | None) -> None:
    assert quantity_value(value) == (Decimal(expected) if expected is not None else None)
