"""How one listener secures its connections: TLS or not, SASL or not (its security protocol),
and the session each new connection starts with."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from logkeel.cluster.metadata import MetadataStore
from logkeel.config import BrokerConfig
from logkeel.server.network.sasl import listener_sasl
from logkeel.server.network.tls import CertificateReloader, PrincipalMapper
from logkeel.server.session import SaslMechanisms, Session

__all__ = ["PLAINTEXT", "ListenerSecurity", "listener_security"]


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    protocol: str = "PLAINTEXT"
    certificates: CertificateReloader | None = None
    principals: PrincipalMapper | None = None
    sasl: SaslMechanisms | None = None
    reauth_ms: int = 0  # connections.max.reauth.ms

    @property
    def tls(self) -> bool:
        return self.certificates is not None

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return None if self.certificates is None else self.certificates.context

    def new_session(self, listener: str, peercert: Mapping[str, Any] | None) -> Session:
        session = Session(listener, self.protocol, sasl=self.sasl, reauth_ms=self.reauth_ms)
        if self.principals is not None:
            session.principal = self.principals.principal(peercert)
        return session


PLAINTEXT = ListenerSecurity()


def listener_security(
    config: BrokerConfig, listener: str, metadata: MetadataStore
) -> ListenerSecurity:
    """The security of ``listener`` from its protocol and settings; ConfigError if they are
    incomplete (a TLS listener without a key, say)."""
    protocol = config.security_protocol(listener)
    tls = protocol in ("SSL", "SASL_SSL")
    return ListenerSecurity(
        protocol,
        CertificateReloader(config, listener) if tls else None,
        PrincipalMapper(config.listener_value(listener, "ssl.principal.mapping.rules"))
        if tls
        else None,
        listener_sasl(config, listener, metadata) if protocol.startswith("SASL_") else None,
        int(config.listener_value(listener, "connections.max.reauth.ms")),
    )
