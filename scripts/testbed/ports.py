"""Loopback ports for the servers the test bed, the tests and the benchmarks start.

A port the kernel hands out for `bind(0)` comes from the ephemeral range, the same range every
outgoing connection takes its source port from. Between probing such a port and the server
binding it, a client connection (the controller manager talking to the API server, say) may
take it, and the server fails with "address already in use". Ports below that range are never
handed to outgoing connections, so only another listener could take them.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOCAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
LOWEST = 10000  # above the well-known and most registered service ports


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' source ports (Linux's default elsewhere)."""
    try:
        low, high = (int(part) for part in LOCAL_PORT_RANGE.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return low, high


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nobody listens on now and no outgoing connection will take."""
    low, _ = ephemeral_range()
    if low - LOWEST < 1000:  # a range widened to (nearly) every port: nothing lies below it
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    draw = random.Random()  # noqa: S311 - spreads concurrent runs apart, not a secret
    for _ in range(200):
        port = draw.randrange(LOWEST, low)
        if _bindable(port):
            return port
    raise OSError(f"no free loopback port between {LOWEST} and {low}")
