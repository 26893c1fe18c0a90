"""Free local ports for the servers a test starts in another process (workers' metrics, Flower, moto).

A port the kernel picks (bind to port 0) lies in its ephemeral range, from which every outgoing
connection takes its local port too: between the test choosing it and the child process binding
it (a worker takes seconds to start), a connection to Redis or Postgres may take it, and the child
then finds it in use (a worker's metrics port was). Ports below that range are never handed out
that way, so these are chosen there, and never twice in one test session.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_LOWEST = 20000
_handed_out: set[int] = set()
_random = random.SystemRandom()  # a test that seeds `random` does not make these predictable


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_slice(low: int, top: int) -> tuple[int, int]:
    """Under pytest-xdist, this worker's own share of [low, top): sessions running side by side never pick
    the same port between one's check and its child's bind (each remembers only what it handed out)."""
    try:
        index = int(os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw"))
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", ""))
    except ValueError:
        return low, top
    if count < 2 or not 0 <= index < count:
        return low, top
    width = (top - low) // count
    return low + index * width, low + (index + 1) * width


def free_ports(n: int = 1) -> int:
    """The first of `n` consecutive free ports on 127.0.0.1, below the ephemeral range (this xdist worker's share)."""
    top = _ephemeral_low() - n
    low = _LOWEST if top > _LOWEST + 1000 else 1024
    if top <= low:
        raise RuntimeError(f"no ports below the ephemeral range (it starts at {top + n}) to choose from")
    low, top = _worker_slice(low, top)
    for _ in range(200):
        base = _random.randrange(low, top)
        ports = set(range(base, base + n))
        if ports & _handed_out:
            continue
        try:
            for port in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        _handed_out.update(ports)
        return base
    raise RuntimeError(f"no {n} free consecutive ports below {top + n}")
