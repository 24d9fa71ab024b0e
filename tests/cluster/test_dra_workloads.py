"""A DRA pool's workloads and inventory, without a server: the claim template comes first, the pod
asks for no extended resource, a gang gets one template per rank, slices become GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from runtime.cluster import kubernetes_manifests as manifests
from runtime.cluster.base import GangMember, NodeInventory
from runtime.cluster.kubernetes_nodes import DraGpus, dra_gpus, with_dra_gpus
from tests.cluster.specs import workload

K8S_VERSION = "1.35.0"


def dra(kind: str = "job", **changes: Any) -> Any:
    """A whole-card spec of a DRA pool, placed by the portal on cards 1 and 3."""
    values: dict[str, Any] = {"allocation": "dra", "device_indexes": (1, 3), **changes}
    return replace(workload(kind), **values)  # type: ignore[arg-type]


def test_a_dra_job_creates_its_claim_template_first_and_asks_for_no_extended_resource() -> None:
    template, job = manifests.workload_manifests(dra())
    assert (template["kind"], job["kind"]) == ("ResourceClaimTemplate", "Job")
    assert template["metadata"]["name"] == "gpr-812-a1"
    assert template["metadata"]["labels"]["gpu-portal/attempt"] == "1"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "gpr-812-a1"}]
    # The claim selects the model; a node label for it may not exist on DRA nodes.
    assert "affinity" not in pod
    assert pod["nodeSelector"]["kubernetes.io/hostname"] == "gpu-a100-01"
    for body in (template, job):
        kubernetes_validate.validate(body, K8S_VERSION, strict=True)


@pytest.mark.parametrize("kind", ["notebook", "service"])
def test_a_dra_deployment_refers_to_its_template(kind: str) -> None:
    template, deployment, *_ = manifests.workload_manifests(dra(kind))
    assert template["kind"] == "ResourceClaimTemplate"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]


def test_a_dra_gang_has_one_template_of_the_per_node_cards_for_every_rank() -> None:
    spec = dra(
        gpu_count=6,
        node_name=None,
        device_indexes=(),
        gang=(GangMember(node_name="n1", gpu_count=3), GangMember(node_name="n2", gpu_count=3)),
    )
    bodies = manifests.workload_manifests(spec)
    assert [b["kind"] for b in bodies] == ["ResourceClaimTemplate", "Service", "Job"]
    template, _, job = bodies
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 3
    claims = job["spec"]["template"]["spec"]["resourceClaims"]
    assert claims == [{"name": "gpus", "resourceClaimTemplateName": template["metadata"]["name"]}]


def test_device_plugin_workloads_are_unchanged() -> None:
    (job,) = manifests.workload_manifests(workload("job"))
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "resourceClaims" not in pod


def test_dra_gives_whole_cards_only() -> None:
    with pytest.raises(ValueError, match="whole cards"):
        replace(workload("job", "vgpu"), allocation="dra")


def slice_(node: str, *devices: dict[str, Any], driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {"spec": {"driver": driver, "nodeName": node, "devices": list(devices)}}


def gpu(index: int, product: str = "NVIDIA A100-SXM4-80GB", kind: str = "gpu") -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": kind},
            "productName": {"string": product},
            "index": {"int": index},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def test_slices_of_nvidias_driver_become_gpus_per_node() -> None:
    found = dra_gpus(
        [
            slice_("n1", gpu(0), gpu(1)),
            slice_("n1", gpu(2)),  # a node may publish several slices
            slice_("n1", gpu(9, kind="mig")),
            slice_("n2", gpu(0), driver="example.com/other"),
        ]
    )
    assert found == {"n1": DraGpus(count=3, product="NVIDIA-A100-SXM4-80GB", memory_mib=81920)}


def test_dra_gpus_fill_what_the_node_does_not_say() -> None:
    node = NodeInventory(
        name="n1",
        labels={},
        taints=(),
        ready=True,
        schedulable=True,
        allocatable={},
        capacity={},
        gpu_model=None,
        gpu_count=0,
        gpu_memory_mib=None,
    )
    filled = with_dra_gpus(node, DraGpus(4, "NVIDIA-A100-SXM4-80GB", 81920))
    assert (filled.dra_gpu_count, filled.gpu_count, filled.gpu_model, filled.gpu_memory_mib) == (
        4,
        4,
        "NVIDIA-A100-SXM4-80GB",
        81920,
    )
    assert with_dra_gpus(node, None) is node
