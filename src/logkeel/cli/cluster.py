"""``logkeel cluster up|stop-broker|start-broker|status``: a local cluster on one machine to try
failures on, and what a cluster looks like.

``up`` starts a ZooKeeper (`cluster.zk_server`) and N `logkeel serve --zookeeper` processes
(`testing.broker_process`, the one launcher), each with its own log dir under ``--dir`` and its
port counting up from ``--port``; with 3 or more brokers every topic it creates by default gets
3 replicas and min.insync.replicas 2 (`cluster_control.replication_defaults`, printed at start;
``--override`` wins). A broker that exits is reported and the others keep running;
``stop-broker N`` (SIGTERM, or SIGKILL with ``--kill``) and ``start-broker N`` ask the running
``up`` through its control socket (`cluster_control`). Ctrl-C or SIGTERM stops everything
cleanly (brokers first, each with a controlled shutdown, ZooKeeper last).

``status`` asks the first broker of ``--bootstrap-server`` that answers for Metadata (v12:
leader epochs, offline replicas) and each broker for its log dirs (DescribeLogDirs), through
`broker_requests` (so ``--command-config`` reaches a TLS or SASL listener, as for the other
admin commands), and shows the brokers, the controller and every partition's replicas, leader,
leader epoch and ISR, flagging offline and under-replicated partitions. It also lists every
election after which replicas lost records (an unclean leader, a designated one out of the
ISR): the controller records them in ZooKeeper, whose address the broker's DescribeConfigs
gives (``zookeeper.connect``).
"""

from __future__ import annotations

import datetime
import json
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from logkeel.admin.cluster_status import status_of
from logkeel.cli.broker_requests import (
    Admin,
    bootstrap_option,
    command_config_option,
    fail,
)
from logkeel.cli.cluster_control import (
    Brokers,
    ControlError,
    ControlServer,
    ask,
    replication_defaults,
)
from logkeel.cluster.zk_server import ZooKeeperServer, ZooKeeperServerError
from logkeel.server.network.client import BrokerConnectionError, ClientSecurity
from logkeel.testing.broker_process import LogkeelBroker

__all__ = ["cluster_group", "cluster_status"]

_BROKER_RESOURCE = 4


@click.group("cluster")
def cluster_group() -> None:
    """Run a local cluster, or show a cluster's brokers and partitions."""


@cluster_group.command("up")
@click.option("--brokers", "count", type=click.IntRange(1, 64), default=3, show_default=True)
@click.option(
    "--dir",
    "base_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("logkeel-cluster"),
    show_default=True,
    help="Holds ZooKeeper's data and one directory per broker.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=9092,
    show_default=True,
    help="The first broker's port; the others count up from it.",
)
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="A broker config for every broker; repeatable.",
)
def cluster_up(count: int, base_dir: Path, port: int, overrides: tuple[str, ...]) -> None:
    """Start ZooKeeper and N brokers until Ctrl-C or SIGTERM."""
    bad = [o for o in overrides if not o.partition("=")[0] or "=" not in o]
    if bad:
        fail("cluster up", f"--override {bad[0]!r} is not KEY=VALUE")
    defaults = replication_defaults(count)
    settings = {**defaults, **dict(o.split("=", 1) for o in overrides)}
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    base_dir.mkdir(parents=True, exist_ok=True)
    zookeeper = ZooKeeperServer(base_dir / "zookeeper")
    try:
        zookeeper.start()
    except ZooKeeperServerError as exc:
        fail("cluster up", str(exc))
    brokers = Brokers({
        i + 1: LogkeelBroker(
            base_dir / f"broker-{i + 1}", port + i,
            overrides={"zookeeper.connect": zookeeper.connect_string, **settings},
            extra_args=["--node-id", str(i + 1)],
        )
        for i in range(count)
    })  # fmt: skip
    control = None
    code = 0
    try:
        control = ControlServer(base_dir, brokers)
        control.start()
        with ThreadPoolExecutor(count) as pool:  # each start waits for its listener
            for started in [pool.submit(brokers.start, i + 1) for i in range(count)]:
                started.result()
        click.echo(f"ZooKeeper: {zookeeper.connect_string}")
        if defaults:
            click.echo("replication: " + ", ".join(f"{k}={settings[k]}" for k in defaults))
        click.echo("bootstrap servers: " + ",".join(f"127.0.0.1:{port + i}" for i in range(count)))
        click.echo(
            f"stop or start a broker: logkeel cluster stop-broker|start-broker N --dir {base_dir}"
        )
        sys.stdout.flush()
        while not stop.wait(0.5):
            for node, broker, exit_code in brokers.exited():
                click.echo(
                    f"broker {node} ({broker.bootstrap}) exited with code {exit_code}; the others "
                    f"keep running (logkeel cluster start-broker {node} --dir {base_dir})",
                    err=True,
                )
    except ControlError as exc:
        click.echo(f"logkeel cluster up: {exc}", err=True)
        code = 1
    finally:
        if control is not None:
            control.close()
        for problem in brokers.stop_all():
            click.echo(problem, err=True)
        zookeeper.stop()
    click.echo("cluster stopped")
    sys.exit(code)


