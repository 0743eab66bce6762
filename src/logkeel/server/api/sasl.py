"""SaslHandshake (v0-v1) and SaslAuthenticate (v0-v2): a client on a SASL listener picks a
mechanism, then sends its tokens until the exchange succeeds (the connection's ``Session``
holds where it stands). After SaslHandshake v0 the tokens come without Kafka framing; the
connection feeds those to the session itself.

A failed authentication is answered (SASL_AUTHENTICATION_FAILED with a message that names no
secret), logged with the peer, and the connection is closed after that answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta

from logkeel.server.api.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from logkeel.server.api.responses import response
from logkeel.server.authorization import anyone
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.session import SaslFailure

__all__ = ["register"]

log = logging.getLogger(__name__)

_NO_LIFETIME = i64Timedelta.parse(timedelta(0))


async def handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    session = ctx.session
    if session.sasl is None or session.exchanging or (session.established and ctx.api_version == 0):
        # Not a SASL listener, a handshake in the middle of an exchange, or a re-authentication
        # with raw (v0) tokens, which cannot follow Kafka-framed requests (KIP-368).
        session.close_after_response = True
        return response(ctx, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    enabled = session.sasl.mechanisms
    if request.mechanism not in enabled:
        log.info(
            "client %s on %s asked for SASL mechanism %r; enabled: %s",
            ctx.peer,
            ctx.connection_id,
            request.mechanism,
            ", ".join(enabled),
        )
        session.close_after_response = True
        return response(ctx, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
    try:
        session.begin(request.mechanism)
    except SaslFailure as exc:
        log.info("client %s on %s: %s", ctx.peer, ctx.connection_id, exc)
        return response(ctx, error_code=ErrorCode.illegal_sasl_state, mechanisms=enabled)
    session.raw_tokens = ctx.api_version == 0
    return response(ctx, error_code=ErrorCode.none, mechanisms=enabled)


class Authenticator:
    """SaslAuthenticate. A failure is logged with the peer, counted (``failed``) and answered
    only after ``connection.failed.authentication.delay.ms``, so a client guessing passwords
    gets few tries per second (Kafka's delayed close)."""

    def __init__(self, failure_delay_ms: int, failed: Callable[[], None]) -> None:
        self._delay_s = failure_delay_ms / 1000
        self._failed = failed

    async def authenticate(
        self, ctx: RequestContext, request: SaslAuthenticateRequest
    ) -> SaslAuthenticateResponse:
        session = ctx.session
        if not session.exchanging:
            session.close_after_response = True
            return _authenticate_response(
                ctx, ErrorCode.illegal_sasl_state, "SaslAuthenticate without a SaslHandshake", b""
            )
        try:
            token = session.step(request.auth_bytes)
        except SaslFailure as exc:
            log.info("failed authentication from %s (%s): %s", ctx.peer, ctx.connection_id, exc)
            self._failed()
            await asyncio.sleep(self._delay_s)
            return _authenticate_response(ctx, ErrorCode.sasl_authentication_failed, str(exc), b"")
        lifetime = _NO_LIFETIME
        if not session.exchanging:
            log.info("%s authenticated on %s as %s", ctx.peer, ctx.connection_id, session.principal)
            if session.lifetime_ms > 0:
                lifetime = i64Timedelta.parse(timedelta(milliseconds=session.lifetime_ms))
        return _authenticate_response(ctx, ErrorCode.none, None, token, lifetime)


def _authenticate_response(
    ctx: RequestContext,
    code: ErrorCode,
    message: str | None,
    token: bytes,
    lifetime: i64Timedelta = _NO_LIFETIME,
) -> Any:
    return response(
        ctx,
        error_code=code,
        error_message=message,
        auth_bytes=token,
        session_lifetime=lifetime,
    )


def handshake_error(
    ctx: RequestContext, request: SaslHandshakeRequest, code: ErrorCode
) -> SaslHandshakeResponse:
    return response(ctx, error_code=code, mechanisms=())


def authenticate_error(
    ctx: RequestContext, request: SaslAuthenticateRequest, code: ErrorCode
) -> SaslAuthenticateResponse:
    return _authenticate_response(ctx, code, None, b"")


def register(registry: HandlerRegistry, failure_delay_ms: int, failed: Callable[[], None]) -> None:
    # The login itself: before it there is no principal to authorize.
    registry.register(
        ApiKey.SASL_HANDSHAKE, 0, 1, handshake,
        rule=anyone("starts the login; names the listener's mechanisms only"),
        error_response=handshake_error,
    )  # fmt: skip
    registry.register(
        ApiKey.SASL_AUTHENTICATE, 0, 2, Authenticator(failure_delay_ms, failed).authenticate,
        rule=anyone("the login; the same refusal for an unknown user and a wrong secret"),
        error_response=authenticate_error,
    )  # fmt: skip
