"""A MIG flavor sells a profile its card offers, as the MIG table says; anything else is a 400."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from scheduling.choices import FlavorKind
from scheduling.demo import FLAVORS, POOLS
from scheduling.engine.mig import MIG_GPUS, layout_fits, profile_problem
from scheduling.models import Flavor, gpu_equivalent_of
from tests.scheduling.conftest import Fleet
from tests.support.personas import Org, api_client

pytestmark = pytest.mark.django_db


def _payload(fleet: Fleet, gpu_model: str, profile: str) -> dict[str, str | int]:
    return {
        "name": f"{gpu_model} {profile}",
        "slug": f"x-{profile.replace('.', '-')}",
        "pool": fleet.mig_1g.pool.slug,
        "kind": "mig",
        "gpu_model": gpu_model,
        "mig_profile": profile,
        "gpu_memory_mib": 10240,
        "gpu_equivalent": "0.1429",
    }


def test_a_flavor_with_a_profile_its_card_lacks_is_refused_naming_the_profiles(
    org: Org, fleet: Fleet
) -> None:
    client = api_client(org.admin)
    response = client.post(
        reverse("flavor-list"), _payload(fleet, "A100-40G", "3g.40gb"), format="json"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert "mig_profile" in error["fields"]
    assert "A100-40G offers no MIG profile '3g.40gb'" in str(error["fields"]["mig_profile"])
    assert "3g.20gb" in str(error["fields"]["mig_profile"])
    response = client.post(reverse("flavor-list"), _payload(fleet, "L4", "1g.10gb"), format="json")
    assert response.status_code == 400
    assert "has no MIG profiles" in str(response.json()["error"]["fields"]["mig_profile"])
    assert not Flavor.objects.filter(slug__startswith="x-").exists()


def test_a_flavor_with_a_profile_its_card_offers_is_created(org: Org, fleet: Fleet) -> None:
    response = api_client(org.admin).post(
        reverse("flavor-list"), _payload(fleet, "H100-80G", "1g.20gb"), format="json"
    )
    assert response.status_code == 201, response.json()
    assert Flavor.objects.get(slug="x-1g-20gb").mig_profile == "1g.20gb"


def test_the_demo_fleet_sells_and_lays_out_only_what_its_cards_offer() -> None:
    models = {pool["slug"]: pool["gpu_model"] for pool in POOLS}
    for _, pool_slug, kind, _, _, profile, weight in FLAVORS.values():
        if kind != FlavorKind.MIG:
            continue
        assert profile_problem(models[pool_slug], profile) == ""
        assert Decimal(weight) == gpu_equivalent_of(
            kind=kind, card_memory_mib=0, memory_mib=0, cores_percent=0, mig_profile=profile
        )
    for pool in POOLS:
        gpu = MIG_GPUS.get(pool["gpu_model"])
        for layout in pool["mig_layouts"] or ():
            assert gpu is not None and layout_fits(gpu, layout), (pool["slug"], layout)
