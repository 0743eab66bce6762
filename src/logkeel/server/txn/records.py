"""The records of ``__transaction_state``, in Kafka's formats (so a dump reads like Kafka's).

Key (TransactionLogKey v0): int16 version 0, string transactional id.
Value (TransactionLogValue): int16 version, then producer id (int64), producer epoch (int16),
transaction timeout ms (int32), status (int8, ``TxnStatus``), the partitions (nullable array of
(topic string, int32 array)), last update and start timestamps (int64). Version 1 is the same
with compact lengths and tagged fields (previous/next producer id, client transaction version),
which logkeel reads and skips; it writes version 0. A null value (tombstone) removes an expired
transactional id.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from logkeel.server.group.records import (
    RecordFormatError,
    RecordReader,
    RecordWriter,
    record_version,
)

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TxnLogValue",
    "TxnStatus",
    "decode_txn_key",
    "decode_txn_value",
    "encode_txn_key",
    "encode_txn_value",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
_KEY_VERSION = 0
_VALUE_VERSION = 0


class TxnStatus(enum.IntEnum):
    """Kafka's TransactionState ids, as stored in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TxnStatus
    partitions: Mapping[str, tuple[int, ...]]
    last_update_ms: int
    start_ms: int


def encode_txn_key(transactional_id: str) -> bytes:
    w = RecordWriter(_KEY_VERSION)
    w.string(transactional_id)
    return w.build()


def decode_txn_key(key: bytes) -> str:
    version = record_version(key)
    if version != _KEY_VERSION:
        raise RecordFormatError(f"unknown transaction log key version {version}")
    return RecordReader(key, 2, False).string()


def encode_txn_value(value: TxnLogValue) -> bytes:
    w = RecordWriter(_VALUE_VERSION)
    w.int64(value.producer_id)
    w.int16(value.producer_epoch)
    w.int32(value.timeout_ms)
    w.int8(int(value.status))
    w.int32(len(value.partitions))
    for topic, partitions in sorted(value.partitions.items()):
        w.string(topic)
        w.int32(len(partitions))
        for p in sorted(partitions):
            w.int32(p)
    w.int64(value.last_update_ms)
    w.int64(value.start_ms)
    return w.build()


def decode_txn_value(value: bytes) -> TxnLogValue:
    version = record_version(value)
    if version not in (0, 1):
        raise RecordFormatError(f"unknown transaction log value version {version}")
    r = RecordReader(value, 2, version >= 1)
    producer_id = r.int64()
    epoch = r.int16()
    timeout_ms = r.int32()
    try:
        status = TxnStatus(r.int8())
    except ValueError as exc:
        raise RecordFormatError(f"unknown transaction status: {exc}") from None
    partitions: dict[str, tuple[int, ...]] = {}
    for _ in range(r.array_length()):
        topic = r.string()
        partitions[topic] = tuple(r.int32() for _ in range(r.array_length()))
        r.tagged_fields()
    last_update_ms = r.int64()
    start_ms = r.int64()
    r.tagged_fields()
    return TxnLogValue(producer_id, epoch, timeout_ms, status, partitions, last_update_ms, start_ms)
