"""Where a config value comes from: Kafka's synonym lists and config sources for topic and
broker configs, as DescribeConfigs (and CreateTopics v5+) report them."""

from __future__ import annotations

from logkeel.config import (
    BROKER_CONFIG_DEF,
    TOPIC_CONFIG_DEF,
    BrokerConfig,
    ConfigSource,
    ConfigType,
    TopicConfig,
    broker_synonyms,
)
from logkeel.config.types import format_value

__all__ = [
    "Synonym",
    "broker_key_synonyms",
    "broker_synonym_names",
    "topic_source",
    "topic_synonyms",
]

# (config name, value or None when sensitive, where it is set)
Synonym = tuple[str, str | None, ConfigSource]


def topic_synonyms(
    broker_config: BrokerConfig, topic_config: TopicConfig, name: str
) -> list[Synonym]:
    """Kafka's synonym list of a topic config: the topic override, then for each broker key
    that defaults it (highest priority first) its static value if set and its default."""
    key = TOPIC_CONFIG_DEF[name]
    out: list[Synonym] = []
    if name in topic_config.overrides:
        out.append(
            (name, format_value(key.type, topic_config.get(name)), ConfigSource.TOPIC_CONFIG)
        )
    for broker_name in broker_synonyms(name):
        out.extend(broker_key_synonyms(broker_config, broker_name))
    return out


def broker_key_synonyms(broker_config: BrokerConfig, name: str) -> list[Synonym]:
    key = BROKER_CONFIG_DEF[name]
    sensitive = key.type is ConfigType.PASSWORD
    out: list[Synonym] = []
    if broker_config.is_set(name):
        value = None if sensitive else format_value(key.type, broker_config.get(name))
        out.append((name, value, ConfigSource.STATIC_BROKER_CONFIG))
    if key.default is not None:
        value = None if sensitive else format_value(key.type, key.default)
        out.append((name, value, ConfigSource.DEFAULT_CONFIG))
    return out


def broker_synonym_names(name: str) -> tuple[str, ...]:
    """Broker keys that stand for one setting (``log.roll.ms`` and ``log.roll.hours``)."""
    topic = BROKER_CONFIG_DEF[name].topic
    if topic is None:
        return (name,)
    group = TOPIC_CONFIG_DEF[topic].synonyms  # (broker key, scale to the topic's unit)
    names = tuple(n for n, _ in group)
    # Kafka treats keys that are one setting in different units (log.roll.ms/hours) as
    # synonyms of each other; a fallback key (log.flush.scheduler.interval.ms behind
    # log.flush.interval.ms) is a synonym only of the key it stands in for.
    if name == names[0] or any(scale != 1 for _, scale in group):
        return names
    return (name,)


def topic_source(broker_config: BrokerConfig, topic_config: TopicConfig, name: str) -> int:
    synonyms = topic_synonyms(broker_config, topic_config, name)
    return int(synonyms[0][2]) if synonyms else int(ConfigSource.DEFAULT_CONFIG)
