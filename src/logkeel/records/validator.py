"""Kafka's LogValidator checks of one batch a client produced, beyond structure and CRC (the
batch walker checks those).

Every record is walked by the one record decoder (``columns.scan_records``: the compiled one
when built, ``record.decode_section`` otherwise), after decompression for a compressed batch;
records are decoded into objects only to name the ones a refusal is about. What it refuses, and how Kafka words the answer:

- ``corrupt`` (CORRUPT_MESSAGE): a payload that does not decompress, records whose framing
  is broken (lengths, varints, header counts, bytes left over, fewer or more records than
  ``recordsCount``), offset deltas that do not rise;
- ``invalid_record`` (INVALID_RECORD): batch-level rules for a client's v2 batch (base offset
  0, ``recordsCount`` equal to ``lastOffsetDelta + 1`` and positive, no control batch, a
  producer id with a sequence and an epoch, transactional only with a producer id) and, with
  the record's index, a null key on a compacted topic;
- ``invalid_timestamp`` (INVALID_TIMESTAMP): CreateTime records outside the topic's
  ``message.timestamp.before/after.max.ms``, each with its index;
- ``too_large`` (MESSAGE_TOO_LARGE): a compressed payload that decompresses to more than the
  caller allows (``MAX_DECOMPRESSED_BYTES`` unless told), stopped there.

Offsets 0..n-1 follow from the decoder's rule (strictly rising deltas, none above
``lastOffsetDelta``) and ``recordsCount == lastOffsetDelta + 1``.

The decompressed records section is handed back, so that a topic recompressing batches
(``compression.type``) does not decompress them twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .batch import (
    HEADER_SIZE,
    NO_TIMESTAMP,
    BatchHeader,
    InvalidBatchError,
)
from .columns import RecordScan, scan_records
from .compression import DecompressedTooLarge, decompress, decompress_bounded
from .record import decode_section

Buffer = bytes | bytearray | memoryview

CORRUPT = "corrupt"
INVALID_RECORD = "invalid_record"
INVALID_TIMESTAMP = "invalid_timestamp"
TOO_LARGE = "too_large"
# logkeel's own bound (Kafka streams records and has none): a few KiB of zstd or gzip can
# stand for gigabytes, and the records of a produced batch are walked in memory. Producers'
# batches are far below it (librdkafka's batch.size defaults to 1 MB uncompressed).
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
# Kafka's answer shows the first few record errors in its message.
_SHOWN_ERRORS = 3
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08


class RecordError(NamedTuple):
    """Kafka's ProduceResponse ``record_errors`` entry: the record's index in its batch."""

    batch_index: int
    message: str


@dataclass(frozen=True, slots=True)
class BatchRefusal:
    kind: str  # CORRUPT, INVALID_RECORD, INVALID_TIMESTAMP or TOO_LARGE
    message: str
    record_errors: tuple[RecordError, ...] = ()


@dataclass(frozen=True, slots=True)
class ClientBatchRules:
    """The topic's settings the checks depend on."""

    compacted: bool = False
    log_append_time: bool = False
    timestamp_before_max_ms: int | None = None
    timestamp_after_max_ms: int | None = None


class CheckedBatch(NamedTuple):
    """A batch that passed: its records section (decompressed, or a view of the request's
    bytes) and the largest record timestamp (NO_TIMESTAMP without records)."""

    section: Buffer
    max_timestamp: int


