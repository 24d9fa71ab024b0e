"""Start and stop the test-bed control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok on free loopback ports, with generated TLS certificates, static-token
authentication and RBAC, plus fake GPU nodes shaped like the demo pools.

Used by `tests/k8s/conftest.py` (one cluster per pytest session), by `make testbed`
(`python -m scripts.testbed`) and by the end-to-end benchmark (`bench/e2e.py`).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scripts.testbed.dra import DraCards, publish
from scripts.testbed.ports import free_port

K8S_VERSION = os.environ.get("K8S_VERSION", "v1.36.3")
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kwok")
HERE = Path(__file__).resolve().parent
STAGES_FILE = HERE / "kwok-stages.yaml"
BUILD_SCRIPT = HERE / "build.sh"

ADMIN_TOKEN = "testbed-admin-token"  # noqa: S105 - a throwaway loopback test credential
PORTAL_TOKEN = "testbed-portal-token"  # noqa: S105
PORTAL_USER = "gpu-portal"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
POOL_LABEL = "gpu-portal/pool"

# Controllers the portal relies on (names as in cmd/kube-controller-manager/names).
CONTROLLERS = (
    "job-controller",
    "namespace-controller",
    "resourcequota-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "ttl-after-finished-controller",
    "deployment-controller",
    "replicaset-controller",
    "endpointslice-controller",  # a Service's ready endpoints, what ingress-nginx proxies to
    "resourceclaim-controller",  # ResourceClaims from a pod's ResourceClaimTemplates (DRA)
)

# The portal's rights (deploy/helm/gpu-portal/files/, the chart's source too): the ClusterRole
# `gpu-portal` bound to PORTAL_USER cluster-wide, the ClusterRole `gpu-portal-workloads` the
# portal binds to itself in each project namespace, and the admission policy that keeps that
# binding right from reaching other namespaces.
CHART_FILES = HERE.parent.parent / "deploy" / "helm" / "gpu-portal" / "files"
RBAC_FILE = CHART_FILES / "rbac.yaml"
ADMISSION_POLICY_FILE = CHART_FILES / "admission-policy.yaml"
PORTAL_CLUSTER_ROLE = "gpu-portal"
PORTAL_WORKLOADS_ROLE = "gpu-portal-workloads"
PORTAL_USERNAME_PLACEHOLDER = "__PORTAL_USERNAME__"


def portal_rbac_rules() -> dict[str, list[dict[str, Any]]]:
    """The rules of both ClusterRoles: {"cluster": [...], "namespace": [...]}."""
    rules = yaml.safe_load(RBAC_FILE.read_text())
    return {"cluster": list(rules["cluster"]), "namespace": list(rules["namespace"])}


def portal_admission_policies(username: str) -> list[dict[str, Any]]:
    """The admission policies and their bindings, for the portal signing in as `username`."""
    text = ADMISSION_POLICY_FILE.read_text().replace(PORTAL_USERNAME_PLACEHOLDER, username)
    return [doc for doc in yaml.safe_load_all(text) if doc]


class TestbedError(RuntimeError):
    """The test bed could not be built or started."""


def cache_root() -> Path:
    if os.environ.get("GPU_PORTAL_TESTBED_DIR"):
        return Path(os.environ["GPU_PORTAL_TESTBED_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-portal-testbed"


def bin_dir(version: str = K8S_VERSION) -> Path:
    """Where build.sh puts the binaries (GPU_PORTAL_TESTBED_BIN overrides it)."""
    if os.environ.get("GPU_PORTAL_TESTBED_BIN"):
        return Path(os.environ["GPU_PORTAL_TESTBED_BIN"])
    return cache_root() / version / "bin"


def missing_binaries(directory: Path | None = None) -> list[str]:
    directory = directory or bin_dir()
    return [b for b in BINARIES if not os.access(directory / b, os.X_OK)]


def build(version: str = K8S_VERSION) -> Path:
    """Run build.sh (a no-op when the binaries exist) and return the bin directory."""
    env = {**os.environ, "K8S_VERSION": version}
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], env=env, check=False, stdout=subprocess.PIPE, text=True
    )
    if result.returncode != 0:
        raise TestbedError(f"build.sh failed with exit code {result.returncode}")
    return Path(result.stdout.strip().splitlines()[-1])


# Certificates ---------------------------------------------------------------------------------


def write_credentials(directory: Path) -> None:
    """A CA, the API server's serving certificate, the service-account key pair and the static
    token file, all generated with `cryptography`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)

    def key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def pem_key(k: rsa.RSAPrivateKey) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )

    ca_key = key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-portal-testbed-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = key()
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
    ]
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = key()
    (directory / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (directory / "ca.key").write_bytes(pem_key(ca_key))
    (directory / "apiserver.crt").write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    (directory / "apiserver.key").write_bytes(pem_key(server_key))
    (directory / "sa.key").write_bytes(pem_key(sa_key))
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    (directory / "tokens.csv").write_text(
        f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n'
        f"{PORTAL_TOKEN},{PORTAL_USER},gpu-portal-uid\n"
    )


def write_kubeconfig(path: Path, *, server: str, ca_file: Path, token: str, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testbed",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
        "current-context": "testbed",
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML


# Fake GPU nodes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeShape:
    """One fake node: labels, annotations and the resources it advertises."""

    name: str
    pool: str
    resources: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = (GPU_TAINT,)
    # GPUs offered through Dynamic Resource Allocation (ResourceSlices) instead of a device
    # plugin's extended resource.
    dra_cards: DraCards | None = None

    def manifest(self) -> dict[str, Any]:
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110", **self.resources}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    KWOK_NODE_ANNOTATION: "fake",
                    **self.annotations,
                },
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    POOL_LABEL: self.pool,
                    **self.labels,
                },
            },
            "spec": {"taints": [dict(t) for t in self.taints]},
            "status": {"capacity": resources, "allocatable": resources},
        }


