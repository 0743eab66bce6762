"""``logkeel log-dirs``: a broker's log dirs as it serves them (DescribeLogDirs), and bringing an
offline one back on demand (``online``) instead of waiting for the broker's own probe every
``log.dir.recovery.check.interval.ms``.

``online`` sends AlterReplicaLogDirs naming the dir and no replicas to the broker given by
``--broker`` (found through the Metadata of ``--bootstrap-server``); the broker probes it and,
if it answers IO with the directory id it had, loads it through unclean recovery. The request's
answer has no per-dir error, so the outcome is read back with DescribeLogDirs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from kio.schema.errors import ErrorCode
from rich.console import Console
from rich.table import Table

from logkeel.cli.broker_requests import (
    admin,
    bootstrap_option,
    command_config_option,
    fail,
    nested,
)
from logkeel.server.protocol import ApiKey, request_schema

__all__ = ["log_dirs_group"]

_BOOTSTRAP = bootstrap_option
_BROKER = click.option(
    "--broker", "broker_id", type=int, default=None,
    help="Id of the broker whose log dirs are meant (default: the bootstrap broker).",
)  # fmt: skip


@click.group("log-dirs")
def log_dirs_group() -> None:
    """A broker's log dirs: describe them, bring an offline one back."""


def _broker_address(bootstrap: str, broker_id: int | None) -> str:
    session = admin("log-dirs", bootstrap)
    if broker_id is None:
        return session.bootstrap()
    brokers = session.brokers()
    if broker_id not in brokers:
        known = ", ".join(map(str, sorted(brokers)))
        fail("log-dirs", f"broker {broker_id} is not alive in the cluster (alive: {known})")
    return brokers[broker_id]


def _describe(address: str) -> list[Any]:
    Request = request_schema(ApiKey.DESCRIBE_LOG_DIRS, 4)
    assert Request is not None
    answer = admin("log-dirs", address).send(Request(topics=None))
    if answer.error_code != ErrorCode.none:
        fail("log-dirs", f"DescribeLogDirs refused: {answer.error_code.name.upper()}")
    return list(answer.results)


def _state(result: Any) -> str:
    return "online" if result.error_code == ErrorCode.none else "offline"


@log_dirs_group.command("describe")
@_BOOTSTRAP
@_BROKER
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@command_config_option
def describe_command(bootstrap_server: str, broker_id: int | None, as_json: bool) -> None:
    """Each log dir of the broker: online or offline, partitions, bytes, free space."""
    results = _describe(_broker_address(bootstrap_server, broker_id))
    if as_json:
        rows = [
            {
                "log_dir": str(r.log_dir),
                "state": _state(r),
                "error": r.error_code.name.upper(),
                "partitions": sorted(
                    f"{t.name}-{int(p.partition_index)}" for t in r.topics for p in t.partitions
                ),
                "bytes": sum(int(p.partition_size) for t in r.topics for p in t.partitions),
                "usable_bytes": int(r.usable_bytes),
            }
            for r in results
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("log dir", "state", "partitions", "bytes", "free")
    for r in results:
        parts = [p for t in r.topics for p in t.partitions]
        online = r.error_code == ErrorCode.none
        table.add_row(
            str(r.log_dir),
            _state(r) if online else f"[red]offline[/red] ({r.error_code.name.upper()})",
            str(len(parts)) if online else "-",
            f"{sum(int(p.partition_size) for p in parts):,}" if online else "-",
            f"{int(r.usable_bytes):,}" if online and int(r.usable_bytes) >= 0 else "-",
        )
    Console().print(table)


@log_dirs_group.command("online")
@click.argument("log_dir")
@_BOOTSTRAP
@_BROKER
@command_config_option
def online_command(log_dir: str, bootstrap_server: str, broker_id: int | None) -> None:
    """Bring the offline LOG_DIR of a broker back now: it is probed and, if it answers IO with
    the directory id it had, loaded through unclean recovery; its replicas catch up."""
    address = _broker_address(bootstrap_server, broker_id)
    wanted = str(Path(log_dir))
    before = {str(r.log_dir): r for r in _describe(address)}
    if wanted not in before:
        fail("log-dirs", f"{log_dir} is not a log dir of that broker ({', '.join(before)})")
    if before[wanted].error_code == ErrorCode.none:
        click.echo(f"{log_dir} is already online")
        return
    Request = request_schema(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
    assert Request is not None
    Dir = nested(Request, "AlterReplicaLogDir")
    admin("log-dirs", address).send(Request(dirs=(Dir(path=wanted, topics=()),)))
    after = {str(r.log_dir): r for r in _describe(address)}[wanted]
    if after.error_code != ErrorCode.none:
        fail("log-dirs", f"{log_dir} is still offline; the broker's log says why")
    partitions = sum(len(t.partitions) for t in after.topics)
    click.echo(f"{log_dir} is online again: {partitions} partition(s)")