_DIR = click.option(
    "--dir", "base_dir", type=click.Path(file_okay=False, path_type=Path),
    default=Path("logkeel-cluster"), show_default=True,
    help="The --dir of the running `logkeel cluster up`.",
)  # fmt: skip


@cluster_group.command("stop-broker")
@click.argument("node", type=int)
@click.option("--kill", is_flag=True, help="SIGKILL (a crash) instead of a clean SIGTERM.")
@_DIR
def stop_broker_command(node: int, kill: bool, base_dir: Path) -> None:
    """Stop broker NODE of the running `cluster up` (the others keep running)."""
    _control("cluster stop-broker", base_dir, {"op": "stop", "broker": node, "kill": kill})


@cluster_group.command("start-broker")
@click.argument("node", type=int)
@_DIR
def start_broker_command(node: int, base_dir: Path) -> None:
    """Start broker NODE of the running `cluster up` again, on its port and log dirs."""
    _control("cluster start-broker", base_dir, {"op": "start", "broker": node})


def _control(command: str, base_dir: Path, request: dict[str, Any]) -> None:
    try:
        answer = ask(base_dir, request)
    except ControlError as exc:
        fail(command, str(exc))
    if not answer.get("ok"):
        fail(command, str(answer.get("error")))
    click.echo(answer["message"])


def cluster_status(
    bootstrap: str,
    timeout: float = 10.0,
    *,
    with_losses: bool = True,
    security: ClientSecurity | None = None,
) -> dict[str, Any]:
    """The cluster as the first broker of ``bootstrap`` that answers sees it, as plain data
    (what ``--json`` prints); ``election_losses`` and ``history`` are None when they could not
    be read (a single node has none). Raises ``BrokerConnectionError`` (``ValueError``: a bad address list).
    ``security``: how to reach the listener when there is no command's ``--command-config``
    to read it from (a thread of `logkeel console`)."""
    with Admin(
        bootstrap,
        client_id="logkeel-cluster-status",
        timeout_ms=int(timeout * 1000),
        security=security,
    ) as admin:
        return status_of(admin, with_losses=with_losses)


@cluster_group.command("status")
@bootstrap_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@command_config_option
def status_command(bootstrap_server: str, as_json: bool) -> None:
    """Brokers, controller, and every partition's leader, epoch and ISR."""
    try:
        status = cluster_status(bootstrap_server)
    except (BrokerConnectionError, ValueError) as exc:
        fail("cluster status", str(exc))
    if as_json:
        click.echo(json.dumps(status, indent=2))
        return
    console = Console()
    brokers = Table(title=f"cluster {status['cluster_id']}")
    for column in ("broker", "address", "rack", "log dirs", "role"):
        brokers.add_column(column)
    for b in status["brokers"]:
        role = "controller" if b["id"] == status["controller"] else ""
        dirs = f"{len(b['log_dirs_online'])} online"
        if b["log_dirs_offline"]:
            dirs += f", [red]offline: {', '.join(b['log_dirs_offline'])}[/]"
        brokers.add_row(str(b["id"]), f"{b['host']}:{b['port']}", b["rack"] or "-", dirs, role)
    console.print(brokers)
    parts = Table(title="partitions")
    for column in ("topic", "partition", "leader", "epoch", "replicas", "isr", "state"):
        parts.add_column(column)
    for p in status["partitions"]:
        state = (
            "[red]offline[/]"
            if p["offline"]
            else "[yellow]under-replicated[/]"
            if p["under_replicated"]
            else "ok"
        )
        parts.add_row(
            p["topic"],
            str(p["partition"]),
            str(p["leader"]),
            str(p["leader_epoch"]),
            ",".join(map(str, p["replicas"])),
            ",".join(map(str, p["isr"])),
            state,
        )
    console.print(parts)
    for p in status["partitions"]:
        if p.get("offline_reason"):
            console.print(f"{p['topic']}-{p['partition']} offline: {p['offline_reason']}")
    losses = status["election_losses"]
    if losses is None:
        console.print("election losses: unknown (ZooKeeper not reachable, or a single node)")
    elif losses:
        table = Table(title="elections after which replicas lost records")
        for column in ("time (UTC)", "partition", "leader", "epoch", "lost from offset",
                       "known past it"):  # fmt: skip
            table.add_column(column)
        for x in losses:
            when = datetime.datetime.fromtimestamp(x["time_ms"] / 1000, datetime.UTC)
            past = ", ".join(f"{r}: {n}" for r, n in x["truncated"].items()) or "-"
            table.add_row(
                when.strftime("%Y-%m-%d %H:%M:%S"), f"{x['topic']}-{x['partition']}",
                str(x["leader"]), str(x["leader_epoch"]),
                "not reported" if x["from_offset"] < 0 else str(x["from_offset"]), past,
            )  # fmt: skip
        console.print(table)
