"""How long a log dir's reads for followers spend on each partition: the measure of a slow disk
for the slow-leader rule (beyond KIP-501; `isr_rules.slow_leader_check`).

A fetch's wall time is no such measure. At 2,000 partitions on a CPU-loaded 2-core machine a
follower's read of ~670 partitions waited for a dir thread, for the GIL and for the event loop
long past `follower.fetch.process.time.max.ms` with every disk healthy, and leaders stepped
down one after another. So each partition's read is timed on the dir's thread, from its start
to its end: what it waits for there is its disk -- its lookups, its records read into memory,
its log's lock (held by appends and flushes, which wait on the same disk) -- and at most a few
GIL switch intervals, far below any budget. A read queued behind another on the same dir
counts from when the dir's oldest partition read under way began: it waits for that disk too.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DirClock", "ReadTime"]


def _now_ms() -> int:
    # Wall-clock ms, as `FollowerTracking` and `isr_rules` compare times.
    return int(time.time() * 1000)


class DirClock:
    """One log dir's partition reads under way (from any of its threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[int, int] = {}  # op id -> when it began (ms)
        self._ids = itertools.count()

    def busy_since_ms(self) -> int | None:
        """When the oldest partition read under way on this dir began (None: none is)."""
        with self._lock:
            return min(self._ops.values(), default=None)

    def read(self) -> ReadTime:
        """The clock of one read of this dir (a follower fetch's part on it)."""
        return ReadTime(self)

    def _begin(self) -> tuple[int, int]:
        op, started = next(self._ids), _now_ms()
        with self._lock:
            self._ops[op] = started
        return op, started

    def _end(self, op: int) -> None:
        with self._lock:
            self._ops.pop(op, None)


class ReadTime:
    """One read of a dir: the longest any of its partitions took, whether any of them read
    records from the disk (into memory; a read that found nothing to return, or only located
    its records for sendfile, read no record byte: no evidence that the disk is fine), and
    (through its dir) since when the disk it waits for has been busy with one partition."""

    def __init__(self, dir_clock: DirClock) -> None:
        self._dir = dir_clock
        self.longest_ms = 0
        self.read_records = False

    @contextmanager
    def partition(self) -> Iterator[None]:
        """Times one partition's read (run on the dir's thread)."""
        op, started = self._dir._begin()
        try:
            yield
        finally:
            self._dir._end(op)
            self.longest_ms = max(self.longest_ms, _now_ms() - started)

    def busy_since_ms(self) -> int | None:
        return self._dir.busy_since_ms()
