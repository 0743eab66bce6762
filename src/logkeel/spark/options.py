"""The options of Spark's built-in Kafka connector, parsed and checked the way it does.

Spark lower-cases option names before a Python data source sees them, so every lookup here is
by lower-case name while messages use the documented camelCase spelling.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# Special offsets in startingOffsets/endingOffsets JSON, as in Spark and Kafka's ListOffsets.
LATEST = -1
EARLIEST = -2

# Consumer and producer settings Spark refuses because the connector manages them itself.
_UNSUPPORTED_KAFKA_OPTIONS = {
    "auto.offset.reset": "set source option 'startingOffsets' instead",
    "key.deserializer": "keys are always read as bytes",
    "value.deserializer": "values are always read as bytes",
    "key.serializer": "keys are written as bytes or strings",
    "value.serializer": "values are written as bytes or strings",
    "enable.auto.commit": "the source does not commit offsets to Kafka; Spark checkpoints them",
    "interceptor.classes": "interceptors are not supported",
}


# Options of Spark's Kafka source this one does not have: refused rather than ignored.
_REFUSED_SOURCE_OPTIONS = {
    "fetchOffset.numRetries": "the driver's offset requests use the client's own retries "
    "(kafka.retries, kafka.retry.backoff.ms)",
    "fetchOffset.retryIntervalMs": "the driver's offset requests use the client's own retries "
    "(kafka.retry.backoff.ms)",
    "maxRecordsPerPartition": "not built; 'minPartitions' spreads large ranges over more tasks",
}


def refuse_unsupported_source_options(options: Mapping[str, str]) -> None:
    for name, why in _REFUSED_SOURCE_OPTIONS.items():
        if get(options, name) is not None:
            raise OptionError(f"option '{name}' is not supported by the logkeel source: {why}")


class OptionError(ValueError):
    """An option is missing, malformed or not allowed here (Spark: IllegalArgumentException)."""


def get(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = options.get(name.lower())
    return default if value is None else value


def get_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = get(options, name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option '{name}' must be 'true' or 'false', not {value!r}")
    return lowered == "true"


def get_choice(options: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (case-insensitive), the first by default."""
    value = get(options, name)
    if value is None:
        return choices[0]
    lowered = value.strip().lower()
    if lowered not in choices:
        raise OptionError(f"option '{name}' must be one of {', '.join(choices)}, not {value!r}")
    return lowered


def get_int(
    options: Mapping[str, str], name: str, default: int | None, minimum: int = 0
) -> int | None:
    value = get(options, name)
    if value is None:
        return default
    try:
        n = int(value.strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, not {value!r}") from None
    if n < minimum:
        raise OptionError(f"option '{name}' must be at least {minimum}, not {n}")
    return n


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options, without the prefix: client settings passed through."""
    params = {}
    for key, value in options.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _UNSUPPORTED_KAFKA_OPTIONS:
            raise OptionError(
                f"Kafka option '{name}' is not supported: {_UNSUPPORTED_KAFKA_OPTIONS[name]}"
            )
        params[name] = value
    return params


ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def isolation_level(params: Mapping[str, str]) -> str:
    """``kafka.isolation.level``: read_uncommitted unless set (Spark's Java consumer default;
    librdkafka's own default is read_committed, so the source always sets it)."""
    level = params.get("isolation.level", ISOLATION_LEVELS[0]).strip().lower()
    if level not in ISOLATION_LEVELS:
        raise OptionError(
            f"Kafka option 'isolation.level' must be one of {', '.join(ISOLATION_LEVELS)}, "
            f"not {params['isolation.level']!r}"
        )
    return level


def bootstrap_servers(options: Mapping[str, str]) -> str:
    servers = get(options, "kafka.bootstrap.servers")
    if not servers:
        raise OptionError("option 'kafka.bootstrap.servers' must be specified")
    return servers


# -- which topics and partitions ----------------------------------------------------------------


@dataclass(frozen=True)
class TopicSelection:
    """Exactly one of ``subscribe`` (topics), ``subscribePattern`` (regex), ``assign``
    (partitions); or nothing at all where ``required`` is False (every topic)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()
    everything: bool = False
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, required: bool = True) -> TopicSelection:
        given = [
            n for n in ("subscribe", "subscribePattern", "assign") if get(options, n) is not None
        ]
        if len(given) > 1:
            raise OptionError(
                f"only one of the options 'subscribe', 'subscribePattern', 'assign' can be "
                f"specified, got {', '.join(given)}"
            )
        if not given:
            if required:
                raise OptionError(
                    "one of the options 'subscribe', 'subscribePattern', 'assign' must be specified"
                )
            return cls(everything=True)
        name = given[0]
        value = get(options, name) or ""
        if name == "subscribe":
            topics = tuple(t.strip() for t in value.split(",") if t.strip())
            if not topics:
                raise OptionError(f"no topics to subscribe to in 'subscribe' = {value!r}")
            return cls(topics=topics)
        if name == "subscribePattern":
            if not value.strip():
                raise OptionError("pattern to subscribe is empty")
            try:
                regex = re.compile(value.strip())
            except re.error as exc:
                raise OptionError(f"invalid 'subscribePattern' {value!r}: {exc}") from None
            return cls(pattern=value.strip(), _regex=regex)
        return cls(assigned=_parse_assign(value))

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is selected (for ``assign``: whether any of its partitions is)."""
        if self.everything:
            return True
        if self.topics:
            return topic in self.topics
        if self._regex is not None:
            # Kafka matches subscription patterns against the whole topic name.
            return self._regex.fullmatch(topic) is not None
        return any(t == topic for t, _ in self.assigned)

    def selects(self, topic: str, partition: int) -> bool:
        if self.assigned:
            return (topic, partition) in self.assigned
        return self.matches(topic)


def _parse_assign(value: str) -> tuple[tuple[str, int], ...]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in ps)
        for ps in parsed.values()
    ):
        raise OptionError(
            f'expected e.g. {{"topicA":[0,1],"topicB":[0,1]}} for \'assign\', got {value!r}'
        )
    pairs = tuple(sorted({(t, p) for t, ps in parsed.items() for p in ps}))
    if not pairs:
        raise OptionError(f"no partitions to assign in 'assign' = {value!r}")
    return pairs


