"""Partition state and the data path: appends, reads, the high watermark, delayed operations.

The replica manager owns one ``Partition`` per partition this broker holds a replica of,
built from the cluster metadata (it listens for changes) over the log manager's logs. API
handlers (Produce, Fetch, ListOffsets, ...) and the group coordinator go through it, never to
the logs directly, so that leadership, offline log dirs and the high watermark are respected
everywhere.

Public API (all ``async`` methods run on the event loop; disk work goes to the IO threads):

- ``partition(tp) -> Partition | None``
- ``async append_records(tp, records, acks=-1, timeout_ms=30000, origin_is_client=True)
  -> PartitionAppendResult`` (one partition; ``append_to_partitions`` for several at once)
- ``async append_to_partitions({tp: records}, acks, timeout_ms, origin_is_client=True)
  -> dict[tp, PartitionAppendResult]``
- ``async fetch([FetchPartitionRequest], replica_id=-1, max_wait_ms=0, min_bytes=1,
  max_bytes=..., isolation_level=0) -> list[FetchPartitionResult]``; the records of a result
  are a ``RegionRecords`` (a file region for sendfile; ``read_bytes()`` gives the bytes) or
  None. Call ``close_records(results)`` if the results are not sent.
- ``async read_records(tp, offset, max_bytes, read_committed=False)
  -> (error, bytes, high_watermark)`` (a convenience for internal readers such as the group
  coordinator: leader-only, whole batches up to the high watermark)
- ``async offset_for_timestamp(tp, timestamp, ...) -> ListOffsetResult``
- ``async delete_records(tp, offset, timeout_ms) -> (error, low_watermark)``
- ``end_offset_for_epoch(tp, current_leader_epoch, leader_epoch, replica_id)
  -> (error, epoch, end_offset)``
- ``async run_in_io(fn, *args)``: runs blocking storage work on the IO threads
  (``num.io.threads``).
- ``on_log_dir_failure(log_dir, reason)`` (the broker calls it on the event loop when the log
  manager takes a dir offline), ``start()``, ``prepare_shutdown()`` (answer every parked
  request now; call before stopping the listener), ``stop()``.

Offline partitions answer KAFKA_STORAGE_ERROR: those the log manager could not load, those
of a dir that failed (at start-up or later), and, at start-up, a partition whose log is
missing while some log dir is offline (its log may be there; it is never replaced by an
empty one, as Kafka refuses to as well).

High watermark: ``Partition.maybe_increment_high_watermark`` sets it to the smallest log end
offset over the ISR (the leader's own, and what followers reported in their fetches). With a
single replica that is the leader's log end, right after each append; acks=all still goes
through the produce purgatory, so replication plugs in without changing the Produce path.

Ordering: the network layer serves one request per connection at a time, so the produce
requests of one connection reach ``append_to_partitions`` in order and each append finishes
before the next request starts; appends from different connections are ordered by the log's
lock.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import PartitionState, TopicState
from logkeel.records.batch import NO_TIMESTAMP, InvalidBatchError, iter_headers
from logkeel.server.errors import error_code_for
from logkeel.server.replica.purgatory import DelayedOperation, DelayedOperationPurgatory
from logkeel.storage import errors as storage_errors
from logkeel.storage.engine.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    PartitionLog,
)
from logkeel.storage.engine.producer_state import (
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from logkeel.storage.engine.txn_index import AbortedTxn
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_PENDING_UPLOAD_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "FetchPartitionRequest",
    "FetchPartitionResult",
    "ListOffsetResult",
    "Partition",
    "PartitionAppendResult",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "RegionRecords",
    "ReplicaManager",
    "TopicSettings",
    "close_records",
    "topic_id_text",
    "topic_uuid",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
# ListOffsets special timestamps beyond storage's -1/-2/-3 (KIP-405, KIP-1005, KIP-1023).
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
# Replica ids of fetchers that are not followers (Kafka's FetchRequest constants).
CONSUMER_REPLICA_ID = -1
DEBUGGING_CONSUMER_ID = -2

_INT32_MAX = (1 << 31) - 1

# Storage exceptions that are not in logkeel.server.errors' table (transactions).
_EXTRA_ERROR_CODES: dict[type[BaseException], ErrorCode] = {
    InvalidTxnStateError: ErrorCode.invalid_txn_state,
    TransactionCoordinatorFencedError: ErrorCode.transaction_coordinator_fenced,
}


def topic_uuid(topic_id: str) -> uuid.UUID:
    """The metadata's base64 (URL-safe, unpadded) Kafka Uuid as a ``uuid.UUID`` for kio."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))


def topic_id_text(value: uuid.UUID) -> str:
    """The inverse of ``topic_uuid``: Kafka's text form of a topic id."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def storage_error_code(exc: BaseException) -> ErrorCode:
    """Kafka's error code for an exception raised by a log operation."""
    for cls in type(exc).__mro__:
        code = _EXTRA_ERROR_CODES.get(cls)
        if code is not None:
            return code
    return error_code_for(exc)


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(slots=True)
class PartitionAppendResult:
    """What Produce reports for one partition (Kafka's PartitionResponse)."""

    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    duplicate: bool = False
    # For NOT_LEADER_OR_FOLLOWER: who leads now, if known (Produce v10+ current_leader).
    leader_id: int = -1
    leader_epoch: int = -1


