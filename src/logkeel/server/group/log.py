"""The group coordinator's durable state: the partitions of ``__consumer_offsets``.

``OffsetsTopicStore`` is what the coordinator needs from the log, and nothing more: make sure
the topic exists, append a batch of coordinator records to one partition (returning once the
write is acknowledged, i.e. in the partition's log file, where a ``kill -9`` of the broker
cannot take it back), and read a partition back from its start at load time.

Two implementations:

- ``BrokerOffsetsStore`` for the running broker: the topic is created through the metadata
  store (``offsets.topic.num.partitions`` partitions, compacted, internal) and records are
  appended through the replica manager when it offers ``append_records`` (so the high watermark,
  leader epoch and purgatories see the write like any other), else straight through the
  partition's log;
- ``LogManagerOffsetsStore`` over a bare ``LogManager``, for driving a coordinator in-process
  (tests, tools) on real files without a broker.

Blocking storage calls run in threads; appends to one partition are serialised (a lock per
partition) so records land in the order the coordinator issued them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import MetadataError, MetadataStore
from logkeel.config import BrokerConfig
from logkeel.records.batch import CompressionType
from logkeel.records.builder import BatchBuilder
from logkeel.records.control import decode_end_txn_marker
from logkeel.records.record import iter_batches
from logkeel.server.errors import error_code_for
from logkeel.server.group.records import OFFSETS_TOPIC
from logkeel.server.replica.replica_manager import ReplicaManager
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "BrokerOffsetsStore",
    "OffsetsTopicHost",
    "CoordinatorRecord",
    "InternalTopic",
    "OpenTxns",
    "TxnProducer",
    "LogManagerOffsetsStore",
    "OffsetsTopicStore",
    "StoreError",
    "build_records_batch",
    "read_partition_records",
]

log = logging.getLogger(__name__)

CoordinatorRecord = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone
TxnProducer = tuple[int, int]  # (producer id, epoch) of a transactional write
OpenTxns = dict[int, list[CoordinatorRecord]]  # records of open transactions by producer id

# Reads at load time: whole batches, this many bytes at a time.
_LOAD_READ_BYTES = 4 * 1024 * 1024


class StoreError(Exception):
    """An append or read failed; ``code`` is the Kafka error of the failure."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = code
        super().__init__(message or code.name.upper())


class OffsetsTopicStore(Protocol):
    def num_partitions(self) -> int | None:
        """Partitions of the topic, or None while it does not exist."""

    async def ensure_topic(self) -> int:
        """Creates the topic if it is missing; returns its partition count."""

    def leads(self, partition: int) -> bool:
        """Whether this broker leads the partition, with its log online (its coordinator)."""

    async def append(
        self,
        partition: int,
        records: Sequence[CoordinatorRecord],
        producer: TxnProducer | None = None,
    ) -> None:
        """Appends ``records`` as one batch (transactional for ``producer``); raises
        StoreError."""

    async def read(
        self, partition: int, open_txns: OpenTxns | None = None
    ) -> list[CoordinatorRecord]:
        """Every record of the partition, oldest first, with transactions resolved (see
        ``read_partition_records``); raises StoreError."""


def build_records_batch(
    records: Sequence[CoordinatorRecord], timestamp_ms: int, producer: TxnProducer | None = None
) -> bytes:
    """One uncompressed batch of coordinator records, as Kafka's coordinator writes them
    (CreateTime timestamps; no producer id, or a transactional batch of ``producer``)."""
    if producer is None:
        builder = BatchBuilder(compression=CompressionType.NONE)
    else:
        builder = BatchBuilder(
            compression=CompressionType.NONE,
            producer_id=producer[0],
            producer_epoch=producer[1],
            is_transactional=True,
        )
    for key, value in records:
        builder.append(timestamp_ms, key, value)
    return builder.build()


