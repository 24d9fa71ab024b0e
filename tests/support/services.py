"""Throw-away service processes for the fault tests: a Redis, a PostgreSQL cluster, a TCP proxy.

The fault suite restarts and cuts these, so it never touches the shared Redis or PostgreSQL that
other tests use: every helper here starts its own process on a free loopback port and removes it
(and its files) afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from scripts.testbed.ports import free_port


def wait_for_port(port: int, *, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f}s")


class RedisServer:
    """A private redis-server without persistence: a restart loses every queued message."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for_port(self.port)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)  # a crash, not a clean shutdown
            self.process.wait(timeout=10)

    def restart(self, *, down_seconds: float) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()


def _postgres_bin() -> Path | None:
    root = Path("/usr/lib/postgresql")
    versions = (
        sorted(root.iterdir(), key=lambda p: [int(x) for x in p.name.split(".")])
        if (root.is_dir())
        else []
    )
    for version in reversed(versions):
        if (version / "bin" / "initdb").exists():
            return version / "bin"
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def postgres_available() -> bool:
    return _postgres_bin() is not None


class PostgresCluster:
    """A private PostgreSQL cluster (initdb in a temp dir), trust auth on a loopback port.

    initdb refuses to run as root, so as root (CI) the cluster belongs to the `postgres` user.
    """

    def __init__(self) -> None:
        bin_dir = _postgres_bin()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.bin = bin_dir
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="faults-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            shutil.chown(self.root, self.user)
            self.root.chmod(0o755)

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args[:2])} failed: {completed.stderr[-2000:]}{self._log_tail()}"
            )

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n--- postgres log ---\n" + self.log.read_text(errors="replace")[-2000:]
        return ""

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "portal", "--auth=trust", "-E", "UTF8")

    def start(self) -> None:
        options = (
            f"-p {self.port} -k /tmp -c listen_addresses=127.0.0.1 "
            # Not synchronous_commit=off: a crash would then lose the last commits, which
            # is data loss by configuration, not by the portal. fsync=off loses nothing when
            # only PostgreSQL (not the machine) goes down.
            "-c fsync=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, *, mode: str = "immediate") -> None:
        """`immediate` is a crash: open transactions are lost and every client is cut off."""
        with contextlib.suppress(RuntimeError):
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, *, down_seconds: float) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def url(self, database: str) -> str:
        return f"postgres://portal@127.0.0.1:{self.port}/{database}"

    def copy_database(self, source_url: str, database: str) -> None:
        """Create `database` here as a copy of the database at `source_url` (pg_dump | psql)."""
        source = urlsplit(source_url)
        env = {**os.environ, "PGPASSWORD": source.password or ""}
        target = ["-h", "127.0.0.1", "-p", str(self.port), "-U", "portal"]
        subprocess.run(
            ["psql", *target, "-q", "-d", "postgres", "-c", f'CREATE DATABASE "{database}"'],
            check=True,
            capture_output=True,
        )
        dump = subprocess.Popen(
            ["pg_dump", "--no-owner", "--no-privileges", "-h", source.hostname or "127.0.0.1",
             "-p", str(source.port or 5432), "-U", source.username or "portal",
             source.path.lstrip("/")],
            stdout=subprocess.PIPE,
            env=env,
        )  # fmt: skip
        restore = subprocess.run(
            ["psql", *target, "-q", "-v", "ON_ERROR_STOP=1", "-d", database],
            stdin=dump.stdout,
            capture_output=True,
            check=False,
        )
        if dump.stdout:
            dump.stdout.close()
        if dump.wait() != 0 or restore.returncode != 0:
            raise RuntimeError(f"copying the database failed: {restore.stderr[-2000:]!r}")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_cluster() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster()
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


class TcpProxy:
    """Forwards a loopback port to `target`; `cut()` makes the target unreachable until `mend()`.

    Cut means what a network partition means to a client: the listener goes away (new
    connections are refused) and every open connection is reset.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.connections = 0

    def mend(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    start = mend

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, set()
        if listener:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                sock.close()

    stop = cut

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._open.update((client, upstream))
                self.connections += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
