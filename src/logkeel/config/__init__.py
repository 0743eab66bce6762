"""Broker and topic configs with Kafka's names and defaults, validated at start-up.

One definition table (``definitions.BROKER_KEYS``) describes every broker key; the topic-level
keys are derived from it, so ``BrokerConfig`` and ``TopicConfig`` are two views of one mechanism::

    cfg = BrokerConfig.from_properties("server.properties", ["log.dirs=/data/a,/data/b"])
    cfg.log_dirs, cfg.log_segment_bytes, cfg.get("log.index.interval.bytes")
    topic = TopicConfig.from_broker(cfg, {"retention.ms": "3600000"})
    topic.segment_bytes, topic.retention_ms, topic.describe()
"""

from logkeel.config.base import ConfigEntry
from logkeel.config.broker import BrokerConfig
from logkeel.config.definitions import (
    BROKER_CONFIG_DEF,
    BROKER_KEYS,
    TOPIC_CONFIG_DEF,
    broker_synonyms,
)
from logkeel.config.docs import config_reference
from logkeel.config.listeners import Listener, parse_listener, parse_listeners
from logkeel.config.properties import load_properties, parse_properties
from logkeel.config.topic import TopicConfig, validate_topic_overrides
from logkeel.config.types import (
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigProblem,
    ConfigSource,
    ConfigType,
)

__all__ = [
    "BROKER_CONFIG_DEF",
    "BROKER_KEYS",
    "LONG_MAX",
    "TOPIC_CONFIG_DEF",
    "BrokerConfig",
    "ConfigDef",
    "ConfigEntry",
    "ConfigError",
    "ConfigKey",
    "ConfigProblem",
    "ConfigSource",
    "ConfigType",
    "Listener",
    "TopicConfig",
    "broker_synonyms",
    "config_reference",
    "load_properties",
    "parse_listener",
    "parse_listeners",
    "parse_properties",
    "validate_topic_overrides",
]
