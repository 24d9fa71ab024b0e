"""A DRA pool's request as a ResourceClaimTemplate: the model, and the portal's chosen cards."""

from __future__ import annotations

from runtime.cluster import dra_manifests as dra
from runtime.cluster.base import WorkloadSpec


def spec(**overrides: object) -> WorkloadSpec:
    values: dict[str, object] = {
        "request_id": "42",
        "attempt": 2,
        "team_slug": "vision",
        "project_slug": "cv",
        "namespace": "gpu-vision-cv",
        "kind": "job",
        "image": "registry.example.com/ml/pytorch:2.4",
        "sharing": "exclusive",
        "gpu_count": 2,
        "gpu_products": ("A100-80G", "NVIDIA-A100-SXM4-80GB"),
        "node_name": "dra-a100-1",
        "device_indexes": (3, 1),
    }
    values.update(overrides)
    return WorkloadSpec(**values)  # type: ignore[arg-type]


def test_the_claim_asks_for_the_model_and_the_cards_the_portal_chose() -> None:
    template = dra.resource_claim_template(spec(), {"app.kubernetes.io/managed-by": "gpu-portal"})
    assert template["metadata"]["name"] == "gpr-42-a2"
    assert template["metadata"]["namespace"] == "gpu-vision-cv"
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "gpus"
    exactly = request["exactly"]
    assert (exactly["deviceClassName"], exactly["allocationMode"], exactly["count"]) == (
        "gpu.nvidia.com",
        "ExactCount",
        2,
    )
    assert [s["cel"]["expression"] for s in exactly["selectors"]] == [
        "device.attributes['gpu.nvidia.com'].productName.replace(' ', '-').lowerAscii() "
        "in ['a100-80g', 'nvidia-a100-sxm4-80gb']",
        "device.attributes['gpu.nvidia.com'].index in [1, 3]",
    ]


def test_without_a_node_the_cluster_picks_the_cards() -> None:
    template = dra.resource_claim_template(spec(node_name=None), {})
    selectors = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    assert len(selectors) == 1 and "productName" in selectors[0]["cel"]["expression"]


def test_the_pod_takes_its_gpus_through_the_claim() -> None:
    pod = {"containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
    claimed = dra.with_claim(pod, spec())
    assert claimed["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "gpr-42-a2"}]
    assert claimed["containers"][0]["resources"] == {
        "requests": {"cpu": "1"},
        "claims": [{"name": "gpus"}],
    }
    assert "resourceClaims" not in pod  # the input is left as it was
