"""The replica manager: routes the data path to partitions and takes failed log dirs offline.

API handlers and the group coordinator go through it, never to the logs directly, so that
leadership, offline log dirs and the high watermark are respected everywhere.

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
  -> (error, bytes, high_watermark)`` (for internal readers such as the group coordinator)
- ``async offset_for_timestamp(tp, timestamp, ...) -> ListOffsetResult``
- ``async delete_records(tp, offset, timeout_ms) -> (error, low_watermark)``
- ``end_offset_for_epoch(tp, current_leader_epoch, leader_epoch, replica_id)
  -> (error, epoch, end_offset)``
- ``async run_in_io(fn, *args)``: runs blocking storage work on the IO threads
  (``num.io.threads``).
- ``add_partition_listener(fn)``: ``fn(tps)`` runs on the event loop after metadata changed
  the state (leader, replicas, online) of partitions ``tps``; the group coordinator follows
  the leadership of ``__consumer_offsets`` with it.
- ``on_log_dir_failure(log_dir, reason)`` (the broker calls it from the thread in which the
  log manager took a dir offline; it only changes in-memory state), ``start()``,
  ``prepare_shutdown()`` (answer every parked request now; call before stopping the
  listener), ``stop()``.

Offline partitions (not loaded, in a failed dir, or missing while a dir is offline: never
replaced by an empty log) answer KAFKA_STORAGE_ERROR.

Siblings: ``partition`` (one partition's state and log access), ``partition_table`` (the map,
kept in line with metadata), ``fetcher_manager``/``fetcher`` (following other leaders),
``results`` (request and result types), ``delayed`` (delayed produce and fetch).

High watermark: the smallest log end offset over the ISR (``Partition``), moved by appends and
by followers' fetches; acks=all waits for it in the produce purgatory. As leader, a periodic
check every ``replica.lag.time.max.ms / 2`` proposes ISR shrinks through the context's
``isr_change_requested`` hook (expansions are proposed as followers' fetches catch up).

Ordering: the network layer serves one request per connection at a time, so the produce
requests of one connection reach ``append_to_partitions`` in order and each append finishes
before the next request starts; appends from different connections are ordered by the log's
lock.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import TopicState
from logkeel.records.batch import InvalidBatchError
from logkeel.server.errors import error_code_for
from logkeel.server.replica import partition_reads
from logkeel.server.replica.append_checks import AppendRejected
from logkeel.server.replica.context import ReplicaManagerContext
from logkeel.server.replica.delayed import DelayedFetch, DelayedProduce
from logkeel.server.replica.fetcher_manager import ReplicaFetcherManager
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.partition_table import PartitionTable
from logkeel.server.replica.purgatory import DelayedOperationPurgatory
from logkeel.server.replica.results import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_CONSUMER_ID,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchPartitionRequest,
    FetchPartitionResult,
    ListOffsetResult,
    PartitionAppendResult,
    close_records,
)
from logkeel.storage import errors as storage_errors
from logkeel.storage.engine.log_results import AppendInfo
from logkeel.storage.engine.producer_state import (
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ReplicaManager"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_INT32_MAX = (1 << 31) - 1

# Storage exceptions that are not in logkeel.server.errors' table (transactions).
_EXTRA_ERROR_CODES: dict[type[BaseException], ErrorCode] = {
    InvalidTxnStateError: ErrorCode.invalid_txn_state,
    TransactionCoordinatorFencedError: ErrorCode.transaction_coordinator_fenced,
}


def storage_error_code(exc: BaseException) -> ErrorCode:
    """Kafka's error code for an exception raised by a log operation."""
    for cls in type(exc).__mro__:
        code = _EXTRA_ERROR_CODES.get(cls)
        if code is not None:
            return code
    return error_code_for(exc)


