"""The topic configs a partition checks on every append, resolved once per metadata change."""

from __future__ import annotations

from dataclasses import dataclass

from logkeel.config import TopicConfig

__all__ = ["TopicSettings"]


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """Topic configs read on every append (Kafka's names in the comments)."""

    min_insync_replicas: int = 1  # min.insync.replicas
    timestamp_before_max_ms: int | None = None  # message.timestamp.before.max.ms
    timestamp_after_max_ms: int | None = None  # message.timestamp.after.max.ms
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime

    @classmethod
    def from_topic_config(cls, config: TopicConfig) -> TopicSettings:
        return cls(
            min_insync_replicas=_int_config(config, "min.insync.replicas") or 1,
            timestamp_before_max_ms=_int_config(config, "message.timestamp.before.max.ms"),
            timestamp_after_max_ms=_int_config(config, "message.timestamp.after.max.ms"),
            log_append_time=_str_config(config, "message.timestamp.type") == "LogAppendTime",
        )


def _int_config(config: TopicConfig, name: str) -> int | None:
    try:
        value = config.get(name)
    except KeyError:
        return None
    return None if value is None else int(value)


def _str_config(config: TopicConfig, name: str) -> str | None:
    try:
        value = config.get(name)
    except KeyError:
        return None
    return None if value is None else str(value)
