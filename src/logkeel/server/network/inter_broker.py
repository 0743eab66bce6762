"""How this broker reaches the other brokers (Kafka's inter-broker listener): which of their
registered endpoints it connects to, and with what security.

The listener is ``inter.broker.listener.name`` (or the one named after
``security.inter.broker.protocol``); each peer is reached at its endpoint of that name, with
that listener's protocol. TLS uses this broker's own key store (sent if the peer asks for a
client certificate) and trust store of that listener; SASL logs in with
``sasl.mechanism.inter.broker.protocol`` as the ``username=``/``password=`` options of the
listener's ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, as Kafka's brokers do.
Follower fetchers and transaction markers open their connections through ``client``.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

from logkeel.cluster.metadata import BrokerInfo
from logkeel.config import BrokerConfig
from logkeel.config.jaas import parse_jaas_options
from logkeel.config.types import ConfigError, ConfigProblem
from logkeel.server.network.client import BrokerClient, ClientSecurity, SaslLogin
from logkeel.server.network.tls import client_ssl_context

__all__ = ["InterBroker", "inter_broker"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InterBroker:
    listener: str = "PLAINTEXT"
    security: ClientSecurity = ClientSecurity()
    _missing: set[int] = field(default_factory=set, compare=False, repr=False)

    def endpoint(self, broker: BrokerInfo) -> tuple[str, int]:
        """``broker``'s address on the inter-broker listener. A broker known by one address
        only (a single node's store, tests) is reached there."""
        for name, host, port in broker.endpoints:
            if name == self.listener:
                return host, port
        if broker.endpoints and broker.node_id not in self._missing:
            self._missing.add(broker.node_id)
            log.error(
                "broker %d registered no %s listener (only %s): every broker needs the "
                "inter-broker listener; trying %s:%d",
                broker.node_id,
                self.listener,
                ", ".join(name for name, _, _ in broker.endpoints),
                broker.host,
                broker.port,
            )
        return broker.host, broker.port

    def client(
        self, broker: BrokerInfo, *, client_id: str, request_timeout_ms: int,
        max_response_bytes: int,
    ) -> BrokerClient:  # fmt: skip
        host, port = self.endpoint(broker)
        return BrokerClient(
            host,
            port,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            max_response_bytes=max_response_bytes,
            security=self.security,
        )


def inter_broker(config: BrokerConfig) -> InterBroker:
    """The inter-broker listener and this broker's credentials on it; ConfigError if they are
    incomplete. A single node has no other broker to reach: plaintext, unchecked."""
    listener = config.inter_broker_listener
    if config.embedded_metadata:
        return InterBroker(listener)
    protocol = config.security_protocol(listener)
    ssl_context = None
    if protocol in ("SSL", "SASL_SSL"):
        client_ssl_context(config, listener)  # unreadable stores stop start-up, not a fetch
        ssl_context = functools.partial(client_ssl_context, config, listener)
    sasl = _sasl_login(config, listener) if protocol.startswith("SASL_") else None
    return InterBroker(listener, ClientSecurity(protocol, ssl_context, sasl))


def _sasl_login(config: BrokerConfig, listener: str) -> SaslLogin:
    mechanism = config.sasl_mechanism_inter_broker_protocol
    if mechanism not in config.listener_value(listener, "sasl.enabled.mechanisms"):
        raise ConfigError(
            [
                ConfigProblem(
                    "sasl.mechanism.inter.broker.protocol",
                    mechanism,
                    f"brokers log in to listener {listener} with {mechanism}: it must be one "
                    "of that listener's sasl.enabled.mechanisms",
                )
            ]
        )
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = config.originals.get(key)
    options = parse_jaas_options(jaas, key) if jaas is not None else {}
    if not options.get("username") or "password" not in options:
        raise ConfigError(
            [
                ConfigProblem(
                    key,
                    None,
                    f"brokers log in to listener {listener} with {mechanism}: give this "
                    'broker\'s username="..." and password="..." in this JAAS config',
                )
            ]
        )
    return SaslLogin(mechanism, options["username"], options["password"])