def check_client_batch(
    buf: Buffer,
    pos: int,
    header: BatchHeader,
    rules: ClientBatchRules,
    now_ms: int,
    max_decompressed: int = MAX_DECOMPRESSED_BYTES,
) -> CheckedBatch | BatchRefusal:
    """Checks the batch at ``pos`` of ``buf`` (framed and CRC-checked by the walker); a
    compressed one may decompress to at most ``max_decompressed`` bytes."""
    refusal = _batch_refusal(header)
    if refusal is not None:
        return refusal
    try:
        section, scan = _scan(buf, pos, header, max_decompressed)
    except DecompressedTooLarge as exc:
        return BatchRefusal(TOO_LARGE, str(exc))
    except InvalidBatchError as exc:
        index = getattr(exc, "record_index", None)
        errors = () if index is None else (RecordError(index, str(exc)),)
        return BatchRefusal(CORRUPT, f"batch of {header.records_count} records: {exc}", errors)
    if rules.compacted and scan.null_keys:
        records = decode_section(header, section, 0, len(section))
        return _record_refusal(
            INVALID_RECORD,
            [
                RecordError(i, "Compacted topic cannot accept message without key")
                for i, r in enumerate(records)
                if r.key is None
            ],
        )
    if not (rules.log_append_time or header.attributes & _LOG_APPEND_TIME):
        refusal = _timestamp_refusal(header, section, scan, rules, now_ms)
        if refusal is not None:
            return refusal
    return CheckedBatch(section, scan.max_timestamp)


def records_problem(buf: Buffer, pos: int, header: BatchHeader) -> str | None:
    """Why the records of the batch at ``pos`` do not decode (a stored batch: ``log check``),
    or None."""
    try:
        _scan(buf, pos, header)
    except InvalidBatchError as exc:
        return str(exc)
    return None


def _scan(
    buf: Buffer, pos: int, header: BatchHeader, limit: int | None = None
) -> tuple[Buffer, RecordScan]:
    codec = header.attributes & _CODEC_MASK
    view = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    if not codec:
        section: Buffer = view
    elif limit is None:
        section = decompress(codec, view)
    else:
        section = decompress_bounded(codec, view, limit)
    return section, scan_records(header, section, 0, len(section))


def _batch_refusal(header: BatchHeader) -> BatchRefusal | None:
    """Kafka's validateBatch for a client's v2 batch (and a transactional one's producer id)."""
    why = None
    if header.base_offset != 0:
        why = f"the baseOffset of a produced batch must be 0, not {header.base_offset}"
    elif header.records_count <= 0:
        why = f"invalid recordsCount {header.records_count}"
    elif header.records_count != header.last_offset_delta + 1:
        why = (
            f"inconsistent batch: lastOffsetDelta {header.last_offset_delta} and "
            f"recordsCount {header.records_count}"
        )
    elif header.is_control:
        why = "clients may not write control batches"
    elif header.producer_id >= 0 and header.base_sequence < 0:
        why = f"invalid sequence {header.base_sequence} for producer id {header.producer_id}"
    elif header.producer_id >= 0 and header.producer_epoch < 0:
        why = f"invalid epoch {header.producer_epoch} for producer id {header.producer_id}"
    elif header.is_transactional and header.producer_id < 0:
        why = "a transactional batch needs a producer id"
    return None if why is None else BatchRefusal(INVALID_RECORD, why)


def _timestamp_refusal(
    header: BatchHeader, section: Buffer, scan: RecordScan, rules: ClientBatchRules, now_ms: int
) -> BatchRefusal | None:
    before, after = rules.timestamp_before_max_ms, rules.timestamp_after_max_ms
    low = now_ms - before if before is not None else None
    high = now_ms + after if after is not None else None
    # The usual batch passes on the scan's min and max, without a look at each record.
    if (low is None or scan.min_timestamp >= low) and (high is None or scan.max_timestamp <= high):
        return None
    records = decode_section(header, section, 0, len(section))
    errors = [
        RecordError(
            i,
            f"timestamp {r.timestamp} is out of range: it must be within [{low}, {high}] "
            "(message.timestamp.before.max.ms/after.max.ms)",
        )
        for i, r in enumerate(records)
        if r.timestamp != NO_TIMESTAMP
        and (low is not None and r.timestamp < low or high is not None and r.timestamp > high)
    ]
    return _record_refusal(INVALID_TIMESTAMP, errors) if errors else None


def _record_refusal(kind: str, errors: list[RecordError]) -> BatchRefusal:
    shown = "; ".join(f"record {e.batch_index}: {e.message}" for e in errors[:_SHOWN_ERRORS])
    return BatchRefusal(
        kind,
        f"{len(errors)} record(s) of the batch rejected (first {min(len(errors), _SHOWN_ERRORS)}"
        f" shown): {shown}",
        tuple(errors),
    )