# -- starting and ending offsets ----------------------------------------------------------------


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``, ``latest``, or per-partition offsets (-2 earliest, -1 latest); partitions the
    JSON leaves out take ``default``."""

    default: int
    specific: tuple[tuple[str, int, int], ...] = ()

    def for_partition(self, topic: str, partition: int) -> int:
        for t, p, offset in self.specific:
            if t == topic and p == partition:
                return offset
        return self.default

    def to_json(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for t, p, offset in self.specific:
            out.setdefault(t, {})[str(p)] = offset
        return out


def parse_offsets(
    options: Mapping[str, str],
    name: str,
    default: str,
    *,
    allow_earliest: bool = True,
    allow_latest: bool = True,
) -> OffsetSpec:
    value = (get(options, name) or default).strip()
    lowered = value.lower()
    what = "starting" if name.startswith("starting") else "ending"
    if lowered == "earliest":
        if not allow_earliest:
            raise OptionError(f"'{name}' can't be 'earliest' ({what} offset)")
        return OffsetSpec(EARLIEST)
    if lowered == "latest":
        if not allow_latest:
            raise OptionError(f"'{name}' can't be 'latest' for batch queries ({what} offset)")
        return OffsetSpec(LATEST)
    specific = _partition_json(value, name, '{"topicA":{"0":23,"1":-1}}')
    for topic, p, offset in specific:
        if offset < EARLIEST:
            raise OptionError(f"'{name}': offset {offset} of {topic}-{p} is negative")
        if offset == EARLIEST and not allow_earliest:
            raise OptionError(f"'{name}': {topic}-{p} can't be earliest (-2) ({what} offset)")
        if offset == LATEST and not allow_latest:
            raise OptionError(f"'{name}': {topic}-{p} can't be latest (-1) for batch queries")
    # Partitions the JSON leaves out (e.g. ones created later) start at earliest, end at latest.
    return OffsetSpec(EARLIEST if what == "starting" else LATEST, specific)


@dataclass(frozen=True)
class TimestampSpec:
    """Epoch-millisecond timestamps to turn into offsets (the first offset at or after each)."""

    default: int | None
    specific: tuple[tuple[str, int, int], ...] = ()

    def for_partition(self, topic: str, partition: int) -> int | None:
        for t, p, ts in self.specific:
            if t == topic and p == partition:
                return ts
        return self.default


def parse_timestamps(options: Mapping[str, str], prefix: str) -> TimestampSpec | None:
    """``<prefix>Timestamp`` (one timestamp for all partitions) or ``<prefix>OffsetsByTimestamp``
    (JSON per partition); None if neither is set. As in Spark, the single timestamp wins."""
    single = get(options, f"{prefix}Timestamp")
    if single is not None:
        try:
            return TimestampSpec(int(single.strip()))
        except ValueError:
            raise OptionError(
                f"'{prefix}Timestamp' must be epoch milliseconds, not {single!r}"
            ) from None
    name = f"{prefix}OffsetsByTimestamp"
    value = get(options, name)
    if value is None:
        return None
    return TimestampSpec(None, _partition_json(value, name, '{"topicA":{"0":1700000000000}}'))


def _partition_json(value: str, name: str, example: str) -> tuple[tuple[str, int, int], ...]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise OptionError(f"expected e.g. {example} for '{name}', got {value!r}")
    out = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"'{name}': the value of topic {topic!r} must be a JSON object")
        for p, number in partitions.items():
            if (
                not (isinstance(number, int) and not isinstance(number, bool))
                or not str(p).isdigit()
            ):
                raise OptionError(f"'{name}': bad entry {p!r}: {number!r} for topic {topic!r}")
            out.append((topic, int(p), number))
    return tuple(sorted(out))
