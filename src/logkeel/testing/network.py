"""Network partitions between local processes, for the tests and the soak: iptables rules in a
chain of our own.

Every broker, the clients and ZooKeeper share 127.0.0.1 here, so an address cannot tell one
broker's traffic from another's. Two things can: the port a broker listens on, and the group id
its process runs with (the launcher gives each child broker its own, see
`broker_process.ChildBroker.group`), which iptables' ``owner`` match reads from every socket the
process opens. ``owner`` only works on locally generated packets -- the OUTPUT chain -- which on
loopback is every packet, so one chain hooked into OUTPUT is enough:

- the isolated process's packets to the peers' ports (and ZooKeeper's) are dropped: its
  requests, its fetches and its ZooKeeper pings go nowhere;
- each peer's packets to the isolated process's port are dropped: the peers' fetches from it
  and their connections to it go nowhere.

Clients (the test process, another group) still reach every broker: the leader cut off from its
cluster keeps its clients, which is the case its write fence is for. DROP rather than REJECT:
a partition looks like silence, not like a closed port. ``refuse`` is the other case: new
connections to a broker that lives on are reset, as if its port were closed (what the crash
detection takes for a crash).

A `NetworkCut` is a context manager: leaving it deletes the rules and the chain whatever
happened, and a chain left behind by a test process that died is removed by the next one.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Self

__all__ = ["Endpoint", "NetworkCut", "available"]

_PREFIX = "LKCUT-"
_names = itertools.count()


@dataclass(frozen=True)
class Endpoint:
    """A process as the rules see it: the port it listens on and the group it runs with
    (None: a process we cannot tell apart, such as ZooKeeper; only its port is used)."""

    port: int
    group: int | None = None


def available() -> str | None:
    """Why network cuts cannot be made here, or None."""
    if shutil.which("iptables") is None:
        return "iptables is not installed (Debian package iptables; scripts/test installs it)"
    if os.geteuid() != 0:
        return "iptables rules need root"
    try:
        _iptables("-S", "OUTPUT")
    except (OSError, subprocess.CalledProcessError) as e:
        return f"iptables does not work here: {e}"
    return None


def _iptables(*args: str) -> str:
    # -w: other test processes change rules concurrently; wait for the xtables lock.
    done = subprocess.run(
        ["iptables", "-w", "10", *args], capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return done.stdout


class NetworkCut:
    """A dedicated iptables chain, hooked into OUTPUT while the context is open."""

    def __init__(self) -> None:
        self.chain = f"{_PREFIX}{os.getpid()}-{next(_names)}"
        self.rules: list[list[str]] = []

    def __enter__(self) -> Self:
        _remove_orphans()
        _iptables("-N", self.chain)
        try:
            _iptables("-I", "OUTPUT", "-j", self.chain)
        except subprocess.CalledProcessError:
            _iptables("-X", self.chain)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        _delete_chain(self.chain)

    def isolate(self, victim: Endpoint, peers: Sequence[Endpoint]) -> None:
        """Cuts ``victim`` off from every one of ``peers`` in both directions (see the module
        docstring for how); clients keep reaching everybody."""
        if victim.group is None:
            raise ValueError("the isolated process needs a group id of its own")
        ports = ",".join(str(p.port) for p in peers)
        self._add("-m", "owner", "--gid-owner", str(victim.group),
                  "-p", "tcp", "-m", "multiport", "--dports", ports)  # fmt: skip
        for peer in peers:
            if peer.group is not None:
                self._add("-m", "owner", "--gid-owner", str(peer.group),
                          "-p", "tcp", "--dport", str(victim.port))  # fmt: skip

    def refuse(self, victim: Endpoint) -> None:
        """New connections to ``victim``'s port are refused (a TCP reset, as from a closed
        port) while the process and its open connections live on: what a crashed broker looks
        like to a prober, for a broker that has not crashed."""
        self._add("-p", "tcp", "--dport", str(victim.port), "--syn",
                  target=["REJECT", "--reject-with", "tcp-reset"])  # fmt: skip

    def heal(self) -> None:
        """Removes every rule; the chain stays hooked (empty) until the context closes."""
        _iptables("-F", self.chain)
        self.rules.clear()

    @property
    def active(self) -> bool:
        return bool(self.rules)

    def _add(self, *match: str, target: Sequence[str] = ("DROP",)) -> None:
        rule = [*match, "-j", *target]
        _iptables("-A", self.chain, *rule)
        self.rules.append(rule)


def _delete_chain(chain: str) -> None:
    # Each step on its own: a half-made chain (hook missing, rules missing) still goes.
    with contextlib.suppress(subprocess.CalledProcessError):
        while True:
            _iptables("-D", "OUTPUT", "-j", chain)  # ends with an error once no hook is left
    with contextlib.suppress(subprocess.CalledProcessError):
        _iptables("-F", chain)
    with contextlib.suppress(subprocess.CalledProcessError):
        _iptables("-X", chain)


def _remove_orphans() -> None:
    """Deletes the chains of test processes that are gone (a SIGKILLed pytest has no
    teardown); chains of live processes are theirs."""
    for chain in _chains(_iptables("-S")):
        m = re.fullmatch(rf"{_PREFIX}(\d+)-\d+", chain)
        if m and not _alive(int(m.group(1))):
            _delete_chain(chain)


def _chains(listing: str) -> Iterable[str]:
    for line in listing.splitlines():
        if line.startswith(f"-N {_PREFIX}"):
            yield line.split()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
