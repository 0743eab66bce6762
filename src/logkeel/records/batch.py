"""RecordBatch v2 headers, read in place without decoding the records.

Layout (big-endian), offsets from the start of the batch:

    0  baseOffset int64        8  batchLength int32      12 partitionLeaderEpoch int32
    16 magic int8              17 crc uint32 (CRC-32C of attributes..end)
    21 attributes int16        23 lastOffsetDelta int32  27 baseTimestamp int64
    35 maxTimestamp int64      43 producerId int64       51 producerEpoch int16
    53 baseSequence int32      57 recordsCount int32     61 records...

Because the CRC starts at ``attributes``, the broker may rewrite ``baseOffset`` and
``partitionLeaderEpoch`` in place when it assigns offsets, without recomputing it.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

import crc32c as _crc32c

LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
HEADER_SIZE = 61
# length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headersCount
MIN_RECORD_SIZE = 7
MAGIC_V2 = 2
CRC_START = 21
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LENGTH = struct.Struct(">qi")

_ATTR_COMPRESSION_MASK = 0x07
_ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_MAX_CODEC = max(CompressionType)


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class InvalidBatchError(ValueError):
    """The bytes do not hold a well-formed v2 record batch (bad magic, length or CRC)."""


def crc32c(data: bytes | memoryview) -> int:
    return _crc32c.crc32c(data)


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of one record batch.

    A NamedTuple rather than a frozen dataclass: headers are made for every batch on every
    append and scan, and tuple construction is several times cheaper.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
        if len(buf) - pos < HEADER_SIZE:
            raise InvalidBatchError(f"batch header needs {HEADER_SIZE} bytes, got {len(buf) - pos}")
        return _new_header(cls, _HEADER.unpack_from(buf, pos))

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies on disk and on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & _ATTR_COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & _ATTR_TIMESTAMP_TYPE else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _ATTR_DELETE_HORIZON)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap at 2**31 like Kafka's."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


# BatchHeader(*fields) without the Python-level __new__ a NamedTuple generates (the fields are
# already a tuple of the right length): headers are made for every batch appended or scanned.
_new_header = tuple.__new__
unpack_header = _HEADER.unpack_from  # (buf, pos) -> the 13 header fields, BatchHeader's order
pack_header = _HEADER.pack  # (*the 13 header fields) -> the 61 header bytes


def header_from_fields(fields: tuple[int, ...]) -> BatchHeader:
    return _new_header(BatchHeader, fields)


def validate_structure(header: BatchHeader, available: int | None = None) -> None:
    """Checks what can be checked without the payload: magic and length bounds."""
    if header.magic != MAGIC_V2:
        raise InvalidBatchError(f"unsupported magic {header.magic} (only v2 is supported)")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatchError(f"batch length {header.batch_length} is below the header size")
    if available is not None and header.size > available:
        raise InvalidBatchError(
            f"batch length {header.batch_length} runs past the end of the data ({available} bytes)"
        )
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise InvalidBatchError("negative lastOffsetDelta or recordsCount")
    if header.attributes & _ATTR_COMPRESSION_MASK > _MAX_CODEC:
        raise InvalidBatchError(
            f"unknown compression codec {header.attributes & _ATTR_COMPRESSION_MASK}"
        )


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    return crc32c(memoryview(buf)[pos + CRC_START : pos + size])


def crc_valid(buf: bytes | bytearray | memoryview, pos: int = 0) -> bool:
    header = BatchHeader.parse(buf, pos)
    return compute_crc(buf, pos, header.size) == header.crc


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    _LEADER_EPOCH.pack_into(buf, pos + 12, epoch)


def peek_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Size of the batch starting at ``pos`` from its first 12 bytes, or None if too short."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    length: int = _LENGTH.unpack_from(buf, pos)[1]
    return length + LOG_OVERHEAD
