"""The mechanisms of a SASL listener: PLAIN against the listener's JAAS users, SCRAM-SHA-256/512
against the salted credentials in the metadata store (``cluster.scram``), OAUTHBEARER against
the signing keys of a JWKS (``oauthbearer``).

PLAIN users come from ``listener.name.<listener>.plain.sasl.jaas.config`` (Kafka's
``user_<name>="<password>"`` options of PlainLoginModule). Every failure answers the same
message whether the user is unknown or the password wrong.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from logkeel.cluster.metadata import MetadataStore
from logkeel.cluster.scram import ScramCredential, ScramError, ScramServerExchange, decoy_shape
from logkeel.config import BrokerConfig
from logkeel.config.jaas import plain_users
from logkeel.server.network.oauthbearer import (
    MECHANISM as OAUTHBEARER,
)
from logkeel.server.network.oauthbearer import (
    JwksKeys,
    JwtSettings,
    OAuthBearerExchange,
    jwt_settings,
)
from logkeel.server.session import SaslExchange, SaslFailure

__all__ = ["ListenerSasl", "listener_sasl"]


class PlainExchange:
    """RFC 4616: one token ``authzid NUL user NUL password``, an empty answer."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.principal: str | None = None

    def step(self, token: bytes) -> bytes:
        if self.principal is not None:
            raise SaslFailure("the PLAIN exchange is already complete")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailure("invalid PLAIN token: expected authzid NUL user NUL password")
        authzid, user_bytes, password = parts
        try:
            user = user_bytes.decode()
        except UnicodeDecodeError:
            raise SaslFailure("invalid PLAIN token") from None
        expected = self._users.get(user)
        # Compared even for an unknown user, so the time taken does not tell users apart.
        ok = hmac.compare_digest((expected or "\0").encode(), password) and expected is not None
        if not ok:
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authzid and authzid != user_bytes:
            raise SaslFailure("Authentication failed: authorization id must match the user")
        self.principal = f"User:{user}"
        return b""


class ScramExchange:
    def __init__(self, mechanism: str, metadata: MetadataStore) -> None:
        def lookup(user: str, mech: str) -> ScramCredential | None:
            doc = metadata.scram_credentials().get(user, {}).get(mech)
            return None if doc is None else ScramCredential.from_json(mech, doc)

        def shape() -> tuple[int, int]:
            return decoy_shape(
                ScramCredential.from_json(mechanism, docs[mechanism])
                for docs in metadata.scram_credentials().values()
                if mechanism in docs
            )

        self._exchange = ScramServerExchange(mechanism, lookup, metadata.scram_secret(), shape)

    @property
    def principal(self) -> str | None:
        name = self._exchange.username
        return None if name is None else f"User:{name}"

    def step(self, token: bytes) -> bytes:
        try:
            return self._exchange.step(token)
        except ScramError as exc:
            raise SaslFailure(str(exc)) from None


class ListenerSasl:
    """``SaslMechanisms`` of one listener."""

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        plain: Mapping[str, str],
        metadata: MetadataStore,
        oauth: tuple[JwksKeys, JwtSettings] | None = None,
    ) -> None:
        self.mechanisms = mechanisms
        self._plain = plain
        self._metadata = metadata
        self._oauth = oauth

    @property
    def jwks(self) -> JwksKeys | None:
        """The OAUTHBEARER key set, which the listener set refreshes."""
        return None if self._oauth is None else self._oauth[0]

    def start(self, mechanism: str) -> SaslExchange:
        if mechanism not in self.mechanisms:
            raise SaslFailure(f"unsupported SASL mechanism {mechanism}")
        if mechanism == "PLAIN":
            return PlainExchange(self._plain)
        if mechanism == OAUTHBEARER:
            assert self._oauth is not None, "listener_sasl sets it up with the mechanism"
            return OAuthBearerExchange(*self._oauth)
        return ScramExchange(mechanism, self._metadata)


def listener_sasl(config: BrokerConfig, listener: str, metadata: MetadataStore) -> ListenerSasl:
    mechanisms = tuple(config.listener_value(listener, "sasl.enabled.mechanisms"))
    plain: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        key = f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
        jaas = config.originals.get(key)
        if jaas is not None:
            plain = plain_users(jaas, key)
    oauth = None
    if OAUTHBEARER in mechanisms:
        settings = jwt_settings(config, listener)
        oauth = (JwksKeys(settings.jwks_url, settings.refresh_ms), settings)
    return ListenerSasl(mechanisms, plain, metadata, oauth)
