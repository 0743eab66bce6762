"""The inter-broker client: kio requests to one other broker over an asyncio stream.

A follower fetcher owns one ``BrokerClient`` per source broker it fetches from (Kafka gives each
fetcher thread its own connection too): the broker serves one request per connection at a time,
so fetchers sharing a connection would queue behind each other's long polls. Requests on one
client are therefore sent one at a time. Any failure (connect, timeout, a bad frame) closes the
connection and raises ``BrokerConnectionError``; the next request reconnects.

``ClientSecurity`` says how to reach a TLS and/or SASL listener (``network/inter_broker.py``
builds it from the inter-broker listener's settings): TLS from a fresh context per connection
(a renewed certificate is used by the next one), then SaslHandshake and SaslAuthenticate v2
before the first request. When the broker gives the session a lifetime (KIP-368,
``connections.max.reauth.ms``), the client authenticates again on the same connection before
85% of it has passed, as Kafka's clients do, so the broker never has to close it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from logkeel.cluster.scram import ScramClientExchange, ScramError
from logkeel.server.network.framing import SIZE_PREFIX
from logkeel.server.protocol import InvalidRequest, decode_response, encode_request, response_schema

__all__ = [
    "BrokerAuthenticationError",
    "BrokerClient",
    "BrokerConnectionError",
    "ClientSecurity",
    "SaslLogin",
]

# Kafka's clients re-authenticate between 85% and 95% of the session lifetime.
_REAUTHENTICATE_AT = 0.85


class BrokerConnectionError(Exception):
    """A request to another broker failed before an answer arrived; the connection is closed."""


class BrokerAuthenticationError(BrokerConnectionError):
    """The other broker refused this one's SASL login (or could not prove its own)."""


@dataclass(frozen=True, slots=True)
class SaslLogin:
    mechanism: str  # PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to reach a listener: TLS (a context factory, called per connection) and/or SASL."""

    protocol: str = "PLAINTEXT"
    ssl_context: Callable[[], ssl.SSLContext] | None = None
    sasl: SaslLogin | None = None


class _PlainLogin:
    """RFC 4616 as a client: one token, an empty answer."""

    def __init__(self, login: SaslLogin) -> None:
        self._token = f"\0{login.username}\0{login.password}".encode()
        self.complete = False

    def first(self) -> bytes:
        return self._token

    def step(self, answer: bytes) -> bytes:
        self.complete = True
        return b""


class _ScramLogin:
    def __init__(self, login: SaslLogin) -> None:
        self._exchange = ScramClientExchange(login.mechanism, login.username, login.password)

    @property
    def complete(self) -> bool:
        return self._exchange.complete

    def first(self) -> bytes:
        return self._exchange.first()

    def step(self, answer: bytes) -> bytes:
        try:
            return self._exchange.step(answer)
        except ScramError as exc:
            raise _Refused(str(exc)) from None


class _Refused(Exception):
    """The SASL exchange failed; the message names no secret."""


class BrokerClient:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        request_timeout_ms: int,
        max_response_bytes: int,
        security: ClientSecurity = ClientSecurity(),
    ) -> None:
        self.host = host
        self.port = port
        self.security = security
        self._reauthenticate_at: float | None = None  # monotonic; None: no session lifetime
        self._client_id = client_id
        self._timeout = request_timeout_ms / 1000
        self._max_response_bytes = max_response_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"BrokerClient({self.security.protocol}://{self.host}:{self.port})"

    async def send(self, request: Any, timeout_ms: int | None = None) -> Any:
        """Sends kio ``request`` and returns the decoded response of the same version."""
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        async with self._lock:
            try:
                # Not wait_for: on 3.11 it swallows a cancel that lands as the answer arrives,
                # and a fetcher being stopped would then fetch on forever.
                async with asyncio.timeout(timeout):
                    return await self._round_trip(request)
            except _Refused as exc:
                await self.close()
                login = self.security.sasl
                assert login is not None
                raise BrokerAuthenticationError(
                    f"SASL authentication ({login.mechanism}) as {login.username} to "
                    f"{self.security.protocol}://{self.host}:{self.port} failed: {exc}"
                ) from None
            except (OSError, EOFError, TimeoutError, InvalidRequest) as exc:
                await self.close()
                raise BrokerConnectionError(
                    f"request to {self.security.protocol}://{self.host}:{self.port} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            except BaseException:
                # Cancelled mid-request: the stream may hold half a response.
                await self.close()
                raise

    async def _round_trip(self, request: Any) -> Any:
        if self._writer is None:
            await self._connect()
        elif self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at:
            await self._authenticate()
        return await self._exchange(request)

    async def _connect(self) -> None:
        factory = self.security.ssl_context
        # Building the context reads the key and trust stores: off the event loop.
        context = None if factory is None else await asyncio.to_thread(factory)
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=context, server_hostname=self.host if context else None
        )
        self._reauthenticate_at = None
        if self.security.sasl is not None:
            await self._authenticate()

    async def _authenticate(self) -> None:
        """SaslHandshake then SaslAuthenticate until the mechanism completes; ``_Refused``
        with the broker's (or the mechanism's) reason otherwise."""
        login = self.security.sasl
        assert login is not None
        handshake = await self._exchange(SaslHandshakeRequest(mechanism=login.mechanism))
        if handshake.error_code != ErrorCode.none:
            offered = ", ".join(handshake.mechanisms) or "none"
            raise _Refused(f"{handshake.error_code.name} (the broker offers {offered})")
        exchange: _PlainLogin | _ScramLogin = (
            _PlainLogin(login) if login.mechanism == "PLAIN" else _ScramLogin(login)
        )
        token = exchange.first()
        started = time.monotonic()
        while True:
            answer = await self._exchange(SaslAuthenticateRequest(auth_bytes=token))
            if answer.error_code != ErrorCode.none:
                raise _Refused(answer.error_message or answer.error_code.name)
            token = exchange.step(answer.auth_bytes)
            if exchange.complete:
                break
        lifetime_s = answer.session_lifetime.total_seconds()
        self._reauthenticate_at = (
            started + lifetime_s * _REAUTHENTICATE_AT if lifetime_s > 0 else None
        )

    async def _exchange(self, request: Any) -> Any:
        reader, writer = self._reader, self._writer
        assert writer is not None
        assert reader is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._correlation_id
        writer.write(encode_request(request, correlation_id, self._client_id))
        await writer.drain()
        (size,) = SIZE_PREFIX.unpack(await reader.readexactly(SIZE_PREFIX.size))
        if size < 0 or size > self._max_response_bytes:
            raise InvalidRequest(f"response size {size} out of bounds")
        frame = await reader.readexactly(size)
        schema = response_schema(request.__api_key__, request.__version__)
        assert schema is not None, "requests are only built for versions kio has"
        got, response = decode_response(schema, frame)
        if got != correlation_id:
            raise InvalidRequest(f"correlation id {got} does not match {correlation_id}")
        return response

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()
