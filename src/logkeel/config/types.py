"""The config definition mechanism: typed keys, validators and a definition that parses a whole map.

Both the broker and the topic configs are instances of ``ConfigDef``; neither hand-writes a field.
Values are parsed the way Kafka's ConfigDef parses them (trimmed strings, Java integer widths,
``true``/``false`` in any case, comma lists), so a ``server.properties`` that Kafka accepts is
accepted here with the same meaning.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple, Protocol


class ConfigType(IntEnum):
    """Value types; the numbers are DescribeConfigs' ``config_type`` ids."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where a value came from; the numbers are DescribeConfigs' ``config_source`` ids."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigProblem(NamedTuple):
    """One rejected setting: the key, the value as given, and why."""

    key: str
    value: str | None
    reason: str

    def __str__(self) -> str:
        shown = "" if self.value is None else f"={self.value!r}"
        return f"{self.key}{shown}: {self.reason}"


class ConfigError(ValueError):
    """One or more settings are invalid; ``problems`` lists every one of them.

    Reporting all bad keys at once lets an operator fix a ``server.properties`` in one pass.
    """

    def __init__(self, problems: Iterable[ConfigProblem] | str):
        if isinstance(problems, str):
            self.problems: tuple[ConfigProblem, ...] = ()
            super().__init__(problems)
            return
        self.problems = tuple(problems)
        if len(self.problems) == 1:
            message = f"Invalid configuration: {self.problems[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            message = f"Invalid configuration ({len(self.problems)} problems):\n{lines}"
        super().__init__(message)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.problems)


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
LONG_MAX = INT64_MAX  # Java's Long.MAX_VALUE, Kafka's "never" for many intervals

_INTEGER = re.compile(r"[+-]?[0-9]+")
# Java's Double.parseDouble accepts a trailing d/f type suffix; Python's float() does not.
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[dDfF]?")
_LIST_SPLIT = re.compile(r"\s*,\s*")
_INT_BOUNDS = {
    ConfigType.SHORT: (INT16_MIN, INT16_MAX),
    ConfigType.INT: (INT32_MIN, INT32_MAX),
    ConfigType.LONG: (INT64_MIN, INT64_MAX),
}


def parse_value(config_type: ConfigType, raw: str) -> Any:
    """Parse one string the way Kafka's ConfigDef does; raise ValueError with the reason."""
    text = raw.strip()
    if config_type is ConfigType.BOOLEAN:
        lowered = text.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
        raise ValueError("expected true or false")
    if config_type in _INT_BOUNDS:
        low, high = _INT_BOUNDS[config_type]
        # int() alone would take "1_000" and non-ASCII digits, which Java rejects.
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"not a number of type {config_type.name}")
        number = int(text)
        if not low <= number <= high:
            raise ValueError(f"out of range for type {config_type.name} [{low}, {high}]")
        return number
    if config_type is ConfigType.DOUBLE:
        if not _DOUBLE.fullmatch(text):
            raise ValueError("not a number of type DOUBLE")
        body = text[:-1] if text[-1] in "dDfF" else text
        return float(body.replace("Infinity", "inf"))
    if config_type is ConfigType.LIST:
        # Kafka keeps empty items inside the list ("a,,b"); validators decide if they are legal.
        return [] if not text else _LIST_SPLIT.split(text)
    return text  # STRING, CLASS, PASSWORD


def format_value(config_type: ConfigType, value: Any) -> str | None:
    """The string form DescribeConfigs reports (Kafka's ConfigDef.convertToString)."""
    if value is None:
        return None
    if config_type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if config_type is ConfigType.LIST:
        return ",".join(str(item) for item in value)
    if config_type is ConfigType.DOUBLE:
        return repr(float(value))
    return str(value)


