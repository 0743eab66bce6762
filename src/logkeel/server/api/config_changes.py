"""Changing topic configs: the checks a new set of overrides must pass, and
IncrementalAlterConfigs' operations (SET, DELETE, APPEND, SUBTRACT) applied to a topic's
overrides."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kio.schema.errors import ErrorCode

from logkeel.config import (
    TOPIC_CONFIG_DEF,
    BrokerConfig,
    ConfigError,
    ConfigType,
    TopicConfig,
    validate_topic_overrides,
)
from logkeel.server.api.responses import EntryError

__all__ = [
    "OP_APPEND",
    "OP_DELETE",
    "OP_SET",
    "OP_SUBTRACT",
    "apply_incremental",
    "validate_topic_configs",
]

# AlterConfigOp.OpType ids.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def validate_topic_configs(broker_config: BrokerConfig, overrides: Mapping[str, str]) -> None:
    """INVALID_CONFIG naming every unknown key and bad value, including clashes with the
    broker's defaults (a topic's resolved config must be valid, not only its overrides)."""
    try:
        validate_topic_overrides(overrides)
        TopicConfig.from_broker(broker_config, overrides)
    except ConfigError as exc:
        raise EntryError(ErrorCode.invalid_config, str(exc)) from None


def apply_incremental(
    current: Mapping[str, str],
    operations: Iterable[tuple[str, int, str | None]],
    effective: TopicConfig,
) -> dict[str, str]:
    """New topic overrides from ``current`` after IncrementalAlterConfigs ``operations``
    (name, op, value): SET, DELETE, APPEND and SUBTRACT (the last two on LIST configs, starting
    from the effective value, default included, as Kafka does)."""
    result = dict(current)
    for name, op, value in operations:
        if op == OP_SET:
            assert value is not None
            result[name] = value
        elif op == OP_DELETE:
            result.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            key = TOPIC_CONFIG_DEF.get(name)
            verb = "APPEND" if op == OP_APPEND else "SUBTRACT"
            if key is None:
                raise EntryError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
            if key.type is not ConfigType.LIST:
                raise EntryError(
                    ErrorCode.invalid_config,
                    f"Can't {verb} to key {name} because its type is not LIST.",
                )
            if name in result:
                items = [i for i in result[name].split(",") if i]
            else:
                items = list(effective.get(name) or [])
            for item in (value or "").split(","):
                if op == OP_APPEND and item not in items:
                    items.append(item)
                elif op == OP_SUBTRACT and item in items:
                    items.remove(item)
            result[name] = ",".join(items)
        else:
            raise EntryError(ErrorCode.invalid_request, f"Unknown operations type {op}")
    return result
