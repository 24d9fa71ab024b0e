"""The demo fleet with team A in Vision's place (all tiers) and team B in Speech's."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.demo import seed_demo_fleet
from scheduling.models import Flavor
from tests.support.personas import Org


@dataclass
class Fleet:
    """The flavors tests ask for, one per pool and sharing mode."""

    a100: Flavor
    mig_1g: Flavor
    mig_3g: Flavor
    l4_12g: Flavor
    l4_6g: Flavor


def make_fleet(org: Org) -> Fleet:
    seed_demo_fleet(teams={"vision": org.team_a, "speech": org.team_b})
    by_slug = {flavor.slug: flavor for flavor in Flavor.objects.all()}
    return Fleet(
        a100=by_slug["a100-80g"],
        mig_1g=by_slug["h100-1g10gb"],
        mig_3g=by_slug["h100-3g40gb"],
        l4_12g=by_slug["l4-12g"],
        l4_6g=by_slug["l4-6g"],
    )
