"""What broker and topic configs share: typed lookup, attributes generated from the table, and
the DescribeConfigs entry shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from logkeel.config.types import ConfigDef, ConfigSource


class ConfigEntry(NamedTuple):
    """One DescribeConfigs result row."""

    name: str
    value: str | None
    source: ConfigSource
    is_sensitive: bool
    read_only: bool


class TypedConfig:
    """Resolved, validated values of one ``ConfigDef``.

    Every key is reachable as ``cfg.get("log.segment.bytes")`` and as an attribute with dots
    turned into underscores (``cfg.log_segment_bytes``). Where Kafka derives an effective value
    from several keys (``log_dirs``, ``log_retention_ms``, ``listeners``), a subclass defines that
    attribute by hand and it replaces the generated one; ``get`` always returns the key's own value.
    """

    DEFINITION: ClassVar[ConfigDef]
    _values: Mapping[str, Any]

    if TYPE_CHECKING:
        # The properties `install_attributes` adds, one per key of the definition table, are
        # made at import time: the type checker sees them as Any.
        def __getattr__(self, name: str) -> Any: ...

    def get(self, name: str) -> Any:
        try:
            value = self._values[name]
        except KeyError:
            raise KeyError(f"{name!r} is not a defined {type(self).__name__} key") from None
        return list(value) if isinstance(value, list) else value

    def values(self) -> dict[str, Any]:
        """Every key's value (a copy)."""
        return {name: self.get(name) for name in self._values}


def install_attributes(cls: type[TypedConfig]) -> None:
    """Add one read-only property per key of ``cls.DEFINITION`` that ``cls`` does not define."""
    for key in cls.DEFINITION.values():
        if hasattr(cls, key.attr):
            continue

        def getter(self: TypedConfig, _name: str = key.name) -> Any:
            return self.get(_name)

        setattr(cls, key.attr, property(getter, doc=f"``{key.name}``: {key.doc}"))
