"""Faults a real socket can provoke without an API server: refused, silent and bad servers,
and loading the client configuration."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from runtime.cluster.base import PermanentClusterError, TransientClusterError
from runtime.cluster.kubernetes import KubernetesClusterBackend, load_api_client
from tests.cluster.specs import workload


def _client(port: int) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    configuration.retries = 0
    return k8s.ApiClient(configuration)


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []

    def accept() -> None:
        try:
            while True:
                accepted.append(server.accept()[0])
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in accepted:
        conn.close()


@pytest.fixture
def gateway_error_server() -> Iterator[int]:
    """Answers every request like a load balancer in front of a dead apiserver."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    body = b"<html>502 Bad Gateway</html>"

    def serve() -> None:
        try:
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(
                        b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\n"
                        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                        + body
                    )
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def test_refused_connection_is_transient(closed_port: int) -> None:
    backend = KubernetesClusterBackend(api_client=_client(closed_port))
    with pytest.raises(TransientClusterError, match="cannot reach the API server"):
        backend.launch(workload())


def test_server_that_never_answers_times_out_as_transient(silent_server: int) -> None:
    backend = KubernetesClusterBackend(
        api_client=_client(silent_server), request_timeout_seconds=0.2
    )
    with pytest.raises(TransientClusterError):
        backend.sync_inventory()


def test_bad_gateway_from_a_proxy_is_transient(gateway_error_server: int) -> None:
    backend = KubernetesClusterBackend(api_client=_client(gateway_error_server))
    with pytest.raises(TransientClusterError) as caught:
        backend.list_workloads()
    assert caught.value.status == 502


KUBECONFIG = """
apiVersion: v1
kind: Config
clusters:
  - name: prod
    cluster: {server: "https://api.prod.example:6443", insecure-skip-tls-verify: true}
  - name: lab
    cluster: {server: "https://api.lab.example:6443", insecure-skip-tls-verify: true}
users:
  - name: portal
    user: {token: not-a-real-token}
contexts:
  - name: prod
    context: {cluster: prod, user: portal}
  - name: lab
    context: {cluster: lab, user: portal}
current-context: prod
"""


def test_kubeconfig_path_and_context_choose_the_cluster(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    assert load_api_client(str(path)).configuration.host == "https://api.prod.example:6443"
    backend = KubernetesClusterBackend(kubeconfig=str(path), context="lab")
    assert backend.api_client.configuration.host == "https://api.lab.example:6443"


def test_missing_kubeconfig_is_a_permanent_error(tmp_path: Path) -> None:
    with pytest.raises(PermanentClusterError, match="cannot load Kubernetes configuration"):
        KubernetesClusterBackend(kubeconfig=str(tmp_path / "absent"))


def test_unknown_context_is_a_permanent_error(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    with pytest.raises(PermanentClusterError):
        KubernetesClusterBackend(kubeconfig=str(path), context="nowhere")