def read_partition_records(
    plog: PartitionLog, open_txns: OpenTxns | None = None
) -> Iterator[CoordinatorRecord]:
    """Every (key, value) in ``plog`` from its log start to its end.

    A transaction's records (TxnOffsetCommit) come out where its commit marker is, and not at
    all if it was aborted; those of transactions still open at the end are put in
    ``open_txns`` by producer id (the transaction coordinator completes them later).

    Blocking: run it in a thread. Reads up to the log end, not the high watermark: on one node
    every acknowledged write is below the end, and an unacknowledged one that reached the log
    is kept, as Kafka's loader does.
    """
    pending: OpenTxns = {}
    offset = plog.log_start_offset
    while True:
        end = plog.log_end_offset
        if offset >= end:
            break
        info = plog.read(offset, _LOAD_READ_BYTES, max_offset=end, min_one_message=True)
        data = info.read_bytes()
        if not data:
            break
        advanced = False
        for _, header, records in iter_batches(data):
            advanced = True
            offset = header.next_offset
            if header.is_control:
                done = pending.pop(header.producer_id, [])
                if records and decode_end_txn_marker(records[0].key, records[0].value).committed:
                    yield from done
                continue
            found = [(r.key, r.value) for r in records if r.key is not None]
            if header.is_transactional:
                pending.setdefault(header.producer_id, []).extend(found)
            else:
                yield from found
        if not advanced:
            raise StoreError(
                ErrorCode.corrupt_message, f"{plog.tp}: no complete batch at offset {offset}"
            )
    if open_txns is not None:
        open_txns.update(pending)


class _PartitionLocks:
    def __init__(self) -> None:
        self._locks: dict[int, asyncio.Lock] = {}

    def __call__(self, partition: int) -> asyncio.Lock:
        lock = self._locks.get(partition)
        if lock is None:
            lock = self._locks[partition] = asyncio.Lock()
        return lock


class LogManagerOffsetsStore:
    """``__consumer_offsets`` straight on a ``LogManager``'s partition logs (no broker)."""

    def __init__(self, log_manager: LogManager, partitions: int) -> None:
        self._log_manager = log_manager
        self._partitions = partitions
        self._created = False
        self._locks = _PartitionLocks()

    def num_partitions(self) -> int | None:
        if self._created or any(tp.topic == OFFSETS_TOPIC for tp in list(self._log_manager.logs)):
            return self._partitions
        return None

    async def ensure_topic(self) -> int:
        self._created = True
        return self._partitions

    def leads(self, partition: int) -> bool:
        return True

    def _log(self, partition: int) -> PartitionLog:
        return self._log_manager.get_or_create_log(TopicPartition(OFFSETS_TOPIC, partition))

    async def append(
        self,
        partition: int,
        records: Sequence[CoordinatorRecord],
        producer: TxnProducer | None = None,
    ) -> None:
        batch = build_records_batch(records, int(time.time() * 1000), producer)
        async with self._locks(partition):
            try:
                await asyncio.to_thread(self._append_sync, partition, batch)
            except Exception as exc:
                raise StoreError(error_code_for(exc), str(exc)) from exc

    def _append_sync(self, partition: int, batch: bytes) -> None:
        plog = self._log(partition)
        plog.append_as_leader(batch, 0, origin_is_client=False)
        plog.high_watermark = plog.log_end_offset

    async def read(
        self, partition: int, open_txns: OpenTxns | None = None
    ) -> list[CoordinatorRecord]:
        try:
            return await asyncio.to_thread(
                lambda: list(read_partition_records(self._log(partition), open_txns))
            )
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(error_code_for(exc), str(exc)) from exc


class OffsetsTopicHost(Protocol):
    """What ``BrokerOffsetsStore`` uses of the broker: its configs (the topic's settings), the
    metadata store (creating the topic), the replica manager (appends) and the log manager
    (reads, and a failed dir)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def metadata(self) -> MetadataStore: ...

    @property
    def replica_manager(self) -> ReplicaManager: ...

    @property
    def log_manager(self) -> LogManager: ...


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """A coordinator's internal, compacted topic and the settings it is created with."""

    name: str
    partitions: int
    replication_factor: int
    segment_bytes: int
    min_insync_replicas: int | None = None

    def configs(self) -> dict[str, str]:
        """The topic configs its coordinator creates (or adopts) it with."""
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.segment_bytes),
        }
        if self.min_insync_replicas is not None:
            configs["min.insync.replicas"] = str(self.min_insync_replicas)
        return configs

    @classmethod
    def offsets(cls, config: BrokerConfig) -> InternalTopic:
        return cls(
            OFFSETS_TOPIC,
            config.offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            config.offsets_topic_segment_bytes,
        )


