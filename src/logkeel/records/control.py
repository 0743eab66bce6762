"""Control records: the transaction markers (and KRaft's types, recognised but not built).

A control batch (attributes bit 5) holds one record whose

- key is ``version int16 (0), type int16`` — ABORT = 0, COMMIT = 1, and
- value, for ABORT/COMMIT (an *end transaction marker*), is
  ``version int16 (0), coordinatorEpoch int32``.

Newer versions may append fields, so decoding reads the known prefix and ignores the rest, as
Kafka does; a negative version means corruption.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from .batch import BatchHeader, CompressionType, InvalidBatchError
from .record import Buffer, decode_records

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1
    # KRaft's; listed so that a log written by a KRaft cluster can be read.
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    type: ControlRecordType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.type == ControlRecordType.COMMIT


def encode_control_key(control_type: ControlRecordType) -> bytes:
    if control_type == ControlRecordType.UNKNOWN:
        raise ValueError("cannot encode an UNKNOWN control record type")
    return _KEY.pack(CONTROL_KEY_VERSION, control_type)


def decode_control_key(key: bytes | None) -> ControlRecordType:
    """The type of a control record from its key; UNKNOWN for types this code does not know
    (Kafka's clients skip those rather than fail)."""
    if key is None or len(key) < _KEY.size:
        raise InvalidBatchError(f"control record key must have at least {_KEY.size} bytes")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidBatchError(f"invalid control record key version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def encode_end_txn_value(coordinator_epoch: int) -> bytes:
    return _END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def encode_end_txn_marker(marker: EndTransactionMarker) -> tuple[bytes, bytes]:
    """(key, value) of the control record for an end transaction marker."""
    if marker.type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise ValueError(f"not a transaction marker type: {marker.type!r}")
    return encode_control_key(marker.type), encode_end_txn_value(marker.coordinator_epoch)


def decode_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker:
    control_type = decode_control_key(key)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidBatchError(
            f"control record of type {int(control_type)} ({control_type.name}) is not a txn marker"
        )
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise InvalidBatchError(
            f"end transaction marker value must have at least {_END_TXN_VALUE.size} bytes"
        )
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise InvalidBatchError(f"invalid end transaction marker version {version}")
    return EndTransactionMarker(control_type, coordinator_epoch)


def decode_marker_batch(
    header: BatchHeader, batch: Buffer
) -> tuple[EndTransactionMarker, int] | None:
    """The end-transaction marker of the control batch ``batch`` (from its first byte) and its
    record's timestamp; None for a batch compaction emptied.

    A marker batch holds one record, and Kafka writes markers uncompressed: anything else is
    corrupt. Raises InvalidBatchError.
    """
    if header.records_count == 0:
        return None
    if header.compression != CompressionType.NONE:
        raise InvalidBatchError(
            f"control batch at offset {header.base_offset} is compressed ({header.compression.name})"
        )
    _, records = decode_records(batch, 0, verify_crc=False)
    record = records[0]
    return decode_end_txn_marker(record.key, record.value), record.timestamp
