"""What a connection knows about its client beyond single requests: the listener and security
protocol it came in on, who the client is (the principal), and where its SASL authentication
stands. One ``Session`` per connection, handed to every handler in ``RequestContext.session``.

On a SASL listener nothing but ApiVersions, SaslHandshake and SaslAuthenticate is served until
the exchange has succeeded (Kafka's order); the connection enforces that with ``may_serve``.
"""

from __future__ import annotations

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

    @property
    def authenticated(self) -> bool:
        return self.sasl is None or (
            self.exchange is not None and self.exchange.principal is not None
        )

    def may_serve(self, api_key: int) -> bool:
        return self.authenticated or api_key in _BEFORE_AUTHENTICATION

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
        if self.exchange.principal is not None:
            self.principal = self.exchange.principal
            self.raw_tokens = False
        return answer
