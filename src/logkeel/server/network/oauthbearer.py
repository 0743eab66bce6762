"""SASL/OAUTHBEARER (RFC 7628, KIP-255) with the JWT validation of KIP-768: the client sends a
signed JWT; the broker checks its signature against the keys of a JWKS (a file or an HTTP(S)
endpoint, ``sasl.oauthbearer.jwks.endpoint.url``), its expiry, audience and issuer, and takes
the principal ``User:<sub>`` from ``sasl.oauthbearer.sub.claim.name``.

Only asymmetric signatures (RS*, PS*, ES*) are accepted: an unsigned token (``alg: none``) or
an HMAC one is refused, as Kafka's broker validator does. A refused token is answered the
RFC 7628 way: the server's error challenge ``{"status":"invalid_token"}``, which the client
acknowledges with a single %x01, after which authentication fails.

The key set is held in memory (``JwksKeys``) and refreshed off the event loop every
``sasl.oauthbearer.jwks.endpoint.refresh.ms`` by the listener set, and sooner when a token
names a key id the set does not have (the identity provider rotated its keys).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from logkeel.config import BrokerConfig, ConfigError, ConfigProblem
from logkeel.server.session import SaslFailure

__all__ = [
    "InvalidToken",
    "JwksKeys",
    "JwtSettings",
    "OAuthBearerExchange",
    "UnknownKeyId",
    "ValidToken",
    "jwt_settings",
    "parse_client_response",
    "validate_token",
]

log = logging.getLogger(__name__)

MECHANISM = "OAUTHBEARER"
# Asymmetric algorithms only: an HMAC key would be the JWKS's public key, which anyone has.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
INVALID_TOKEN = json.dumps({"status": "invalid_token"}, separators=(",", ":")).encode()
# After a token named an unknown key id, the set is fetched again at most this often.
_MIN_REFRESH_S = 1.0
_FETCH_TIMEOUT_S = 10.0


class InvalidToken(Exception):
    """Why a token is refused (logged, and sent to the client after its acknowledgement)."""


class UnknownKeyId(InvalidToken):
    """The token names a key the JWKS does not hold (yet: the provider may have rotated)."""


@dataclass(frozen=True, slots=True)
class JwtSettings:
    jwks_url: str
    audience: tuple[str, ...] = ()
    issuer: str | None = None
    clock_skew_s: int = 30
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    refresh_ms: int = 3_600_000


@dataclass(frozen=True, slots=True)
class ValidToken:
    principal: str  # User:<sub>
    expires_at_ms: int  # the token's exp, in ms since the epoch
    scope: tuple[str, ...]


def jwt_settings(config: BrokerConfig, listener: str) -> JwtSettings:
    """The listener's JWT settings: Kafka's ``listener.name.<l>.oauthbearer.<key>`` or
    ``listener.name.<l>.<key>`` override, else the broker's ``<key>``. ConfigError without a
    JWKS url: logkeel has no unsecured (unsigned-token) validator."""

    def value(key: str) -> Any:
        override = config.originals.get(f"listener.name.{listener.lower()}.oauthbearer.{key}")
        if override is not None:
            return config.DEFINITION[key].parse(override)
        return config.listener_value(listener, key)

    url = value("sasl.oauthbearer.jwks.endpoint.url")
    if not url:
        raise ConfigError(
            [
                ConfigProblem(
                    "sasl.oauthbearer.jwks.endpoint.url",
                    None,
                    f"OAUTHBEARER on listener {listener} needs the JWKS that signs its tokens "
                    "(file:// or http(s)://); unsecured tokens are not accepted",
                )
            ]
        )
    if not url.startswith(("file://", "http://", "https://")):
        raise ConfigError(
            [
                ConfigProblem(
                    "sasl.oauthbearer.jwks.endpoint.url",
                    url,
                    "must be file://, http:// or https://",
                )
            ]
        )
    return JwtSettings(
        jwks_url=url,
        audience=tuple(value("sasl.oauthbearer.expected.audience") or ()),
        issuer=value("sasl.oauthbearer.expected.issuer") or None,
        clock_skew_s=int(value("sasl.oauthbearer.clock.skew.seconds")),
        sub_claim=value("sasl.oauthbearer.sub.claim.name"),
        scope_claim=value("sasl.oauthbearer.scope.claim.name"),
        refresh_ms=int(value("sasl.oauthbearer.jwks.endpoint.refresh.ms")),
    )


# -- the key set ----------------------------------------------------------------------------------


def _read_jwks(url: str) -> jwt.PyJWKSet:
    if url.startswith("file://"):
        text = Path(url.removeprefix("file://")).read_text()
    else:
        with urllib.request.urlopen(url, timeout=_FETCH_TIMEOUT_S) as answer:
            text = answer.read().decode()
    return jwt.PyJWKSet.from_dict(json.loads(text))


class JwksKeys:
    """The current keys of one JWKS url. ``refresh_if_due`` (blocking: run it off the loop)
    fetches them again when the refresh interval has passed or a token asked for a key id the
    set lacked. A fetch that fails keeps the keys it had."""

    def __init__(self, url: str, refresh_ms: int) -> None:
        self.url = url
        self._refresh_s = refresh_ms / 1000
        self._lock = threading.Lock()
        self._keys: tuple[jwt.PyJWK, ...] = ()
        self._fetched_at = float("-inf")
        self._wanted = False
        try:
            self._fetch()
        except Exception as exc:  # noqa: BLE001 - logged; tokens are refused until a fetch works
            if url.startswith("file://"):
                raise ConfigError(
                    [ConfigProblem("sasl.oauthbearer.jwks.endpoint.url", url, f"unreadable: {exc}")]
                ) from None
            log.warning(
                "could not fetch the JWKS at %s (tokens are refused until it is): %s", url, exc
            )

    def _fetch(self) -> None:
        keys = tuple(_read_jwks(self.url).keys)
        with self._lock:
            self._keys = keys
            self._fetched_at = time.monotonic()
            self._wanted = False

    @property
    def keys(self) -> tuple[jwt.PyJWK, ...]:
        return self._keys

    def want_refresh(self) -> None:
        self._wanted = True

    def refresh_if_due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        age = now - self._fetched_at
        if not (age >= self._refresh_s or (self._wanted and age >= _MIN_REFRESH_S)):
            return False
        try:
            self._fetch()
        except Exception as exc:  # noqa: BLE001 - the old keys stay; try again next time
            log.warning("refreshing the JWKS at %s failed: %s", self.url, exc)
            with self._lock:
                self._fetched_at = now  # not again before the next interval (or a new key id)
            return False
        return True


# -- validation (pure) ----------------------------------------------------------------------------


def _candidates(keys: tuple[jwt.PyJWK, ...], header: Mapping[str, Any]) -> list[jwt.PyJWK]:
    kid = header.get("kid")
    if kid is not None:
        return [k for k in keys if k.key_id == kid]
    kty = "EC" if str(header.get("alg", "")).startswith("ES") else "RSA"
    return [k for k in keys if k.key_type == kty]


def validate_token(token: str, keys: tuple[jwt.PyJWK, ...], settings: JwtSettings) -> ValidToken:
    """The principal and expiry of ``token``, or InvalidToken saying why it is refused."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise InvalidToken(f"malformed token: {exc}") from None
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise InvalidToken(f"algorithm {alg!r} is not accepted (signed RS/PS/ES tokens only)")
    candidates = _candidates(keys, header)
    if not candidates:
        raise UnknownKeyId(f"no key in the JWKS matches the token's key id {header.get('kid')!r}")
    claims: dict[str, Any] | None = None
    error: Exception | None = None
    for key in candidates:
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[alg],
                audience=list(settings.audience) or None,
                issuer=settings.issuer,
                leeway=settings.clock_skew_s,
                options={"require": ["exp"], "verify_aud": bool(settings.audience)},
            )
            break
        except jwt.PyJWTError as exc:
            error = exc
    if claims is None:
        raise InvalidToken(_reason(error))
    sub = claims.get(settings.sub_claim)
    if not isinstance(sub, str) or not sub.strip():
        raise InvalidToken(f"the token has no {settings.sub_claim!r} claim naming the principal")
    scope = claims.get(settings.scope_claim)
    if scope is None:
        scopes: tuple[str, ...] = ()
    elif isinstance(scope, str):
        scopes = tuple(scope.split())
    elif isinstance(scope, list) and all(isinstance(s, str) for s in scope):
        scopes = tuple(scope)
    else:
        raise InvalidToken(f"the {settings.scope_claim!r} claim is neither a string nor a list")
    return ValidToken(f"User:{sub}", int(claims["exp"]) * 1000, scopes)


