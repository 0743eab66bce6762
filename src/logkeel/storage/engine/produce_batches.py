"""A produce or replication payload on its way into the log: split into checked batches (the
shared walker's STOP policy, Kafka's checks in Kafka's order) and, for LogAppendTime topics,
stamped with the broker's time."""

from __future__ import annotations

from logkeel.records.batch import (
    BatchHeader,
    compute_crc,
)
from logkeel.records.walk import BadBatch, BadKind, BatchPosition, split_batches
from logkeel.storage.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    StorageError,
)

_ATTR_TIMESTAMP_TYPE = 0x08


def parse_batches(
    data: bytes | bytearray | memoryview, max_batch_bytes: int
) -> list[BatchPosition]:
    """Validates every batch of a produce or replication payload; (position, header) each.

    Checks structure and CRC so that nothing corrupt reaches the disk; the distinct errors
    map to CORRUPT_MESSAGE and MESSAGE_TOO_LARGE.
    """
    if not data:
        raise CorruptRecordError("the request holds no record batch")
    batches = split_batches(data, max_batch_size=max_batch_bytes)
    if type(batches) is BadBatch:
        raise _produce_error(batches, max_batch_bytes)
    return batches  # type: ignore[return-value]


def _produce_error(bad: BadBatch, max_batch_bytes: int) -> StorageError:
    if bad.kind is BadKind.TOO_LARGE:
        return RecordTooLargeError(
            f"batch of {bad.size} bytes exceeds max.message.bytes={max_batch_bytes}"
        )
    if bad.kind is BadKind.CRC:
        return CorruptRecordError(f"batch at byte {bad.position} fails its CRC-32C check")
    if bad.header is None:
        return CorruptRecordError(f"{bad.size} trailing bytes after the last batch")
    return CorruptRecordError(f"batch at byte {bad.position}: {bad.reason}")


def stamp_log_append_time(batch: bytearray, header: BatchHeader, now: int) -> None:
    """LogAppendTime topics: the broker's time becomes the batch's max timestamp.

    This changes bytes under the CRC, so (unlike offset assignment) the CRC is recomputed.
    """
    attributes = header.attributes | _ATTR_TIMESTAMP_TYPE
    batch[21:23] = attributes.to_bytes(2, "big", signed=True)
    batch[35:43] = now.to_bytes(8, "big", signed=True)
    batch[17:21] = compute_crc(batch, 0, header.size).to_bytes(4, "big")
