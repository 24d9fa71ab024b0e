"""The loopback ports the test bed and the tests give their own servers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.testbed import ports


def test_a_free_port_lies_below_the_range_outgoing_connections_draw_from() -> None:
    low, _ = ports.ephemeral_range()
    for _ in range(50):
        port = ports.free_port()
        assert ports.LOWEST <= port < low
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))
            server.listen()


def test_a_port_someone_listens_on_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports.free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        other = ports.free_port()

        class Draws:
            def __init__(self) -> None:
                self.ports: Iterator[int] = iter([busy, busy, other])

            def randrange(self, start: int, stop: int) -> int:
                return next(self.ports)

        monkeypatch.setattr(ports.random, "Random", Draws)
        assert ports.free_port() == other


def test_the_kernels_range_is_read_and_a_missing_file_means_linuxs_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    narrow = tmp_path / "ip_local_port_range"
    narrow.write_text("40000\t50000\n")
    monkeypatch.setattr(ports, "LOCAL_PORT_RANGE", narrow)
    assert ports.ephemeral_range() == (40000, 50000)
    assert all(ports.LOWEST <= ports.free_port() < 40000 for _ in range(20))

    monkeypatch.setattr(ports, "LOCAL_PORT_RANGE", tmp_path / "absent")
    assert ports.ephemeral_range() == ports.DEFAULT_EPHEMERAL_RANGE
