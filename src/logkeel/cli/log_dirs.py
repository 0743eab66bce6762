"""``logkeel log-dirs``: a broker's log dirs as it serves them (DescribeLogDirs), bringing an
offline one back on demand (``online``) instead of waiting for the broker's own probe every
``log.dir.recovery.check.interval.ms``, and moving replicas between them (``move``,
``balance``: AlterReplicaLogDirs, KIP-113), with a progress bar fed by the future replicas
DescribeLogDirs reports, until the broker swaps each one in.

``online`` asks the broker given by ``--broker`` (found through the Metadata of
``--bootstrap-server``) to bring the dir back (`admin.log_dirs`, shared with `logkeel
console`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click
from kio.schema.errors import ErrorCode
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from logkeel.admin.log_dirs import bring_online, describe_log_dirs
from logkeel.admin.session import AdminError
from logkeel.cli.broker_requests import (
    admin,
    bootstrap_option,
    command_config_option,
    fail,
    nested,
)
from logkeel.cli.log_dirs_balance import DirMove, plan_balance
from logkeel.server.protocol import ApiKey, request_schema

__all__ = ["log_dirs_group"]

_BOOTSTRAP = bootstrap_option
_BROKER = click.option(
    "--broker", "broker_id", type=int, default=None,
    help="Id of the broker whose log dirs are meant (default: the bootstrap broker).",
)  # fmt: skip


@click.group("log-dirs")
def log_dirs_group() -> None:
    """A broker's log dirs: describe them, bring an offline one back, move replicas."""


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
    try:
        return describe_log_dirs(admin("log-dirs", address), address)
    except AdminError as exc:
        fail("log-dirs", str(exc))


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
    try:
        click.echo(bring_online(admin("log-dirs", address), address, log_dir))
    except AdminError as exc:
        fail("log-dirs", str(exc))


# How often a move's progress is read back (DescribeLogDirs).
_POLL_S = 0.5
_TIMEOUT = click.option(
    "--timeout", type=float, default=3600.0, show_default=True,
    help="Seconds to follow the moves; they go on in the broker after that.",
)  # fmt: skip
_NO_WAIT = click.option(
    "--no-wait", is_flag=True, help="Start the moves and return without following them."
)


def _start_moves(address: str, moves: list[DirMove]) -> None:
    """AlterReplicaLogDirs for ``moves``; fails on the first replica the broker refuses."""
    Request = request_schema(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
    assert Request is not None
    Dir, Topic = nested(Request, "AlterReplicaLogDir"), nested(Request, "AlterReplicaLogDirTopic")
    by_target: dict[str, dict[str, list[int]]] = {}
    for m in moves:
        by_target.setdefault(m.target, {}).setdefault(m.topic, []).append(m.partition)
    dirs = tuple(
        Dir(
            path=target,
            topics=tuple(Topic(name=t, partitions=tuple(ps)) for t, ps in sorted(topics.items())),
        )
        for target, topics in by_target.items()
    )
    answer = admin("log-dirs", address).send(Request(dirs=dirs))
    refused = [
        f"{t.topic_name}-{int(p.partition_index)}: {p.error_code.name.upper()}"
        for t in answer.results
        for p in t.partitions
        if p.error_code != ErrorCode.none
    ]
    if refused:
        fail("log-dirs", "move refused: " + ", ".join(refused))


def _replicas(results: list[Any]) -> dict[tuple[str, int, bool], tuple[str, Any]]:
    """(topic, partition, is future) -> (log dir, DescribeLogDirs entry)."""
    return {
        (str(t.name), int(p.partition_index), bool(p.is_future_key)): (str(r.log_dir), p)
        for r in results
        if r.error_code == ErrorCode.none
        for t in r.topics
        for p in t.partitions
    }


def _follow(address: str, moves: list[DirMove], timeout: float) -> None:
    """A bar per move (bytes of the future replica against the current one, and its offset
    lag) until the broker has swapped each in; fails on a move that ended elsewhere."""
    deadline = time.monotonic() + timeout
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TextColumn("lag {task.fields[lag]}"))  # fmt: skip
    with Progress(*columns) as progress:
        tasks = {
            m: progress.add_task(f"{m.topic}-{m.partition} -> {m.target}", total=None, lag="?")
            for m in moves
        }
        pending = list(moves)
        while pending:
            found = _replicas(_describe(address))
            for m in list(pending):
                future = found.get((m.topic, m.partition, True))
                current = found.get((m.topic, m.partition, False))
                if future is not None and current is not None:
                    progress.update(
                        tasks[m],
                        completed=int(future[1].partition_size),
                        total=max(int(current[1].partition_size), 1),
                        lag=int(future[1].offset_lag),
                    )
                    continue
                if current is not None and current[0] == m.target:
                    size = int(current[1].partition_size)
                    progress.update(tasks[m], completed=size, total=max(size, 1), lag=0)
                    pending.remove(m)
                    continue
                fail(
                    "log-dirs",
                    f"the move of {m.topic}-{m.partition} to {m.target} ended without being "
                    "swapped in (the broker's log says why); the replica stays where it was",
                )
            if not pending:
                break
            if time.monotonic() > deadline:
                fail("log-dirs", f"still moving after {timeout:g} s; the broker goes on")
            time.sleep(_POLL_S)


