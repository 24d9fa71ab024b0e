"""A MIG flavor sells a profile its card offers, as the MIG table says; anything else is a 400."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Flavor
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
