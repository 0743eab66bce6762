"""``logkeel cluster up|status``: a local cluster on one machine, and what a cluster looks like.

``up`` starts a ZooKeeper (`cluster.zk_server`) and N `logkeel serve --zookeeper` processes
(`testing.broker_process`, the one launcher), each with its own log dir under ``--dir`` and its
port counting up from ``--port``; it prints the bootstrap servers and stops everything cleanly
on Ctrl-C or SIGTERM (brokers first, each with a controlled shutdown, ZooKeeper last).

``status`` asks one broker for Metadata (v12: leader epochs, offline replicas) and each broker
for its log dirs (DescribeLogDirs), through `broker_requests` (so ``--command-config`` reaches a
TLS or SASL listener, as for the other admin commands), and shows the brokers, the controller and every partition's
replicas, leader, leader epoch and ISR, flagging offline and under-replicated partitions. It also
lists every election after which replicas lost records (an unclean leader, a designated one out
of the ISR) and why each offline partition waits: the controller records both in ZooKeeper,
whose address the broker's DescribeConfigs gives (``zookeeper.connect``).
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
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8
from rich.console import Console
from rich.table import Table

from logkeel.cli.broker_requests import command_config_option, nested, send
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_server import ZooKeeperServer, ZooKeeperServerError
from logkeel.cluster.zk_session import ZooKeeperUnavailable
from logkeel.server.network.client import BrokerConnectionError
from logkeel.server.protocol import ApiKey, request_schema
from logkeel.testing.broker_process import BrokerUnavailable, LogkeelBroker

__all__ = ["cluster_group", "cluster_status", "zookeeper_connect"]

_BROKER_RESOURCE = 4

_METADATA_VERSION = 12


@click.group("cluster")
def cluster_group() -> None:
    """Run a local cluster, or show a cluster's brokers and partitions."""


@cluster_group.command("up")
@click.option("--brokers", "count", type=click.IntRange(1, 64), default=3, show_default=True)
@click.option(
    "--dir", "base_dir", type=click.Path(file_okay=False, path_type=Path),
    default=Path("logkeel-cluster"), show_default=True,
    help="Holds ZooKeeper's data and one directory per broker.",
)
@click.option("--port", type=click.IntRange(1, 65535), default=9092, show_default=True,
              help="The first broker's port; the others count up from it.")
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE",
              help="A broker config for every broker; repeatable.")
def cluster_up(count: int, base_dir: Path, port: int, overrides: tuple[str, ...]) -> None:
    """Start ZooKeeper and N brokers until Ctrl-C or SIGTERM."""
    settings = dict(o.split("=", 1) for o in overrides if "=" in o)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    zookeeper = ZooKeeperServer(base_dir / "zookeeper")
    try:
        zookeeper.start()
    except ZooKeeperServerError as exc:
        click.echo(f"logkeel cluster up: {exc}", err=True)
        sys.exit(1)
    brokers: list[LogkeelBroker] = []
    code = 0
    try:
        brokers = [
            LogkeelBroker(
                base_dir / f"broker-{i + 1}", port + i,
                overrides={"zookeeper.connect": zookeeper.connect_string, **settings},
                extra_args=["--node-id", str(i + 1)],
            )
            for i in range(count)
        ]
        with ThreadPoolExecutor(count) as pool:  # each start waits for its listener
            for started in [pool.submit(b.start) for b in brokers]:
                started.result()
        click.echo(f"ZooKeeper: {zookeeper.connect_string}")
        click.echo("bootstrap servers: " + ",".join(b.bootstrap for b in brokers), nl=True)
        sys.stdout.flush()
        while not stop.wait(0.5):
            dead = [b for b in brokers if not b.alive()]
            if dead:
                click.echo(f"broker(s) exited: {', '.join(b.bootstrap for b in dead)}", err=True)
                code = 1
                break
    except BrokerUnavailable as exc:
        click.echo(f"logkeel cluster up: {exc}", err=True)
        code = 1
    finally:
        for broker in reversed(brokers):
            if not broker.alive():
                continue
            try:
                broker.stop(timeout=60)
            except BrokerUnavailable as exc:
                click.echo(str(exc), err=True)
        zookeeper.stop()
    click.echo("cluster stopped")
    sys.exit(code)


