"""Kueue on the test bed: its CRDs and its controller manager, from the Go module proxy.

`scripts/testbed/build-kueue.sh` builds the controller once per version; the CRDs are read from
the same module in the Go module cache (`go mod download`), never copied into the repository.
The controller runs outside the cluster like the rest of the control plane. Its webhooks are not
registered with the API server (the portal creates its Jobs suspended and labelled itself, which
is what the webhooks would otherwise do), so it needs no Service, only a serving certificate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from scripts.testbed import crds
from scripts.testbed.cluster import Testbed, TestbedError, cache_root, wait_until
from scripts.testbed.crds import module_dir
from scripts.testbed.ports import free_port

KUEUE_VERSION = os.environ.get("KUEUE_VERSION", "v0.17.0")
MODULE = "sigs.k8s.io/kueue"
HERE = Path(__file__).resolve().parent
CRD_KINDS = (
    "workloadpriorityclasses",
    "resourceflavors",
    "cohorts",
    "clusterqueues",
    "localqueues",
    "workloads",
    "admissionchecks",
    "topologies",
    "provisioningrequestconfigs",
    "multikueueclusters",
    "multikueueconfigs",
)


def kueue_binary(version: str = KUEUE_VERSION) -> Path:
    return cache_root() / f"kueue-{version}" / "bin" / "kueue"


def build_kueue(version: str = KUEUE_VERSION) -> Path:
    binary = kueue_binary(version)
    if not binary.exists():
        subprocess.run(  # noqa: S603 - our own script
            ["bash", str(HERE / "build-kueue.sh")],
            check=True,
            env={**os.environ, "KUEUE_VERSION": version},
        )
    return binary


def install_crds(bed: Testbed, version: str = KUEUE_VERSION, *, timeout: float = 60.0) -> None:
    """Create Kueue's CRDs (as its release ships them, conversion webhooks left out: the portal
    speaks the storage version v1beta2 only) and wait until they are served."""
    bases = module_dir(MODULE, version) / "config" / "components" / "crd" / "bases"
    files = [bases / f"kueue.x-k8s.io_{kind}.yaml" for kind in CRD_KINDS]
    crds.install_crds(bed, files, what="Kueue", timeout=timeout)


def kueue_configuration(bed: Testbed, cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": free_port(), "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 200, "burst": 400},
        # The visibility API is an aggregated API server (needs a Service the API server can
        # reach, and its own certificate in /visibility); the portal computes queue positions.
        "featureGates": {"VisibilityOnDemand": False},
        "integrations": {"frameworks": ["batch/job"]},
        # Fair sharing across the teams' ClusterQueues by their weights, Kueue's default order.
        "fairSharing": {
            "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
        },
        # The portal governs GPUs; CPU and memory stay with the namespaces' LimitRanges.
        "resources": {"excludeResourcePrefixes": ["cpu", "memory", "ephemeral-storage"]},
    }


# Kueue v0.17 loads its metrics certificate from this fixed path whenever its internal
# certificate management is off (cmd/kueue/main.go), even with the metrics server disabled.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def _ensure_metrics_certificate(cert_dir: Path) -> None:
    """Any valid pair satisfies it (metrics are not served): the test bed's, once per machine."""
    if (METRICS_CERT_DIR / "tls.crt").exists() and (METRICS_CERT_DIR / "tls.key").exists():
        return
    try:
        METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(cert_dir / name, METRICS_CERT_DIR / name)
    except OSError as exc:
        raise TestbedError(
            f"Kueue {KUEUE_VERSION} reads a certificate from {METRICS_CERT_DIR} (fixed in its "
            f"main.go when internalCertManagement is off); make it writable: {exc}"
        ) from exc


def start_kueue(bed: Testbed, version: str = KUEUE_VERSION, *, timeout: float = 120.0) -> None:
    """Install the CRDs and run Kueue's controller manager against the test bed."""
    binary = kueue_binary(version)
    if not binary.exists():
        raise TestbedError(f"{binary} is missing: run `make testbed-build`")
    install_crds(bed, version)
    cert_dir = bed.workdir / "kueue-certs"
    cert_dir.mkdir(exist_ok=True)
    shutil.copy(bed.workdir / "apiserver.crt", cert_dir / "tls.crt")
    shutil.copy(bed.workdir / "apiserver.key", cert_dir / "tls.key")
    _ensure_metrics_certificate(cert_dir)
    configuration = kueue_configuration(bed, cert_dir)
    config_file = bed.workdir / "kueue-config.yaml"
    config_file.write_text(json.dumps(configuration, indent=2))
    probe = configuration["health"]["healthProbeBindAddress"]
    component = bed.component(
        "kueue",
        [
            str(binary),
            f"--config={config_file}",
            f"--kubeconfig={bed.admin_kubeconfig}",
            "--zap-log-level=2",
        ],
    )
    component.start()

    def ready() -> bool:
        import urllib.request

        if not component.alive():
            return True  # stop waiting: reported below
        try:
            with urllib.request.urlopen(f"http://{probe}/readyz", timeout=2) as response:  # noqa: S310
                return bool(response.status == 200)
        except OSError:
            return False

    started = time.monotonic()
    wait_until("kueue ready", ready, timeout=timeout)
    if not component.alive():
        raise TestbedError(f"kueue exited:\n{component.tail()}")
    bed.startup_seconds["kueue"] = time.monotonic() - started
