"""One Kafka request from a CLI command to a broker's listener, and the one way such a command
fails (a message on stderr, exit status 1).

A PLAINTEXT listener by default; ``--command-config FILE`` (``command_config_option``) gives
Kafka client properties for a TLS or SASL one, as Kafka's tools take them: ``security.protocol``,
``ssl.truststore.location`` (and for mutual TLS ``ssl.keystore.location``; PEM),
``sasl.mechanism`` and ``sasl.jaas.config`` with ``username=`` and ``password=``."""

from __future__ import annotations

import asyncio
import sys
from typing import Any, NoReturn

import click

from logkeel.config.properties import load_properties
from logkeel.config.types import ConfigError
from logkeel.server.network.client import BrokerClient, BrokerConnectionError, ClientSecurity
from logkeel.server.network.inter_broker import client_security

__all__ = ["call", "command_config_option", "fail", "nested", "send"]

_SECURITY = "logkeel.client_security"


def _read_command_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> None:
    if path is not None:
        try:
            ctx.meta[_SECURITY] = client_security(load_properties(path), path)
        except ConfigError as exc:
            fail(ctx.parent.info_name if ctx.parent else ctx.info_name, str(exc))


command_config_option = click.option(
    "--command-config",
    type=click.Path(exists=True, dir_okay=False),
    expose_value=False,
    callback=_read_command_config,
    help="Kafka client properties to reach a TLS or SASL listener (security.protocol, "
    "ssl.truststore.location, sasl.mechanism, sasl.jaas.config).",
)


def send(bootstrap_server: str, request: Any, *, client_id: str, timeout_ms: int = 30_000) -> Any:
    """The broker's answer to ``request``, on a connection of its own secured as the command's
    ``--command-config`` says; raises ``BrokerConnectionError`` (``ValueError``: a bad address)
    for a caller that carries on without the answer."""
    host, _, port = bootstrap_server.rpartition(":")
    context = click.get_current_context(silent=True)
    security = context.meta.get(_SECURITY) if context is not None else None

    async def round_trip() -> Any:
        client = BrokerClient(
            host.strip("[]") or "127.0.0.1",
            int(port),
            client_id=client_id,
            request_timeout_ms=timeout_ms,
            max_response_bytes=10 * 1024 * 1024,
            security=security or ClientSecurity(),
        )
        try:
            return await client.send(request)
        finally:
            await client.close()

    return asyncio.run(round_trip())


def call(command: str, bootstrap_server: str, request: Any) -> Any:
    """``send``, failing the command when the broker cannot be reached."""
    try:
        return send(bootstrap_server, request, client_id=f"logkeel-{command}")
    except (BrokerConnectionError, ValueError) as exc:
        fail(command, str(exc))


def nested(request_type: Any, name: str) -> Any:
    """A nested entity class of a kio request type."""
    return getattr(sys.modules[request_type.__module__], name)


def fail(command: str, message: str) -> NoReturn:
    click.echo(f"logkeel {command}: {message}", err=True)
    sys.exit(1)
