"""`logkeel elect`: leader elections an operator asks for.

``--preferred`` and ``--unclean`` go through Kafka's ElectLeaders API, as
``kafka-leader-election.sh`` does. ``--replica N`` makes a chosen replica the leader, in or out
of the ISR (the index-corruption incident: the operator knows which copy is good). ElectLeaders
has no field for a chosen replica, so this one is handed to the controller through ZooKeeper,
whose address the broker's DescribeConfigs gives (``zookeeper.connect``), or ``--zookeeper``.
``--command-config`` reaches a TLS or SASL listener, as for the other admin commands.
A replica that lost acknowledged data is refused unless ``--force``. Either way the result names
what the other replicas will truncate.
"""

from __future__ import annotations

import sys

import click
from kio.schema.errors import ErrorCode
from rich.console import Console
from rich.table import Table

from logkeel.admin.cluster_status import zookeeper_connect
from logkeel.admin.elections import (
    Results,
    designated_election,
    elect_leaders_request,
    election_results,
)
from logkeel.cli.broker_requests import (
    admin,
    bootstrap_option,
    call,
    command_config_option,
    fail,
)
from logkeel.cli.cluster import cluster_status
from logkeel.cluster.zk_session import ZooKeeperUnavailable
from logkeel.server.network.client import BrokerConnectionError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["elect_command"]


@click.command("elect")
@click.option("--topic", help="The topic (with --partition), or every partition when omitted.")
@click.option("--partition", type=int, help="The partition of --topic.")
@click.option("--preferred", "kind", flag_value="preferred", help="Kafka's preferred election.")
@click.option("--unclean", "kind", flag_value="unclean",
              help="Kafka's unclean election: with no in-sync replica left, the replica with the "
                   "highest (last leader epoch, log end offset) leads.")  # fmt: skip
@click.option("--replica", type=int, help="Make this replica the leader, in or out of the ISR.")
@click.option("--force", is_flag=True,
              help="With --replica: accept a replica that lost acknowledged data.")  # fmt: skip
@bootstrap_option
@click.option(
    "--zookeeper", help="zookeeper.connect of the cluster (default: asked of the broker)."
)
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for the result.")
@command_config_option
def elect_command(
    topic: str | None,
    partition: int | None,
    kind: str | None,
    replica: int | None,
    force: bool,
    bootstrap_server: str,
    zookeeper: str | None,
    timeout: float,
) -> None:
    """Elect partition leaders: --preferred, --unclean, or --replica N."""
    if partition is not None and topic is None:
        fail("elect", "--partition needs --topic")
    if replica is not None:
        if kind is not None:
            fail("elect", "--replica is an election of its own: drop --preferred/--unclean")
        if topic is None or partition is None:
            fail("elect", "--replica needs --topic and --partition")
        tp = TopicPartition(topic, partition)
        results = _designated(tp, replica, force, bootstrap_server, zookeeper, timeout)
    else:
        if kind is None:
            fail("elect", "say --preferred, --unclean or --replica N")
        if force:
            fail("elect", "--force goes with --replica")
        if topic is not None and partition is None:
            fail("elect", "--topic needs --partition (or name neither for every partition)")
        wanted = None if topic is None else [TopicPartition(topic, partition or 0)]
        results = _elect_leaders(kind, wanted, bootstrap_server, timeout)
    _print(results)
    if any(err not in (None, "ELECTION_NOT_NEEDED") for err, _ in results.values()):
        sys.exit(1)


def _elect_leaders(
    kind: str, wanted: list[TopicPartition] | None, bootstrap: str, timeout: float
) -> Results:
    response = call("elect", bootstrap, elect_leaders_request(kind, wanted, timeout))
    if response.error_code != ErrorCode.none:
        fail("elect", f"the broker refused: {response.error_code.name.upper()}")
    return election_results(response)


def _designated(
    tp: TopicPartition,
    replica: int,
    force: bool,
    bootstrap: str,
    zookeeper: str | None,
    timeout: float,
) -> Results:
    connect = zookeeper or _zookeeper_of(bootstrap)
    try:
        return designated_election(connect, tp, replica, force, timeout)
    except ZooKeeperUnavailable as exc:
        fail("elect", str(exc))


def _zookeeper_of(bootstrap: str) -> str:
    """The cluster's zookeeper.connect, from the bootstrap broker's DescribeConfigs."""
    try:
        status = cluster_status(bootstrap, with_losses=False)
    except (BrokerConnectionError, ValueError) as exc:
        fail("elect", str(exc))
    connect = zookeeper_connect(admin("elect", bootstrap), status)
    if connect is None:
        fail("elect", f"{bootstrap} is not a cluster member (no zookeeper.connect) or not among "
                      "the brokers it lists; give --zookeeper")  # fmt: skip
    return connect


def _print(results: Results) -> None:
    table = Table(title="elections")
    for column in ("partition", "result", "reason"):
        table.add_column(column)
    for tp, (err, why) in sorted(results.items()):
        table.add_row(str(tp), err or "elected", why)
    Console().print(table)
