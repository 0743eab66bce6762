"""The handler table: which API versions the broker implements, and the code that serves each.

ApiVersions answers from this table, so the broker advertises exactly what is registered.

Adding an API family
--------------------
Write one module per family under ``logkeel/server/api/`` (``metadata.py``, ``produce.py``, ...)
with a class holding what it needs (replica manager, config, ...) and a ``register`` function::

    from kio.schema.errors import ErrorCode
    from logkeel.server.authorization import anyone
    from logkeel.server.errors import ApiError
    from logkeel.server.handlers import HandlerRegistry, RequestContext
    from logkeel.server.protocol import ApiKey, response_schema

    class MetadataApi:
        def __init__(self, broker: Broker) -> None:
            self._broker = broker

        async def handle(self, ctx: RequestContext, request: Any) -> Any:
            # ``request`` is kio's MetadataRequest class for ctx.api_version; answer with the
            # response class of the same version:
            Response = response_schema(ctx.api_key, ctx.api_version)
            return Response(...)

        def error_response(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
            # The whole request failed (refused by its rule, or an exception escaped
            # ``handle``). Return the response that reports ``code`` everywhere, like Kafka's
            # getErrorResponse.
            ...

    METADATA_RULE = anyone("lists the brokers; each topic only with DESCRIBE on it")

    def register(registry: HandlerRegistry, broker: Broker) -> None:
        api = MetadataApi(broker)
        registry.register(
            ApiKey.METADATA, 0, 12, api.handle, rule=METADATA_RULE, error_response=api.error_response
        )

Rules:

- Every API is registered with its authorization ``Rule`` (``logkeel.server.authorization``
  builds them): the whole-request checks the gate runs before the handler (``checks``), the
  per-entry checks the handler itself makes (``per_entry``, in words), or why anyone may call it
  (``anyone``). There is no default: an API without a rule cannot be registered, so it cannot
  be served unchecked (deny by default). On a broker the gate runs before every handler.
- ``handle(ctx, request)`` is ``async`` and returns a kio response of the request's API and
  version, or ``None`` to send nothing (only Produce with ``acks=0`` does that). It may await
  as long as it needs (long-poll Fetch): a connection's requests are handled one at a time and
  answered in order, as Kafka does, so later requests on that connection wait for it.
- Register only versions you implement; the registry refuses versions kio has no schema for.
  Implementing a version means accepting every field it defines and filling every field of
  its response.
- Errors: per-partition or per-topic failures go in the response's ``error_code`` fields, as
  in Kafka. Use ``logkeel.server.errors``: ``error_code_for(exc)`` maps storage exceptions
  (``KafkaStorageError`` -> KAFKA_STORAGE_ERROR, ``CorruptRecordError`` -> CORRUPT_MESSAGE,
  ``RecordTooLargeError`` -> MESSAGE_TOO_LARGE, ...) and ``error_code_named("NOT_LEADER_OR_FOLLOWER")``
  looks up a code by Kafka's name. An exception that escapes ``handle`` is logged, mapped with
  ``error_code_for`` (``ApiError(code)`` carries its code; anything unexpected is
  UNKNOWN_SERVER_ERROR) and answered with ``error_response`` (one that returns None closes
  the connection). Raise ``CloseConnection`` to close it on purpose (failed acks=0 produce).
- Blocking work (disk, fsync) goes to a thread (``asyncio.to_thread``), never on the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.protocol import api_name, request_schema, response_schema
from logkeel.server.request_time import Timed, with_throttle
from logkeel.server.session import Session

__all__ = [
    "ApiHandler",
    "Check",
    "ErrorResponder",
    "Gate",
    "Handler",
    "HandlerRegistry",
    "Meter",
    "RequestContext",
    "Rule",
]


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request and how; passed to every handler with the decoded request."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str  # Kafka treats a null client id as ""
    peer: tuple[str, int]  # client's (host, port)
    connection_id: str  # Kafka's form: "localHost:localPort-peerHost:peerPort-index"
    listener: str  # listener name, e.g. "PLAINTEXT"
    header_version: int = 1
    received_at: float = field(default_factory=time.monotonic)  # time.monotonic() at arrival
    # The connection's principal and SASL state; a fresh unauthenticated-PLAINTEXT one when a
    # request is handled outside a connection (tests).
    session: Session = field(default_factory=lambda: Session("PLAINTEXT", "PLAINTEXT"))
    # Called by a Produce handler once its appends are handed to the IO threads in order: the
    # connection may then start the next pipelined Produce (see network/connection.py).
    release: Callable[[], None] = field(default=lambda: None)
    size: int = 0  # bytes of the request frame (what a produce quota charges)
    # Stops the connection reading for this many ms: a throttled request with no response
    # (acks=0 Produce); one with a response says its throttle_time_ms instead.
    mute: Callable[[float], None] = field(default=lambda _ms: None)

    @property
    def api_name(self) -> str:
        return api_name(self.api_key)

    def __str__(self) -> str:
        return (
            f"{self.api_name} v{self.api_version} (correlation id {self.correlation_id}, "
            f"client id {self.client_id!r}, connection {self.connection_id})"
        )


Handler = Callable[[RequestContext, Any], Coroutine[Any, Any, Any | None]]
ErrorResponder = Callable[[RequestContext, Any, ErrorCode], Any]


@dataclass(frozen=True, slots=True)
class Check:
    """One check of a whole request, run by the gate before the handler: ``refuse(permissions,
    ctx, request)`` is the error the request is refused with, or None to let it through
    (``permissions``: the broker's ``RequestAuthorizer``). ``summary`` says it in words."""

    summary: str
    refuse: Callable[[Any, RequestContext, Any], ErrorCode | None]


@dataclass(frozen=True, slots=True)
class Rule:
    """How the requests of one API are authorized. Every registered API has one: ``checks``
    the gate runs on the whole request, ``per_entry`` the checks its handler makes on each
    topic, group, ... it names (in words), ``anyone`` why anyone may call it. A rule that says
    nothing is refused at construction."""

    checks: tuple[Check, ...] = ()
    per_entry: str = ""
    anyone: str = ""

    def __post_init__(self) -> None:
        if not (self.checks or self.per_entry or self.anyone):
            raise ValueError("an authorization rule must check something or say why it need not")
        if self.anyone and self.checks:
            raise ValueError("a rule for anyone has no whole-request checks")

    @property
    def summary(self) -> str:
        parts = [c.summary for c in self.checks]
        if self.per_entry:
            parts.append(("per entry: " if self.checks else "") + self.per_entry)
        if self.anyone:
            parts.insert(0, f"anyone ({self.anyone})")
        return "; ".join(parts)


# Decides before a handler runs whether the whole request is refused (authorization): the
# error to answer with, through the API's error response, or None to serve it.
Gate = Callable[[RequestContext, Any, Rule], ErrorCode | None]


# Whether a request is charged to a request_percentage quota: None, or a function that charges
# the seconds its handler ran and returns the throttle time in ms (``server/quotas.py``).
Meter = Callable[[RequestContext, Any], Callable[[float], int] | None]


def _metered(handle: Handler, meter: Meter) -> Handler:
    async def run(ctx: RequestContext, request: Any) -> Any | None:
        charge = meter(ctx, request)
        if charge is None:
            return await handle(ctx, request)
        timed = Timed(handle(ctx, request))
        try:
            response = await timed
        except BaseException:
            charge(timed.spent_s)
            raise
        throttle_ms = charge(timed.spent_s)
        return (
            with_throttle(response, throttle_ms)
            if throttle_ms and response is not None
            else response
        )

    return run


def _gated(handle: Handler, error_response: ErrorResponder, rule: Rule, gate: Gate) -> Handler:
    async def run(ctx: RequestContext, request: Any) -> Any | None:
        code = gate(ctx, request, rule)
        if code is not None:
            return error_response(ctx, request, code)
        return await handle(ctx, request)

    return run


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    handle: Handler
    error_response: ErrorResponder
    rule: Rule

    def supports(self, api_version: int) -> bool:
        return self.min_version <= api_version <= self.max_version


class HandlerRegistry:
    """API key -> handler, the version range it implements and its authorization rule.
    ``gate`` (a broker always gives one; tests of the network layer may not) runs before every
    handler, with the API's rule; a refusal is answered with the API's error response.
    ``meter`` charges the handler's time to a request_percentage quota."""

    def __init__(self, gate: Gate | None = None, meter: Meter | None = None) -> None:
        self._handlers: dict[int, ApiHandler] = {}
        self._gate = gate
        self._meter = meter

    def register(
        self,
        api_key: int,
        min_version: int,
        max_version: int,
        handle: Handler,
        *,
        rule: Rule,
        error_response: ErrorResponder,
    ) -> ApiHandler:
        """Registers ``handle`` for versions ``min_version..max_version`` (inclusive) of an API.

        Raises ValueError if the API is already registered, the range is empty, or kio lacks
        the request or response schema of any version in it (it could not be decoded or
        answered, so it must not be advertised); TypeError without a ``Rule`` or an error
        response (a refusal must be answerable).
        """
        if not isinstance(rule, Rule):
            raise TypeError(f"{api_name(api_key)} (key {api_key}) needs an authorization Rule")
        if not callable(error_response):
            raise TypeError(f"{api_name(api_key)} (key {api_key}) needs an error response")
        api_key = int(api_key)
        if api_key in self._handlers:
            raise ValueError(f"{api_name(api_key)} (key {api_key}) is already registered")
        if not 0 <= min_version <= max_version:
            raise ValueError(f"bad version range {min_version}..{max_version}")
        missing = [
            v
            for v in range(min_version, max_version + 1)
            if request_schema(api_key, v) is None or response_schema(api_key, v) is None
        ]
        if missing:
            raise ValueError(
                f"kio has no schema for {api_name(api_key)} (key {api_key}) versions {missing}"
            )
        if self._meter is not None:
            handle = _metered(handle, self._meter)
        if self._gate is not None:
            handle = _gated(handle, error_response, rule, self._gate)
        entry = ApiHandler(api_key, min_version, max_version, handle, error_response, rule)
        self._handlers[api_key] = entry
        return entry

    def lookup(self, api_key: int) -> ApiHandler | None:
        return self._handlers.get(api_key)

    def supports(self, api_key: int, api_version: int) -> bool:
        entry = self._handlers.get(api_key)
        return entry is not None and entry.supports(api_version)

    def version_ranges(self) -> list[tuple[int, int, int]]:
        """(api key, min version, max version) for every registered API, by api key."""
        return [(h.api_key, h.min_version, h.max_version) for h in self]

    def __iter__(self) -> Iterator[ApiHandler]:
        return iter(sorted(self._handlers.values(), key=lambda h: h.api_key))

    def __len__(self) -> int:
        return len(self._handlers)

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._handlers