def hami_register(cards: int, *, split: int = 10, memory_mib: int = 23034) -> str:
    return json.dumps(
        [
            {
                "id": f"GPU-testbed-{i}",
                "count": split,
                "devmem": memory_mib,
                "devcore": 100,
                "type": "NVIDIA-NVIDIA L4",
                "numa": 0,
                "mode": "hami-core",
                "health": True,
                "index": i,
            }
            for i in range(cards)
        ]
    )


def whole_card_node(
    name: str,
    *,
    pool: str = "a100-training",
    gpus: int = 8,
    cpu: str = "128",
    memory: str = "2Ti",
) -> NodeShape:
    """An A100 whole-card node; by default the host of a DGX A100 (128 cores, 2 TiB)."""
    return NodeShape(
        name=name,
        pool=pool,
        resources={"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory},
        labels={
            # What GPU feature discovery reports; inventory sync maps it onto the demo
            # flavors' short model (A100-80G) through runtime/cluster/gpu_models.py.
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": "81920",
        },
    )


def demo_nodes() -> list[NodeShape]:
    """The demo fleet (scheduling/demo.py): 2 A100 whole-card nodes (128 cores, 2 TiB), 1 H100
    MIG node (4 cards of 7 × 1g.10gb and 4 of 2 × 3g.40gb; 112 cores, 2 TiB), 2 L4 HAMi vGPU
    nodes (4 cards split 10 ways; 48 cores, 384 GiB)."""
    nodes = [whole_card_node(f"a100-training-{i}") for i in (1, 2)]
    nodes.append(
        NodeShape(
            name="h100-mig-1",
            pool="h100-mig",
            resources={
                "nvidia.com/mig-1g.10gb": "28",
                "nvidia.com/mig-3g.40gb": "8",
                "cpu": "112",
                "memory": "2Ti",
            },
            labels={
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.memory": "81920",
                "nvidia.com/mig.strategy": "mixed",
            },
        )
    )
    for i in (1, 2):
        nodes.append(
            NodeShape(
                name=f"l4-vgpu-{i}",
                pool="l4-vgpu",
                resources={
                    "nvidia.com/gpu": "40",
                    "nvidia.com/gpumem": str(4 * 23034),
                    "nvidia.com/gpucores": "400",
                    "cpu": "48",
                    "memory": "384Gi",
                },
                labels={"nvidia.com/gpu.product": "NVIDIA-L4"},
                annotations={"hami.io/node-nvidia-register": hami_register(4)},
            )
        )
    return nodes


# Processes --------------------------------------------------------------------------------------


@dataclass
class Component:
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(  # noqa: S603 - our own argv
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_until(
    what: str, check: Callable[[], bool], *, timeout: float = 60.0, interval: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 - keep polling; report the last error
            last_error = exc
        time.sleep(interval)
    raise TestbedError(f"timed out after {timeout:.0f}s waiting for {what} ({last_error!r})")


class Testbed:
    """One control plane in a work directory; `start()`, use `admin_kubeconfig`, `stop()`."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        binaries: Path | None = None,
        scheduler_qps: int = 5000,
        controller_qps: int = 500,
        verbosity: int = 1,
        start_scheduler: bool = True,
        stages_file: Path = STAGES_FILE,
    ) -> None:
        self.binaries = binaries or bin_dir()
        missing = missing_binaries(self.binaries)
        if missing:
            raise TestbedError(
                f"test-bed binaries missing in {self.binaries}: {', '.join(missing)} "
                "(run `make testbed` or scripts/testbed/build.sh)"
            )
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gpu-portal-testbed-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        self.scheduler_qps = scheduler_qps
        self.controller_qps = controller_qps
        self.verbosity = verbosity
        self.start_scheduler_at_boot = start_scheduler
        self.stages_file = stages_file
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.api_port = free_port()
        self.kwok_port = free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self.portal_kubeconfig = self.workdir / "portal.kubeconfig"
        self.components: dict[str, Component] = {}
        self.startup_seconds: dict[str, float] = {}

    # -- plumbing

    def component(self, name: str, argv: list[str]) -> Component:
        component = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        self.components[name] = component
        return component

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.workdir / "ca.crt"))

    def api_get(self, path: str, *, timeout: float = 5.0) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._ssl()) as r:  # noqa: S310
                return int(r.status), r.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def _check_alive(self, *names: str) -> None:
        for name in names:
            component = self.components[name]
            if not component.alive():
                raise TestbedError(f"{name} exited:\n{component.tail()}")

    def etcd_request(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A call to etcd's v3 JSON gateway, e.g. `/v3/kv/compaction`."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.etcd_port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            result: dict[str, Any] = json.loads(response.read())
            return result

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (old resource versions → 410)."""
        key = base64.b64encode(b"/registry").decode()
        revision = int(self.etcd_request("/v3/kv/range", {"key": key})["header"]["revision"])
        self.etcd_request("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    # -- lifecycle

    def start(self, *, nodes: Iterable[NodeShape] | None = None) -> Testbed:
        t0 = time.monotonic()
        try:
            write_credentials(self.workdir)
            for path, token, user in (
                (self.admin_kubeconfig, ADMIN_TOKEN, "admin"),
                (self.portal_kubeconfig, PORTAL_TOKEN, PORTAL_USER),
            ):
                write_kubeconfig(
                    path,
                    server=self.server,
                    ca_file=self.workdir / "ca.crt",
                    token=token,
                    user=user,
                )
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers()
            self._apply_portal_rbac()
            if nodes is None:
                nodes = demo_nodes()
            nodes = list(nodes)
            if nodes:
                self.add_nodes(nodes)
            self.startup_seconds["total"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self) -> None:
        t0 = time.monotonic()
        data = self.workdir / "etcd-data"
        url = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        etcd = self.component(
            "etcd",
            [
                str(self.binaries / "etcd"),
                "--name=testbed",
                f"--data-dir={data}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=testbed={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--quota-backend-bytes=4294967296",
            ],
        )
        etcd.start()

        def healthy() -> bool:
            self._check_alive("etcd")
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:  # noqa: S310
                return bool(json.loads(r.read()).get("health") == "true")

        wait_until("etcd /health", healthy, timeout=30)
        self.startup_seconds["etcd"] = time.monotonic() - t0

    def apiserver_argv(self) -> list[str]:
        d = self.workdir
        return [
            str(self.binaries / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--cert-dir={d / 'cert'}",
            f"--tls-cert-file={d / 'apiserver.crt'}",
            f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--client-ca-file={d / 'ca.crt'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,"
            "TaintNodesByCondition,Priority,DefaultTolerationSeconds,ResourceQuota",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            "--profiling=false",
            f"--v={self.verbosity}",
        ]

    def _start_apiserver(self) -> None:
        t0 = time.monotonic()
        self.component("kube-apiserver", self.apiserver_argv()).start()
        self._wait_apiserver()
        self.startup_seconds["kube-apiserver"] = time.monotonic() - t0

    def _wait_apiserver(self, timeout: float = 120.0) -> None:
        def ready() -> bool:
            self._check_alive("kube-apiserver")
            status, _ = self.api_get("/readyz")
            return status == 200

        wait_until("kube-apiserver /readyz", ready, timeout=timeout, interval=0.5)

    def restart_apiserver(self, *, down_seconds: float = 0.0) -> None:
        """Stop the API server (SIGTERM), optionally wait, and start it on the same port."""
        self.stop_apiserver()
        if down_seconds:
            time.sleep(down_seconds)
        self.start_apiserver_again()

    def stop_apiserver(self) -> None:
        self.components["kube-apiserver"].stop()

    def start_apiserver_again(self) -> None:
        self.components["kube-apiserver"].start()
        self._wait_apiserver()

    def start_scheduler(self) -> None:
        """Start kube-scheduler when the test bed was made with `start_scheduler=False`."""
        component = self.components["kube-scheduler"]
        if not component.alive():
            component.start()

    def _start_controllers(self) -> None:
        t0 = time.monotonic()
        d = self.workdir
        kubeconfig = str(self.admin_kubeconfig)
        self.component(
            "kube-controller-manager",
            [
                str(self.binaries / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--service-account-private-key-file={d / 'sa.key'}",
                f"--root-ca-file={d / 'ca.crt'}",
                "--use-service-account-credentials=false",
                f"--kube-api-qps={self.controller_qps}",
                f"--kube-api-burst={self.controller_qps * 2}",
                "--concurrent-job-syncs=10",
                "--node-monitor-period=2s",
                "--node-monitor-grace-period=60s",
                f"--v={self.verbosity}",
            ],
        ).start()
        scheduler_config = d / "kube-scheduler.yaml"
        scheduler_config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": kubeconfig,
                        "qps": self.scheduler_qps,
                        "burst": self.scheduler_qps * 2,
                    },
                    "leaderElection": {"leaderElect": False},
                },
                indent=2,
            )
        )
        scheduler = self.component(
            "kube-scheduler",
            [
                str(self.binaries / "kube-scheduler"),
                f"--config={scheduler_config}",
                "--secure-port=0",
                f"--v={self.verbosity}",
            ],
        )
        if self.start_scheduler_at_boot:
            scheduler.start()
        self.component(
            "kwok",
            [
                str(self.binaries / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={self.stages_file}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                "--manage-nodes-with-label-selector=",
                "--cidr=10.128.0.0/10",
                "--node-ip=10.0.0.1",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{self.kwok_port}",
            ],
        ).start()

        # The controller manager is ready when the namespace `default` has its ServiceAccount.
        def default_sa() -> bool:
            self._check_alive("kube-controller-manager", "kwok")
            status, _ = self.api_get("/api/v1/namespaces/default/serviceaccounts/default")
            return status == 200

        wait_until("the default ServiceAccount (kube-controller-manager)", default_sa, timeout=90)

        def kwok_healthy() -> bool:
            self._check_alive("kwok")
            with urllib.request.urlopen(  # noqa: S310
                f"http://127.0.0.1:{self.kwok_port}/healthz", timeout=2
            ) as r:
                return int(r.status) == 200

        wait_until("kwok /healthz", kwok_healthy, timeout=60)
        self.startup_seconds["controllers"] = time.monotonic() - t0

    # -- Kubernetes objects (through the official client)

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        from kubernetes import config as k8s_config

        return k8s_config.new_client_from_config(
            config_file=str(kubeconfig or self.admin_kubeconfig)
        )

    def _apply_portal_rbac(self) -> None:
        """Both ClusterRoles, `gpu-portal` bound to PORTAL_USER, and the admission policies,
        waited for until the API server enforces them."""
        from kubernetes import client as k8s

        api_client = self.api_client()
        rbac: Any = k8s.RbacAuthorizationV1Api(api_client)
        rules = portal_rbac_rules()
        for name, role_rules in (
            (PORTAL_CLUSTER_ROLE, rules["cluster"]),
            (PORTAL_WORKLOADS_ROLE, rules["namespace"]),
        ):
            rbac.create_cluster_role(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": name},
                    "rules": role_rules,
                },
                _preload_content=False,
            )
        rbac.create_cluster_role_binding(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": PORTAL_CLUSTER_ROLE},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": PORTAL_CLUSTER_ROLE,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": PORTAL_USER}
                ],
            },
            _preload_content=False,
        )
        admission: Any = k8s.AdmissionregistrationV1Api(api_client)
        for doc in portal_admission_policies(PORTAL_USER):
            create = (
                admission.create_validating_admission_policy
                if doc["kind"] == "ValidatingAdmissionPolicy"
                else admission.create_validating_admission_policy_binding
            )
            create(doc, _preload_content=False)
        self._wait_admission_policies()

    def _wait_admission_policies(self, timeout: float = 60.0) -> None:
        """Until the portal's dry-run RoleBinding in `default` (not a project namespace) is
        refused by the policy: it is then loaded, not only stored."""
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        rbac: Any = k8s.RbacAuthorizationV1Api(self.api_client(self.portal_kubeconfig))
        body = {
            "metadata": {"name": PORTAL_WORKLOADS_ROLE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": PORTAL_WORKLOADS_ROLE,
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": PORTAL_USER}
            ],
        }

        def refused() -> bool:
            try:
                rbac.create_namespaced_role_binding(
                    "default", body, dry_run="All", _preload_content=False
                )
            except ApiException as exc:
                return exc.status == 403 and "not a GPU Portal project namespace" in str(
                    exc.body or ""
                )
            return False

        wait_until("the portal's admission policies", refused, timeout=timeout, interval=0.2)

    def add_nodes(self, nodes: Iterable[NodeShape], *, timeout: float = 180.0) -> None:
        """Register nodes and wait until each is Ready and free of the not-ready taint."""
        from concurrent.futures import ThreadPoolExecutor

        from kubernetes import client as k8s

        t0 = time.monotonic()
        core: Any = k8s.CoreV1Api(self.api_client())
        shapes = list(nodes)

        def create(shape: NodeShape) -> None:
            body = shape.manifest()
            core.create_node(body, _preload_content=False)
            # Status sent on create is dropped for Nodes by some versions: set it explicitly.
            core.patch_node_status(shape.name, {"status": body["status"]}, _preload_content=False)

        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(create, shapes))
        dra_nodes = [(s.name, s.dra_cards) for s in shapes if s.dra_cards is not None]
        if dra_nodes:
            publish(self.api_client(), dra_nodes)
        names = {s.name for s in shapes}

        def all_ready() -> bool:
            self._check_alive("kwok", "kube-controller-manager")
            pending = set(names)
            token: str | None = None
            while True:
                page = self._raw_list(core, token)
                for node in page["items"]:
                    name = node["metadata"]["name"]
                    if name not in pending:
                        continue
                    conditions = node.get("status", {}).get("conditions") or []
                    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
                    taints = node.get("spec", {}).get("taints") or []
                    not_ready = any(t["key"].startswith("node.kubernetes.io/") for t in taints)
                    if ready and not not_ready:
                        pending.discard(name)
                token = page["metadata"].get("continue")
                if not token:
                    return not pending

        wait_until(f"{len(names)} nodes Ready", all_ready, timeout=timeout, interval=1.0)
        self.startup_seconds["nodes"] = time.monotonic() - t0

    @staticmethod
    def _raw_list(core: Any, token: str | None) -> dict[str, Any]:
        response = core.list_node(limit=500, _continue=token, _preload_content=False)
        result: dict[str, Any] = json.loads(response.data)
        return result

    def wait_default_service_account(self, namespace: str, timeout: float = 60.0) -> None:
        def exists() -> bool:
            status, _ = self.api_get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
            return status == 200

        wait_until(f"ServiceAccount {namespace}/default", exists, timeout=timeout)

    def stop(self) -> None:
        """Stop everything, newest first, and remove the work directory if we made it."""
        for name in (
            "kueue",
            "kwok",
            "kube-scheduler",
            "kube-controller-manager",
            "kube-apiserver",
            "etcd",
        ):
            component = self.components.get(name)
            if component is not None and component.process is not None:
                component.stop()
        if self._own_workdir and not os.environ.get("TESTBED_KEEP"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
