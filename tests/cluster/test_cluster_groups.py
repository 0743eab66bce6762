"""Consumer groups on three real brokers: the coordinator of a group is the leader of its
``__consumer_offsets`` partition, and a group keeps its committed offsets when that broker is
SIGKILLed (the topic has three replicas, so the new leader loads them)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.types import GroupId

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.server.group.records import OFFSETS_TOPIC, partition_for
from tests.brokerproc import BrokerProcess
from tests.cluster.test_cluster_brokers import (
    FAILOVER_BOUND_S,
    PROBE_ERRORS,
    Cluster,
    three_brokers,
)
from tests.server.test_admin_wire import Wire
from tests.waiting import wait_until

OFFSETS_PARTITIONS = 6
TOPIC = "grouped"
GROUP = "movers"
RECORDS = 3000
CONSUME_BOUND_S = 60.0


@pytest.fixture(scope="module")
def groups_cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    overrides = {
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    }
    base = tmp_path_factory.mktemp("groups")
    with three_brokers(zookeeper, base, "/cluster_groups", overrides) as c:
        c.ensure_all_running()
        yield c


def find_coordinator(port: int, group: str) -> Any:
    wire = Wire(port)
    try:
        return wire.call(FindCoordinatorRequest(key=group, key_type=0))
    finally:
        wire.close()


def offsets_leader(cluster: Cluster, group: str, via: int | None = None) -> int:
    p = partition_for(group, OFFSETS_PARTITIONS)
    return int(cluster.partitions(OFFSETS_TOPIC, via)[p].leader_id)


def produce(cluster: Cluster, start: int, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.live()[0].bootstrap, "acks": "all", "linger.ms": 5}
    )
    for i in range(start, start + count):
        producer.produce(TOPIC, value=f"v{i}".encode(), key=str(i).encode())
    assert producer.flush(30) == 0


def consumer(cluster: Cluster) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )


def consume(c: Consumer, count: int) -> list[Any]:
    """``count`` records, within the bound."""
    got: list[Any] = []
    deadline = time.monotonic() + CONSUME_BOUND_S
    while len(got) < count and time.monotonic() < deadline:
        for m in c.consume(500, timeout=1.0):
            if m.error() is None:
                got.append(m)
    return got


def test_find_coordinator_names_the_offsets_partition_leader_everywhere(
    groups_cluster: Cluster,
) -> None:
    group = f"probe-{uuid.uuid4().hex[:6]}"

    def answers() -> set[int] | None:
        nodes = set()
        for b in groups_cluster.brokers.values():
            r = find_coordinator(b.port, group)
            if r.error_code != ErrorCode.none:
                return None
            nodes.add(int(r.node_id))
        # Each broker's metadata cache catches up with the new topic's leaders on its own.
        return nodes if nodes == {offsets_leader(groups_cluster, group)} else None

    nodes = wait_until(
        answers, 30, "every broker to name the partition's leader", retry_on=PROBE_ERRORS
    )
    # The topic was created with the configured replication factor.
    for p in groups_cluster.partitions(OFFSETS_TOPIC).values():
        assert sorted(p.replica_nodes) == [1, 2, 3]
    # Another broker is not the group's coordinator.
    [coordinator] = nodes
    other = next(b for i, b in groups_cluster.brokers.items() if i != coordinator)
    wire = Wire(other.port)
    try:
        r = wire.call(
            HeartbeatRequest(
                group_id=GroupId(group), generation_id=1, member_id="m", group_instance_id=None
            )
        )
    finally:
        wire.close()
    assert r.error_code == ErrorCode.not_coordinator


def test_group_resumes_from_its_commits_after_the_coordinator_is_killed(
    groups_cluster: Cluster,
) -> None:
    groups_cluster.create_topic(TOPIC, 3, 3)
    produce(groups_cluster, 0, RECORDS)
    first = consumer(groups_cluster)
    try:
        first.subscribe([TOPIC])
        got = consume(first, RECORDS)
        assert len(got) == RECORDS, f"{len(got)} of {RECORDS} records consumed"
        assert len({m.value() for m in got}) == RECORDS
        first.commit(asynchronous=False)
        committed = first.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=10)
        assert sum(tp.offset for tp in committed) == RECORDS
    finally:
        first.close()

    produce(groups_cluster, RECORDS, RECORDS)
    victim = offsets_leader(groups_cluster, GROUP)
    groups_cluster.brokers[victim].kill()
    survivor = next(i for i in groups_cluster.brokers if i != victim)
    wait_until(
        lambda: offsets_leader(groups_cluster, GROUP, survivor) not in (-1, victim),
        FAILOVER_BOUND_S,
        "a new leader of the group's offsets partition",
        retry_on=PROBE_ERRORS,
    )

    second = consumer(groups_cluster)
    try:
        second.subscribe([TOPIC])
        got = consume(second, RECORDS)
        values = [m.value().decode() for m in got]
        old = [v for v in values if int(v[1:]) < RECORDS]
        assert not old, f"{len(old)} records before the commit point read again"
        assert len(set(values)) == RECORDS, f"{len(set(values))} of {RECORDS} new records"
        second.commit(asynchronous=False)
    finally:
        second.close()


def test_offsets_topic_waits_for_enough_brokers(tmp_path: Path) -> None:
    with BrokerProcess(
        tmp_path, overrides={"offsets.topic.replication.factor": "3"}
    ).start() as broker:
        r = find_coordinator(broker.port, GROUP)
        assert r.error_code == ErrorCode.coordinator_not_available
        assert "not creating __consumer_offsets yet" in broker.output()


def test_controlled_shutdown_unloads_the_group_and_another_broker_serves_it(
    groups_cluster: Cluster,
) -> None:
    groups_cluster.ensure_all_running()
    p = partition_for(GROUP, OFFSETS_PARTITIONS)
    leaving = offsets_leader(groups_cluster, GROUP)
    assert groups_cluster.brokers[leaving].stop(timeout=30) == 0
    assert f"unloaded {OFFSETS_TOPIC}-{p}: 1 groups" in groups_cluster.brokers[leaving].output()
    c = consumer(groups_cluster)
    try:
        committed = c.committed([TopicPartition(TOPIC, q) for q in range(3)], timeout=20)
        assert sum(tp.offset for tp in committed) == 2 * RECORDS
    finally:
        c.close()