class BrokerOffsetsStore:
    """A coordinator's internal topic (``__consumer_offsets`` by default) of a running broker."""

    def __init__(self, broker: OffsetsTopicHost, topic: InternalTopic | None = None) -> None:
        self._broker = broker
        self._topic = topic or InternalTopic.offsets(broker.config)
        self._create_lock = asyncio.Lock()
        self._locks = _PartitionLocks()

    def num_partitions(self) -> int | None:
        state = self._broker.metadata.topic(self._topic.name)
        return None if state is None else len(state.partitions)

    async def ensure_topic(self) -> int:
        # Always through the lock: the topic shows in the metadata before the replica manager
        # has built its partitions, and a write must not slip into that gap.
        async with self._create_lock:
            n = self.num_partitions()
            if n is not None:
                return n
            topic = self._topic
            configs = topic.configs()
            alive = len(self._broker.metadata.brokers())
            if alive < topic.replication_factor:
                # As Kafka: not created with fewer replicas than configured; the coordinator
                # is unavailable until enough brokers are up.
                log.warning(
                    "not creating %s yet: replication factor %d, %d broker(s) alive",
                    topic.name,
                    topic.replication_factor,
                    alive,
                )
                raise StoreError(
                    ErrorCode.coordinator_not_available,
                    f"{alive} broker(s) alive, {topic.replication_factor} replicas required",
                )
            try:
                state = await asyncio.to_thread(
                    self._broker.metadata.create_topic,
                    topic.name,
                    topic.partitions,
                    topic.replication_factor,
                    configs,
                    internal=True,
                )
            except MetadataError as exc:
                if exc.error_name == "TOPIC_ALREADY_EXISTS":
                    return self.num_partitions() or topic.partitions
                log.error("cannot create %s: %s", topic.name, exc)
                raise StoreError(ErrorCode.coordinator_not_available, str(exc)) from exc
            except (KafkaStorageError, OSError) as exc:
                log.error("cannot create %s: %s", topic.name, exc)
                raise StoreError(ErrorCode.coordinator_not_available, str(exc)) from exc
            log.info("created %s with %d partitions", topic.name, len(state.partitions))
            return len(state.partitions)

    def _tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self._topic.name, partition)

    def leads(self, partition: int) -> bool:
        p = self._broker.replica_manager.partition(self._tp(partition))
        return p is not None and p.is_leader and p.online

    def _log(self, partition: int) -> PartitionLog:
        # Never get_or_create_log: for a partition in an offline dir that would create an
        # empty replacement and hide the committed offsets.
        tp = self._tp(partition)
        plog = self._broker.log_manager.get_log(tp)
        if plog is None:
            raise StoreError(ErrorCode.kafka_storage_error, f"{tp} is offline or missing")
        return plog

    async def append(
        self,
        partition: int,
        records: Sequence[CoordinatorRecord],
        producer: TxnProducer | None = None,
    ) -> None:
        batch = build_records_batch(records, int(time.time() * 1000), producer)
        timeout_ms = 5000  # Kafka's offsets.commit.timeout.ms default
        async with self._locks(partition):
            try:
                result = await self._broker.replica_manager.appends.append_records(
                    self._tp(partition), batch, -1, timeout_ms, origin_is_client=False
                )
            except Exception as exc:
                raise StoreError(error_code_for(exc), str(exc)) from exc
            if result.error != ErrorCode.none:
                raise StoreError(
                    result.error,
                    f"append to {self._tp(partition)} failed: {result.error.name.upper()}",
                )

    async def read(
        self, partition: int, open_txns: OpenTxns | None = None
    ) -> list[CoordinatorRecord]:
        def load() -> list[CoordinatorRecord]:
            try:
                return list(read_partition_records(self._log(partition), open_txns))
            except KafkaStorageError as exc:
                # Taking the dir offline closes its logs: done here, off the event loop.
                self._broker.log_manager.handle_dir_failure(exc)
                raise StoreError(ErrorCode.kafka_storage_error, str(exc)) from exc

        try:
            return await asyncio.to_thread(load)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(error_code_for(exc), str(exc)) from exc
