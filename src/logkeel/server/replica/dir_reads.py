"""Follower fetches read log dir by log dir (beyond KIP-501): one slow disk must not make the
leader late for partitions on its healthy disks, nor shrink their ISRs.

Each dir's partitions of a follower's fetch are read on threads of that dir's own, side by
side. The fetch waits for them at most `follower.fetch.process.time.max.ms`; a dir that has not
answered by then gives its partitions no records in this response, and its read goes on: its
records (read into memory while the dir is slow, so sending them cannot wait on the disk)
answer the follower's next fetch from the same offsets. Meanwhile no further read for that
follower is queued on the slow dir. The time such a read takes counts as the leader serving
that follower (`FollowerTracking.response_started` / `response_sent`), judged by its disk time,
partition by partition (`disk_time`), not by how long the fetch waited: a leader whose disk is too
slow for a partition's followers resigns it, and the follower's fetch stays pending (KIP-501) --
it is not lagging, the leader is. A read late only because the CPU is busy counts for nothing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode

from logkeel.server.replica.data_path import DataPath
from logkeel.server.replica.disk_time import DirClock, ReadTime
from logkeel.server.replica.results import (
    FetchPartitionRequest,
    FetchPartitionResult,
    MemoryRecords,
    RegionRecords,
    close_records,
)

__all__ = ["DirReads", "LateRead", "read_into_memory"]

log = logging.getLogger(__name__)

# (requests, replica id, max bytes, isolation level, into memory, the read's disk time) ->
# results, in order
ReadAll = Callable[
    [Sequence[FetchPartitionRequest], int, int, int, bool, ReadTime | None],
    list[FetchPartitionResult],
]

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
    disk: ReadTime


class DirReads:
    """Per log dir: the threads that read it for followers, whether it is slow, and the reads
    that outlasted a fetch (by dir and follower)."""

    def __init__(self, path: DataPath, read_all: ReadAll, budget_s: float) -> None:
        """``read_all`` reads partitions in order (the fetch's own reader); ``budget_s`` is
        follower.fetch.process.time.max.ms."""
        self._path = path
        self._read_all = read_all
        self._budget_s = budget_s
        self._lock = threading.Lock()
        self._executors: dict[Path, ThreadPoolExecutor] = {}
        self._slow_until: dict[Path, float] = {}
        self._clocks: dict[Path, DirClock] = {}
        self._late: dict[tuple[Path, int], LateRead] = {}
        self._closed = False

    def splits(self, groups: dict[Path | None, list[int]], replica_id: int) -> bool:
        """Whether a follower's fetch over these dirs is read dir by dir: it spans dirs, or
        touches a slow one or one with a late read."""
        dirs = [d for d in groups if d is not None]
        return len(dirs) > 1 or any(self.slow(d) or self.late(d, replica_id) for d in dirs)

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

    def clock(self, log_dir: Path) -> DirClock:
        with self._lock:
            return self._clocks.setdefault(log_dir, DirClock())

    def slow(self, log_dir: Path) -> bool:
        return self._slow_until.get(log_dir, 0.0) > time.monotonic()

    def any_slow(self) -> bool:
        if not self._slow_until:
            return False
        now = time.monotonic()
        # (A copy: a read's end marks dirs slow from an IO thread.)
        return any(until > now for until in list(self._slow_until.values()))

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

    async def read(
        self,
        groups: dict[Path | None, list[int]],
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
    ) -> list[FetchPartitionResult]:
        """A follower's fetch, ``groups`` mapping each dir to the indexes of its requests:
        each dir read on its own threads, at most the budget waited for; the response's
        ``max_bytes`` shared evenly between the dirs."""
        results: list[FetchPartitionResult | None] = [None] * len(requests)
        limit = max(1, max_bytes // len(groups))
        started_ms = int(time.time() * 1000)
        reads: dict[asyncio.Future[list[FetchPartitionResult]], tuple[Path | None, list[int]]] = {}
        threads: dict[
            asyncio.Future[list[FetchPartitionResult]], Future[list[FetchPartitionResult]]
        ] = {}
        disks: dict[Path, ReadTime] = {}
        for d, indexes in groups.items():
            if d is not None:
                indexes = self._from_late_read(d, indexes, requests, replica_id, results)
            if not indexes:
                continue
            wanted = [requests[i] for i in indexes]
            if d is None:
                fut = self._path.submit_io(
                    self._read_all, wanted, replica_id, limit, isolation_level
                )
            else:
                disk = disks[d] = self.clock(d).read()
                thread_fut = self.executor(d).submit(
                    self._read_dir, d, wanted, replica_id, limit, isolation_level,
                    self.slow(d), disk,
                )  # fmt: skip
                fut = asyncio.wrap_future(thread_fut)
                threads[fut] = thread_fut
            reads[fut] = (d, indexes)
        try:
            if reads:
                done, late = await asyncio.wait(reads, timeout=self._budget_s)
                for fut in late:
                    d, indexes = reads[fut]
                    if d is None:  # partitions without a log answer at once anyway
                        done.add(fut)
                        await asyncio.wait([fut])
                        continue
                    # Not marked slow for this: the wait may have been the CPU's, not the
                    # disk's (`_read_dir` marks it once the read's disk time says so).
                    fut.add_done_callback(_retrieve)
                    self._keep_late(d, threads[fut], [requests[i] for i in indexes], replica_id,
                                    started_ms, disks[d])  # fmt: skip
                    for i in indexes:
                        results[i] = self._unserved(requests[i])
                for fut in done:
                    d, indexes = reads[fut]
                    for i, result in zip(indexes, fut.result(), strict=True):
                        results[i] = result
                    if d is not None:
                        self._served_in_time(disks[d], [requests[i] for i in indexes], replica_id)
        except BaseException:
            close_records(r for r in results if r is not None)
            raise
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def _served_in_time(
        self, disk: ReadTime, wanted: list[FetchPartitionRequest], replica_id: int
    ) -> None:
        """A dir read within the budget that returned records is evidence its disk is fine:
        it ends a slow spell (one partition read that a loaded CPU stretched must not stand for
        the lag time); one that found nothing to return is not (`isr_rules`)."""
        now = int(time.time() * 1000)
        for r in wanted:
            p = self._path.partition(r.tp)
            if p is not None and p.is_leader:
                p.followers.read_served(
                    replica_id, disk.longest_ms, now, read_records=disk.read_records
                )

    def _from_late_read(
        self,
        d: Path,
        indexes: list[int],
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        results: list[FetchPartitionResult | None],
    ) -> list[int]:
        """Answers what a late read of ``d`` for this follower holds (the same partitions
        from the same offsets); while it still runs, the dir's partitions get no records.
        Returns the indexes still to read."""
        late = self.late(d, replica_id)
        if late is None:
            return indexes
        if not late.future.done():
            # One read at a time per dir and follower: nothing queues behind a slow disk.
            for i in indexes:
                results[i] = self._unserved(requests[i])
            return []
        self.take_late(d, replica_id)
        try:
            ready = {
                (req.tp, req.fetch_offset): res
                for req, res in zip(late.requests, late.future.result(), strict=True)
            }
        except Exception:  # noqa: BLE001 - the read failed: read again now
            return indexes
        for i in indexes:
            res = ready.pop((requests[i].tp, requests[i].fetch_offset), None)
            if res is not None:
                p = self._path.partition(requests[i].tp)
                plog = p.log if p is not None else None
                if plog is not None:  # the high watermark may have moved since the read
                    res.high_watermark = max(res.high_watermark, plog.high_watermark)
                res.read_earlier = True
                results[i] = res
        close_records(ready.values())
        return [i for i in indexes if results[i] is None]

    def _keep_late(
        self,
        d: Path,
        thread_fut: Future[list[FetchPartitionResult]],
        wanted: list[FetchPartitionRequest],
        replica_id: int,
        started_ms: int,
        disk: ReadTime,
    ) -> None:
        """A dir's read outlasted the budget: it goes on, and answers the next fetch; until it
        ends it counts as the leader serving this follower, as slowly as its disk is."""
        token = id(thread_fut)
        for r in wanted:
            p = self._path.partition(r.tp)
            if p is not None:
                p.followers.response_started(replica_id, token, started_ms, disk=disk)
        self.add_late(d, replica_id, LateRead(thread_fut, wanted, token, started_ms, disk))

        def ended(_f: Future[list[FetchPartitionResult]]) -> None:
            now = int(time.time() * 1000)
            for r in wanted:
                p = self._path.partition(r.tp)
                if p is not None:
                    # The follower waited on this leader's disk, not the other way round.
                    p.followers.response_sent(token, now, leader=p.is_leader, leader_slow=True)

        thread_fut.add_done_callback(ended)

    def _unserved(self, r: FetchPartitionRequest) -> FetchPartitionResult:
        """A partition whose read is still under way: no records in this response."""
        p = self._path.partition(r.tp)
        plog = p.log if p is not None else None
        if p is None or plog is None:
            return FetchPartitionResult(r.tp)
        return FetchPartitionResult(
            r.tp,
            high_watermark=plog.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=plog.log_start_offset,
        )

    def _read_dir(
        self,
        log_dir: Path,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
        into_memory: bool,
        disk: ReadTime,
    ) -> list[FetchPartitionResult]:
        """One dir's part of a follower's fetch, on that dir's threads, timed partition by
        partition. A read slow on the disk answers a later fetch: its records are read into
        memory before it ends, so sending them never waits on this disk. Its dir is marked slow
        here, before the result can be seen: marked from the future's callback, a fetch could
        take that result while the dir still read as healthy."""
        results = self._read_all(
            requests, replica_id, max_bytes, isolation_level, into_memory, disk
        )
        if disk.longest_ms > self._budget_s * 1000:
            if not into_memory:
                for result in results:
                    with disk.partition():
                        read_into_memory(result)
            self.mark_slow(log_dir)
        return results


def read_into_memory(result: FetchPartitionResult) -> None:
    """The result's records read from the file into memory (a slow dir's)."""
    if not isinstance(result.records, RegionRecords):
        return
    region, result.records = result.records, None
    try:
        result.records = MemoryRecords(region.read_bytes())
    except (OSError, EOFError) as exc:
        log.error("read of %s failed: %s", result.tp, exc)
        result.error = ErrorCode.kafka_storage_error
    finally:
        region.close()


def _retrieve(fut: asyncio.Future[list[FetchPartitionResult]]) -> None:
    """A late read's outcome is taken through its thread's future; this one is dropped."""
    if not fut.cancelled():
        fut.exception()
