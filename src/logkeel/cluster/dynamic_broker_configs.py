"""Dynamic broker configs (Kafka's DynamicConfig.Broker), pure: which exist, their checks, and
the change an AlterConfigs or IncrementalAlterConfigs makes to a broker's set. logkeel's
broker configs are otherwise static (server.properties, --override); the dynamic ones are the
replication throttles a reassignment sets and removes.

They live in ZooKeeper as Kafka keeps them, /config/brokers/<id> and /config/brokers/<default>
(``{"version":1,"config":{...}}``, `zk_broker_configs`); a broker's own value wins over the
cluster-wide default."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = [
    "DEFAULT_ENTITY",
    "DYNAMIC_BROKER_CONFIGS",
    "altered",
    "check",
    "effective",
    "rate",
]

DEFAULT_ENTITY = "<default>"

# name -> doc. Both are bytes/s, Kafka's default Long.MAX_VALUE (unthrottled).
DYNAMIC_BROKER_CONFIGS: Mapping[str, str] = {
    "leader.replication.throttled.rate": (
        "Bytes/s a leader sends to the replicas its topics list in "
        "leader.replication.throttled.replicas while they are not in sync (dynamic only)."
    ),
    "follower.replication.throttled.rate": (
        "Bytes/s a follower fetches for the replicas its topics list in "
        "follower.replication.throttled.replicas while they are not in sync (dynamic only)."
    ),
}

_OP_SET, _OP_DELETE = 0, 1


def check(name: str, value: str | None) -> str | None:
    """Why ``value`` cannot be ``name``'s (None: it can; a None value removes it)."""
    if name not in DYNAMIC_BROKER_CONFIGS:
        return f"{name} is not a dynamic broker config"
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return f"Invalid value {value} for configuration {name}: Not a number of type LONG"
    if number < 0:
        return f"Invalid value {value} for configuration {name}: Value must be at least 0"
    return None


def altered(
    current: Mapping[str, str], changes: Iterable[tuple[str, int, str | None]], incremental: bool
) -> dict[str, str]:
    """The broker's set after ``changes`` (name, operation, value): AlterConfigs replaces the
    whole set, IncrementalAlterConfigs sets (0) or deletes (1) each name. Raises ValueError
    with Kafka's message for anything else."""
    out = dict(current) if incremental else {}
    for name, op, value in changes:
        if incremental and op not in (_OP_SET, _OP_DELETE):
            raise ValueError(f"{name} is not a list: only SET and DELETE apply")
        why = check(name, None if incremental and op == _OP_DELETE else value)
        if why is not None:
            raise ValueError(why)
        if incremental and op == _OP_DELETE:
            out.pop(name, None)
        elif value is not None:
            out[name] = value.strip()
    return out


def effective(own: Mapping[str, str], default: Mapping[str, str]) -> dict[str, str]:
    return {**default, **own}


def rate(configs: Mapping[str, str], name: str) -> float | None:
    """A throttle rate in bytes/s, None when unset (unthrottled)."""
    value = configs.get(name)
    return None if value is None else float(int(value))
