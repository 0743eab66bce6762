"""The broker's configuration: ``server.properties`` plus ``--override key=value``, validated whole."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from logkeel.config.base import ConfigEntry, TypedConfig, install_attributes
from logkeel.config.definitions import BROKER_CONFIG_DEF, HOUR_MS, MINUTE_MS, TOPIC_CONFIG_DEF
from logkeel.config.listeners import (
    Listener,
    check_listener_ports,
    parse_csv,
    parse_listeners,
    parse_protocol_map,
)
from logkeel.config.properties import load_properties
from logkeel.config.types import (
    ConfigError,
    ConfigProblem,
    ConfigSource,
    ConfigType,
    format_value,
    to_property_string,
)

logger = logging.getLogger(__name__)

_ID_SYNONYMS = ("node.id", "broker.id")
LISTENER_PREFIX = "listener.name."


class BrokerConfig(TypedConfig):
    """Validated broker settings. Construct from a mapping, or from a file with ``from_properties``.

    Unknown keys are kept in ``originals`` and logged as warnings, as Kafka does (plugins and
    newer versions add keys); every invalid value is reported in one ``ConfigError``.
    """

    DEFINITION = BROKER_CONFIG_DEF

    def __init__(self, props: Mapping[str, object] | None = None, *, warn_unknown: bool = True):
        originals = {str(k): to_property_string(v) for k, v in (props or {}).items()}
        self._originals = MappingProxyType(originals)
        # listener.name.<name>.<key> are per-listener settings, read through listener_value.
        self._unknown = tuple(
            k for k in originals if k not in self.DEFINITION and not k.startswith(LISTENER_PREFIX)
        )
        for key in self._unknown if warn_unknown else ():
            logger.warning("Unknown broker config %r (value %r) is ignored", key, originals[key])

        raw = dict(originals)
        problems: list[ConfigProblem] = []
        _reconcile_ids(raw, problems)
        values, parse_problems = self.DEFINITION.parse(raw)
        problems[:0] = parse_problems
        bad = {p.key for p in problems}
        problems.extend(self._derive(values, bad))
        if problems:
            raise ConfigError(problems)
        self._values = MappingProxyType(values)

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def from_properties(
        cls,
        path: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, object] | Iterable[str] | None = None,
    ) -> BrokerConfig:
        """Load ``path`` (Java .properties syntax) if given, apply ``overrides`` on top, validate.

        ``overrides`` is a mapping or a list of ``"key=value"`` strings (the CLI's --override).
        Malformed overrides and invalid values are reported together.
        """
        props: dict[str, object] = dict(load_properties(path)) if path is not None else {}
        problems: list[ConfigProblem] = []
        if isinstance(overrides, Mapping):
            props.update(overrides)
        elif overrides is not None:
            for item in overrides:
                key, sep, value = item.partition("=")
                if not sep or not key.strip():
                    problems.append(ConfigProblem(item, None, "an override must be key=value"))
                else:
                    props[key.strip()] = value
        try:
            config = cls(props)
        except ConfigError as exc:
            raise ConfigError(problems + list(exc.problems)) from None
        if problems:
            raise ConfigError(problems)
        return config

    def updated(self, changes: Mapping[str, object]) -> BrokerConfig:
        """A new config with ``changes`` applied over this one's originals."""
        fresh = [k for k in changes if k not in self.DEFINITION and k not in self._originals]
        config = BrokerConfig({**self._originals, **changes}, warn_unknown=False)
        for key in fresh:
            logger.warning("Unknown broker config %r is ignored", key)
        return config

    # ---- raw access -------------------------------------------------------------------------

    @property
    def originals(self) -> Mapping[str, str]:
        """Every key as given (file, then overrides), including unknown ones."""
        return self._originals

    @property
    def unknown_keys(self) -> tuple[str, ...]:
        return self._unknown

    def is_set(self, name: str) -> bool:
        """Whether ``name`` was given explicitly (node.id and broker.id count for each other)."""
        if name in _ID_SYNONYMS:
            return any(n in self._originals for n in _ID_SYNONYMS)
        return name in self._originals

    # ---- effective values (Kafka derives these from several keys) ---------------------------

    @property
    def log_dirs(self) -> list[str]:
        """``log.dirs`` if set, else ``log.dir``, split on commas."""
        return list(self._log_dirs)

    @property
    def log_retention_ms(self) -> int:
        """``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours``; -1 = none."""
        return self._retention_ms

    @property
    def log_roll_ms(self) -> int:
        """``log.roll.ms`` if set, else ``log.roll.hours`` in ms."""
        return self._roll_ms

    @property
    def log_flush_interval_ms(self) -> int:
        """``log.flush.interval.ms`` if set, else ``log.flush.scheduler.interval.ms``."""
        return self._flush_interval_ms

    # ---- cluster membership (read by server/cluster_node.py) ----------------------------------
    @property
    def embedded_metadata(self) -> bool:
        """True for a single-node broker (no ``zookeeper.connect``)."""
        return not self._values["zookeeper.connect"]

    @property
    def listeners(self) -> list[Listener]:
        return list(self._listeners)

    @property
    def advertised_listeners(self) -> list[Listener]:
        """``advertised.listeners`` if set, else the bound ``listeners``."""
        return list(self._advertised)

    @property
    def listener_security_protocol_map(self) -> dict[str, str]:
        return dict(self._protocol_map)

    @property
    def per_ip_connection_limits(self) -> dict[str, int]:
        """``max.connections.per.ip.overrides`` parsed: host name or IP -> limit."""
        return dict(self._per_ip_overrides)

    @property
    def inter_broker_listener(self) -> str:
        """The listener other brokers are reached on: ``inter.broker.listener.name``, else
        the one named after ``security.inter.broker.protocol`` if that was set, else the
        listener named PLAINTEXT, else the first one."""
        return self._inter_broker_listener

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)."""
        return self._protocol_map.get(listener_name, listener_name)

    def listener_value(self, listener_name: str, key: str) -> Any:
        """Kafka's per-listener override ``listener.name.<name>.<key>`` (name lower-cased) if
        given, else the broker-wide ``key`` (None for a key that is not defined)."""
        full_key = f"{LISTENER_PREFIX}{listener_name.lower()}.{key}"
        override = self._originals.get(full_key)
        if override is not None and key in self.DEFINITION:
            try:
                return self.DEFINITION[key].parse(override)
            except ValueError as exc:
                raise ConfigError([ConfigProblem(full_key, override, str(exc))]) from None
        if override is not None:
            return override
        return self._values.get(key)

    def topic_default(self, topic_name: str) -> Any:
        """The server default of a topic-level config, resolved through its broker synonyms."""
        key = TOPIC_CONFIG_DEF[topic_name]
        if topic_name == "retention.ms":
            # Kafka turns any negative broker retention into -1 (unlimited); the topic-level
            # config itself only accepts -1.
            return self._retention_ms
        for name, scale in key.synonyms:
            value = self._values[name]
            if value is not None:
                return list(value) if isinstance(value, list) else value * scale
        return key.default

    # ---- DescribeConfigs --------------------------------------------------------------------

    def source(self, name: str) -> ConfigSource:
        self.get(name)
        return (
            ConfigSource.STATIC_BROKER_CONFIG if self.is_set(name) else ConfigSource.DEFAULT_CONFIG
        )

    def describe(self, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """Entries for ``names`` (all keys if None; undefined names are skipped, as Kafka does).

        Every broker key is read-only: logkeel has no dynamic broker configs.
        """
        wanted = self.DEFINITION if names is None else [n for n in names if n in self.DEFINITION]
        entries = []
        for name in wanted:
            key = self.DEFINITION[name]
            sensitive = key.type is ConfigType.PASSWORD
            value = None if sensitive else format_value(key.type, self._values[name])
            entries.append(ConfigEntry(name, value, self.source(name), sensitive, True))
        return entries

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self._originals.items())
        return f"BrokerConfig({given})"

    # ---- cross-key rules --------------------------------------------------------------------

    def _derive(self, values: dict[str, Any], bad: set[str]) -> list[ConfigProblem]:
        """Compute the effective values and check the rules that span keys.

        A rule is skipped when one of its keys already failed to parse, so each mistake is
        reported once.
        """
        problems: list[ConfigProblem] = []

        def ok(*names: str) -> bool:
            return not bad.intersection(names)

        dirs_key = "log.dirs" if values["log.dirs"] is not None else "log.dir"
        self._log_dirs = tuple(parse_csv(values[dirs_key]))
        if ok("log.dirs", "log.dir") and not self._log_dirs:
            problems.append(
                ConfigProblem(dirs_key, values[dirs_key], "at least one log directory is needed")
            )

        self._retention_ms, retention_key = _first_set(
            values,
            ("log.retention.ms", 1),
            ("log.retention.minutes", MINUTE_MS),
            ("log.retention.hours", HOUR_MS),
        )
        if self._retention_ms < 0:
            self._retention_ms = -1
        elif self._retention_ms == 0 and ok(retention_key):
            problems.append(
                ConfigProblem(retention_key, "0", "retention must be -1 (unlimited) or positive")
            )

        self._roll_ms, roll_key = _first_set(
            values, ("log.roll.ms", 1), ("log.roll.hours", HOUR_MS)
        )
        if self._roll_ms < 1 and ok(roll_key):
            problems.append(ConfigProblem(roll_key, str(self._roll_ms), "must be at least 1"))

        self._flush_interval_ms, _ = _first_set(
            values, ("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)
        )

        queued, request_max = values["queued.max.request.bytes"], values["socket.request.max.bytes"]
        if "queued.max.request.bytes" not in self._originals:
            # The default bound follows a larger socket.request.max.bytes (one frame must fit).
            values["queued.max.request.bytes"] = queued = max(queued, request_max)
        elif 0 < queued < request_max and ok(
            "queued.max.request.bytes", "socket.request.max.bytes"
        ):
            problems.append(
                ConfigProblem(
                    "queued.max.request.bytes",
                    str(queued),
                    f"must be -1, 0 or at least socket.request.max.bytes ({request_max})",
                )
            )
        self._per_ip_overrides: dict[str, int] = {}
        overrides = values["max.connections.per.ip.overrides"]
        for entry in filter(None, (e.strip() for e in overrides.split(","))):
            host, sep, count = entry.rpartition(":")
            if not sep or not host or not count.strip().isdigit():
                problems.append(
                    ConfigProblem(
                        "max.connections.per.ip.overrides",
                        overrides,
                        f"{entry!r} is not host:count",
                    )
                )
                continue
            self._per_ip_overrides[host.strip().strip("[]")] = int(count)
        if values["max.connections.per.ip"] == 0 and not overrides.strip():
            problems.append(
                ConfigProblem(
                    "max.connections.per.ip",
                    "0",
                    "0 is only allowed with max.connections.per.ip.overrides",
                )
            )
        problems.extend(self._derive_listeners(values))
        problems.extend(_check_consumer_group_bounds(values, ok))
        return problems

    def _derive_listeners(self, values: dict[str, Any]) -> list[ConfigProblem]:
        problems: list[ConfigProblem] = []
        self._protocol_map: dict[str, str] = {}
        self._listeners: tuple[Listener, ...] = ()
        self._advertised: tuple[Listener, ...] = ()
        try:
            self._protocol_map = parse_protocol_map(values["listener.security.protocol.map"])
        except ConfigError as exc:
            problems.extend(exc.problems)

        def load(key: str) -> tuple[Listener, ...]:
            try:
                found = tuple(parse_listeners(values[key], key))
            except ConfigError as exc:
                problems.extend(exc.problems)
                return ()
            for listener in found:
                if self._protocol_map and listener.name not in self._protocol_map:
                    problems.append(
                        ConfigProblem(
                            key,
                            values[key],
                            f"listener {listener.name} has no entry in "
                            "listener.security.protocol.map",
                        )
                    )
            return found

        before = len(problems)
        self._listeners = load("listeners")
        if len(problems) == before and not self._listeners:
            problems.append(ConfigProblem("listeners", values["listeners"], "no listener given"))
        problems.extend(check_listener_ports(list(self._listeners)))

        if values["advertised.listeners"] is None:
            self._advertised = self._listeners
        else:
            before = len(problems)
            self._advertised = load("advertised.listeners")
            if len(problems) == before and not self._advertised:
                problems.append(
                    ConfigProblem(
                        "advertised.listeners", values["advertised.listeners"], "no listener given"
                    )
                )
            names = {listener.name for listener in self._listeners}
            for listener in self._advertised:
                if listener.host == "0.0.0.0":
                    problems.append(
                        ConfigProblem(
                            "advertised.listeners",
                            values["advertised.listeners"],
                            "cannot advertise the non-routable address 0.0.0.0",
                        )
                    )
                if self._listeners and listener.name not in names:
                    problems.append(
                        ConfigProblem(
                            "advertised.listeners",
                            values["advertised.listeners"],
                            f"listener {listener.name} is not one of listeners",
                        )
                    )
        problems.extend(self._derive_inter_broker(values))
        return problems

    def _derive_inter_broker(self, values: dict[str, Any]) -> list[ConfigProblem]:
        names = [listener.name for listener in self._listeners]
        self._inter_broker_listener = names[0] if names else "PLAINTEXT"
        by_name, by_protocol = (
            values["inter.broker.listener.name"],
            "security.inter.broker.protocol",
        )
        if by_name is not None and self.is_set(by_protocol):
            return [
                ConfigProblem(
                    "inter.broker.listener.name",
                    by_name,
                    "set inter.broker.listener.name or security.inter.broker.protocol, not both",
                )
            ]
        if by_name is not None:
            key, wanted = "inter.broker.listener.name", by_name.strip().upper()
        elif self.is_set(by_protocol):
            key, wanted = by_protocol, values[by_protocol]
        elif "PLAINTEXT" in names or not names:
            key, wanted = "", "PLAINTEXT"
        else:
            return []
        self._inter_broker_listener = wanted
        if key and names and wanted not in names:
            return [
                ConfigProblem(
                    key,
                    values[key],
                    f"brokers would talk to each other on listener {wanted}, which is not one "
                    f"of listeners ({', '.join(names)})",
                )
            ]
        advertised = {listener.name for listener in self._advertised}
        if key and advertised and wanted not in advertised:
            return [
                ConfigProblem(
                    key, values[key], f"listener {wanted} is not one of advertised.listeners"
                )
            ]
        return []


def _check_consumer_group_bounds(
    values: Mapping[str, Any], ok: Callable[..., bool]
) -> list[ConfigProblem]:
    """Kafka's rules on the group.consumer.* timings: each within its min and max, and the
    heartbeat interval below the session timeout."""
    problems: list[ConfigProblem] = []
    for what in ("session.timeout.ms", "heartbeat.interval.ms"):
        key, low, high = (f"group.consumer.{p}{what}" for p in ("", "min.", "max."))
        if not ok(key, low, high):
            continue
        if not values[low] <= values[key] <= values[high]:
            problems.append(
                ConfigProblem(
                    key,
                    str(values[key]),
                    f"must be between {low} and {high} ({values[low]} and {values[high]})",
                )
            )
    session, interval = "group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms"
    if ok(session, interval) and values[interval] >= values[session]:
        problems.append(
            ConfigProblem(interval, str(values[interval]), f"must be less than {session}")
        )
    if ok("group.consumer.assignors") and not values["group.consumer.assignors"]:
        problems.append(ConfigProblem("group.consumer.assignors", "", "needs an assignor"))
    return problems


def _reconcile_ids(raw: dict[str, str], problems: list[ConfigProblem]) -> None:
    """node.id and broker.id are one setting under two names (Kafka's populateSynonyms)."""
    node, broker = raw.get("node.id"), raw.get("broker.id")
    if node is not None and broker is None:
        raw["broker.id"] = node
    elif broker is not None and node is None:
        raw["node.id"] = broker
    elif node is not None and broker is not None and node.strip() != broker.strip():
        problems.append(
            ConfigProblem("node.id", node, f"differs from broker.id={broker!r}; set one of them")
        )


def _first_set(values: Mapping[str, Any], *keys: tuple[str, int]) -> tuple[int, str]:
    """The first non-null of ``keys`` times its unit factor, and the key it came from."""
    for name, scale in keys:
        value = values[name]
        if value is not None:
            return value * scale, name
    raise AssertionError(f"{keys[-1][0]} has a default")


install_attributes(BrokerConfig)
