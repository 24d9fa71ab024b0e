from __future__ import annotations

import pytest

from tests.support.fleet import Fleet, make_fleet
from tests.support.personas import Org

__all__ = ["Fleet", "fleet"]


@pytest.fixture
def fleet(org: Org) -> Fleet:
    """The demo fleet with team A in Vision's place (all tiers) and team B in Speech's."""
    return make_fleet(org)
