"""What producer state is made of: the entry kept per producer id (epoch, last batches,
open transaction), the end-transaction markers that close transactions, the results the
manager returns, and its bookkeeping of open transactions by first offset.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from logkeel.records.batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    InvalidBatchError,
)
from logkeel.records.control import ControlRecordType, decode_marker_batch
from logkeel.storage.engine.producer_snapshot import (
    ProducerSnapshotEntry,
)
from logkeel.storage.errors import (
    CorruptRecordError,
)

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = (1 << 31) - 1
NO_COORDINATOR_EPOCH = -1

Buffer = bytes | bytearray | memoryview


# -- end-transaction markers -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    control_type: ControlRecordType
    coordinator_epoch: int
    timestamp: int


def read_end_txn_marker(header: BatchHeader, batch: Buffer) -> EndTxnMarker | None:
    """Decodes the marker in a control batch; None for an empty one (cleaned by compaction).

    ``batch`` holds the batch from its first byte. Raises CorruptRecordError.
    """
    try:
        decoded = decode_marker_batch(header, batch)
    except InvalidBatchError as exc:
        raise CorruptRecordError(f"marker batch at offset {header.base_offset}: {exc}") from exc
    if decoded is None:
        return None
    marker, timestamp = decoded
    return EndTxnMarker(marker.type, marker.coordinator_epoch, timestamp)


# -- per-producer state ----------------------------------------------------------------------


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is kept of one appended batch: enough to recognise and answer its retry."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        # Sequences wrap from Int32 max to 0, so the first is taken modulo 2**31.
        return (self.last_seq - self.offset_delta) % (INT32_MAX + 1)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """One producer id's state. ``batches`` is oldest first, at most NUM_BATCHES_TO_RETAIN."""

    __slots__ = (
        "producer_id",
        "producer_epoch",
        "coordinator_epoch",
        "last_timestamp",
        "current_txn_first_offset",
        "batches",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        coordinator_epoch: int = NO_COORDINATOR_EPOCH,
        last_timestamp: int = NO_TIMESTAMP,
        current_txn_first_offset: int | None = None,
        batches: Iterable[BatchMetadata] = (),
    ):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def maybe_update_producer_epoch(self, epoch: int) -> bool:
        # Sequences restart with each epoch, so the old epoch's batches can no longer match.
        if epoch == self.producer_epoch:
            return False
        self.batches.clear()
        self.producer_epoch = epoch
        return True

    def add_batch(
        self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        self.maybe_update_producer_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def end_txn(self, epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        self.maybe_update_producer_epoch(epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = None
        self.last_timestamp = timestamp

    def to_snapshot_entry(self) -> ProducerSnapshotEntry:
        return ProducerSnapshotEntry(
            producer_id=self.producer_id,
            epoch=self.producer_epoch,
            last_sequence=self.last_seq,
            last_offset=self.last_data_offset,
            offset_delta=self.last_offset_delta,
            timestamp=self.last_timestamp,
            coordinator_epoch=self.coordinator_epoch,
            current_txn_first_offset=(
                -1 if self.current_txn_first_offset is None else self.current_txn_first_offset
            ),
        )

    @classmethod
    def from_snapshot_entry(cls, e: ProducerSnapshotEntry) -> ProducerStateEntry:
        batches = (
            [BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp)]
            if e.last_offset >= 0
            else []
        )
        return cls(
            e.producer_id,
            e.epoch,
            e.coordinator_epoch,
            e.timestamp,
            e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
            batches,
        )

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
            f"coordinator_epoch={self.coordinator_epoch}, last_timestamp={self.last_timestamp}, "
            f"current_txn_first_offset={self.current_txn_first_offset}, batches={list(self.batches)})"
        )


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """A retried batch: the log answers with these instead of appending it again."""

    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the COMMIT/ABORT marker
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class SnapshotLoadResult:
    """What ``load_latest_snapshot`` did: the snapshot offset used (None: none usable) and the
    corrupt snapshot files it deleted on the way."""

    offset: int | None
    discarded: list[Path] = field(default_factory=list)
    producers: int = 0


@dataclass(slots=True)
class TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None


class TxnsByOffset:
    """Transactions keyed and ordered by first offset (Kafka uses a TreeMap)."""

    def __init__(self) -> None:
        self._by_offset: dict[int, TxnMetadata] = {}
        self._offsets: list[int] = []

    def put(self, txn: TxnMetadata) -> None:
        if txn.first_offset not in self._by_offset:
            bisect.insort(self._offsets, txn.first_offset)
        self._by_offset[txn.first_offset] = txn

    def pop(self, first_offset: int) -> TxnMetadata | None:
        txn = self._by_offset.pop(first_offset, None)
        if txn is not None:
            del self._offsets[bisect.bisect_left(self._offsets, first_offset)]
        return txn

    def first(self) -> TxnMetadata | None:
        return self._by_offset[self._offsets[0]] if self._offsets else None

    def clear(self) -> None:
        self._by_offset.clear()
        self._offsets.clear()

    def __iter__(self) -> Iterator[TxnMetadata]:
        return (self._by_offset[o] for o in list(self._offsets))

    def __len__(self) -> int:
        return len(self._offsets)


@dataclass(slots=True)
class StagedProducer:
    """A producer's state as validation sees it partway through one append."""

    epoch: int
    last_seq: int | None  # None: no batch of this append yet in the current epoch
    txn_open: bool
    coordinator_epoch: int
