from __future__ import annotations

from tests.scheduling.conftest import Fleet, fleet

__all__ = ["Fleet", "fleet"]
