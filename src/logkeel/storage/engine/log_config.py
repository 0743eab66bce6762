"""The per-partition settings the storage engine needs, with Kafka's topic-config defaults.

Storage takes plain values so it can run without the broker's config machinery (offline
tools, the Spark segment reader); `from_topic_config` adapts a resolved TopicConfig.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms (-1: unlimited)
    retention_bytes: int = -1  # retention.bytes (-1: unlimited)
    flush_messages: int = INT64_MAX  # flush.messages
    flush_ms: int = INT64_MAX  # flush.ms
    max_message_bytes: int = 1048588  # max.message.bytes
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms
    producer_snapshot_interval_ms: int = 30_000  # producer.state.snapshot.interval.ms (logkeel)
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms
    cleanup_policy: tuple[str, ...] = ("delete",)  # cleanup.policy: delete, compact or both
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    delete_retention_ms: int = 86_400_000  # delete.retention.ms (how long tombstones stay)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms

    @classmethod
    def from_topic_config(cls, topic: Any, **broker_level: int) -> LogConfig:
        """Builds from any object with a ``get(name)`` returning resolved topic configs."""

        def value(name: str, default: Any) -> Any:
            try:
                v = topic.get(name)
            except KeyError:
                return default
            return default if v is None else v

        # A slots dataclass keeps no defaults on the class (``cls.segment_bytes`` is the slot's
        # descriptor), so the defaults come from an instance.
        d = cls()
        return cls(
            segment_bytes=int(value("segment.bytes", d.segment_bytes)),
            segment_ms=int(value("segment.ms", d.segment_ms)),
            segment_index_bytes=int(value("segment.index.bytes", d.segment_index_bytes)),
            index_interval_bytes=int(value("index.interval.bytes", d.index_interval_bytes)),
            retention_ms=int(value("retention.ms", d.retention_ms)),
            retention_bytes=int(value("retention.bytes", d.retention_bytes)),
            flush_messages=int(value("flush.messages", d.flush_messages)),
            flush_ms=int(value("flush.ms", d.flush_ms)),
            max_message_bytes=int(value("max.message.bytes", d.max_message_bytes)),
            message_timestamp_type=str(value("message.timestamp.type", d.message_timestamp_type)),
            file_delete_delay_ms=int(value("file.delete.delay.ms", d.file_delete_delay_ms)),
            cleanup_policy=_policies(value("cleanup.policy", d.cleanup_policy)),
            min_cleanable_dirty_ratio=float(
                value("min.cleanable.dirty.ratio", d.min_cleanable_dirty_ratio)
            ),
            delete_retention_ms=int(value("delete.retention.ms", d.delete_retention_ms)),
            min_compaction_lag_ms=int(value("min.compaction.lag.ms", d.min_compaction_lag_ms)),
            **broker_level,
        )

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        """Whether the log cleaner compacts this log (cleanup.policy holds ``compact``)."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether retention deletes old segments (cleanup.policy holds ``delete``)."""
        return "delete" in self.cleanup_policy


def _policies(raw: Any) -> tuple[str, ...]:
    """cleanup.policy as a tuple, from a resolved list or a raw ``"compact,delete"`` string."""
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    return tuple(str(p).strip().lower() for p in items if str(p).strip())