@log_dirs_group.command("move")
@_BOOTSTRAP
@_BROKER
@click.option("--topic", required=True, help="Topic of the replica to move.")
@click.option("--partition", type=int, required=True, help="Partition of the replica to move.")
@click.option("--to", "target", required=True, help="The log dir of that broker to move it to.")
@_NO_WAIT
@_TIMEOUT
@command_config_option
def move_command(
    bootstrap_server: str,
    broker_id: int | None,
    topic: str,
    partition: int,
    target: str,
    no_wait: bool,
    timeout: float,
) -> None:
    """Move a broker's replica of a partition to another of its log dirs (AlterReplicaLogDirs):
    a future replica catches up there and is swapped in; the partition serves throughout."""
    address = _broker_address(bootstrap_server, broker_id)
    found = _replicas(_describe(address))
    current = found.get((topic, partition, False))
    if current is None:
        fail("log-dirs", f"that broker serves no replica of {topic}-{partition}")
    move = DirMove(topic, partition, int(current[1].partition_size), current[0], str(Path(target)))
    if move.source == move.target:
        click.echo(f"{topic}-{partition} is already in {target}")
        return
    _start_moves(address, [move])
    if no_wait:
        click.echo(f"moving {topic}-{partition} to {target}")
        return
    _follow(address, [move], timeout)
    click.echo(f"{topic}-{partition} moved from {move.source} to {move.target}")


@log_dirs_group.command("balance")
@_BOOTSTRAP
@_BROKER
@click.option("--execute", is_flag=True, help="Perform the moves proposed.")
@_NO_WAIT
@_TIMEOUT
@command_config_option
def balance_command(
    bootstrap_server: str, broker_id: int | None, execute: bool, no_wait: bool, timeout: float
) -> None:
    """Propose (with --execute, perform) replica moves that spread the broker's replicas over
    its online log dirs by size; replicas being moved stay out of the plan."""
    address = _broker_address(bootstrap_server, broker_id)
    results = _describe(address)
    moving = {(str(t.name), int(p.partition_index)) for r in results for t in r.topics
              for p in t.partitions if p.is_future_key}  # fmt: skip
    dirs = {
        str(r.log_dir): {
            (str(t.name), int(p.partition_index)): int(p.partition_size)
            for t in r.topics
            for p in t.partitions
            if not p.is_future_key and (str(t.name), int(p.partition_index)) not in moving
        }
        for r in results
        if r.error_code == ErrorCode.none
    }
    plan = plan_balance(dirs)
    if not plan:
        click.echo("the log dirs are balanced: no move would narrow the gap between them")
        return
    table = Table("replica", "bytes", "from", "to")
    for m in plan:
        table.add_row(f"{m.topic}-{m.partition}", f"{m.size:,}", m.source, m.target)
    Console().print(table)
    if not execute:
        click.echo("proposed only: run again with --execute to move them")
        return
    _start_moves(address, plan)
    if no_wait:
        click.echo(f"{len(plan)} move(s) started")
        return
    _follow(address, plan, timeout)
    click.echo(f"{len(plan)} replica(s) moved")