class RegionRecords:
    """Records to send straight from a segment file: ``size`` bytes at ``position`` of ``fd``.

    ``fd`` is a duplicate of the segment's descriptor, taken under the log's lock, so the region
    stays readable (and never names another file) even if the segment is closed, deleted or its
    dir fails before the bytes are sent. It is closed by ``close()`` or, as a safety net, when
    the object is collected.
    """

    __slots__ = ("fd", "position", "size", "_finalizer", "__weakref__")

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd = fd
        self.position = position
        self.size = size
        self._finalizer = weakref.finalize(self, _close_fd, fd)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"RegionRecords(fd={self.fd}, position={self.position}, size={self.size})"

    def read_bytes(self) -> bytes:
        """The region's bytes (one copy, through ``os.pread``)."""
        chunks = []
        pos, remaining = self.position, self.size
        while remaining > 0:
            chunk = os.pread(self.fd, remaining, pos)
            if not chunk:
                raise EOFError(f"file region ended {remaining} bytes early (truncated segment)")
            chunks.append(chunk)
            pos += len(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


def _close_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


@dataclass(frozen=True, slots=True)
class FetchPartitionRequest:
    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's own log start offset


@dataclass(slots=True)
class FetchPartitionResult:
    tp: TopicPartition
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: RegionRecords | None = None
    aborted_transactions: tuple[AbortedTxn, ...] | None = None
    # (epoch, end offset) when the fetcher's last fetched epoch diverges from this log.
    diverging_epoch: tuple[int, int] | None = None
    preferred_read_replica: int = -1
    leader_id: int = -1
    leader_epoch: int = -1

    @property
    def size(self) -> int:
        return self.records.size if self.records is not None else 0


@dataclass(frozen=True, slots=True)
class ListOffsetResult:
    error: ErrorCode = ErrorCode.none
    timestamp: int = NO_TIMESTAMP
    offset: int = -1
    leader_epoch: int = -1


def close_records(results: Iterable[FetchPartitionResult]) -> None:
    """Releases the file descriptors held by fetch results that will not be sent."""
    for r in results:
        if r.records is not None:
            r.records.close()


# ---------------------------------------------------------------------------------------------
# Partition


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """Topic configs read on every append (Kafka's names in the comments)."""

    min_insync_replicas: int = 1  # min.insync.replicas
    timestamp_before_max_ms: int | None = None  # message.timestamp.before.max.ms
    timestamp_after_max_ms: int | None = None  # message.timestamp.after.max.ms
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime

    @classmethod
    def from_topic_config(cls, config: Any) -> TopicSettings:
        return cls(
            min_insync_replicas=_int_config(config, "min.insync.replicas") or 1,
            timestamp_before_max_ms=_int_config(config, "message.timestamp.before.max.ms"),
            timestamp_after_max_ms=_int_config(config, "message.timestamp.after.max.ms"),
            log_append_time=_str_config(config, "message.timestamp.type") == "LogAppendTime",
        )


class Partition:
    """One partition replica on this broker: leadership, ISR, high watermark, and its log.

    Attributes are read on the event loop and written under ``log.lock`` (appends, high
    watermark) or by metadata changes; each write is a single attribute store.
    """

    def __init__(self, tp: TopicPartition, topic_id: str, node_id: int) -> None:
        self.tp = tp
        self.topic_id = topic_id
        self.node_id = node_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = 0
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.log: PartitionLog | None = None
        self.offline_reason: str | None = None
        # Log end offsets followers reported in their fetches (replica id -> offset).
        self.follower_end_offsets: dict[int, int] = {}
        # Bytes appended since start: delayed fetches compare it to decide they have enough.
        self.appended_bytes = 0
        # Cached under the log's lock after every change, for cheap reads on the event loop.
        self.last_stable_offset = 0
        # The topic's settings the data path checks on every append, refreshed on each
        # metadata change of the topic (configs only change through metadata).
        self.settings = TopicSettings()

    def __repr__(self) -> str:
        return (
            f"Partition({self.tp}, leader={self.leader_id}, epoch={self.leader_epoch}, "
            f"isr={self.isr}, offline={self.offline_reason is not None})"
        )

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark if self.log is not None else -1

    @property
    def online(self) -> bool:
        return self.offline_reason is None and self.log is not None

    def apply_state(self, state: PartitionState) -> bool:
        """Takes leader, epoch, replicas and ISR from metadata; True if the epoch moved."""
        moved = state.leader_epoch != self.leader_epoch or state.leader != self.leader_id
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        for replica in list(self.follower_end_offsets):
            if replica not in self.replicas:
                del self.follower_end_offsets[replica]
        return moved

    def state_error(self, *, leader_only: bool = True) -> ErrorCode | None:
        """Why this replica cannot serve a request now, or None."""
        if self.offline_reason is not None:
            return ErrorCode.kafka_storage_error
        if self.log is None or self.node_id not in self.replicas:
            return ErrorCode.not_leader_or_follower
        if leader_only and not self.is_leader:
            return ErrorCode.not_leader_or_follower
        return None

    def epoch_error(self, current_leader_epoch: int) -> ErrorCode | None:
        """Kafka's check of a request's ``current_leader_epoch`` (-1: not checked)."""
        if current_leader_epoch < 0:
            return None
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.unknown_leader_epoch
        return None

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset over the ISR; only ever moves forward.

        Call with ``log.lock`` held (producer state learns the new HW too).
        """
        plog = self.log
        if plog is None or not self.is_leader:
            return False
        new_hw = plog.log_end_offset
        for replica in self.isr:
            if replica != self.node_id:
                new_hw = min(new_hw, self.follower_end_offsets.get(replica, plog.high_watermark))
        changed = new_hw > plog.high_watermark
        if changed:
            plog.high_watermark = new_hw
            plog.producer_state.on_high_watermark_updated(new_hw)
        self.last_stable_offset = plog.last_stable_offset()
        return changed


# ---------------------------------------------------------------------------------------------
# Delayed operations


class DelayedProduce(DelayedOperation):
    """acks=all: done when the high watermark has passed every partition's last offset."""

    def __init__(
        self,
        manager: ReplicaManager,
        delay_ms: int,
        results: dict[TopicPartition, PartitionAppendResult],
    ) -> None:
        super().__init__(delay_ms)
        self._manager = manager
        self.results = results
        self.waiting = {
            tp: r.last_offset + 1
            for tp, r in results.items()
            if r.error == ErrorCode.none and not r.duplicate
        }

    def try_complete(self) -> bool:
        for tp, required in list(self.waiting.items()):
            partition = self._manager.partition(tp)
            result = self.results[tp]
            error = (
                ErrorCode.not_leader_or_follower if partition is None else partition.state_error()
            )
            if error is None and partition is not None and partition.high_watermark >= required:
                if len(partition.isr) < partition.settings.min_insync_replicas:
                    error = ErrorCode.not_enough_replicas_after_append
                else:
                    del self.waiting[tp]
                    continue
            if error is not None:
                result.error = error
                del self.waiting[tp]
        if not self.waiting:
            return self.force_complete()
        return False

    def on_expired(self) -> None:
        for tp in self.waiting:
            self.results[tp].error = ErrorCode.request_timed_out


class DelayedFetch(DelayedOperation):
    """A long poll: done when enough new bytes are readable, a partition changed state so the
    fetcher must hear about it, or the deadline passed.

    The byte count is an estimate (Kafka's is too): bytes appended to a partition since the
    first read, counted once the partition has readable data past the fetch offset.
    """

    def __init__(
        self,
        manager: ReplicaManager,
        delay_ms: int,
        requests: Sequence[FetchPartitionRequest],
        *,
        replica_id: int,
        min_bytes: int,
        isolation_level: int,
        bytes_already: int,
    ) -> None:
        super().__init__(delay_ms)
        self._manager = manager
        self._requests = requests
        self._replica_id = replica_id
        self._min_bytes = min_bytes
        self._isolation_level = isolation_level
        self._bytes_already = bytes_already
        self._start: dict[TopicPartition, tuple[Partition | None, int]] = {}
        for r in requests:
            p = manager.partition(r.tp)
            self._start[r.tp] = (p, p.appended_bytes if p is not None else 0)

    def try_complete(self) -> bool:
        accumulated = self._bytes_already
        follower = self._replica_id >= 0
        for r in self._requests:
            first, start_bytes = self._start[r.tp]
            p = self._manager.partition(r.tp)
            if p is None or p is not first or p.state_error(leader_only=not follower) is not None:
                return self.force_complete()
            if p.epoch_error(r.current_leader_epoch) is not None:
                return self.force_complete()
            plog = p.log
            assert plog is not None
            if r.fetch_offset > plog.log_end_offset or r.fetch_offset < plog.log_start_offset:
                return self.force_complete()  # truncated or deleted: the fetcher must know
            if follower:
                end = plog.log_end_offset
            elif self._isolation_level == READ_COMMITTED:
                end = p.last_stable_offset
            else:
                end = plog.high_watermark
            if end > r.fetch_offset:
                accumulated += max(1, min(p.appended_bytes - start_bytes, r.max_bytes))
        if accumulated >= self._min_bytes:
            return self.force_complete()
        return False


# ---------------------------------------------------------------------------------------------
# The replica manager


class ReplicaManager:
    def __init__(self, broker: Any) -> None:
        self._broker = broker
        self.node_id: int = broker.node_id
        self._partitions: dict[TopicPartition, Partition] = {}
        self._lock = threading.RLock()  # the partition map; never held across IO
        # Serialises applying metadata changes (which create and delete logs).
        self._metadata_lock = threading.RLock()
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("produce")
        )
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory(
            "fetch"
        )
        threads = _config(broker, "num.io.threads", 8)
        self._executor = ThreadPoolExecutor(max(1, threads), thread_name_prefix="logkeel-io")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Builds the partitions from metadata over the loaded logs; listens for changes."""
        self._loop = asyncio.get_running_loop()
        self._broker.metadata.add_listener(self._on_metadata_change)
        await self.run_in_io(self._sync_all)
        self._started = True
        with self._lock:
            partitions = list(self._partitions.values())
        offline = [p for p in partitions if p.offline_reason is not None]
        log.info(
            "replica manager started: %d partition(s), %d led here, %d offline",
            len(partitions),
            sum(1 for p in partitions if p.is_leader),
            len(offline),
        )
        for p in offline:
            log.warning("partition %s is offline: %s", p.tp, p.offline_reason)

    def prepare_shutdown(self) -> None:
        """Answers every waiting produce and long-poll fetch now, and parks no new ones: call
        it before stopping the network server, so in-flight requests finish at once instead
        of at their deadlines."""
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()

    async def stop(self) -> None:
        """Answers every waiting produce and fetch now, then stops the IO threads."""
        if self._stopped:
            return
        self._stopped = True
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        # Let the woken requests take their turn on the loop before the threads go.
        await asyncio.sleep(0)
        await asyncio.to_thread(self._executor.shutdown, True)

    async def run_in_io(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs blocking storage work ``fn(*args)`` on the IO threads (``num.io.threads``)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    # -- partitions and metadata ----------------------------------------------------------------

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self._partitions.get(tp)

    def partitions(self) -> list[Partition]:
        with self._lock:
            return list(self._partitions.values())

    def _topic_settings(self, topic: str) -> TopicSettings:
        try:
            return TopicSettings.from_topic_config(self._broker.topic_config(topic))
        except Exception:  # noqa: BLE001 - a config problem must not stop the partition
            log.exception("reading the configs of topic %s failed; using defaults", topic)
            return TopicSettings()

    def _sync_all(self) -> None:
        for name, state in self._broker.metadata.topics().items():
            self._apply_topic(name, state)
        lm = self._broker.log_manager
        known = set(self._partitions)
        strays = [tp for tp in list(lm.logs) if tp not in known]
        for tp in strays:
            # Kept, not deleted: without a controller history we cannot tell a deleted topic
            # from metadata that was lost.
            log.warning("log %s has no topic in the metadata; it is not served", tp)

    def _on_metadata_change(self, name: str, state: TopicState | None) -> None:
        """Metadata listener; runs in the thread that changed the metadata."""
        if not self._started and self._loop is None:
            return
        try:
            changed = self._apply_topic(name, state)
        except Exception:
            log.exception("applying the metadata change of topic %s failed", name)
            return
        self._wake(changed)

    def _apply_topic(self, name: str, state: TopicState | None) -> list[TopicPartition]:
        """Brings this topic's partitions in line with ``state`` (None: deleted)."""
        with self._metadata_lock:
            return self._apply_topic_locked(name, state)

    def _apply_topic_locked(self, name: str, state: TopicState | None) -> list[TopicPartition]:
        lm = self._broker.log_manager
        changed: list[TopicPartition] = []
        with self._lock:
            existing = [tp for tp in self._partitions if tp.topic == name]
            if state is None:
                for tp in existing:
                    self._partitions.pop(tp, None)
                    changed.append(tp)
            else:
                for tp in existing:
                    if tp.partition not in state.partitions:
                        self._partitions.pop(tp, None)
                        changed.append(tp)
        if state is None:
            for tp in changed:
                try:
                    lm.delete_log(tp)
                except KafkaStorageError as exc:
                    lm.handle_dir_failure(exc)
                except Exception:
                    log.exception("deleting the log of %s failed", tp)
            if changed:
                log.info("topic %s deleted: removed %d partition log(s)", name, len(changed))
            return changed

        config = None
        settings = self._topic_settings(name)
        for pstate in state.partitions.values():
            tp = pstate.tp
            with self._lock:
                p = self._partitions.get(tp)
                # New: created while we run. A partition known at start-up whose log is
                # missing may have it in a dir that is offline: never replace it with an
                # empty log then (Kafka refuses to as well).
                is_new = self._started and p is None
                if p is None or p.topic_id != state.topic_id:
                    p = Partition(tp, state.topic_id, self.node_id)
                    self._partitions[tp] = p
            moved = p.apply_state(pstate)
            p.settings = settings
            if self.node_id not in pstate.replicas:
                changed.append(tp)
                continue
            if p.log is None and p.offline_reason is None:
                reason = lm.offline_partitions.get(tp)
                offline_dirs = [str(d.path) for d in lm.dirs if not d.online]
                if reason is not None:
                    p.offline_reason = reason
                elif not is_new and lm.get_log(tp) is None and offline_dirs:
                    p.offline_reason = (
                        f"no log found, and log dir(s) {', '.join(offline_dirs)} are offline"
                    )
                else:
                    if config is None:
                        config = self._broker.log_config(name)
                    try:
                        p.log = lm.get_or_create_log(tp, config)
                    except KafkaStorageError as exc:
                        p.offline_reason = str(exc)
                        if exc.log_dir:
                            lm.handle_dir_failure(exc)
                        changed.append(tp)
                        continue
            if p.log is not None and (moved or p.log.high_watermark < p.log.log_end_offset):
                self._become_leader_or_follower(p)
            changed.append(tp)
        # Config changes: every log of the topic takes the new settings.
        try:
            lm.update_config(name, config or self._broker.log_config(name))
        except Exception:
            log.exception("applying the configs of topic %s failed", name)
        return changed

    def _become_leader_or_follower(self, p: Partition) -> None:
        plog = p.log
        assert plog is not None
        with plog.lock:
            if p.is_leader:
                latest = plog.leader_epochs.latest_epoch
                if p.leader_epoch >= 0 and (latest is None or latest < p.leader_epoch):
                    plog.leader_epochs.assign(p.leader_epoch, plog.log_end_offset)
                p.maybe_increment_high_watermark()
            else:
                p.last_stable_offset = plog.last_stable_offset()

    def on_log_dir_failure(self, log_dir: str, reason: str) -> None:
        """A log dir went offline (the broker calls this on the event loop): its partitions
        answer KAFKA_STORAGE_ERROR from now on, and requests waiting on them are answered."""
        lm = self._broker.log_manager
        failed: list[TopicPartition] = []
        with self._lock:
            for p in self._partitions.values():
                if p.offline_reason is not None:
                    continue
                in_dir = p.log is not None and str(p.log.log_dir) == log_dir
                if in_dir or p.tp in lm.offline_partitions:
                    p.offline_reason = f"log dir {log_dir} is offline: {reason}"
                    p.log = None
                    failed.append(p.tp)
        if failed:
            log.error(
                "%d partition(s) in %s are offline and answer KAFKA_STORAGE_ERROR: %s",
                len(failed),
                log_dir,
                ", ".join(str(tp) for tp in failed[:20]) + (" ..." if len(failed) > 20 else ""),
            )
        self._wake(failed)

    def _wake(self, tps: Iterable[TopicPartition]) -> None:
        """Re-checks the delayed operations of ``tps`` on the event loop, from any thread."""
        tps = list(tps)
        if not tps or self._loop is None or self._loop.is_closed():
            return

        def wake() -> None:
            for tp in tps:
                self.produce_purgatory.check_and_complete(tp)
                self.fetch_purgatory.check_and_complete(tp)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            wake()
        else:
            self._loop.call_soon_threadsafe(wake)

    def _storage_failure(self, p: Partition, exc: KafkaStorageError) -> None:
        """An IO error in ``p``'s log: the dir goes offline (the log manager tells us back)."""
        p.offline_reason = str(exc)
        p.log = None
        try:
            self._broker.log_manager.handle_dir_failure(exc)
        except Exception:
            log.exception("handling the failure of log dir %s failed", exc.log_dir)

    # -- appends --------------------------------------------------------------------------------

    async def append_records(
        self,
        tp: TopicPartition,
        records: bytes | bytearray | memoryview,
        acks: int = -1,
        timeout_ms: int = 30_000,
        origin_is_client: bool = True,
    ) -> PartitionAppendResult:
        """Appends ``records`` (one or more v2 batches) to ``tp`` as its leader."""
        results = await self.append_to_partitions({tp: records}, acks, timeout_ms, origin_is_client)
        return results[tp]

    async def append_to_partitions(
        self,
        entries: Mapping[TopicPartition, bytes | bytearray | memoryview],
        acks: int,
        timeout_ms: int,
        origin_is_client: bool = True,
    ) -> dict[TopicPartition, PartitionAppendResult]:
        """Appends to several partitions in one trip to the IO threads; with ``acks=-1`` waits
        (up to ``timeout_ms``) until the high watermark covers every appended partition."""
        results: dict[TopicPartition, PartitionAppendResult] = {}
        todo: list[tuple[Partition, bytes | bytearray | memoryview]] = []
        for tp, records in entries.items():
            p = self.partition(tp)
            refused = self._refuse_append(tp, p, acks)
            if refused is not None:
                results[tp] = refused
            else:
                todo.append((p, records))
        if todo:
            # One handoff per request, not per partition: the thread switch costs more than
            # a page-cache append, and appends to distinct partitions do not contend.
            try:
                outcomes = await self.run_in_io(self._append_all, todo, origin_is_client)
            except RuntimeError:
                if not self._stopped:
                    raise
                # The IO threads are gone: shutting down. Clients retry elsewhere.
                outcomes = [_AppendRejected(ErrorCode.not_leader_or_follower, "shutting down")] * len(todo)
            for (p, _), outcome in zip(todo, outcomes, strict=True):
                results[p.tp] = self._append_result(p, outcome)
        results = {tp: results[tp] for tp in entries}
        if acks == -1 and any(r.error == ErrorCode.none for r in results.values()):
            op = DelayedProduce(self, timeout_ms, results)
            await self.produce_purgatory.wait(op, op.waiting)
            if op.expired:
                op.on_expired()
        return results

    def _refuse_append(
        self, tp: TopicPartition, p: Partition | None, acks: int
    ) -> PartitionAppendResult | None:
        """The answer for a partition that cannot take an append now, or None."""
        if p is None:
            return PartitionAppendResult(ErrorCode.unknown_topic_or_partition)
        error = p.state_error()
        if error is not None:
            return PartitionAppendResult(error, leader_id=p.leader_id, leader_epoch=p.leader_epoch)
        if acks == -1 and len(p.isr) < p.settings.min_insync_replicas:
            return PartitionAppendResult(
                ErrorCode.not_enough_replicas,
                error_message=f"the ISR of {tp} has {len(p.isr)} replica(s), fewer than "
                "min.insync.replicas",
            )
        return None

    def _append_all(
        self,
        todo: list[tuple[Partition, bytes | bytearray | memoryview]],
        origin_is_client: bool,
    ) -> list[AppendInfo | BaseException]:
        """IO thread: appends each partition's records; an exception is that partition's result."""
        outcomes: list[AppendInfo | BaseException] = []
        for p, records in todo:
            try:
                outcomes.append(self._append_blocking(p, records, origin_is_client))
            except Exception as exc:  # noqa: BLE001 - mapped per partition by _append_result
                outcomes.append(exc)
        return outcomes

    def _append_result(self, p: Partition, outcome: AppendInfo | BaseException) -> PartitionAppendResult:
        tp = p.tp
        if isinstance(outcome, KafkaStorageError):
            log.error("append to %s failed: %s", tp, outcome)
            self._storage_failure(p, outcome)
            self._wake([tp])
            return PartitionAppendResult(ErrorCode.kafka_storage_error, error_message=str(outcome))
        if isinstance(outcome, _AppendRejected):
            return PartitionAppendResult(outcome.code, error_message=str(outcome))
        if isinstance(outcome, storage_errors.StorageError | InvalidBatchError):
            code = storage_error_code(outcome)
            if code == ErrorCode.unknown_server_error and isinstance(outcome, InvalidBatchError):
                code = ErrorCode.corrupt_message
            log.info("append to %s rejected with %s: %s", tp, code.name.upper(), outcome)
            return PartitionAppendResult(code, error_message=str(outcome))
        if isinstance(outcome, BaseException):
            log.error("append to %s failed", tp, exc_info=outcome)
            return PartitionAppendResult(ErrorCode.unknown_server_error, error_message=str(outcome))
        info = outcome
        if not info.duplicate:
            p.appended_bytes += info.valid_bytes
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
        return PartitionAppendResult(
            ErrorCode.none,
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_append_time=info.log_append_time,
            log_start_offset=info.log_start_offset,
            duplicate=info.duplicate,
        )

    def _append_blocking(
        self, p: Partition, records: bytes | bytearray | memoryview, origin_is_client: bool
    ) -> AppendInfo:
        plog = p.log
        if plog is None:
            raise _AppendRejected(ErrorCode.kafka_storage_error, f"{p.tp} is offline")
        self._validate_batches(p, records, origin_is_client)
        with plog.lock:
            if p.log is not plog or not p.is_leader:
                raise _AppendRejected(ErrorCode.not_leader_or_follower, f"{p.tp} changed state")
            info = plog.append_as_leader(
                records, max(p.leader_epoch, 0), origin_is_client=origin_is_client
            )
            p.maybe_increment_high_watermark()
        return info

    def _validate_batches(
        self, p: Partition, records: bytes | bytearray | memoryview, origin_is_client: bool
    ) -> None:
        """What Kafka's LogValidator checks beyond structure and CRC (the log checks those):
        no control batches from clients, and CreateTime timestamps within the topic's bounds."""
        if not origin_is_client:
            return
        settings = p.settings
        before = settings.timestamp_before_max_ms
        after = settings.timestamp_after_max_ms
        log_append_time = settings.log_append_time
        now = int(time.time() * 1000)
        try:
            for _, header in iter_headers(records):
                if header.is_control:
                    raise _AppendRejected(
                        ErrorCode.invalid_record, "clients may not write control batches"
                    )
                if log_append_time or header.records_count == 0:
                    continue
                for ts in (header.base_timestamp, header.max_timestamp):
                    if ts == NO_TIMESTAMP:
                        continue
                    if (before is not None and now - ts > before) or (
                        after is not None and ts - now > after
                    ):
                        raise _AppendRejected(
                            ErrorCode.invalid_timestamp,
                            f"timestamp {ts} of a batch for {p.tp} is out of the range allowed "
                            "by message.timestamp.before.max.ms/after.max.ms",
                        )
        except InvalidBatchError:
            return  # the log's own parse reports it as CORRUPT_MESSAGE

    # -- reads ----------------------------------------------------------------------------------

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
        results = await self.run_in_io(
            self._read_all, requests, replica_id, max_bytes, isolation_level
        )
        total = sum(r.size for r in results)
        if (
            max_wait_ms <= 0
            or not requests
            or total >= min_bytes
            or any(r.error != ErrorCode.none or r.diverging_epoch for r in results)
            or self._stopped
        ):
            return results
        op = DelayedFetch(
            self,
            max_wait_ms,
            requests,
            replica_id=replica_id,
            min_bytes=min_bytes,
            isolation_level=isolation_level,
            bytes_already=total,
        )
        await self.fetch_purgatory.wait(op, [r.tp for r in requests])
        # Read again even on expiry: offsets (high watermark, log start) may have moved.
        close_records(results)
        if self._stopped:
            return await asyncio.to_thread(
                self._read_all, requests, replica_id, max_bytes, isolation_level
            )
        return await self.run_in_io(
            self._read_all, requests, replica_id, max_bytes, isolation_level
        )

    def _read_all(
        self,
        requests: Sequence[FetchPartitionRequest],
        replica_id: int,
        max_bytes: int,
        isolation_level: int,
    ) -> list[FetchPartitionResult]:
        results = []
        remaining = max(0, max_bytes)
        min_one_message = True
        try:
            for r in requests:
                limit = max(0, min(r.max_bytes, remaining))
                result = self._read_one(r, replica_id, limit, isolation_level, min_one_message)
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
        p = self._partitions.get(tp)
        if p is None:
            return FetchPartitionResult(tp, ErrorCode.unknown_topic_or_partition)
        follower = replica_id >= 0
        leader_only = replica_id != DEBUGGING_CONSUMER_ID
        error = p.state_error(leader_only=leader_only) or p.epoch_error(r.current_leader_epoch)
        if error is None and follower and replica_id not in p.replicas:
            # Only assigned replicas read past the high watermark.
            error = ErrorCode.not_leader_or_follower
        if error is not None:
            return FetchPartitionResult(
                tp, error, leader_id=p.leader_id, leader_epoch=p.leader_epoch
            )
        plog = p.log
        assert plog is not None
        try:
            with plog.lock:
                if p.log is not plog:
                    return FetchPartitionResult(tp, ErrorCode.kafka_storage_error)
                if follower:
                    self._update_follower_locked(p, replica_id, r.fetch_offset)
                hw = plog.high_watermark
                lso = plog.last_stable_offset()
                p.last_stable_offset = lso
                result = FetchPartitionResult(
                    tp,
                    high_watermark=hw,
                    last_stable_offset=lso,
                    log_start_offset=plog.log_start_offset,
                )
                if r.last_fetched_epoch >= 0:
                    epoch, end = plog.leader_epochs.end_offset_for(
                        r.last_fetched_epoch, plog.log_end_offset
                    )
                    if end < r.fetch_offset or epoch < r.last_fetched_epoch:
                        result.diverging_epoch = (epoch, end)
                        return result
                if follower:
                    max_offset = None
                elif isolation_level == READ_COMMITTED:
                    max_offset = lso
                else:
                    max_offset = hw
                info = plog.read(
                    r.fetch_offset,
                    limit,
                    max_offset=max_offset,
                    min_one_message=min_one_message,
                    include_aborted=isolation_level == READ_COMMITTED and not follower,
                )
                if info.region is not None and info.region.size > 0:
                    result.records = RegionRecords(
                        os.dup(info.region.fd), info.region.position, info.region.size
                    )
                if isolation_level == READ_COMMITTED and not follower:
                    result.aborted_transactions = info.aborted_transactions
                return result
        except storage_errors.OffsetOutOfRangeError:
            return FetchPartitionResult(
                tp,
                ErrorCode.offset_out_of_range,
                high_watermark=plog.high_watermark,
                last_stable_offset=p.last_stable_offset,
                log_start_offset=plog.log_start_offset,
            )
        except KafkaStorageError as exc:
            log.error("read of %s failed: %s", tp, exc)
            self._storage_failure(p, exc)
            self._wake([tp])
            return FetchPartitionResult(tp, ErrorCode.kafka_storage_error)
        except OSError as exc:  # os.dup; the log's reads are guarded
            log.error("read of %s failed: %s", tp, exc)
            return FetchPartitionResult(tp, ErrorCode.kafka_storage_error)

    def _update_follower_locked(self, p: Partition, replica_id: int, fetch_offset: int) -> None:
        """A follower fetching from ``fetch_offset`` has everything below it."""
        if replica_id not in p.replicas or replica_id == self.node_id:
            return
        previous = p.follower_end_offsets.get(replica_id, -1)
        if fetch_offset > previous:
            p.follower_end_offsets[replica_id] = fetch_offset
            if p.maybe_increment_high_watermark():
                self._wake([p.tp])

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
            data = await self.run_in_io(r.records.read_bytes) if r.records is not None else b""
        finally:
            close_records(results)
        return r.error, data, r.high_watermark

    # -- offsets --------------------------------------------------------------------------------

    async def offset_for_timestamp(
        self,
        tp: TopicPartition,
        timestamp: int,
        *,
        isolation_level: int | None = READ_UNCOMMITTED,
        current_leader_epoch: int = -1,
        replica_id: int = CONSUMER_REPLICA_ID,
    ) -> ListOffsetResult:
        """ListOffsets for one partition. ``isolation_level`` None: a follower's request,
        answered up to the log end."""
        p = self.partition(tp)
        if p is None:
            return ListOffsetResult(ErrorCode.unknown_topic_or_partition)
        error = p.state_error(leader_only=replica_id != DEBUGGING_CONSUMER_ID)
        error = error or p.epoch_error(current_leader_epoch)
        if error is not None:
            return ListOffsetResult(error)
        try:
            return await self.run_in_io(
                self._offset_for_timestamp_blocking, p, timestamp, isolation_level
            )
        except KafkaStorageError as exc:
            self._storage_failure(p, exc)
            self._wake([tp])
            return ListOffsetResult(ErrorCode.kafka_storage_error)

    @staticmethod
    def _offset_for_timestamp_blocking(
        p: Partition, timestamp: int, isolation_level: int | None
    ) -> ListOffsetResult:
        plog = p.log
        if plog is None:
            return ListOffsetResult(ErrorCode.kafka_storage_error)
        with plog.lock:
            if isolation_level is None:
                last_fetchable = plog.log_end_offset
            elif isolation_level == READ_COMMITTED:
                last_fetchable = plog.last_stable_offset()
            else:
                last_fetchable = plog.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return ListOffsetResult(
                ErrorCode.none, NO_TIMESTAMP, last_fetchable, max(p.leader_epoch, -1)
            )
        if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            # No tiered storage: Kafka answers "no offset" for these.
            return ListOffsetResult(ErrorCode.none, NO_TIMESTAMP, -1, -1)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            timestamp = EARLIEST_TIMESTAMP
        if timestamp < MAX_TIMESTAMP:
            return ListOffsetResult(ErrorCode.invalid_request)
        found = plog.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return ListOffsetResult(ErrorCode.none)
        if (
            isolation_level is not None
            and timestamp != EARLIEST_TIMESTAMP
            and found.offset >= last_fetchable
        ):
            return ListOffsetResult(ErrorCode.none)
        return ListOffsetResult(ErrorCode.none, found.timestamp, found.offset, found.leader_epoch)

    def end_offset_for_epoch(
        self,
        tp: TopicPartition,
        current_leader_epoch: int,
        leader_epoch: int,
        replica_id: int = CONSUMER_REPLICA_ID,
    ) -> tuple[ErrorCode, int, int]:
        """OffsetForLeaderEpoch: (error, the largest epoch <= ``leader_epoch``, its end offset).

        In memory only (the epoch cache), so it runs on the event loop.
        """
        p = self.partition(tp)
        if p is None:
            return ErrorCode.unknown_topic_or_partition, -1, -1
        error = p.state_error(leader_only=replica_id != DEBUGGING_CONSUMER_ID)
        error = error or p.epoch_error(current_leader_epoch)
        if error is not None:
            return error, -1, -1
        plog = p.log
        assert plog is not None
        epoch, end = plog.leader_epochs.end_offset_for(leader_epoch, plog.log_end_offset)
        return ErrorCode.none, epoch, end

    async def delete_records(
        self, tp: TopicPartition, offset: int, timeout_ms: int = 30_000
    ) -> tuple[ErrorCode, int]:
        """DeleteRecords: moves the log start offset to ``offset`` (-1: the high watermark);
        returns (error, low watermark). The new log start is checkpointed before answering."""
        p = self.partition(tp)
        if p is None:
            return ErrorCode.unknown_topic_or_partition, -1
        error = p.state_error()
        if error is not None:
            return error, -1
        plog = p.log
        assert plog is not None
        if offset == -1:
            offset = plog.high_watermark
        if offset < 0 or offset > plog.high_watermark:
            return ErrorCode.offset_out_of_range, -1
        try:
            moved = await self.run_in_io(plog.maybe_increment_log_start_offset, offset)
        except storage_errors.OffsetOutOfRangeError:
            return ErrorCode.offset_out_of_range, -1
        except KafkaStorageError as exc:
            self._storage_failure(p, exc)
            self._wake([tp])
            return ErrorCode.kafka_storage_error, -1
        if moved:
            await self._checkpoint_log_start_offsets(timeout_ms)
        self.fetch_purgatory.check_and_complete(tp)
        return ErrorCode.none, plog.log_start_offset

    async def _checkpoint_log_start_offsets(self, timeout_ms: int) -> None:
        """Writes the checkpoints on the log manager's scheduler thread (which owns them, so
        two writers never race on the same temp file) and waits for it, within reason."""
        lm = self._broker.log_manager
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def checkpoint() -> None:
            try:
                lm.checkpoint_all()
            finally:
                loop.call_soon_threadsafe(_set_done, done)

        try:
            lm.scheduler.schedule(checkpoint)
        except Exception:  # noqa: BLE001 - a stopped scheduler: the clean shutdown writes it
            log.warning("could not schedule the log-start-offset checkpoint", exc_info=True)
            return
        try:
            await asyncio.wait_for(asyncio.shield(done), max(0.1, min(timeout_ms, 10_000) / 1000))
        except TimeoutError:
            log.warning("log-start-offset checkpoint is slow; answering DeleteRecords anyway")


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _AppendRejected(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        super().__init__(message)


def _config(broker: Any, name: str, default: int) -> int:
    try:
        return int(broker.config.get(name))
    except Exception:  # noqa: BLE001 - tests may pass a minimal broker
        return default


def _int_config(config: Any, name: str) -> int | None:
    try:
        value = config.get(name)
    except KeyError:
        return None
    return None if value is None else int(value)


def _str_config(config: Any, name: str) -> str | None:
    try:
        value = config.get(name)
    except KeyError:
        return None
    return None if value is None else str(value)
