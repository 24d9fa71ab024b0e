"""CRDs for the test bed, read from a Go module in the module cache (`go mod download` through
the proxy), never copied into the repository."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from scripts.testbed.cluster import Testbed, TestbedError, cache_root, wait_until


def module_dir(module: str, version: str) -> Path:
    """The module's source in the Go module cache (downloaded once from the proxy)."""
    done = subprocess.run(  # noqa: S603
        ["go", "mod", "download", "-json", f"{module}@{version}"],  # noqa: S607 - go on PATH
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        cwd=cache_root() if cache_root().exists() else None,
    )
    if done.returncode != 0:
        raise TestbedError(
            f"go mod download {module}@{version} failed: {done.stderr or done.stdout}"
        )
    return Path(json.loads(done.stdout)["Dir"])


def install_crds(bed: Testbed, files: Iterable[Path], *, what: str, timeout: float = 60.0) -> None:
    """Create the CRDs in `files` and wait until they are served; a repeat is a no-op."""
    import yaml
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    api: Any = k8s.ApiextensionsV1Api(bed.api_client())
    names = []
    for path in files:
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        try:
            api.create_custom_resource_definition(body, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def established() -> bool:
        for name in names:
            crd = api.read_custom_resource_definition(name)
            conditions = {c.type: c.status for c in (crd.status.conditions or [])}
            if conditions.get("Established") != "True":
                return False
        return True

    wait_until(f"{what} CRDs established", established, timeout=timeout)