def cluster_status(
    bootstrap: str, timeout: float = 10.0, *, with_losses: bool = True
) -> dict[str, Any]:
    """The cluster as one broker sees it, as plain data (what ``--json`` prints);
    ``election_losses`` is None when they could not be read (a single node has none)."""
    response = _call(
        bootstrap, ApiKey.METADATA, _METADATA_VERSION, timeout,
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )
    brokers = [
        {"id": int(b.node_id), "host": b.host, "port": int(b.port), "rack": b.rack,
         **_log_dirs(f"{b.host}:{int(b.port)}", timeout)}
        for b in sorted(response.brokers, key=lambda b: b.node_id)
    ]
    partitions = []
    for t in sorted(response.topics, key=lambda t: t.name or ""):
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            replicas = [int(r) for r in p.replica_nodes]
            isr = [int(r) for r in p.isr_nodes]
            partitions.append({
                "topic": t.name,
                "partition": int(p.partition_index),
                "leader": int(p.leader_id),
                "leader_epoch": int(p.leader_epoch),
                "replicas": replicas,
                "isr": isr,
                "offline_replicas": [int(r) for r in p.offline_replicas],
                "offline": int(p.leader_id) < 0,
                "under_replicated": len(isr) < len(replicas),
            })
    status: dict[str, Any] = {
        "cluster_id": response.cluster_id,
        "controller": int(response.controller_id),
        "brokers": brokers,
        "partitions": partitions,
    }
    if with_losses:
        connect = zookeeper_connect(bootstrap, status, timeout)
        status["election_losses"], reasons = _from_zookeeper(connect)
        for p in partitions:
            if p["offline"]:
                p["offline_reason"] = reasons.get((p["topic"], p["partition"]))
    return status


def zookeeper_connect(bootstrap: str, status: dict[str, Any], timeout: float = 10.0) -> str | None:
    """The cluster's zookeeper.connect, from the bootstrap broker's DescribeConfigs (None: not a
    cluster member, or not among the brokers ``status`` lists)."""
    host, _, port = bootstrap.rpartition(":")
    node = next(
        (b["id"] for b in status["brokers"] if b["port"] == int(port) and
         (not host or b["host"] == host)),  # fmt: skip
        None,
    )
    if node is None:
        return None
    request_type = request_schema(ApiKey.DESCRIBE_CONFIGS, 1)
    resource = nested(request_type, "DescribeConfigsResource")
    response = _call(
        bootstrap, ApiKey.DESCRIBE_CONFIGS, 1, timeout,
        resources=(resource(resource_type=i8(_BROKER_RESOURCE), resource_name=str(node),
                            configuration_keys=("zookeeper.connect",)),),
        include_synonyms=False,
    )  # fmt: skip
    for result in response.results:
        for config in result.configs:
            if config.name == "zookeeper.connect" and config.value:
                return str(config.value)
    return None


def _from_zookeeper(
    connect: str | None,
) -> tuple[list[dict[str, Any]] | None, dict[tuple[str, int], str]]:
    """The election losses (None: unknown) and why each offline partition waits."""
    if connect is None:
        return None, {}
    client = ZkMetadataClient(connect, session_timeout_ms=10_000)
    try:
        client.start()
    except ZooKeeperUnavailable:
        return None, {}
    try:
        reasons = {(tp.topic, tp.partition): r for tp, r in client.offline_reasons().items()}
        return [
            {"topic": x.tp.topic, "partition": x.tp.partition, "leader": x.leader,
             "leader_epoch": x.leader_epoch, "from_offset": x.from_offset,
             "truncated": {str(r): n for r, n in x.truncated.items()}, "reason": x.reason,
             "time_ms": x.time_ms}
            for x in client.election_losses()
        ], reasons  # fmt: skip
    finally:
        client.close()


def _call(bootstrap: str, api: ApiKey, version: int, timeout: float, **fields: Any) -> Any:
    """One request on a connection of its own, and its decoded response."""
    request_type = request_schema(api, version)
    assert request_type is not None
    return send(
        bootstrap, request_type(**fields), client_id="logkeel-cluster-status",
        timeout_ms=int(timeout * 1000),
    )


def _log_dirs(address: str, timeout: float) -> dict[str, list[str]]:
    """The broker's log dirs, online and offline (DescribeLogDirs); empty when unreachable."""
    try:
        response = _call(address, ApiKey.DESCRIBE_LOG_DIRS, 1, timeout, topics=None)
    except BrokerConnectionError:
        return {"log_dirs_online": [], "log_dirs_offline": []}
    online = [r.log_dir for r in response.results if r.error_code == ErrorCode.none]
    offline = [r.log_dir for r in response.results if r.error_code != ErrorCode.none]
    return {"log_dirs_online": online, "log_dirs_offline": offline}


@cluster_group.command("status")
@click.option("--bootstrap-server", "bootstrap", default="127.0.0.1:9092", show_default=True,
              metavar="HOST:PORT")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@command_config_option
def status_command(bootstrap: str, as_json: bool) -> None:
    """Brokers, controller, and every partition's leader, epoch and ISR."""
    try:
        status = cluster_status(bootstrap)
    except (BrokerConnectionError, ValueError) as exc:
        click.echo(f"logkeel cluster status: cannot reach {bootstrap}: {exc}", err=True)
        sys.exit(1)
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
            "[red]offline[/]" if p["offline"]
            else "[yellow]under-replicated[/]" if p["under_replicated"] else "ok"
        )
        parts.add_row(
            p["topic"], str(p["partition"]), str(p["leader"]), str(p["leader_epoch"]),
            ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])), state,
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
