"""Free local ports for the processes logkeel launches (tests, benchmarks, `cluster up`'s
ZooKeeper).

Ports are picked below the kernel's ephemeral range: a port the kernel handed out with bind(0)
can be given again to any outgoing connection (a ZooKeeper client, a follower fetcher) between
the check and the child's own bind, which is how a cluster test once lost its second broker's
port. Outside that range only another listener can take it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 20000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def port_is_free(host: str, port: int, *, reuse_address: bool = False) -> bool:
    """Whether a server could listen on ``port`` now; ``reuse_address``: one that binds with
    SO_REUSEADDR, which the connections of a server stopped moments ago (in TIME_WAIT) do not
    keep from its port, as they keep a plain bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if reuse_address:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(count: int = 1, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive ports that are free on ``host`` now."""
    high = _ephemeral_low() - count
    for _ in range(500):
        base = random.randrange(_LOWEST, max(high, _LOWEST + 1))
        if all(port_is_free(host, base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no run of {count} free ports between {_LOWEST} and {high + count}")
