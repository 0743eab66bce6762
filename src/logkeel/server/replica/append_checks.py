"""What a leader refuses before an append reaches the log: the refusal, and Kafka's
LogValidator checks of client batches beyond structure and CRC (the log checks those)."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from logkeel.records.batch import NO_TIMESTAMP, InvalidBatchError
from logkeel.records.walk import iter_headers
from logkeel.server.replica.topic_settings import TopicSettings
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["AppendRejected", "check_client_batches"]


class AppendRejected(Exception):
    """An append refused before it reached the log; ``code`` is the partition's answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        super().__init__(message)


def check_client_batches(
    records: bytes | bytearray | memoryview, settings: TopicSettings, tp: TopicPartition
) -> None:
    """No control batches from clients, and CreateTime timestamps within the topic's bounds;
    raises ``AppendRejected``."""
    before = settings.timestamp_before_max_ms
    after = settings.timestamp_after_max_ms
    now = int(time.time() * 1000)
    try:
        for _, header in iter_headers(records):
            if header.is_control:
                raise AppendRejected(
                    ErrorCode.invalid_record, "clients may not write control batches"
                )
            if settings.log_append_time or header.records_count == 0:
                continue
            for ts in (header.base_timestamp, header.max_timestamp):
                if ts == NO_TIMESTAMP:
                    continue
                if (before is not None and now - ts > before) or (
                    after is not None and ts - now > after
                ):
                    raise AppendRejected(
                        ErrorCode.invalid_timestamp,
                        f"timestamp {ts} of a batch for {tp} is out of the range allowed "
                        "by message.timestamp.before.max.ms/after.max.ms",
                    )
    except InvalidBatchError:
        return  # the log's own parse reports it as CORRUPT_MESSAGE