def _reason(error: Exception | None) -> str:
    if isinstance(error, jwt.ExpiredSignatureError):
        return "the token has expired"
    if isinstance(error, jwt.InvalidAudienceError):
        return "the token is not for this audience"
    if isinstance(error, jwt.InvalidIssuerError):
        return "the token's issuer is not the expected one"
    if isinstance(error, jwt.InvalidSignatureError):
        return "the token's signature does not verify"
    return f"invalid token: {error}"


# -- the SASL exchange ----------------------------------------------------------------------------


def parse_client_response(message: bytes) -> tuple[str, str | None]:
    """RFC 7628's initial client response ``gs2-header %x01 auth=Bearer <token> %x01 ...
    %x01%x01``: the token and the authorization id (None if not given). Other keys are
    extensions (KIP-342), which logkeel does not use."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise SaslFailure("invalid OAUTHBEARER message: not UTF-8") from None
    header, sep, rest = text.partition("\x01")
    if not sep or not rest.endswith("\x01\x01"):
        raise SaslFailure("invalid OAUTHBEARER message: expected gs2-header, key=value pairs")
    gs2 = header.split(",")
    if len(gs2) != 3 or gs2[0] not in ("n", "y") or gs2[2] != "":
        raise SaslFailure("invalid OAUTHBEARER message: bad GS2 header")
    authzid = gs2[1].removeprefix("a=") if gs2[1].startswith("a=") else None
    if gs2[1] and authzid is None:
        raise SaslFailure("invalid OAUTHBEARER message: bad authorization id")
    pairs = dict(p.split("=", 1) for p in rest[:-2].split("\x01") if "=" in p)
    auth = pairs.get("auth", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise SaslFailure("invalid OAUTHBEARER message: no auth=Bearer <token>")
    return token.strip(), authzid


class OAuthBearerExchange:
    """The server side: one client response with the token; an empty answer if it is valid,
    else the RFC 7628 error challenge, and the failure once the client acknowledges it."""

    def __init__(self, keys: JwksKeys, settings: JwtSettings) -> None:
        self._keys = keys
        self._settings = settings
        self._refused: str | None = None
        self.principal: str | None = None
        self.expires_at_ms: int | None = None  # the token's exp: the session's longest life

    def step(self, token: bytes) -> bytes:
        if self.principal is not None:
            raise SaslFailure("the OAUTHBEARER exchange is already complete")
        if self._refused is not None:
            # The client's %x01 acknowledging the error challenge (or anything else): done.
            raise SaslFailure(f"Authentication failed: {self._refused}")
        jwt_text, authzid = parse_client_response(token)
        try:
            valid = validate_token(jwt_text, self._keys.keys, self._settings)
        except InvalidToken as exc:
            if isinstance(exc, UnknownKeyId):
                self._keys.want_refresh()
            self._refused = str(exc)
            return INVALID_TOKEN
        if authzid is not None and f"User:{authzid}" != valid.principal:
            raise SaslFailure(
                "Authentication failed: the authorization id is not the token's subject"
            )
        self.principal = valid.principal
        self.expires_at_ms = valid.expires_at_ms
        return b""
