from __future__ import annotations

from tests.scheduling.conftest import fleet  # noqa: F401 — the fleet fixture
