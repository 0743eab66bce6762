"""What a connection knows about its client beyond single requests: the listener and security
protocol it came in on, who the client is (the principal), and where its SASL authentication
stands. One ``Session`` per connection, handed to every handler in ``RequestContext.session``.

On a SASL listener nothing but ApiVersions, SaslHandshake and SaslAuthenticate is served until
the exchange has succeeded (Kafka's order); the connection enforces that with ``may_serve``.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` set, a session expires that
long after each successful authentication. The client may authenticate again on the same
connection (SaslHandshake + SaslAuthenticate, same mechanism, same principal) while the old
session still serves its requests; once expired, any other request closes the connection.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ANONYMOUS", "SaslExchange", "SaslFailure", "SaslMechanisms", "Session"]

ANONYMOUS = "User:ANONYMOUS"
# ApiVersions, SaslHandshake, SaslAuthenticate: the only APIs before authentication.
_BEFORE_AUTHENTICATION = frozenset({18, 17, 36})


class SaslFailure(Exception):
    """The client's SASL exchange failed; the message is sent to it, so it names no secret."""


class SaslExchange(Protocol):
    """One mechanism's server side: each client token in, the server's token out."""

    @property
    def principal(self) -> str | None:
        """``User:<name>`` once the exchange has succeeded."""

    def step(self, token: bytes) -> bytes: ...


class SaslMechanisms(Protocol):
    """A SASL listener's enabled mechanisms and the credentials they check."""

    @property
    def mechanisms(self) -> tuple[str, ...]: ...

    def start(self, mechanism: str) -> SaslExchange: ...


@dataclass(slots=True)
class Session:
    listener: str
    security_protocol: str
    principal: str = ANONYMOUS  # a TLS client certificate's, then SASL's
    sasl: SaslMechanisms | None = None  # None: not a SASL listener
    exchange: SaslExchange | None = None
    raw_tokens: bool = False  # after SaslHandshake v0 the tokens come without a Kafka header
    close_after_response: bool = False  # a failed authentication ends the connection
    reauth_ms: int = 0  # connections.max.reauth.ms of the listener; 0: sessions never expire
    mechanism: str | None = None  # of the exchange under way or done
    established: bool = False  # an authentication has succeeded on this connection
    expires_at: float | None = None  # time.monotonic() when the session ends; None: never

    @property
    def authenticated(self) -> bool:
        return self.sasl is None or self.established

    @property
    def exchanging(self) -> bool:
        """A SaslHandshake has started an exchange that has not succeeded yet."""
        return self.exchange is not None and self.exchange.principal is None

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and (now or time.monotonic()) >= self.expires_at

    def may_serve(self, api_key: int) -> bool:
        return self.authenticated or api_key in _BEFORE_AUTHENTICATION

    def begin(self, mechanism: str) -> None:
        """Starts an exchange (SaslHandshake): the first, or a re-authentication. SaslFailure
        (and the connection closes) for a re-authentication that is not allowed."""
        assert self.sasl is not None
        if self.established:
            if self.reauth_ms <= 0:
                self.close_after_response = True
                raise SaslFailure("already authenticated (re-authentication is off)")
            if mechanism != self.mechanism:
                self.close_after_response = True
                raise SaslFailure(f"re-authentication must use {self.mechanism}, not {mechanism}")
        self.exchange = self.sasl.start(mechanism)
        self.mechanism = mechanism

    def step(self, token: bytes) -> bytes:
        """Feeds one client token to the exchange; on success the principal becomes SASL's.
        SaslFailure marks the connection for closing."""
        if self.exchange is None:
            self.close_after_response = True
            raise SaslFailure("no SASL handshake before the authentication token")
        try:
            answer = self.exchange.step(token)
        except SaslFailure:
            self.close_after_response = True
            raise
        principal = self.exchange.principal
        if principal is not None:
            if self.established and principal != self.principal:
                self.close_after_response = True
                raise SaslFailure("re-authentication cannot change the principal")
            self.principal = principal
            self.raw_tokens = False
            self.established = True
            self.expires_at = (
                time.monotonic() + self.reauth_ms / 1000 if self.reauth_ms > 0 else None
            )
        return answer
