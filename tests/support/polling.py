"""Wait for a specific outcome with a deadline, instead of sleeping and accepting any outcome."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(check: Callable[[], bool], *, timeout: float = 10.0, what: str = "") -> None:
    """Call `check` until it returns True; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:g}s: {what or check}")
        time.sleep(0.005)
