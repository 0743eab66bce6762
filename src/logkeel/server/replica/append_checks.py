"""What a leader refuses or rewrites before a client's append reaches the log: Kafka's
LogValidator checks of every batch (``records/validator.py``) and the topic's
``compression.type`` (a batch written with another codec is recompressed, ``maxTimestamp``
corrected as Kafka does), before the log lock is taken."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from logkeel.records.batch import HEADER_SIZE, NO_TIMESTAMP
from logkeel.records.recompress import rebuild_batch
from logkeel.records.validator import (
    CORRUPT,
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    MAX_DECOMPRESSED_BYTES,
    TOO_LARGE,
    BatchRefusal,
    RecordError,
    check_client_batch,
)
from logkeel.records.walk import BatchPosition
from logkeel.server.replica.topic_settings import TopicSettings
from logkeel.storage.engine.produce_batches import parse_batches
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["AppendRejected", "prepare_client_batches"]

Buffer = bytes | bytearray | memoryview

_CODES = {
    CORRUPT: ErrorCode.corrupt_message,
    INVALID_RECORD: ErrorCode.invalid_record,
    INVALID_TIMESTAMP: ErrorCode.invalid_timestamp,
    TOO_LARGE: ErrorCode.message_too_large,
}
_LOG_APPEND_TIME = 0x08


class AppendRejected(Exception):
    """An append refused before it reached the log; ``code`` is the partition's answer,
    ``record_errors`` the records it names (Produce's record_errors)."""

    def __init__(
        self, code: ErrorCode, message: str, record_errors: tuple[RecordError, ...] = ()
    ) -> None:
        self.code = code
        self.record_errors = record_errors
        super().__init__(message)


def prepare_client_batches(
    records: Buffer, settings: TopicSettings, tp: TopicPartition, max_batch_bytes: int
) -> tuple[Buffer, list[BatchPosition]]:
    """The batches of a client's records, each validated; the records as they are to be
    written (rewritten only when a batch is recompressed or its maxTimestamp corrected).

    Raises ``AppendRejected`` for a refused batch, the log's CORRUPT_MESSAGE and
    MESSAGE_TOO_LARGE errors for one that is not framed, fails its CRC or is too large."""
    batches = parse_batches(records, max_batch_bytes)
    now = int(time.time() * 1000)
    rules = settings.rules
    codec = settings.codec
    parts: list[Buffer] | None = None
    view = memoryview(records)
    # A topic that allows huge batches gets room for their records once decompressed.
    limit = max(MAX_DECOMPRESSED_BYTES, 4 * max_batch_bytes)
    for i, (pos, header) in enumerate(batches):
        checked = check_client_batch(records, pos, header, rules, now, limit)
        if type(checked) is BatchRefusal:
            raise AppendRejected(
                _CODES[checked.kind], f"{tp}: {checked.message}", checked.record_errors
            )
        # Kafka keeps a CreateTime batch's maxTimestamp true to its records.
        max_ts = checked.max_timestamp  # type: ignore[union-attr]
        fix_max = (
            not settings.log_append_time
            and not header.attributes & _LOG_APPEND_TIME
            and max_ts != NO_TIMESTAMP
            and max_ts != header.max_timestamp
        )
        if fix_max or codec is not None and codec != header.compression:
            if parts is None:
                parts = [view[p : p + h.size] for p, h in batches[:i]]
            parts.append(
                rebuild_batch(
                    header,
                    checked.section,  # type: ignore[union-attr]
                    header.compression if codec is None else codec,
                    level=settings.level,
                    max_timestamp=max_ts if fix_max else None,
                    stored=view[pos + HEADER_SIZE : pos + header.size],
                )
            )
        elif parts is not None:
            parts.append(view[pos : pos + header.size])
    if parts is None:
        return records, batches
    rewritten = b"".join(parts)
    # A batch recompressed larger than the topic allows is refused, as Kafka does.
    return rewritten, parse_batches(rewritten, max_batch_bytes)
