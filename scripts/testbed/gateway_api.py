"""Gateway API on the test bed: its standard-channel CRDs, from the Go module proxy.

The CRDs are read from the module in the Go module cache (`go mod download`), never copied
into the repository. No gateway controller runs: the tests check the HTTPRoutes the portal
writes and removes, which the API server validates against the CRDs' schemas.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from scripts.testbed.cluster import Testbed, TestbedError, cache_root, wait_until

GATEWAY_API_VERSION = os.environ.get("GATEWAY_API_VERSION", "v1.3.0")
MODULE = "sigs.k8s.io/gateway-api"
CRD_KINDS = ("gatewayclasses", "gateways", "httproutes", "referencegrants")


def module_dir(version: str = GATEWAY_API_VERSION) -> Path:
    """The module's source in the Go module cache (downloaded once from the proxy)."""
    done = subprocess.run(  # noqa: S603
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],  # noqa: S607 - go on PATH
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        cwd=cache_root() if cache_root().exists() else None,
    )
    if done.returncode != 0:
        raise TestbedError(
            f"go mod download {MODULE}@{version} failed: {done.stderr or done.stdout}"
        )
    return Path(json.loads(done.stdout)["Dir"])


def install_crds(
    bed: Testbed, version: str = GATEWAY_API_VERSION, *, timeout: float = 60.0
) -> None:
    """Create the standard channel's CRDs and wait until they are served; a repeat is a no-op."""
    import yaml
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    standard = module_dir(version) / "config" / "crd" / "standard"
    api: Any = k8s.ApiextensionsV1Api(bed.api_client())
    names = []
    for kind in CRD_KINDS:
        body = yaml.safe_load((standard / f"gateway.networking.k8s.io_{kind}.yaml").read_text())
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

    wait_until("Gateway API CRDs established", established, timeout=timeout)
