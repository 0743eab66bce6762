"""Fetches, from consumers and followers: every partition read in one trip to the IO threads
(``partition_reads``), long polls parked in the fetch purgatory until ``min_bytes`` are
readable, and the timing of responses to followers (beyond KIP-501). The records of a result
are a ``RegionRecords`` (a file region for sendfile; ``read_bytes()`` gives the bytes) or None;
call ``close_records(results)`` if the results are not sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path

from kio.schema.errors import ErrorCode

from logkeel.server.replica import partition_reads
from logkeel.server.replica.data_path import DataPath
from logkeel.server.replica.delayed import DelayedFetch
from logkeel.server.replica.dir_reads import DirReads, LateRead
from logkeel.server.replica.results import (
    CONSUMER_REPLICA_ID,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchPartitionRequest,
    FetchPartitionResult,
    MemoryRecords,
    RegionRecords,
    close_records,
)
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["Fetches"]

log = logging.getLogger(__name__)

_INT32_MAX = (1 << 31) - 1


class Fetches:
    """Reads of partitions for fetch requests and internal readers."""

    def __init__(self, path: DataPath, *, follower_budget_ms: int = 500) -> None:
        """``follower_budget_ms`` (follower.fetch.process.time.max.ms): how long a follower's
        fetch waits for a log dir's reads before answering without them (`dir_reads`)."""
        self._path = path
        self.dir_reads = DirReads()
        self._sending: dict[int, int] = {}  # follower response token -> when sending began
        self._budget_s = follower_budget_ms / 1000

    async def fetch(
        self,
        requests: Sequence[FetchPartitionRequest],
        *,
        replica_id: int = CONSUMER_REPLICA_ID,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = _INT32_MAX,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> list[FetchPartitionResult]:
        """Reads every partition in order, long-polling up to ``max_wait_ms`` for
        ``min_bytes``. The first partition with data may exceed ``max_bytes`` by one batch
        (Kafka's rule, so a consumer never gets stuck behind a large batch)."""
        results = await self._read(requests, replica_id, max_bytes, isolation_level)
        total = sum(r.size for r in results)
        if (
            max_wait_ms <= 0
            or not requests
            or total >= min_bytes
            or any(r.error != ErrorCode.none or r.diverging_epoch for r in results)
            or self._path.stopped
        ):
            return results
        op = DelayedFetch(
            self._path,
            max_wait_ms,
            requests,
            replica_id=replica_id,
            min_bytes=min_bytes,
            isolation_level=isolation_level,
            bytes_already=total,
        )
        await self._path.fetch_purgatory.wait(op, [r.tp for r in requests])
        # Read again even on expiry: offsets (high watermark, log start) may have moved.
        close_records(results)
        if self._path.stopped:
            return await asyncio.to_thread(
                self._read_all, requests, replica_id, max_bytes, isolation_level
            )
        return await self._read(requests, replica_id, max_bytes, isolation_level)

    async def _read(
        self,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
    ) -> list[FetchPartitionResult]:
        """Every partition read: on the IO threads in one trip, or, for a follower whose fetch
        spans log dirs or touches a slow one, dir by dir (`dir_reads`)."""
        groups: dict[Path | None, list[int]] = {}
        for i, r in enumerate(requests):
            p = self._path.partition(r.tp)
            plog = p.log if p is not None else None
            groups.setdefault(plog.log_dir if plog is not None else None, []).append(i)
        dirs = [d for d in groups if d is not None]
        split = (
            replica_id >= 0
            and not self._path.stopped
            and (
                len(dirs) > 1
                or any(self.dir_reads.slow(d) or self.dir_reads.late(d, replica_id) for d in dirs)
            )
        )
        if not split:
            return await self._path.run_in_io(
                self._read_all, requests, replica_id, max_bytes, isolation_level
            )
        return await self._read_by_dir(groups, requests, replica_id, max_bytes, isolation_level)

    async def _read_by_dir(
        self,
        groups: dict[Path | None, list[int]],
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
    ) -> list[FetchPartitionResult]:
        results: list[FetchPartitionResult | None] = [None] * len(requests)
        limit = max(1, max_bytes // len(groups))
        started_ms = int(time.time() * 1000)
        reads: dict[asyncio.Future[list[FetchPartitionResult]], tuple[Path | None, list[int]]] = {}
        threads: dict[
            asyncio.Future[list[FetchPartitionResult]], Future[list[FetchPartitionResult]]
        ] = {}
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
                thread_fut = self.dir_reads.executor(d).submit(
                    self._read_dir, wanted, replica_id, limit, isolation_level,
                    self.dir_reads.slow(d),
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
                    self.dir_reads.mark_slow(d)
                    fut.add_done_callback(_retrieve)
                    self._keep_late(d, threads[fut], [requests[i] for i in indexes], replica_id,
                                    started_ms)  # fmt: skip
                    for i in indexes:
                        results[i] = self._unserved(requests[i])
                for fut in done:
                    _, indexes = reads[fut]
                    for i, result in zip(indexes, fut.result(), strict=True):
                        results[i] = result
        except BaseException:
            close_records(r for r in results if r is not None)
            raise
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

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
        late = self.dir_reads.late(d, replica_id)
        if late is None:
            return indexes
        if not late.future.done():
            # One read at a time per dir and follower: nothing queues behind a slow disk.
            for i in indexes:
                results[i] = self._unserved(requests[i])
            return []
        self.dir_reads.take_late(d, replica_id)
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
    ) -> None:
        """A dir's read outlasted the budget: it goes on, and answers the next fetch; until it
        ends it counts as the leader serving this follower (slowly)."""
        token = id(thread_fut)
        for r in wanted:
            p = self._path.partition(r.tp)
            if p is not None:
                p.followers.response_started(replica_id, token, started_ms)
        self.dir_reads.add_late(d, replica_id, LateRead(thread_fut, wanted, token, started_ms))

        def ended(_f: Future[list[FetchPartitionResult]]) -> None:
            now = int(time.time() * 1000)
            for r in wanted:
                p = self._path.partition(r.tp)
                if p is not None:
                    p.followers.response_sent(token, now, leader=p.is_leader)

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
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
        into_memory: bool,
    ) -> list[FetchPartitionResult]:
        """One dir's part of a follower's fetch, on that dir's threads. A read that outlasts
        the budget answers a later fetch: its records are read into memory before it ends, so
        sending them never waits on this disk."""
        started = time.monotonic()
        results = self._read_all(requests, replica_id, max_bytes, isolation_level, into_memory)
        if not into_memory and time.monotonic() - started > self._budget_s:
            for result in results:
                _into_memory(result)
        return results

    def _read_all(
        self,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
        into_memory: bool = False,
    ) -> list[FetchPartitionResult]:
        """Reads in order; ``into_memory``: records are read into memory (a slow dir) rather
        than left in the file for sendfile."""
        results = []
        remaining = max(0, max_bytes)
        min_one_message = True
        try:
            for r in requests:
                limit = max(0, min(r.max_bytes, remaining))
                result = self._read_one(r, replica_id, limit, isolation_level, min_one_message)
                if into_memory:
                    _into_memory(result)
                if result.records is not None:
                    remaining = max(0, remaining - result.records.size)
                    min_one_message = False
                results.append(result)
        except BaseException:
            close_records(results)
            raise
        return results

    def _read_one(
        self,
        r: FetchPartitionRequest,
        replica_id: int,
        limit: int,
        isolation_level: int,
        min_one_message: bool,
    ) -> FetchPartitionResult:
        tp = r.tp
        p = self._path.partition(tp)
        if p is None:
            return FetchPartitionResult(tp, ErrorCode.unknown_topic_or_partition)
        try:
            result, hw_moved = partition_reads.read(
                p, r, replica_id, limit, isolation_level, min_one_message
            )
        except KafkaStorageError as exc:
            log.error("read of %s failed: %s", tp, exc)
            self._path.storage_failed(p, exc)
            return FetchPartitionResult(tp, ErrorCode.kafka_storage_error)
        except OSError as exc:  # os.dup; the log's reads are guarded
            log.error("read of %s failed: %s", tp, exc)
            return FetchPartitionResult(tp, ErrorCode.kafka_storage_error)
        if hw_moved:
            self._path.high_watermark_moved(tp)
        return result

    async def read_records(
        self, tp: TopicPartition, offset: int, max_bytes: int, *, read_committed: bool = False
    ) -> tuple[ErrorCode, bytes, int]:
        """(error, whole batches from ``offset``, high watermark): for internal readers."""
        results = await self.fetch(
            [FetchPartitionRequest(tp, offset, max_bytes)],
            isolation_level=READ_COMMITTED if read_committed else READ_UNCOMMITTED,
        )
        r = results[0]
        try:
            data = (
                await self._path.run_in_io(r.records.read_bytes) if r.records is not None else b""
            )
        finally:
            close_records(results)
        return r.error, data, r.high_watermark

    def follower_response(
        self, tps: Iterable[TopicPartition], replica_id: int, token: int, sent: bool
    ) -> None:
        """A response carrying these partitions' records to a follower starts being sent, or
        is sent (beyond KIP-501: how long a leader takes to serve its followers). One that took
        longer than the budget marks its partitions' dirs slow: their records are read into
        memory on the dir's threads from then on, so sending cannot wait on the disk."""
        now = int(time.time() * 1000)
        tps = list(tps)
        if sent:
            started = self._sending.pop(token, None)
            slow = started is not None and now - started > self._budget_s * 1000
        else:
            self._sending[token] = now
            slow = False
        for tp in tps:
            p = self._path.partition(tp)
            if p is None:
                continue
            if slow and p.log is not None:
                self.dir_reads.mark_slow(p.log.log_dir)
            if sent:
                p.followers.response_sent(token, now, leader=p.is_leader)
            else:
                p.followers.response_started(replica_id, token, now)


def _into_memory(result: FetchPartitionResult) -> None:
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
