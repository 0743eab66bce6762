"""A consumer group's own configs (KIP-848's GROUP config resource, DescribeConfigs and
IncrementalAlterConfigs resource type 32): ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms``, each within the broker's ``group.consumer.min/max.*``
bounds, the interval below the session timeout; a group without an override takes the broker's
``group.consumer.*`` value. Pure: the overrides come from the metadata store."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from logkeel.server.group.consumer_group import ConsumerGroupSettings

__all__ = [
    "CONSUMER_HEARTBEAT_INTERVAL",
    "CONSUMER_SESSION_TIMEOUT",
    "GROUP_CONFIG_NAMES",
    "GroupConfigError",
    "GroupConfigRow",
    "apply_group_config_ops",
    "describe_group_configs",
    "group_timings",
    "validate_group_configs",
]

CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
GROUP_CONFIG_NAMES = (CONSUMER_HEARTBEAT_INTERVAL, CONSUMER_SESSION_TIMEOUT)
_BROKER_KEYS = {
    CONSUMER_SESSION_TIMEOUT: "group.consumer.session.timeout.ms",
    CONSUMER_HEARTBEAT_INTERVAL: "group.consumer.heartbeat.interval.ms",
}
DOCS = {
    CONSUMER_SESSION_TIMEOUT: "The timeout to detect client failures when using the consumer "
    "group protocol.",
    CONSUMER_HEARTBEAT_INTERVAL: "The heartbeat interval given to the members.",
}
# AlterConfigOp.OpType ids.
_SET, _DELETE = 0, 1


class GroupConfigError(ValueError):
    """An override refused (INVALID_CONFIG), with Kafka's message."""


@dataclass(frozen=True, slots=True)
class GroupConfigRow:
    name: str
    value: str
    overridden: bool  # set for the group (else the broker's value)
    broker_key: str


def _broker_values(settings: ConsumerGroupSettings) -> dict[str, int]:
    return {
        CONSUMER_SESSION_TIMEOUT: settings.session_timeout_ms,
        CONSUMER_HEARTBEAT_INTERVAL: settings.heartbeat_interval_ms,
    }


def group_timings(settings: ConsumerGroupSettings, overrides: Mapping[str, str]) -> tuple[int, int]:
    """The group's (session timeout, heartbeat interval) in ms. An override the broker's bounds
    no longer admit (they changed since) is ignored for the broker's value."""
    values = _broker_values(settings)
    bounds = {
        CONSUMER_SESSION_TIMEOUT: settings.session_timeout_bounds_ms,
        CONSUMER_HEARTBEAT_INTERVAL: settings.heartbeat_interval_bounds_ms,
    }
    out = dict(values)
    for name, (low, high) in bounds.items():
        raw = overrides.get(name)
        if raw is not None and raw.strip().lstrip("-").isdigit() and low <= int(raw) <= high:
            out[name] = int(raw)
    if out[CONSUMER_HEARTBEAT_INTERVAL] >= out[CONSUMER_SESSION_TIMEOUT]:
        return values[CONSUMER_SESSION_TIMEOUT], values[CONSUMER_HEARTBEAT_INTERVAL]
    return out[CONSUMER_SESSION_TIMEOUT], out[CONSUMER_HEARTBEAT_INTERVAL]


def validate_group_configs(settings: ConsumerGroupSettings, overrides: Mapping[str, str]) -> None:
    """Raises GroupConfigError for an unknown name, a value that is not an int, one outside
    the broker's bounds, or an interval not below the session timeout."""
    unknown = sorted(set(overrides) - set(GROUP_CONFIG_NAMES))
    if unknown:
        raise GroupConfigError(f"Unknown group config name: {', '.join(unknown)}")
    values = _broker_values(settings)
    for name, raw in overrides.items():
        try:
            values[name] = int(raw.strip())
        except ValueError:
            raise GroupConfigError(
                f"Invalid value {raw} for configuration {name}: Not a number of type INT"
            ) from None
    for name, (low, high) in (
        (CONSUMER_SESSION_TIMEOUT, settings.session_timeout_bounds_ms),
        (CONSUMER_HEARTBEAT_INTERVAL, settings.heartbeat_interval_bounds_ms),
    ):
        broker = _BROKER_KEYS[name]
        min_key, max_key = (broker.replace("consumer.", f"consumer.{m}.") for m in ("min", "max"))
        if values[name] < low:
            raise GroupConfigError(f"{name} must be greater than or equal to {min_key} ({low})")
        if values[name] > high:
            raise GroupConfigError(f"{name} must be less than or equal to {max_key} ({high})")
    if values[CONSUMER_HEARTBEAT_INTERVAL] >= values[CONSUMER_SESSION_TIMEOUT]:
        raise GroupConfigError(
            f"{CONSUMER_HEARTBEAT_INTERVAL} must be less than {CONSUMER_SESSION_TIMEOUT}"
        )


def apply_group_config_ops(
    current: Mapping[str, str], operations: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs' SET and DELETE (APPEND and SUBTRACT are
    for LIST configs, which groups have none of)."""
    out = dict(current)
    for name, op, value in operations:
        if op == _SET and value is not None:
            out[name] = value
        elif op == _DELETE:
            out.pop(name, None)
        else:
            verb = {2: "APPEND", 3: "SUBTRACT"}.get(op, str(op))
            raise GroupConfigError(f"Can't {verb} to key {name} because its type is not LIST.")
    return out


def describe_group_configs(
    settings: ConsumerGroupSettings, overrides: Mapping[str, str], names: Iterable[str] | None
) -> list[GroupConfigRow]:
    """The group's configs (all, or ``names`` among them): its override, else the broker's."""
    values = _broker_values(settings)
    wanted = GROUP_CONFIG_NAMES if names is None else [n for n in names if n in values]
    return [
        GroupConfigRow(n, overrides.get(n, str(values[n])), n in overrides, _BROKER_KEYS[n])
        for n in wanted
    ]
