"""Per-topic configuration: explicit overrides on top of the broker's ``log.*`` defaults."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from logkeel.config.base import ConfigEntry, TypedConfig, install_attributes
from logkeel.config.broker import BrokerConfig
from logkeel.config.definitions import (
    BROKER_CONFIG_DEF,
    KAFKA_TOPIC_CONFIGS_NOT_SUPPORTED,
    TOPIC_CONFIG_DEF,
)
from logkeel.config.types import (
    ConfigError,
    ConfigProblem,
    ConfigSource,
    format_value,
    to_property_string,
)


class TopicConfig(TypedConfig):
    """The resolved config of one topic.

    ``overrides`` holds what was set explicitly for the topic, as strings (what CreateTopics and
    AlterConfigs carry and what the metadata store persists); every other value is the broker's
    server default, e.g. ``segment.bytes`` from ``log.segment.bytes`` and ``retention.ms`` from the
    effective ``log.retention.ms``/``minutes``/``hours``.
    """

    DEFINITION = TOPIC_CONFIG_DEF

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, object] | None = None):
        raw = {str(k): to_property_string(v) for k, v in (overrides or {}).items()}
        parsed = _parse_overrides(raw)
        values = {
            name: parsed[name] if name in parsed else broker.topic_default(name)
            for name in self.DEFINITION
        }
        self._broker = broker
        self._overrides = MappingProxyType(raw)
        self._values = MappingProxyType(values)

    @classmethod
    def from_broker(
        cls, broker: BrokerConfig, overrides: Mapping[str, object] | None = None
    ) -> TopicConfig:
        return cls(broker, overrides)

    @property
    def overrides(self) -> Mapping[str, str]:
        """The explicitly set topic configs, as given."""
        return self._overrides

    @property
    def broker(self) -> BrokerConfig:
        return self._broker

    def with_overrides(
        self, set_: Mapping[str, object] | None = None, delete: Iterable[str] = ()
    ) -> TopicConfig:
        """A new config with some overrides set and others removed (IncrementalAlterConfigs)."""
        merged: dict[str, object] = dict(self._overrides)
        for name in delete:
            merged.pop(name, None)
        merged.update(set_ or {})
        return TopicConfig(self._broker, merged)

    def source(self, name: str) -> ConfigSource:
        self.get(name)
        if name in self._overrides:
            return ConfigSource.TOPIC_CONFIG
        synonyms = (broker_name for broker_name, _ in self.DEFINITION[name].synonyms)
        if any(self._broker.is_set(broker_name) for broker_name in synonyms):
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def describe(self, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs rows for ``names`` (all if None; undefined names are skipped)."""
        wanted = self.DEFINITION if names is None else [n for n in names if n in self.DEFINITION]
        return [
            ConfigEntry(
                name,
                format_value(self.DEFINITION[name].type, self._values[name]),
                self.source(name),
                False,
                False,
            )
            for name in wanted
        ]

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self._overrides.items())
        return f"TopicConfig({given})"


def validate_topic_overrides(overrides: Mapping[str, object]) -> None:
    """Check topic configs as CreateTopics/AlterConfigs would; raise ConfigError (Kafka's
    INVALID_CONFIG) naming every unknown key, bad value and setting not supported yet."""
    _parse_overrides({str(k): to_property_string(v) for k, v in overrides.items()})


def _parse_overrides(raw: Mapping[str, str]) -> dict[str, Any]:
    problems: list[ConfigProblem] = []
    for name, value in raw.items():
        if name in TOPIC_CONFIG_DEF:
            continue
        if name in KAFKA_TOPIC_CONFIGS_NOT_SUPPORTED:
            problems.append(ConfigProblem(name, value, "not supported yet by logkeel"))
            continue
        reason = "unknown topic config"
        topic_name = BROKER_CONFIG_DEF[name].topic if name in BROKER_CONFIG_DEF else None
        if topic_name is not None:
            reason += f" ({name} is the broker default of {topic_name})"
        elif name in BROKER_CONFIG_DEF:
            reason += " (it is a broker config)"
        problems.append(ConfigProblem(name, value, reason))
    values, value_problems = TOPIC_CONFIG_DEF.parse(raw)
    problems.extend(value_problems)
    if problems:
        raise ConfigError(problems)
    return {name: values[name] for name in raw}


install_attributes(TopicConfig)