def to_property_string(value: object) -> str:
    """Turn a Python value given in code (``{"log.segment.bytes": 1024}``) into a property string."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


class Validator(Protocol):
    def check(self, value: Any) -> str | None:
        """Return why ``value`` is not acceptable, or None if it is."""

    def describe(self) -> str:
        """The valid values, as the config docs print them."""


@dataclass(frozen=True, slots=True)
class Range:
    """Numbers in [min, max]; either bound may be open. ``min_exclusive`` makes min a strict bound."""

    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False

    def check(self, value: Any) -> str | None:
        if isinstance(value, float) and math.isnan(value):
            return "must be a number"
        if self.min is not None:
            if self.min_exclusive and value <= self.min:
                return f"must be greater than {self.min}"
            if not self.min_exclusive and value < self.min:
                return f"must be at least {self.min}"
        if self.max is not None and value > self.max:
            return f"must be no more than {self.max}"
        return None

    def describe(self) -> str:
        opening = "(" if self.min_exclusive else "["
        if self.max is None:
            return f"{opening}{self.min},...]"
        if self.min is None:
            return f"[...,{self.max}]"
        return f"{opening}{self.min},...,{self.max}]"


@dataclass(frozen=True, slots=True)
class OneOf:
    """One of a fixed set of values, compared exactly (Kafka's ValidString is case-sensitive)."""

    choices: tuple[Any, ...]

    def check(self, value: Any) -> str | None:
        if value in self.choices:
            return None
        # An empty choice (a setting that may be left unset) reads as such, not as ", x".
        return f"must be one of {', '.join(repr(c) if c == '' else str(c) for c in self.choices)}"

    def describe(self) -> str:
        return "[" + ", ".join(str(c) for c in self.choices) + "]"


@dataclass(frozen=True, slots=True)
class EachOneOf:
    """A list whose every item is one of a fixed set (Kafka's ValidList)."""

    choices: tuple[str, ...]

    def check(self, value: Any) -> str | None:
        bad = [item for item in value if item not in self.choices]
        if bad:
            return f"{', '.join(repr(b) for b in bad)} not in {', '.join(self.choices)}"
        return None

    def describe(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True, slots=True)
class AnyOf:
    """Values any one of ``rules`` accepts (Kafka's gzip level: [1,...,9] or -1)."""

    rules: tuple[Validator, ...]

    def check(self, value: Any) -> str | None:
        reasons = [rule.check(value) for rule in self.rules]
        if any(reason is None for reason in reasons):
            return None
        return f"must be within {self.describe()}"

    def describe(self) -> str:
        return " or ".join(rule.describe() for rule in self.rules)


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One row of a definition table.

    ``topic`` names the topic-level config this broker setting is the server default of;
    ``topic_scale`` converts the broker unit into the topic unit (``log.roll.hours`` -> ms);
    ``topic_validator``/``topic_doc`` apply when the topic-level rule or text differs.
    ``synonyms`` is filled in on derived topic keys: (broker name, scale) in priority order.
    ``unsupported`` marks a Kafka setting logkeel does not implement yet (saying why, or what
    brings it): any value but the default is refused, so that a user who sets it is not misled.
    """

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None
    topic: str | None = None
    topic_scale: int = 1
    topic_validator: Validator | None = None
    topic_doc: str | None = None
    synonyms: tuple[tuple[str, int], ...] = ()
    unsupported: str | None = None

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, raw: str) -> Any:
        """Parse and validate one value; ValueError carries the reason."""
        value = parse_value(self.type, raw)
        if self.validator is not None:
            reason = self.validator.check(value)
            if reason is not None:
                raise ValueError(reason)
        if self.unsupported is not None and value != self.default:
            raise ValueError(f"not supported yet: {self.unsupported}; {self.accepted()}")
        return value

    def accepted(self) -> str:
        """What an unsupported key accepts: its default only."""
        if self.default is None:
            return "leave it unset"
        return f"only the default {format_value(self.type, self.default)!r} is accepted"


class ConfigDef(Mapping[str, ConfigKey]):
    """An ordered set of keys that parses a whole string map at once, collecting every problem."""

    def __init__(self, keys: Iterable[ConfigKey]):
        self._keys: dict[str, ConfigKey] = {}
        for key in keys:
            if key.name in self._keys:
                raise ValueError(f"config {key.name} defined twice")
            self._keys[key.name] = key

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def parse(self, raw: Mapping[str, str]) -> tuple[dict[str, Any], list[ConfigProblem]]:
        """Typed values for every defined key (defaults where not given) and the problems found.

        Keys of ``raw`` that are not defined are ignored here; callers decide whether an unknown
        key is a warning (broker) or an error (topic overrides). A key that fails keeps its
        default in the returned values, so callers must check the problems first.
        """
        values: dict[str, Any] = {}
        problems: list[ConfigProblem] = []
        for name, key in self._keys.items():
            if name not in raw:
                values[name] = key.default
                continue
            try:
                values[name] = key.parse(raw[name])
            except ValueError as exc:
                problems.append(ConfigProblem(name, raw[name], str(exc)))
                # Keep a well-typed placeholder so cross-key rules can run over the rest.
                values[name] = key.default
        return values, problems
