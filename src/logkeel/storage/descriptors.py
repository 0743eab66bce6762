"""The file descriptors a broker needs, against the limit the system gives it (RLIMIT_NOFILE).

Each replica keeps one descriptor for as long as it is served: its active segment's ``.log``
(reads hand that descriptor to ``sendfile``, so it cannot be closed under them). Its indexes
cost one each while mapped, before Python 3.13, and at most ``index_maps.MAPS.limit`` are mapped
at a time. The rest (client and replication sockets, ZooKeeper, checkpoints being written, the
files of older segments being read) is ``RESERVE``. A broker raises its soft limit to the hard
one at start-up, logs the budget, refuses to start with more replicas on disk than it can serve,
and refuses a new replica past the budget (the partition goes offline with the reason) instead
of failing with EMFILE somewhere mid-run.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

from logkeel.storage.engine.index_maps import MAPS, limit_for

RESERVE = 1024


@dataclass(frozen=True, slots=True)
class DescriptorBudget:
    limit: int  # the soft limit in force
    raised_from: int  # the soft limit the process started with
    hard: int
    maps: int  # index maps that may be open at once (0: maps cost no descriptor)
    reserve: int = RESERVE

    @property
    def replicas(self) -> int:
        """How many replicas fit."""
        return max(0, self.limit - self.maps - self.reserve)

    def describe(self, replicas: int) -> str:
        """The start-up line: the limit, what it was raised from, and what it leaves room for."""
        raised = f", raised from {self.raised_from}" if self.raised_from < self.limit else ""
        return f"file descriptors: {replicas} replica logs; {self._room()}{raised}"

    def refusal(self, replicas: int) -> str | None:
        """Why ``replicas`` logs cannot be served, or None if they can."""
        if replicas <= self.replicas:
            return None
        return (
            f"{replicas} replica logs need more file descriptors than this broker may open "
            f"({self._room()}): raise the hard limit (ulimit -Hn, systemd LimitNOFILE) or "
            f"move replicas to other brokers"
        )

    def _room(self) -> str:
        return (
            f"soft limit {self.limit} (hard {_show(self.hard)}): one per replica, up to "
            f"{self.maps} index maps and {self.reserve} for sockets and other files leave room "
            f"for {self.replicas} replicas"
        )


def _show(n: int) -> str:
    return "unlimited" if n == resource.RLIM_INFINITY else str(n)


def _nr_open() -> int:
    """The kernel's ceiling for a process's descriptors (what an unlimited hard limit means)."""
    try:
        return int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return 1 << 20


def raise_soft_limit() -> tuple[int, int, int]:
    """Raises the soft limit to the hard one: (soft before, soft now, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _nr_open() if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft, hard
        return soft, target, hard
    return soft, soft, hard


def configure() -> DescriptorBudget:
    """Raises the soft limit and sizes the index-map budget from it (once, at start-up)."""
    before, limit, hard = raise_soft_limit()
    MAPS.limit = limit_for(limit)
    return DescriptorBudget(limit, before, hard, MAPS.limit or 0)
