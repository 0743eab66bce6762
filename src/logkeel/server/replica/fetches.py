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
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from kio.schema.errors import ErrorCode

from logkeel.server.replica import partition_reads, session_reads
from logkeel.server.replica.data_path import DataPath
from logkeel.server.replica.delayed import DelayedFetch
from logkeel.server.replica.dir_reads import DirReads, read_into_memory
from logkeel.server.replica.disk_time import ReadTime
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.purgatory import DelayedOperationPurgatory
from logkeel.server.replica.replication_quota import ReplicationQuota
from logkeel.server.replica.results import (
    CONSUMER_REPLICA_ID,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchPartitionRequest,
    FetchPartitionResult,
    close_records,
)
from logkeel.server.replica.session_reads import Stamp, Unread
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["Fetches", "SessionWatch"]

log = logging.getLogger(__name__)

_INT32_MAX = (1 << 31) - 1


class SessionWatch(Protocol):
    """A fetch session's unread partitions, as a fetch of it waits on them (`session_reads`,
    with a change feed)."""

    def __len__(self) -> int: ...

    def changed(self) -> list[FetchPartitionRequest]:
        """The requests of the unread partitions that changed: read from now on."""
        ...

    def park(self, wake: Callable[[], object] | None) -> None: ...


class Fetches:
    """Reads of partitions for fetch requests and internal readers."""

    def __init__(
        self,
        path: DataPath,
        *,
        follower_budget_ms: int = 500,
        leader_quota: ReplicationQuota | None = None,
        racks: Callable[[], Mapping[int, str | None]] | None = None,
    ) -> None:
        """``follower_budget_ms`` (follower.fetch.process.time.max.ms): how long a follower's
        fetch waits for a log dir's reads before answering without them (`dir_reads`);
        ``leader_quota``: leader.replication.throttled.rate (`replication_quota`); ``racks``:
        the live brokers' broker.rack, for consumers that give a client.rack (KIP-392)."""
        self._path = path
        self._racks = racks
        self._leader_quota = leader_quota or ReplicationQuota()
        self.dir_reads = DirReads(
            path,
            lambda *args: self._read_all(*args),
            follower_budget_ms / 1000,
        )
        self._sending: dict[int, int] = {}  # follower response token -> when sending began
        self._budget_s = follower_budget_ms / 1000

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self._path.partition(tp)

    @property
    def changes(self) -> DelayedOperationPurgatory[TopicPartition]:
        """Where a change of a partition is told (`session_reads`' change feed)."""
        return self._path.fetch_purgatory

    def on_slow_dir(self, p: Partition) -> bool:
        """Whether ``p``'s log dir is slow: a follower's session reads its partitions there on
        every Fetch (each read tells the slow-leader rule about the disk, and all of a dir's
        partitions show it together), not only those that changed."""
        plog = p.log
        return plog is not None and self.dir_reads.slow(plog.log_dir)

    async def fetch(
        self,
        requests: Sequence[FetchPartitionRequest],
        *,
        replica_id: int = CONSUMER_REPLICA_ID,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = _INT32_MAX,
        isolation_level: int = READ_UNCOMMITTED,
        unread: Sequence[Unread] = (),
        stamps: dict[int, Stamp | None] | None = None,
        session: SessionWatch | None = None,
    ) -> list[FetchPartitionResult]:
        """Reads every partition in order, long-polling up to ``max_wait_ms`` for
        ``min_bytes``. The first partition with data may exceed ``max_bytes`` by one batch
        (Kafka's rule, so a consumer never gets stuck behind a large batch).

        ``unread``: partitions of the fetch's session answered without a read
        (`session_reads`); the long poll watches them too, and those that changed when it
        ends are read, their results after the others'. ``session``: instead of ``unread``,
        the session that knows which of its unread partitions changed (a follower's: its
        long poll is woken by them without watching each). ``stamps``: filled with each
        partition's stamp just before the read whose result is returned (by request id)."""
        received = time.monotonic()
        self._stamp(requests, replica_id, isolation_level, stamps)
        results = await self._read(requests, replica_id, max_bytes, isolation_level)
        total = sum(r.size for r in results)
        if total < min_bytes and max_wait_ms > 0 and any(r.throttled for r in results):
            # Data held back by the leader's replication throttle does not end a long poll
            # early (Kafka does not count it either): the follower is answered once the rate
            # allows or the wait is over, never in a loop of empty answers.
            wait_ms = min(max_wait_ms, self._leader_quota.throttle_ms(time.monotonic()))
            await asyncio.sleep(wait_ms / 1000)
            close_records(results)
            again = [*requests, *self._changed(unread, replica_id, isolation_level, session)]
            self._stamp(again, replica_id, isolation_level, stamps)
            return await self._read_again(again, replica_id, max_bytes, isolation_level, received)
        # Unread partitions that changed since the session checked them (during the read):
        # read now rather than parked on.
        early = self._changed((), replica_id, isolation_level, session)
        if early:
            close_records(results)
            again = [*requests, *early]
            self._stamp(again, replica_id, isolation_level, stamps)
            return await self._read_again(again, replica_id, max_bytes, isolation_level, received)
        if (
            max_wait_ms <= 0
            or not (requests or unread or (session is not None and len(session)))
            or total >= min_bytes
            or any(
                r.error != ErrorCode.none or r.diverging_epoch or r.preferred_read_replica >= 0
                for r in results
            )
            or self._path.stopped
        ):
            return results
        answered = {r.tp: (r.high_watermark, r.log_start_offset) for r in results}
        for u in unread:
            answered[u.request.tp] = (u.stamp.high_watermark, u.stamp.log_start_offset)
        watched = [*requests, *(u.request for u in unread)]
        op = DelayedFetch(
            self._path,
            max_wait_ms,
            watched,
            replica_id=replica_id,
            min_bytes=min_bytes,
            isolation_level=isolation_level,
            bytes_already=total,
            answered_high_watermarks={tp: hw for tp, (hw, _) in answered.items()},
        )
        if session is not None:
            session.park(op.force_complete)
        try:
            await self._path.fetch_purgatory.wait(op, [r.tp for r in watched])
        finally:
            if session is not None:
                session.park(None)
        changed = self._changed(unread, replica_id, isolation_level, session)
        if (
            op.expired
            and total == 0
            and not self._path.stopped
            and not changed
            and op.unchanged({tp: start for tp, (_, start) in answered.items()})
            and not self._stale(requests, replica_id, received)
        ):
            # Nothing moved while it waited (an idle follower's or tail consumer's long poll):
            # the first read is the answer. Reading every partition of a follower's session
            # again was half of an idle broker's CPU at 2,000 partitions. The follower's
            # caught-up time stays that of the first read, at most max_wait_ms older, so ISR
            # expiry can only come that much sooner, never later. (The unread partitions too:
            # no byte appended, same high watermark, log start and leader epoch; a change of
            # anything else in their stamps answers nothing new, and the next Fetch reads it.)
            return results
        # Read again: offsets (high watermark, log start) may have moved.
        close_records(results)
        again = [*requests, *changed]
        self._stamp(again, replica_id, isolation_level, stamps)
        if self._path.stopped:
            return await asyncio.to_thread(
                self._read_all, again, replica_id, max_bytes, isolation_level
            )
        return await self._read_again(again, replica_id, max_bytes, isolation_level, received)

    def _stamp(
        self,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        isolation_level: int,
        stamps: dict[int, Stamp | None] | None,
    ) -> None:
        """Each partition's stamp before its read (`session_reads`): taken before, so that
        whatever changes during the read makes it differ later."""
        if stamps is None:
            return
        stamps.clear()
        for r in requests:
            p = self._path.partition(r.tp)
            slow = replica_id >= 0 and p is not None and self.on_slow_dir(p)
            stamps[id(r)] = None if slow else session_reads.stamp(p, r, replica_id, isolation_level)

    def _changed(
        self,
        unread: Sequence[Unread],
        replica_id: int,
        isolation_level: int,
        session: SessionWatch | None = None,
    ) -> list[FetchPartitionRequest]:
        """The requests of the ``unread`` partitions (and of the ``session``'s) that changed
        since their last read."""
        changed = [
            u.request
            for u in unread
            if session_reads.stamp(self._path.partition(u.request.tp), u.request, replica_id,
                                   isolation_level) != u.stamp
        ]  # fmt: skip
        if session is not None:
            changed += session.changed()
        return changed

    async def _read_again(
        self,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
        received: float,
    ) -> list[FetchPartitionResult]:
        """A fetch read again after waiting. A follower that stopped being a replica and was
        added again meanwhile (a reassignment undone and redone) sent this fetch from its
        earlier incarnation: its offset says nothing of the new, empty log, and counting it
        would put that log in the ISR. Those partitions answer NOT_LEADER_OR_FOLLOWER."""
        stale = self._stale(requests, replica_id, received)
        if not stale:
            return await self._read(requests, replica_id, max_bytes, isolation_level)
        fresh = [r for r in requests if r.tp not in stale]
        read = iter(await self._read(fresh, replica_id, max_bytes, isolation_level))
        return [
            FetchPartitionResult(r.tp, ErrorCode.not_leader_or_follower)
            if r.tp in stale
            else next(read)
            for r in requests
        ]

    def _stale(
        self, requests: Sequence[FetchPartitionRequest], replica_id: int, received: float
    ) -> set[TopicPartition]:
        """The partitions that made ``replica_id`` a replica again after ``received``."""
        if replica_id < 0:
            return set()
        stale = set()
        for r in requests:
            p = self._path.partition(r.tp)
            if p is not None and p.replica_since.get(replica_id, 0.0) > received:
                stale.add(r.tp)
        return stale

    async def _read(
        self,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
    ) -> list[FetchPartitionResult]:
        """Every partition read: on the loop when there is nothing to read (`_read_in_place`),
        else on the IO threads in one trip, or, for a follower whose fetch spans log dirs or
        touches a slow one, dir by dir (`dir_reads`)."""
        if not self._path.stopped:
            in_place = self._read_in_place(requests, replica_id, max_bytes, isolation_level)
            if in_place is not None:
                return in_place
        groups: dict[Path | None, list[int]] = {}
        for i, r in enumerate(requests):
            p = self._path.partition(r.tp)
            plog = p.log if p is not None else None
            groups.setdefault(plog.log_dir if plog is not None else None, []).append(i)
        if replica_id < 0 or self._path.stopped or not self.dir_reads.splits(groups, replica_id):
            return await self._path.run_in_io(
                self._read_all, requests, replica_id, max_bytes, isolation_level
            )
        return await self.dir_reads.read(groups, requests, replica_id, max_bytes, isolation_level)

    def _read_in_place(
        self,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
    ) -> list[FetchPartitionResult] | None:
        """A fetch with nothing to read -- every partition asked at its log end: a caught-up
        follower, a consumer at the tail -- touches no file, only offsets in memory, so it is
        answered on the loop. That saves a follower's round trip two thread switches, and the
        high watermark its fetch moves completes the acks=all produces waiting on it at once.
        Only when every log's lock is free: an append or a flush holding one may be waiting on
        the disk, which the loop must never do. None: read on the IO threads."""
        held = []
        try:
            for r in requests:
                p = self._path.partition(r.tp)
                plog = p.log if p is not None else None
                if plog is None or not plog.lock.acquire(blocking=False):
                    return None
                held.append(plog.lock)
                if r.fetch_offset != plog.log_end_offset:
                    return None
            return self._read_all(requests, replica_id, max_bytes, isolation_level)
        finally:
            for lock in held:
                lock.release()

    def _read_all(
        self,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
        into_memory: bool = False,
        disk: ReadTime | None = None,
    ) -> list[FetchPartitionResult]:
        """Reads in order; ``into_memory``: records are read into memory (a slow dir) rather
        than left in the file for sendfile; ``disk``: each partition's read timed into it (a
        dir's read for a follower, `dir_reads`)."""
        results = []
        remaining = max(0, max_bytes)
        min_one_message = True
        racks = None
        if self._racks is not None and any(r.client_rack for r in requests):
            racks = self._racks()
        try:
            for r in requests:
                limit = max(0, min(r.max_bytes, remaining))
                with disk.partition() if disk is not None else nullcontext():
                    result = self._read_one(
                        r, replica_id, limit, isolation_level, min_one_message, racks
                    )
                    if into_memory:
                        read_into_memory(result)
                if disk is not None and into_memory and result.records is not None:
                    # Records read from the disk (a file region is only located: its bytes
                    # are read by the send, timed as such).
                    disk.read_records = True
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
        racks: Mapping[int, str | None] | None = None,
    ) -> FetchPartitionResult:
        tp = r.tp
        p = self._path.partition(tp)
        if p is None:
            return FetchPartitionResult(tp, ErrorCode.unknown_topic_or_partition)
        quota = self._leader_quota
        throttled = (
            replica_id >= 0
            and quota.bound is not None
            and p.settings.leader_throttled.covers(tp.partition, p.node_id)
            and replica_id not in p.isr
        )
        held_back = throttled and quota.throttle_ms(time.monotonic()) > 0
        if held_back:
            limit, min_one_message = 0, False
        try:
            result, hw_moved = partition_reads.read(
                p, r, replica_id, limit, isolation_level, min_one_message, racks
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
        if held_back:
            return replace(result, throttled=True)
        if throttled:
            quota.record(result.size, time.monotonic())
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
        self,
        tps: Iterable[TopicPartition],
        replica_id: int,
        token: int,
        sent: bool,
        file_read_ms: int = 0,
    ) -> None:
        """A response carrying these partitions' records to a follower starts being sent, or
        is sent (beyond KIP-501: how long a leader takes to serve its followers);
        ``file_read_ms``: how long its regions took to read from their files while sending
        (``sendfile``), the only part of the send that waits on the disk. A send late for
        the disk -- those reads longer than the budget -- marks its partitions' dirs slow: their
        records are read into memory on the dir's threads from then on, so sending cannot wait
        on the disk, and those reads tell whether the disk is slow. A send late for anything
        else (the CPU, the event loop, a follower slow to read its socket) marks nothing: a
        slow dir has every Fetch read all its partitions, which at 10,000 partitions RF 3 kept
        the loop so busy that sends stayed late and the dir was marked slow again and again,
        acks=all round trips taking seconds. A late send is not itself counted against the
        leader either: a big response on a busy machine is slow to send with every disk
        healthy (at 2,000 partitions leaders stepped down for it one by one)."""
        now = int(time.time() * 1000)
        tps = list(tps)
        budget_ms = self._budget_s * 1000
        if sent:
            started = self._sending.pop(token, None)
            late = started is not None and now - started > budget_ms
        else:
            self._sending[token] = now
            late = False
        on_disk = sent and file_read_ms > budget_ms
        for tp in tps:
            p = self._path.partition(tp)
            if p is None:
                continue
            if on_disk and p.log is not None:
                self.dir_reads.mark_slow(p.log.log_dir)
            if sent:
                p.followers.response_sent(token, now, leader=p.is_leader and not late)
            else:
                p.followers.response_started(replica_id, token, now, sending=True)
