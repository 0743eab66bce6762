"""The one way API families build responses and answer errors.

kio has one class per API version, each with only the fields that version defines. ``build``
drops the values a version does not have, so one code path serves every version; ``response``
builds the top-level response of the request being answered, with the throttle time a client
quota set (``server/quotas.py``; none by default). Errors:

- one entry of a request (a topic, a resource, a partition) failed: raise ``EntryError`` where
  the entry is handled and put its code and message in that entry;
- the whole request failed (an exception escaped the handler): the family's ``error_response``
  answers it, built with ``response`` like any other answer, and is registered with its handler
  by ``register_family``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Collection, Iterable, Mapping
from datetime import timedelta
from functools import cache
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from logkeel.cluster.metadata import BrokerInfo
from logkeel.server.handlers import ErrorResponder, Handler, HandlerRegistry, RequestContext, Rule
from logkeel.server.protocol import ApiKey, response_schema

__all__ = [
    "NO_THROTTLE",
    "OPERATIONS_NOT_REQUESTED",
    "Endpoint",
    "EntryError",
    "build",
    "duration_ms",
    "nested",
    "nested_types",
    "node_endpoints",
    "register_family",
    "response",
]

NO_THROTTLE = i32Timedelta.parse(timedelta(0))
# The schemas' default for "authorized operations": the client did not ask for them.
OPERATIONS_NOT_REQUESTED = -(2**31)


@cache
def nested_types(api_key: int, api_version: int) -> ModuleType:
    """kio's response module of an API version, holding its nested entity classes."""
    response_type = response_schema(api_key, api_version)
    assert response_type is not None, "the registry only admits versions kio has"
    return importlib.import_module(response_type.__module__)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type, **values: Any) -> Any:
    """``cls(**values)`` keeping only the fields this version of ``cls`` has; a field missing
    from ``values`` is a bug that kio reports at construction."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def nested(ctx: RequestContext, name: str) -> type[Any]:
    """The nested entity class ``name`` of the response to ``ctx``'s API version."""
    return getattr(nested_types(ctx.api_key, ctx.api_version), name)


def response(ctx: RequestContext, throttle_ms: int = 0, **values: Any) -> Any:
    """The response to the request of ``ctx`` (its API and version); ``throttle_ms``: the
    client is over a quota and the connection stops reading for that long once it is sent."""
    cls = response_schema(ctx.api_key, ctx.api_version)
    assert cls is not None, "the registry only admits versions kio has"
    throttle = (
        i32Timedelta.parse(timedelta(milliseconds=throttle_ms)) if throttle_ms else NO_THROTTLE
    )
    return build(cls, throttle_time=throttle, **values)


def duration_ms(value: Any) -> int:
    """A kio duration field (a timedelta) in milliseconds; a plain number is taken as ms."""
    if isinstance(value, timedelta):
        return int(round(value / timedelta(milliseconds=1)))
    return int(value)


class EntryError(Exception):
    """One entry of a request failed; becomes that entry's error code and message."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        self.code = code
        self.message = message
        super().__init__(message or code.name)


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """One API of a family: the versions served, the handler, its whole-request error answer
    and its authorization rule."""

    min_version: int
    max_version: int
    handle: Handler
    error_response: ErrorResponder
    rule: Rule


def node_endpoints(
    types: ModuleType, brokers: Iterable[BrokerInfo], leaders: Collection[int]
) -> tuple[Any, ...]:
    """The ``node_endpoints`` of Produce/Fetch responses (KIP-951): the address of every leader
    named in a NOT_LEADER_OR_FOLLOWER answer, so the client need not refresh its metadata."""
    endpoint_type = getattr(types, "NodeEndpoint", None)
    if endpoint_type is None or not leaders:
        return ()
    return tuple(
        endpoint_type(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in brokers
        if b.node_id in leaders
    )


def register_family(registry: HandlerRegistry, endpoints: Mapping[ApiKey, Endpoint]) -> None:
    for api_key, e in endpoints.items():
        registry.register(
            api_key,
            e.min_version,
            e.max_version,
            e.handle,
            rule=e.rule,
            error_response=e.error_response,
        )
