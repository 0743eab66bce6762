"""The admin request path of a CLI command (`admin.session`, secured by ``--command-config``),
and the one way such a command fails (a message on stderr, exit status 1).

``--bootstrap-server`` takes a comma-separated ``host:port`` list, as Kafka's tools do: the first
broker of it that answers an ApiVersions request is the command's bootstrap broker (a dead one is
skipped), and ApiVersions also tells which request versions it serves, so an unsupported one is
a clear refusal instead of a broken frame. Requests that must reach one broker (a group's
coordinator, a partition's leader, a broker's log dirs) go to the address its Metadata gives.
Each broker gets one connection for the whole command.

A PLAINTEXT listener by default; ``--command-config FILE`` (``command_config_option``) gives
Kafka client properties for a TLS or SASL one, as Kafka's tools take them: ``security.protocol``,
``ssl.truststore.location`` (and for mutual TLS ``ssl.keystore.location``; PEM),
``sasl.mechanism`` and ``sasl.jaas.config`` with ``username=`` and ``password=``."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from logkeel.admin.session import AdminSession, nested, parse_bootstrap
from logkeel.config.properties import load_properties
from logkeel.config.types import ConfigError
from logkeel.server.network.client import BrokerConnectionError, ClientSecurity
from logkeel.server.network.inter_broker import client_security

__all__ = [
    "Admin",
    "admin",
    "bootstrap_option",
    "call",
    "command_config_option",
    "fail",
    "nested",
    "parse_bootstrap",
    "send",
]

_SECURITY = "logkeel.client_security"
_ADMINS = "logkeel.admins"


def _read_command_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> None:
    if path is not None:
        try:
            ctx.meta[_SECURITY] = client_security(load_properties(path), path)
        except ConfigError as exc:
            fail((ctx.parent or ctx).info_name or "logkeel", str(exc))


command_config_option = click.option(
    "--command-config",
    type=click.Path(exists=True, dir_okay=False),
    expose_value=False,
    callback=_read_command_config,
    help="Kafka client properties to reach a TLS or SASL listener (security.protocol, "
    "ssl.truststore.location, sasl.mechanism, sasl.jaas.config).",
)

bootstrap_option = click.option(
    "--bootstrap-server",
    default="127.0.0.1:9092",
    show_default=True,
    metavar="HOST:PORT[,HOST:PORT...]",
    help="Brokers to bootstrap from; the first that answers is used (PLAINTEXT unless "
    "--command-config).",
)


def _current_security() -> ClientSecurity:
    context = click.get_current_context(silent=True)  # meta is shared by nested contexts
    security = context.meta.get(_SECURITY) if context is not None else None
    return security or ClientSecurity()


class Admin(AdminSession):
    """An ``AdminSession`` secured as the running command's ``--command-config`` says (unless
    given ``security``)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        timeout_ms: int = 30_000,
        security: ClientSecurity | None = None,
    ) -> None:
        super().__init__(
            bootstrap,
            client_id=client_id,
            timeout_ms=timeout_ms,
            security=security if security is not None else _current_security(),
        )


class _CommandAdmin(Admin):
    """An ``Admin`` whose failures end the command (``fail``)."""

    def __init__(self, command: str, bootstrap: str) -> None:
        self.command = command
        try:
            super().__init__(bootstrap, client_id=f"logkeel-{command.replace(' ', '-')}")
        except ValueError as exc:
            fail(command, str(exc))

    def _failed(self, exc: BrokerConnectionError) -> NoReturn:
        fail(self.command, str(exc))


def admin(command: str, bootstrap: str) -> Admin:
    """The running command's ``Admin`` for ``bootstrap`` (one per command, closed with it);
    any failure to reach a broker ends the command with a one-line message and exit 1."""
    context = click.get_current_context(silent=True)
    if context is None:
        return _CommandAdmin(command, bootstrap)
    admins: dict[str, Admin] = context.meta.setdefault(_ADMINS, {})
    if bootstrap not in admins:
        admins[bootstrap] = _CommandAdmin(command, bootstrap)
        context.call_on_close(admins[bootstrap].close)
    return admins[bootstrap]


def send(bootstrap_server: str, request: Any, *, client_id: str, timeout_ms: int = 30_000) -> Any:
    """The answer of the first broker of ``bootstrap_server`` that answers ``request``, on a
    connection of its own secured as the command's ``--command-config`` says; raises
    ``BrokerConnectionError`` (``ValueError``: a bad address) for a caller that carries on
    without the answer."""
    with Admin(bootstrap_server, client_id=client_id, timeout_ms=timeout_ms) as one:
        return one.send(request)


def call(command: str, bootstrap_server: str, request: Any) -> Any:
    """``request`` to the command's bootstrap broker, failing the command when no broker of
    ``bootstrap_server`` can be reached."""
    context = click.get_current_context(silent=True)
    if context is None:
        with admin(command, bootstrap_server) as one:
            return one.send(request)
    return admin(command, bootstrap_server).send(request)


def fail(command: str, message: str) -> NoReturn:
    click.echo(f"logkeel {command}: {message}", err=True)
    sys.exit(1)