class ReplicaManager:
    def __init__(self, ctx: ReplicaManagerContext) -> None:
        self._ctx = ctx
        self._log_manager = ctx.log_manager
        self.node_id = ctx.node_id
        self._table = PartitionTable(ctx)
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("produce")
        )
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory(
            "fetch"
        )
        self._executor = ThreadPoolExecutor(
            max(1, ctx.num_io_threads), thread_name_prefix="logkeel-io"
        )
        self._loop_thread: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fetcher_manager = ReplicaFetcherManager(
            ctx.node_id,
            ctx.replication,
            ctx.metadata.brokers,
            self.run_in_io,
            self._storage_failure,
        )
        self._isr_task: asyncio.Task[None] | None = None
        self._partition_listeners: list[Callable[[list[TopicPartition]], None]] = []
        self._started = False
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Builds the partitions from metadata over the loaded logs; listens for changes."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._ctx.metadata.add_listener(self._on_metadata_change)
        await self.run_in_io(self._table.sync_all)
        self._table.started = self._started = True
        partitions = self._table.all()
        self.fetcher_manager.partitions_changed([p.tp for p in partitions], self._table.get)
        self._isr_task = self._loop.create_task(self._check_isr_shrinks(), name="isr-expiration")
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
        if self._isr_task is not None:
            self._isr_task.cancel()
        await self.fetcher_manager.shutdown()
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
        return self._table.get(tp)

    def partitions(self) -> list[Partition]:
        return self._table.all()

    def add_partition_listener(self, fn: Callable[[list[TopicPartition]], None]) -> None:
        """``fn(tps)`` runs on the event loop after metadata changed partitions ``tps``."""
        self._partition_listeners.append(fn)

    async def _check_isr_shrinks(self) -> None:
        """Kafka's isr-expiration task: leaders propose dropping followers that fell behind."""
        while True:
            await asyncio.sleep(self._ctx.replication.isr.replica_lag_time_max_ms / 2000)
            self._table.check_isr_shrinks(int(time.time() * 1000))

    def _on_metadata_change(self, name: str, state: TopicState | None) -> None:
        """Metadata listener; runs in the thread that changed the metadata."""
        if not self._started and self._loop is None:
            return
        try:
            changed = self._table.apply_topic(name, state)
        except Exception:
            log.exception("applying the metadata change of topic %s failed", name)
            return
        self._wake(changed)

    def on_log_dir_failure(self, log_dir: str, reason: str) -> None:
        """A log dir went offline (called from the thread that took it offline): its
        partitions answer KAFKA_STORAGE_ERROR from now on, and requests waiting on them are
        answered. In-memory only, so safe on any thread."""
        self._wake(self._table.take_dir_offline(log_dir, reason))

    def follower_response(
        self, tps: Iterable[TopicPartition], replica_id: int, token: int, sent: bool
    ) -> None:
        """A response carrying these partitions' records to a follower starts being sent, or
        is sent (beyond KIP-501: how long a leader takes to serve its followers)."""
        now = int(time.time() * 1000)
        for tp in tps:
            p = self._table.get(tp)
            if p is None:
                continue
            if sent:
                p.followers.response_sent(token, now, leader=p.is_leader)
            else:
                p.followers.response_started(replica_id, token, now)

    def on_log_dir_online(self, log_dir: str, loaded: list[TopicPartition]) -> None:
        """A failed log dir was loaded again (called from the thread that loaded it): its
        partitions serve again, as followers catching up or as leaders the controller picks."""
        self._wake(self._table.take_dir_online(log_dir, loaded))

    def on_partition_failure(self, tp: TopicPartition, reason: str) -> None:
        """One partition's log went offline for an error that is not a device fault (its dir
        keeps serving): it answers KAFKA_STORAGE_ERROR, and requests waiting on it are
        answered now rather than at their deadline. In-memory only, so safe on any thread."""
        p = self._table.get(tp)
        if p is None or p.offline_reason is not None:
            return
        p.offline_reason = reason
        p.log = None
        self._wake([tp])

    def _wake(self, tps: Iterable[TopicPartition]) -> None:
        """Re-checks the delayed operations of ``tps`` on the event loop, from any thread."""
        tps = list(tps)
        if not tps or self._loop is None or self._loop.is_closed():
            return

        def wake() -> None:
            if not self._stopped:
                self.fetcher_manager.partitions_changed(tps, self._table.get)
            for tp in tps:
                self.produce_purgatory.check_and_complete(tp)
                self.fetch_purgatory.check_and_complete(tp)
            for fn in self._partition_listeners:
                try:
                    fn(tps)
                except Exception:
                    log.exception("a partition listener failed")

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            wake()
        else:
            self._loop.call_soon_threadsafe(wake)

    def _high_watermark_moved(self, tp: TopicPartition) -> None:
        """Completes what waits for ``tp``'s high watermark (acks=all produces, consumers'
        long polls), from any thread. Not a state change: fetchers and partition listeners
        are not told."""

        def complete() -> None:
            self.produce_purgatory.check_and_complete(tp)
            self.fetch_purgatory.check_and_complete(tp)

        if threading.get_ident() == self._loop_thread:
            complete()
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(complete)

    def _storage_failure(self, p: Partition, exc: KafkaStorageError) -> None:
        """An IO error in ``p``'s log: the dir goes offline (the log manager tells us back).

        Taking a dir offline closes its logs, so on the event loop it is handed to the IO
        threads; the partition stops serving at once either way."""
        p.offline_reason = str(exc)
        p.log = None
        if threading.get_ident() == self._loop_thread and not self._stopped:
            try:
                self._executor.submit(self._handle_dir_failure, exc)
                return
            except RuntimeError:  # the IO threads are shutting down
                pass
        self._handle_dir_failure(exc)

    def _handle_dir_failure(self, exc: KafkaStorageError) -> None:
        try:
            self._log_manager.handle_dir_failure(exc)
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
                outcomes = [
                    AppendRejected(ErrorCode.not_leader_or_follower, "shutting down")
                ] * len(todo)
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
        fenced = self._ctx.write_fence() if self._ctx.write_fence is not None else None
        if fenced is not None:
            return PartitionAppendResult(ErrorCode.not_leader_or_follower, error_message=fenced)
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
                outcomes.append(p.append_as_leader(records, origin_is_client))
            except Exception as exc:  # noqa: BLE001 - mapped per partition by _append_result
                outcomes.append(exc)
        return outcomes

    def _append_result(
        self, p: Partition, outcome: AppendInfo | BaseException
    ) -> PartitionAppendResult:
        tp = p.tp
        if isinstance(outcome, KafkaStorageError):
            log.error("append to %s failed: %s", tp, outcome)
            self._storage_failure(p, outcome)
            self._wake([tp])
            return PartitionAppendResult(ErrorCode.kafka_storage_error, error_message=str(outcome))
        if isinstance(outcome, AppendRejected):
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
        p = self._table.get(tp)
        if p is None:
            return FetchPartitionResult(tp, ErrorCode.unknown_topic_or_partition)
        try:
            result, hw_moved = partition_reads.read(
                p, r, replica_id, limit, isolation_level, min_one_message
            )
        except KafkaStorageError as exc:
            log.error("read of %s failed: %s", tp, exc)
            self._storage_failure(p, exc)
            self._wake([tp])
            return FetchPartitionResult(tp, ErrorCode.kafka_storage_error)
        except OSError as exc:  # os.dup; the log's reads are guarded
            log.error("read of %s failed: %s", tp, exc)
            return FetchPartitionResult(tp, ErrorCode.kafka_storage_error)
        if hw_moved:
            self._high_watermark_moved(tp)
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
                partition_reads.offset_for_timestamp, p, timestamp, isolation_level
            )
        except KafkaStorageError as exc:
            self._storage_failure(p, exc)
            self._wake([tp])
            return ListOffsetResult(ErrorCode.kafka_storage_error)

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
        epoch, end = p.end_offset_for_epoch(leader_epoch)
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
        lm = self._log_manager
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
            async with asyncio.timeout(max(0.1, min(timeout_ms, 10_000) / 1000)):
                await asyncio.shield(done)
        except TimeoutError:
            log.warning("log-start-offset checkpoint is slow; answering DeleteRecords anyway")


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
