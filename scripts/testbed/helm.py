"""The Helm CLI that scripts/testbed/build-helm.sh builds, and the chart rendered with it.

`render` runs `helm template` on deploy/helm/gpu-portal and returns the objects it makes, hooks
included, so tests can check them offline and apply them to the test bed's API server.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from scripts.testbed.cluster import cache_root

HELM_VERSION = os.environ.get("HELM_VERSION", "v3.21.4")
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpu-portal"
# The values files CI renders besides the defaults.
CI_VALUES = tuple(sorted((CHART / "ci").glob("*.yaml")))


class HelmError(RuntimeError):
    """helm refused the chart or its values; the message is helm's."""


def helm_binary() -> Path:
    """Where build-helm.sh puts helm (HELM_BIN overrides it); it may not exist yet."""
    if os.environ.get("HELM_BIN"):
        return Path(os.environ["HELM_BIN"])
    return cache_root() / f"helm-{HELM_VERSION}" / "bin" / "helm"


def helm(*args: str) -> str:
    done = subprocess.run(  # noqa: S603 - our own binary, fixed arguments
        [str(helm_binary()), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise HelmError(done.stderr.strip() or done.stdout.strip())
    return done.stdout


def values_args(values_files: Iterable[Path], set_values: Iterable[str] = ()) -> list[str]:
    args: list[str] = []
    for path in values_files:
        args += ["--values", str(path)]
    for assignment in set_values:
        args += ["--set", assignment]
    return args


def lint(values_files: Iterable[Path] = (), set_values: Iterable[str] = ()) -> str:
    return helm("lint", "--strict", str(CHART), *values_args(values_files, set_values))


def render(
    values_files: Iterable[Path] = (),
    *,
    release: str = "gpu-portal",
    namespace: str = "gpu-portal",
    set_values: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The objects `helm template` renders (hooks included), in the order helm prints them."""
    import yaml

    out = helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        *values_args(values_files, set_values),
    )
    return [doc for doc in yaml.safe_load_all(out) if doc]
