"""`logkeel users add|delete|list`: SCRAM users of a running broker, managed through Kafka's
AlterUserScramCredentials / DescribeUserScramCredentials APIs (what kafka-configs.sh
--alter --add-config 'SCRAM-SHA-256=[password=…]' does).

The password is salted and hashed here; only the salted password crosses the network, and the
broker stores only keys derived from it. The command talks to a PLAINTEXT listener (any other
with ``--command-config``), or, with ``--zookeeper``, writes the salted credential straight into a cluster's ZooKeeper: the way to
create the brokers' own SCRAM user before they start (what ``kafka-configs.sh --zookeeper``
did), since brokers that log in to each other with SCRAM cannot replicate without it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click
from kio.schema.alter_user_scram_credentials.v0 import request as alter_scram
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from logkeel.cli.broker_requests import (
    bootstrap_option,
    call,
    command_config_option,
    fail,
)
from logkeel.cluster.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    mechanism_name,
    mechanism_type,
    salted_password,
)
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_session import ZooKeeperUnavailable

__all__ = ["users_group"]

_BOOTSTRAP = bootstrap_option
_MECHANISM = click.option(
    "--mechanism",
    "mechanisms",
    type=click.Choice(sorted(MECHANISMS)),
    multiple=True,
    help="SCRAM mechanism (repeatable; default: both).",
)


@click.group("users")
def users_group() -> None:
    """SCRAM users (SASL/SCRAM-SHA-256 and SCRAM-SHA-512 credentials)."""


@users_group.command("add")
@click.argument("name")
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True)
@click.option("--iterations", default=MIN_ITERATIONS, show_default=True, type=int)
@_MECHANISM
@_BOOTSTRAP
@command_config_option
@click.option(
    "--zookeeper",
    default=None,
    help="zookeeper.connect of a cluster (host:port[/chroot]): write there, no broker needed.",
)
def add(
    name: str, password: str, iterations: int, mechanisms: tuple[str, ...], bootstrap_server: str,
    zookeeper: str | None,
) -> None:  # fmt: skip
    """Add user NAME, or set a new password."""
    if zookeeper is not None:
        _add_in_zookeeper(zookeeper, name, password, iterations, mechanisms)
        return
    upsertions = []
    for mech in mechanisms or tuple(sorted(MECHANISMS)):
        salt = os.urandom(32)
        upsertions.append(
            alter_scram.ScramCredentialUpsertion(
                name=name,
                mechanism=i8(mechanism_type(mech)),
                iterations=i32(iterations),
                salt=salt,
                salted_password=salted_password(mech, password, salt, iterations),
            )
        )
    request = alter_scram.AlterUserScramCredentialsRequest(
        deletions=(), upsertions=tuple(upsertions)
    )
    _report_alter(_call(bootstrap_server, request))


@users_group.command("delete")
@click.argument("name")
@_MECHANISM
@_BOOTSTRAP
@command_config_option
def delete(name: str, mechanisms: tuple[str, ...], bootstrap_server: str) -> None:
    """Delete user NAME's credentials (every mechanism it has unless --mechanism)."""
    if not mechanisms:
        described = _describe(bootstrap_server, name)
        mechanisms = tuple(
            mechanism_name(int(info.mechanism)) or "" for info in described.credential_infos
        )
    deletions = tuple(
        alter_scram.ScramCredentialDeletion(name=name, mechanism=i8(mechanism_type(m)))
        for m in mechanisms
    )
    _report_alter(
        _call(
            bootstrap_server,
            alter_scram.AlterUserScramCredentialsRequest(deletions=deletions, upsertions=()),
        )
    )


@users_group.command("list")
@_BOOTSTRAP
@command_config_option
def list_users(bootstrap_server: str) -> None:
    """List the SCRAM users and their mechanisms (never their credentials)."""
    answer = _call(bootstrap_server, describe_scram.DescribeUserScramCredentialsRequest(users=None))
    for result in answer.results:
        mechs = ", ".join(
            f"{mechanism_name(int(i.mechanism))} (iterations {i.iterations})"
            for i in result.credential_infos
        )
        click.echo(f"{result.user}: {mechs}")


def _add_in_zookeeper(
    connect: str, name: str, password: str, iterations: int, mechanisms: tuple[str, ...]
) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        _fail(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    client = ZkMetadataClient(connect, session_timeout_ms=10_000)
    try:
        client.start()
    except ZooKeeperUnavailable as exc:
        _fail(str(exc))
    try:
        current: dict[str, dict[str, Any]] = {}
        client.scram_credentials(watch=current.update)  # the watch fires at once
        credentials = dict(current.get(name, {}))
        for mech in mechanisms or tuple(sorted(MECHANISMS)):
            credentials[mech] = ScramCredential.from_password(mech, password, iterations).to_json()
        client.set_scram_credentials(name, credentials)
    finally:
        client.close()
    click.echo(f"{name}: ok")


def _describe(bootstrap_server: str, name: str) -> Any:
    request = describe_scram.DescribeUserScramCredentialsRequest(
        users=(describe_scram.UserName(name=name),)
    )
    result = _call(bootstrap_server, request).results[0]
    if result.error_code != ErrorCode.none:
        _fail(f"{name}: {result.error_message or result.error_code.name}")
    return result


def _report_alter(answer: Any) -> None:
    failed = False
    for result in answer.results:
        if result.error_code == ErrorCode.none:
            click.echo(f"{result.user}: ok")
        else:
            failed = True
            click.echo(f"{result.user}: {result.error_message or result.error_code.name}", err=True)
    if failed:
        sys.exit(1)


def _call(bootstrap_server: str, request: Any) -> Any:
    return call("users", bootstrap_server, request)


def _fail(message: str) -> None:
    fail("users", message)
