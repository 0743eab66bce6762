"""A KIP-848 consumer group on three real brokers: librdkafka ``group.protocol=consumer``
consumers keep their member ids and partitions when the group's coordinator (the leader of its
``__consumer_offsets`` partition) is SIGKILLed: the new leader replays the group's records."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.server.group.records import OFFSETS_TOPIC, partition_for
from tests.cluster.test_cluster_brokers import (
    FAILOVER_BOUND_S,
    PROBE_ERRORS,
    Cluster,
    three_brokers,
)
from tests.waiting import wait_until

OFFSETS_PARTITIONS = 3
TOPIC = "kip848"
GROUP = "next-gen"
PARTITIONS = 4
BOUND_S = 60.0


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    overrides = {
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.session.timeout.ms": "30000",
        "group.consumer.session.timeout.ms": "30000",
    }
    base = tmp_path_factory.mktemp("kip848")
    # Three brokers starting at once on a loaded 2-core machine can take more than 30 s.
    with three_brokers(zookeeper, base, "/cluster_kip848", overrides, start_timeout=120) as c:
        c.ensure_all_running()
        yield c


def _consumer(cluster: Cluster) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
            "group.id": GROUP,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([TOPIC])
    return c


def _produce(cluster: Cluster, tag: str, count: int) -> set[bytes]:
    p = Producer({"bootstrap.servers": cluster.live()[0].bootstrap, "acks": "all", "linger.ms": 5})
    values = {f"{tag}-{i}".encode() for i in range(count)}
    for i, v in enumerate(sorted(values)):
        p.produce(TOPIC, value=v, partition=i % PARTITIONS)
    assert p.flush(30) == 0
    return values


def _poll_until(consumers: list[Consumer], done: Any, got: set[bytes], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not done():
        for c in consumers:
            for m in c.consume(500, timeout=0.2):
                if m.error() is None:
                    got.add(m.value())
                else:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def _members(cluster: Cluster) -> dict[str, set[int]]:
    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.live())})
    desc = admin.describe_consumer_groups([GROUP])[GROUP].result(30)
    return {m.member_id: {p.partition for p in m.assignment.topic_partitions} for m in desc.members}


def _coordinator(cluster: Cluster, via: int | None = None) -> int:
    p = partition_for(GROUP, OFFSETS_PARTITIONS)
    return int(cluster.partitions(OFFSETS_TOPIC, via)[p].leader_id)


def test_the_group_survives_a_coordinator_kill(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, PARTITIONS, 3)
    values = _produce(cluster, "before", 200)
    a, b = _consumer(cluster), _consumer(cluster)
    got: set[bytes] = set()
    try:
        _poll_until(
            [a, b],
            lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2 and got >= values,
            got,
            "two members sharing the topic, every record",
        )
        members = _members(cluster)
        assert sorted(map(len, members.values())) == [2, 2]
        victim = _coordinator(cluster)
        cluster.brokers[victim].kill()
        survivor = next(i for i in cluster.brokers if i != victim)
        new = wait_until(
            lambda: c if (c := _coordinator(cluster, survivor)) not in (-1, victim) else None,
            FAILOVER_BOUND_S,
            "a new leader of the group's offsets partition",
            retry_on=PROBE_ERRORS,
        )
        after = _produce(cluster, "after", 200)
        _poll_until([a, b], lambda: got >= after, got, "the records after the failover")
        # The new coordinator read the group back: the same members, the same partitions.
        assert _members(cluster) == members
        assert f"group {GROUP}: loaded at epoch" in cluster.brokers[new].output(10_000_000)
    finally:
        a.close()
        b.close()
        cluster.ensure_all_running()
