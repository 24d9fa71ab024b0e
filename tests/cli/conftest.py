"""gpuctl against a live portal: pytest-django's `live_server` (a real threaded HTTP server on a
free port, over the test database) and the installed `gpuctl` run as a separate process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import Fleet, make_fleet
from tests.support.personas import Org

GPUCTL_TIMEOUT_SECONDS = 90


def gpuctl_command() -> list[str]:
    """The `gpuctl` script `pip install -e .` put next to this Python, else `python -m gpuctl`."""
    script = Path(sys.executable).parent / "gpuctl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gpuctl"]


@dataclass
class Gpuctl:
    """Runs `gpuctl` with its own config file, against the live server."""

    url: str
    config: Path
    env: dict[str, str]

    def popen(self, *args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.Popen[str]:
        # A session of its own: no controlling terminal, so the password prompt reads stdin.
        return subprocess.Popen(
            [*gpuctl_command(), *args],
            env=self.env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def __call__(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*gpuctl_command(), *args],
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=GPUCTL_TIMEOUT_SECONDS,
            start_new_session=True,
        )

    def login(self, username: str) -> None:
        done = self("login", "--url", self.url, input=f"{username}\npw-{username}\n")
        assert done.returncode == 0, done.stderr


@pytest.fixture
def gpuctl(live_server: Any, tmp_path: Path) -> Gpuctl:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPUCTL_")}
    config = tmp_path / "gpuctl" / "config"
    env.update(GPUCTL_CONFIG=str(config), HOME=str(tmp_path), NO_PROXY="*")
    return Gpuctl(url=live_server.url, config=config, env=env)


@pytest.fixture
def logged_in(gpuctl: Gpuctl, org: Org) -> Callable[[str], Gpuctl]:
    def as_user(username: str) -> Gpuctl:
        gpuctl.login(username)
        return gpuctl

    return as_user


@pytest.fixture
def fleet(org: Org) -> Fleet:
    """The demo fleet with team A in Vision's place (all tiers) and team B in Speech's."""
    return make_fleet(org)
