"""Free loopback ports for the brokers, PostgreSQL servers and listeners the tests and benchmarks
start.

A port asked of the kernel with bind(port 0) and closed again is only a guess: the kernel may give
the same number to the next such request (one broker's AMQP and HTTP listeners were once handed the
same port), and a port from the ephemeral range may be taken by any client's outgoing connection
before the server binds it. So the ports come from below the ephemeral range, and none is handed
out twice by one process."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_HOST = "127.0.0.1"
_LOWEST = 20000
_handed_out: set[int] = set()


def _ephemeral_floor() -> int:
    """The first port of the kernel's range for outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((_HOST, port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port that nothing is bound to now and that this process has not handed out."""
    candidates = range(_LOWEST, max(_ephemeral_floor(), _LOWEST + 1000))
    for _ in range(1000):
        port = random.choice(candidates)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free loopback port between {candidates.start} and {candidates.stop}")
