"""Gateway API on the test bed: its standard-channel CRDs, from the Go module proxy.

The CRDs are read from the module in the Go module cache (`go mod download`), never copied
into the repository. No gateway controller runs: the tests check the HTTPRoutes the portal
writes and removes, which the API server validates against the CRDs' schemas.
"""

from __future__ import annotations

import os

from scripts.testbed import crds
from scripts.testbed.cluster import Testbed
from scripts.testbed.crds import module_dir

GATEWAY_API_VERSION = os.environ.get("GATEWAY_API_VERSION", "v1.3.0")
MODULE = "sigs.k8s.io/gateway-api"
CRD_KINDS = ("gatewayclasses", "gateways", "httproutes", "referencegrants")


def install_crds(
    bed: Testbed, version: str = GATEWAY_API_VERSION, *, timeout: float = 60.0
) -> None:
    """Create the standard channel's CRDs and wait until they are served; a repeat is a no-op."""
    standard = module_dir(MODULE, version) / "config" / "crd" / "standard"
    files = [standard / f"gateway.networking.k8s.io_{kind}.yaml" for kind in CRD_KINDS]
    crds.install_crds(bed, files, what="Gateway API", timeout=timeout)
