"""How this broker reaches the other brokers (Kafka's inter-broker listener): which of their
registered endpoints it connects to, and with what security.

The listener is ``inter.broker.listener.name`` (or the one named after
``security.inter.broker.protocol``); each peer is reached at its endpoint of that name, with
that listener's protocol. TLS uses this broker's own key store (sent if the peer asks for a
client certificate) and trust store of that listener; SASL logs in with
``sasl.mechanism.inter.broker.protocol`` as the ``username=``/``password=`` options of the
listener's ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, as Kafka's brokers do.
Follower fetchers and transaction markers open their connections through ``client``.

``client_security`` reads the same from Kafka client properties (a command's
``--command-config``: ``security.protocol``, ``ssl.*``, ``sasl.mechanism``, ``sasl.jaas.config``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from logkeel.cluster.metadata import BrokerInfo
from logkeel.config import BrokerConfig
from logkeel.config.definitions import BROKER_CONFIG_DEF
from logkeel.config.jaas import parse_jaas_options
from logkeel.config.listeners import SECURITY_PROTOCOLS
from logkeel.config.types import ConfigError, ConfigProblem
from logkeel.server.network.client import BrokerClient, ClientSecurity, SaslLogin
from logkeel.server.network.tls import client_ssl_context, client_ssl_context_of

__all__ = ["InterBroker", "client_security", "inter_broker"]

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


def client_security(props: Mapping[str, str], source: str) -> ClientSecurity:
    """How a client with Kafka client properties ``props`` (read from ``source``) reaches a
    listener; ConfigError names what is wrong."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError([ConfigProblem("security.protocol", protocol, f"unknown ({source})")])

    def value(key: str) -> Any:
        definition = BROKER_CONFIG_DEF[key]
        try:
            return definition.parse(props[key]) if key in props else definition.default
        except ValueError as exc:
            raise ConfigError([ConfigProblem(key, props[key], f"{exc} ({source})")]) from None

    ssl_context = None
    if protocol in ("SSL", "SASL_SSL"):
        client_ssl_context_of(value, source)  # unreadable stores fail now, named
        ssl_context = functools.partial(client_ssl_context_of, value, source)
    sasl = None
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ConfigError([ConfigProblem(
                "sasl.mechanism", mechanism, f"PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 ({source})"
            )])  # fmt: skip
        sasl = _login(mechanism, props.get("sasl.jaas.config"), f"sasl.jaas.config ({source})")
    return ClientSecurity(protocol, ssl_context, sasl)


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
    return _login(mechanism, config.originals.get(key), key)


def _login(mechanism: str, jaas: str | None, key: str) -> SaslLogin:
    """The ``username=``/``password=`` options of a JAAS config, as Kafka's clients log in."""
    options = parse_jaas_options(jaas, key) if jaas is not None else {}
    if not options.get("username") or "password" not in options:
        raise ConfigError(
            [
                ConfigProblem(
                    key,
                    None,
                    f'logging in with {mechanism} needs username="..." and '
                    'password="..." in this JAAS config',
                )
            ]
        )
    return SaslLogin(mechanism, options["username"], options["password"])
