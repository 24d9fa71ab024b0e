from tests.scheduling.conftest import fleet  # noqa: F401 — the demo-fleet fixture
