"""The topic configs a partition checks on every append, resolved once per metadata change."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from logkeel.config import TopicConfig
from logkeel.config.throttled_replicas import NO_THROTTLE, ThrottledReplicas
from logkeel.records.batch import CompressionType
from logkeel.records.validator import ClientBatchRules

__all__ = ["TopicSettings"]

# compression.type -> the codec batches are stored with; "producer" keeps the producer's.
_CODECS = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
_LZ4_DEFAULT_LEVEL = 9  # compression.lz4.level's default
# The KIP-390 level config of each codec that has one.
_LEVEL_CONFIGS = {
    CompressionType.GZIP: "compression.gzip.level",
    CompressionType.LZ4: "compression.lz4.level",
    CompressionType.ZSTD: "compression.zstd.level",
}


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """Topic configs read on every append (Kafka's names in the comments)."""

    min_insync_replicas: int = 1  # min.insync.replicas
    timestamp_before_max_ms: int | None = None  # message.timestamp.before.max.ms
    timestamp_after_max_ms: int | None = None  # message.timestamp.after.max.ms
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime
    compacted: bool = False  # cleanup.policy holds compact
    codec: CompressionType | None = None  # compression.type (None: producer)
    level: int | None = None  # compression.<codec>.level (None: the codec's default)
    rules: ClientBatchRules = ClientBatchRules()
    # {leader,follower}.replication.throttled.replicas
    leader_throttled: ThrottledReplicas = NO_THROTTLE
    follower_throttled: ThrottledReplicas = NO_THROTTLE

    @classmethod
    def from_topic_config(cls, config: TopicConfig) -> TopicSettings:
        before = _int_config(config, "message.timestamp.before.max.ms")
        after = _int_config(config, "message.timestamp.after.max.ms")
        append_time = _str_config(config, "message.timestamp.type") == "LogAppendTime"
        policy = _config(config, "cleanup.policy") or ()
        names = policy.split(",") if isinstance(policy, str) else policy
        compacted = isinstance(names, Collection) and "compact" in names
        codec = _CODECS.get(_str_config(config, "compression.type") or "producer")
        level = None
        if codec in _LEVEL_CONFIGS:
            level = _int_config(config, _LEVEL_CONFIGS[codec])
            if codec == CompressionType.GZIP and level == -1:
                level = None  # Kafka's -1: zlib's default
            elif codec == CompressionType.LZ4 and level == _LZ4_DEFAULT_LEVEL:
                # Kafka's Java lz4 stream uses the fast compressor at the default level and
                # the high-compression one for any other.
                level = None
        return cls(
            min_insync_replicas=_int_config(config, "min.insync.replicas") or 1,
            timestamp_before_max_ms=before,
            timestamp_after_max_ms=after,
            log_append_time=append_time,
            compacted=compacted,
            codec=codec,
            level=level,
            rules=ClientBatchRules(compacted, append_time, before, after),
            leader_throttled=_throttled(config, "leader.replication.throttled.replicas"),
            follower_throttled=_throttled(config, "follower.replication.throttled.replicas"),
        )


def _config(config: TopicConfig, name: str) -> object:
    try:
        return config.get(name)
    except KeyError:
        return None


def _throttled(config: TopicConfig, name: str) -> ThrottledReplicas:
    value = _config(config, name)
    return ThrottledReplicas.parse(value) if isinstance(value, list) and value else NO_THROTTLE


def _int_config(config: TopicConfig, name: str) -> int | None:
    value = _config(config, name)
    return None if value is None else int(value)  # type: ignore[call-overload]


def _str_config(config: TopicConfig, name: str) -> str | None:
    value = _config(config, name)
    return None if value is None else str(value)
