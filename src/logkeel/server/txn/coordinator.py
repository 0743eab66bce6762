"""The transaction coordinator: it serves the transactional ids of the ``__transaction_state``
partitions this broker leads (all of them on one node), loading a partition when leadership
moves here and dropping its ids when it moves away, through the group coordinator's mechanism
(``CoordinatorPartitions``).

Durability: each state change of a transactional id is a record in its ``__transaction_state``
partition, written (acknowledged, in the log file) before the change takes effect, and the
partitions are read back when led here. A transaction found in PREPARE_COMMIT/PREPARE_ABORT has
its markers (re)written and is completed; one found ONGOING is aborted when it times out or
when its transactional id is initialised again, so after any crash a transaction is committed
or aborted everywhere, never half.

Ending a transaction: the PREPARE_* record is written (the decision is now durable), the COMMIT
or ABORT control batch (marker) is written to each of its partitions by their leader (``markers``:
here, or WriteTxnMarkers to another broker) with the transaction's producer id and epoch (an abort
also goes into the partition's transaction index, by the log), the group coordinator of each
``__consumer_offsets`` partition makes its pending offsets visible or drops them, and COMPLETE_*
is written.
EndTxn is answered once that is done, or after ``_END_WAIT_S`` while markers are retried.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import MetadataStore
from logkeel.config import BrokerConfig
from logkeel.server.coordinator_partitions import CoordinatorPartitions
from logkeel.server.group.log import InternalTopic, OffsetsTopicStore, StoreError
from logkeel.server.group.records import (
    OFFSETS_TOPIC,
    RecordFormatError,
    partition_for,
)
from logkeel.server.replica.replica_manager import ReplicaManager
from logkeel.server.tasks import BackgroundTasks
from logkeel.server.txn.markers import Marker, TxnMarkers
from logkeel.server.txn.records import (
    TRANSACTION_STATE_TOPIC,
    TxnLogValue,
    TxnStatus,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from logkeel.server.txn.state import TxnError, TxnMetadata
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["TransactionCoordinator", "TxnSettings"]

log = logging.getLogger(__name__)

_END_WAIT_S = 10.0
_MARKER_RETRY_S = 0.5
# Markers for these partitions are not retried: the topic is gone.
_GONE = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id})


@dataclass(frozen=True, slots=True)
class TxnSettings:
    max_timeout_ms: int = 900_000
    abort_timed_out_interval_ms: int = 10_000
    id_expiration_ms: int = 604_800_000
    remove_expired_interval_ms: int = 3_600_000
    topic: InternalTopic = InternalTopic(TRANSACTION_STATE_TOPIC, 50, 1, 104857600, 1)

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> TxnSettings:
        return cls(
            max_timeout_ms=config.transaction_max_timeout_ms,
            abort_timed_out_interval_ms=(
                config.transaction_abort_timed_out_transaction_cleanup_interval_ms
            ),
            id_expiration_ms=config.transactional_id_expiration_ms,
            remove_expired_interval_ms=(
                config.transaction_remove_expired_transaction_cleanup_interval_ms
            ),
            topic=InternalTopic(
                TRANSACTION_STATE_TOPIC,
                config.transaction_state_log_num_partitions,
                config.transaction_state_log_replication_factor,
                config.transaction_state_log_segment_bytes,
                config.transaction_state_log_min_isr,
            ),
        )


class TransactionCoordinator:
    def __init__(
        self,
        settings: TxnSettings,
        store: OffsetsTopicStore,
        metadata: MetadataStore,
        replica_manager: ReplicaManager,
        next_producer_id: Callable[[], Awaitable[int]],
        markers: TxnMarkers,
    ) -> None:
        self.settings = settings
        self._store = store
        self._metadata = metadata
        self._replica_manager = replica_manager
        self._next_producer_id = next_producer_id
        self._markers = markers
        self._txns: dict[str, TxnMetadata] = {}
        self._tasks = BackgroundTasks("transaction coordinator", log)
        self._partitions = CoordinatorPartitions(
            settings.topic.name,
            store,
            self._load_partition,
            self._unload_partition,
            self._tasks.spawn,
        )
        self._active = False
        self._expiry: list[asyncio.Task[None]] = []

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts loading the ``__transaction_state`` partitions led here (in the background)
        and following their leadership."""
        self._active = True
        self._partitions.start()
        self._replica_manager.add_partition_listener(self._on_partitions_changed)
        loop = asyncio.get_running_loop()
        self._expiry = [
            loop.create_task(
                self._every(self.settings.abort_timed_out_interval_ms, self._abort_timed_out)
            ),
            loop.create_task(
                self._every(self.settings.remove_expired_interval_ms, self._remove_idle)
            ),
        ]

    def _on_partitions_changed(self, tps: list[TopicPartition]) -> None:
        if self._active:
            self._partitions.partitions_changed(tps)

    def is_loading(self) -> bool:
        return self._partitions.is_loading()

    async def wait_loaded(self) -> None:
        while self.is_loading():
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._active = False
        for task in self._expiry:
            task.cancel()
        await self._tasks.finish(5)
        await self._markers.close()

    async def _load_partition(self, partition: int, current: Callable[[], bool]) -> bool:
        """Reads the partition back and completes what it left prepared."""
        try:
            records = await self._store.read(partition)
        except StoreError as exc:
            log.error("cannot load %s-%d: %s", TRANSACTION_STATE_TOPIC, partition, exc)
            return False
        loaded: dict[str, TxnMetadata] = {}
        for key, value in records:
            try:
                txn_id = decode_txn_key(key)
                if value is None:
                    loaded.pop(txn_id, None)
                else:
                    loaded[txn_id] = TxnMetadata(txn_id, decode_txn_value(value))
            except (RecordFormatError, ValueError) as exc:
                log.warning(
                    "%s-%d: skipping a bad record: %s", TRANSACTION_STATE_TOPIC, partition, exc
                )
        if not current():
            return True
        self._txns.update(loaded)
        for meta in loaded.values():
            if meta.state in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT):
                self._tasks.spawn(self._complete(meta))
            elif meta.state == TxnStatus.PREPARE_EPOCH_FENCE:
                self._tasks.spawn(self._abort_fenced(meta))
        if records:
            log.info("loaded %s-%d: %d records", TRANSACTION_STATE_TOPIC, partition, len(records))
        return True

    def _unload_partition(self, partition: int) -> None:
        """Leadership moved away: the ids of the partition are coordinated elsewhere now."""
        gone = [t for t in self._txns if self.state_partition(t).partition == partition]
        for txn_id in gone:
            del self._txns[txn_id]
        log.info("unloaded %s-%d: %d ids", TRANSACTION_STATE_TOPIC, partition, len(gone))

    async def ensure_state_topic(self) -> ErrorCode:
        """Creates ``__transaction_state`` on first use (FindCoordinator, InitProducerId)."""
        if self._partitions.num_partitions is not None:
            return ErrorCode.none
        existed = self._store.num_partitions() is not None
        self._partitions.creating_topic = True
        try:
            n = await self._store.ensure_topic()
        except StoreError:
            return ErrorCode.coordinator_not_available
        finally:
            self._partitions.creating_topic = False
        self._partitions.created(n, existed)
        return ErrorCode.none

    def _check(self, transactional_id: str) -> None:
        """Raises COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR
        unless the id's partition is loaded here."""
        if not self._active:
            raise TxnError(ErrorCode.coordinator_not_available)
        if self._partitions.num_partitions is None:
            return
        code = self._partitions.check(self.state_partition(transactional_id).partition)
        if code != ErrorCode.none:
            raise TxnError(code)

    def _existing(self, transactional_id: str) -> TxnMetadata:
        self._check(transactional_id)
        meta = self._txns.get(transactional_id)
        if meta is None:
            raise TxnError(ErrorCode.invalid_producer_id_mapping)
        return meta

    # -- requests ---------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[int, int]:
        """InitProducerId with a transactional id: (producer id, epoch); raises TxnError."""
        if not self._active:
            raise TxnError(ErrorCode.coordinator_not_available)
        if not transactional_id:
            raise TxnError(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            raise TxnError(ErrorCode.invalid_transaction_timeout)
        if await self.ensure_state_topic() != ErrorCode.none:
            raise TxnError(ErrorCode.coordinator_not_available)
        self._check(transactional_id)
        now = _now_ms()
        meta = self._txns.get(transactional_id)
        if meta is None:
            pid = await self._next_producer_id()
            meta = self._txns.setdefault(
                transactional_id, TxnMetadata.new(transactional_id, pid, timeout_ms, now)
            )
        if meta.pending is not None:
            raise TxnError(ErrorCode.concurrent_transactions)
        if (
            producer_id >= 0
            and meta.producer_epoch >= 0
            and (producer_id != meta.producer_id or producer_epoch != meta.producer_epoch)
        ):
            # KIP-360: a producer re-initialising itself must still be the current one. A state
            # that was just created (epoch -1) has no incarnation to fence, so any id and epoch
            # the client still holds are accepted, as Kafka does (a client recovering from
            # UNKNOWN_PRODUCER_ID, or one that sends 0/0 on its first call).
            raise TxnError(ErrorCode.producer_fenced)
        if meta.state in (TxnStatus.ONGOING, TxnStatus.PREPARE_EPOCH_FENCE):
            # The previous incarnation left a transaction open: fence it and abort it; the
            # client retries until the abort is complete.
            self._tasks.spawn(self._abort_fenced(meta))
            raise TxnError(ErrorCode.concurrent_transactions)
        if not meta.is_completed:
            raise TxnError(ErrorCode.concurrent_transactions)
        new_pid = await self._next_producer_id() if meta.needs_new_producer_id() else None
        target = meta.prepare_init(new_pid, timeout_ms, now)
        await self._write(meta, target)
        log.info(
            "transactional id %r: producer id %d, epoch %d",
            transactional_id,
            meta.producer_id,
            meta.producer_epoch,
        )
        return meta.producer_id, meta.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> None:
        meta = self._existing(transactional_id)
        meta.check_producer(producer_id, producer_epoch)
        target = meta.prepare_add_partitions(partitions, _now_ms())
        if target is not None:
            await self._write(meta, target)

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        n = self._offsets_partitions()
        if n is None:
            raise TxnError(ErrorCode.coordinator_not_available)
        await self.add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            [(OFFSETS_TOPIC, partition_for(group_id, n))],
        )

    def _offsets_partitions(self) -> int | None:
        state = self._metadata.topic(OFFSETS_TOPIC)
        return None if state is None else len(state.partitions)

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        meta = self._existing(transactional_id)
        meta.check_producer(producer_id, producer_epoch)
        target = meta.prepare_end(commit, _now_ms())
        if target is None:
            return
        await self._write(meta, target)
        task = self._tasks.spawn(self._complete(meta))
        # The decision is durable: answer once the markers are written, or after a bound while
        # they are retried (the id answers CONCURRENT_TRANSACTIONS until then).
        await asyncio.wait([task], timeout=_END_WAIT_S)

    def verify_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        """Produce's check of a transactional batch: NONE if ``tp`` is in the open transaction
        of this producer, INVALID_PRODUCER_EPOCH for an older incarnation, else
        INVALID_TXN_STATE. An id coordinated by another broker is not checked here (as Kafka
        before KIP-890's verification round trip): the batch is accepted."""
        if (
            self._partitions.num_partitions is not None
            and self._partitions.check(self.state_partition(transactional_id).partition)
            == ErrorCode.not_coordinator
        ):
            return ErrorCode.none
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_txn_state
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if meta.state != TxnStatus.ONGOING or tp.partition not in meta.value.partitions.get(
            tp.topic, ()
        ):
            return ErrorCode.invalid_txn_state
        return ErrorCode.none

    # -- completion ---------------------------------------------------------------------------

    async def _abort_fenced(self, meta: TxnMetadata) -> None:
        """Aborts the open transaction of a fenced or timed-out producer, with the epoch
        bumped so that the producer's later requests are refused."""
        if meta.pending is not None:
            return
        if meta.state == TxnStatus.ONGOING:
            meta.complete(meta.prepare_fence(_now_ms()))
        target = meta.prepare_end(False, _now_ms())
        if target is None:
            return
        try:
            await self._write(meta, target)
        except TxnError as exc:
            log.warning("cannot abort the transaction of %r: %s", meta.transactional_id, exc)
            return
        await self._complete(meta)

    async def _complete(self, meta: TxnMetadata) -> None:
        committed = meta.state == TxnStatus.PREPARE_COMMIT
        partitions = [TopicPartition(t, p) for t, p in meta.partitions()]
        await self._write_markers(meta, partitions, committed)
        while self._active:
            try:
                await self._write(meta, meta.prepare_complete(_now_ms()))
                break
            except TxnError as exc:
                if exc.code == ErrorCode.invalid_txn_state:
                    return
                await asyncio.sleep(_MARKER_RETRY_S)
        log.info(
            "transactional id %r: %s %d partitions (producer %d, epoch %d)",
            meta.transactional_id,
            "committed" if committed else "aborted",
            len(partitions),
            meta.producer_id,
            meta.producer_epoch,
        )

    async def _write_markers(
        self, meta: TxnMetadata, partitions: list[TopicPartition], committed: bool
    ) -> None:
        todo = set(partitions)
        marker = Marker(
            meta.producer_id,
            meta.producer_epoch,
            self._coordinator_epoch(meta.transactional_id),
            committed,
        )
        while todo and self._active:
            results = await self._markers.write(marker, todo, _now_ms())
            for tp, error in results.items():
                if error == ErrorCode.none or error in _GONE:
                    todo.discard(tp)
                else:
                    log.warning(
                        "writing the marker of %r to %s: %s",
                        meta.transactional_id,
                        tp,
                        error.name,
                    )
            if todo:
                await asyncio.sleep(_MARKER_RETRY_S)

    def _coordinator_epoch(self, transactional_id: str) -> int:
        tp = self.state_partition(transactional_id)
        state = self._metadata.partition(tp)
        return max(state.leader_epoch, 0) if state is not None else 0

    def state_partition(self, transactional_id: str) -> TopicPartition:
        n = self._partitions.num_partitions or self.settings.topic.partitions
        return TopicPartition(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, n))

    async def _write(self, meta: TxnMetadata, target: TxnLogValue) -> None:
        """Writes ``target`` as the id's record; it is the state once acknowledged."""
        tp = self.state_partition(meta.transactional_id)
        record = (encode_txn_key(meta.transactional_id), encode_txn_value(target))
        try:
            await self._store.append(tp.partition, [record])
        except StoreError as exc:
            meta.abandon()
            log.warning("writing the state of %r failed: %s", meta.transactional_id, exc)
            raise TxnError(ErrorCode.not_coordinator, str(exc)) from exc
        meta.complete(target)

    # -- expiry ------------------------------------------------------------------------------

    async def _every(self, interval_ms: int, check: Callable[[int], None]) -> None:
        while self._active:
            await asyncio.sleep(interval_ms / 1000)
            check(_now_ms())

    def _abort_timed_out(self, now: int) -> None:
        for meta in list(self._txns.values()):
            if meta.expired(now):
                log.info(
                    "transactional id %r: aborting the transaction open past its timeout of %d ms",
                    meta.transactional_id,
                    meta.value.timeout_ms,
                )
                self._tasks.spawn(self._abort_fenced(meta))

    def _remove_idle(self, now: int) -> None:
        """``transactional.id.expiration.ms``: ids idle that long are forgotten (tombstoned);
        their next InitProducerId starts afresh with a new producer id."""
        for meta in list(self._txns.values()):
            if meta.idle(now, self.settings.id_expiration_ms):
                self._tasks.spawn(self._remove(meta, meta.prepare_dead(now)))

    async def _remove(self, meta: TxnMetadata, dead: TxnLogValue) -> None:
        tp = self.state_partition(meta.transactional_id)
        try:
            await self._store.append(tp.partition, [(encode_txn_key(meta.transactional_id), None)])
        except StoreError as exc:
            meta.abandon()
            log.warning("expiring %r failed: %s", meta.transactional_id, exc)
            return
        meta.complete(dead)
        if self._txns.get(meta.transactional_id) is meta:
            del self._txns[meta.transactional_id]
        log.info("transactional id %r expired", meta.transactional_id)

    # -- inspection ----------------------------------------------------------------------------

    def transaction(self, transactional_id: str) -> TxnMetadata | None:
        return self._txns.get(transactional_id)

    def describe(self, transactional_id: str) -> TxnMetadata:
        """DescribeTransactions: the id's state here; raises TxnError (NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND)."""
        self._check(transactional_id)
        meta = self._txns.get(transactional_id)
        if meta is None:
            raise TxnError(ErrorCode.transactional_id_not_found)
        return meta

    def list_transactions(self) -> list[TxnMetadata]:
        """ListTransactions: the ids of the partitions loaded here; raises TxnError while one
        is still loading."""
        if not self._active:
            raise TxnError(ErrorCode.coordinator_not_available)
        if self._partitions.is_loading():
            raise TxnError(ErrorCode.coordinator_load_in_progress)
        return list(self._txns.values())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
