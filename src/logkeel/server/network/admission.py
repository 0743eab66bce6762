"""Whether a request frame is served: its header, the connection's session and the handler
registry decide, before any handler runs. A pure decision (no socket, no logging): the
connection acts on the answer, serving an ``Admitted`` request or closing on a ``Refused`` one
after the responses to the requests before it.

Refused, as Kafka refuses them: a malformed header or body, any request but a re-authentication
after the SASL session expired (KIP-368), any request the session may not make before it has
authenticated, an API the broker does not serve, a version it does not serve (except
ApiVersions, answered at any version so a client can learn the versions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from logkeel.server.handlers import ApiHandler, HandlerRegistry
from logkeel.server.protocol import (
    ApiKey,
    InvalidRequest,
    RequestHeader,
    api_name,
    decode_request,
    parse_request_header,
    peek_api,
)
from logkeel.server.session import Session

__all__ = ["Admitted", "Refused", "admit"]

_REAUTHENTICATION = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request to run: its handler and the decoded request (None only for an ApiVersions of a
    version not served, which its handler answers with the versions it serves)."""

    header: RequestHeader
    entry: ApiHandler
    request: Any


@dataclass(frozen=True, slots=True)
class Refused:
    """A request that closes its connection: why, and what is known of it (the parsed header,
    or (api key, version, correlation id) peeked from a header too broken to parse)."""

    reason: str
    header: RequestHeader | tuple[int, int, int] | None
    entry: ApiHandler | None = None


def admit(
    frame: bytes | memoryview, session: Session, registry: HandlerRegistry
) -> Admitted | Refused:
    try:
        header = parse_request_header(frame)
    except InvalidRequest as exc:
        guess = peek_api(frame)
        what = (
            f"{api_name(guess[0])} v{guess[1]}, correlation id {guess[2]}"
            if guess is not None
            else "too short to tell"
        )
        return Refused(f"malformed request header ({what}): {exc}", guess)

    api = f"{api_name(header.api_key)} v{header.api_version}"
    if session.expired() and header.api_key not in _REAUTHENTICATION:
        return Refused(
            f"{api} after the SASL session of {session.principal} expired "
            "(connections.max.reauth.ms) without re-authentication",
            header,
        )
    if not session.may_serve(header.api_key):
        return Refused(f"{api} before SASL authentication", header)
    entry = registry.lookup(header.api_key)
    if entry is None:
        return Refused(f"unsupported API key {header.api_key} ({api})", header)
    if entry.supports(header.api_version):
        try:
            return Admitted(header, entry, decode_request(header, frame))
        except InvalidRequest as exc:
            return Refused(f"malformed {api} request: {exc}", header, entry)
    if header.api_key == ApiKey.API_VERSIONS:
        return Admitted(header, entry, None)
    return Refused(
        f"unsupported version {header.api_version} of {api_name(header.api_key)} "
        f"(supported: {entry.min_version}-{entry.max_version})",
        header,
        entry,
    )
