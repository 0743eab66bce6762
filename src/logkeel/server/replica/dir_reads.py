"""Follower fetches read log dir by log dir (beyond KIP-501): one slow disk must not make the
leader late for partitions on its healthy disks, nor shrink their ISRs.

Each dir's partitions of a follower's fetch are read on threads of that dir's own, side by
side. The fetch waits for them at most `follower.fetch.process.time.max.ms`; a dir that has not
answered by then gives its partitions no records in this response, and its read goes on: its
records (read into memory while the dir is slow, so sending them cannot wait on the disk)
answer the follower's next fetch from the same offsets. Meanwhile no further read for that
follower is queued on the slow dir. The time such a read takes counts as the leader serving
that follower (`FollowerTracking.response_started` / `response_sent`): a leader too slow for a
partition's followers resigns it, and the follower's fetch stays pending (KIP-501) -- it is not
lagging, the leader is.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from logkeel.server.replica.results import FetchPartitionRequest, FetchPartitionResult

__all__ = ["DirReads", "LateRead"]

# How long a dir counts as slow after a read there outlasted the budget: its records are read
# into memory meanwhile.
_SLOW_FOR_S = 30.0
_THREADS_PER_DIR = 2


@dataclass
class LateRead:
    """A dir's read for one follower that outlasted the fetch's budget."""

    future: Future[list[FetchPartitionResult]]
    requests: list[FetchPartitionRequest]
    token: int
    started_ms: int


class DirReads:
    """Per log dir: the threads that read it for followers, whether it is slow, and the reads
    that outlasted a fetch (by dir and follower)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executors: dict[Path, ThreadPoolExecutor] = {}
        self._slow_until: dict[Path, float] = {}
        self._late: dict[tuple[Path, int], LateRead] = {}
        self._closed = False

    def executor(self, log_dir: Path) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("the dir readers are stopped")
            ex = self._executors.get(log_dir)
            if ex is None:
                ex = self._executors[log_dir] = ThreadPoolExecutor(
                    _THREADS_PER_DIR, thread_name_prefix=f"logkeel-dir-{log_dir.name}"
                )
            return ex

    def slow(self, log_dir: Path) -> bool:
        return self._slow_until.get(log_dir, 0.0) > time.monotonic()

    def mark_slow(self, log_dir: Path) -> None:
        self._slow_until[log_dir] = time.monotonic() + _SLOW_FOR_S

    def late(self, log_dir: Path, replica_id: int) -> LateRead | None:
        with self._lock:
            return self._late.get((log_dir, replica_id))

    def add_late(self, log_dir: Path, replica_id: int, late: LateRead) -> None:
        with self._lock:
            self._late[(log_dir, replica_id)] = late

    def take_late(self, log_dir: Path, replica_id: int) -> LateRead | None:
        with self._lock:
            return self._late.pop((log_dir, replica_id), None)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            executors, self._executors = list(self._executors.values()), {}
        for ex in executors:
            ex.shutdown(wait=False, cancel_futures=True)
