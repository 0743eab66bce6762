"""A KIP-848 consumer group on three real brokers: librdkafka ``group.protocol=consumer``
consumers keep their member ids, partitions and committed offsets when the group's coordinator
(the leader of its ``__consumer_offsets`` partition) is SIGKILLed: the new leader replays the
group's records. The group's own configs (GROUP resource) are in ZooKeeper, so every broker,
the new coordinator included, serves them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import kafka.admin as kp
import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, Producer, TopicPartition
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


def _consumer(cluster: Cluster, group: str = GROUP, topic: str = TOPIC, **extra: Any) -> Consumer:
    """A librdkafka consumer, ``group.protocol=consumer`` unless ``extra`` says otherwise."""
    c = Consumer(
        {
            "bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )
    c.subscribe([topic])
    return c


def _produce(cluster: Cluster, tag: str, count: int) -> set[bytes]:
    return _produce_to(cluster, TOPIC, tag, count)


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


def _group_config(cluster: Cluster, via: int, configs: dict[str, str] | None = None) -> str:
    """Sets (with ``configs``) or reads the group's consumer.heartbeat.interval.ms through
    broker ``via`` (kafka-python's admin client: confluent-kafka has no GROUP resource)."""
    client = kp.KafkaAdminClient(bootstrap_servers=cluster.brokers[via].bootstrap)
    try:
        if configs is not None:
            resource = kp.ConfigResource(kp.ConfigResourceType.GROUP, GROUP, configs=configs)
            assert client.alter_configs([resource], incremental=True)["group"][GROUP] == "OK"
        resource = kp.ConfigResource(kp.ConfigResourceType.GROUP, GROUP)
        described = client.describe_configs([resource], config_filter="all")["group"][GROUP]
        return str(described["consumer.heartbeat.interval.ms"]["value"])
    finally:
        client.close()


def _committed(c: Consumer) -> dict[int, int]:
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    return {tp.partition: tp.offset for tp in c.committed(tps, timeout=30)}


def _commit_positions(consumers: list[Consumer]) -> dict[int, int]:
    """Each member commits the positions of what it owns; returns them all."""
    out = {}
    for c in consumers:
        positions = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
        for tp in c.commit(offsets=positions, asynchronous=False) or []:
            assert tp.error is None, tp.error
            out[tp.partition] = tp.offset
    return out


def test_the_group_survives_a_coordinator_kill(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, PARTITIONS, 3)
    values = _produce(cluster, "before", 200)
    first = next(iter(cluster.brokers))
    assert _group_config(cluster, first, {"consumer.heartbeat.interval.ms": "700"}) == "700"
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
        committed = _commit_positions([a, b])
        assert sorted(committed) == list(range(PARTITIONS))
        assert sum(committed.values()) == len(values)
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
        # The new coordinator read the group back: the same members, the same partitions,
        # the offsets committed before the kill; the group's config is served by it too.
        assert _members(cluster) == members
        assert f"group {GROUP}: loaded at epoch" in cluster.brokers[new].output(10_000_000)
        assert _committed(a) == committed
        assert _group_config(cluster, new) == "700"
        again = _commit_positions([a, b])
        assert sum(again.values()) == len(values) + len(after)
        assert _committed(b) == again
    finally:
        a.close()
        b.close()
        cluster.ensure_all_running()


MIXED_GROUP = "half-migrated"
MIXED_TOPIC = "kip848-mixed"


def test_a_half_migrated_group_survives_a_coordinator_kill(cluster: Cluster) -> None:
    """A classic librdkafka member and a ``group.protocol=consumer`` one in one group (the
    classic group upgraded online): the new coordinator reads the classic member back as one
    (its protocols are in the member record), and both go on consuming without ever sharing a
    partition."""
    cluster.ensure_all_running()
    cluster.create_topic(MIXED_TOPIC, PARTITIONS, 3)
    classic = _consumer(
        cluster,
        MIXED_GROUP,
        MIXED_TOPIC,
        **{"group.protocol": "classic", "session.timeout.ms": 20_000, "heartbeat.interval.ms": 500},
    )
    got: set[bytes] = set()
    consumers = [classic]

    def disjoint_and(done: Any) -> Any:
        def check() -> bool:
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            assert sum(map(len, owned)) == len(set().union(*owned)), owned
            return bool(done())

        return check

    try:
        values = _produce_to(cluster, MIXED_TOPIC, "classic", 100)
        _poll_until(consumers, disjoint_and(lambda: got >= values), got, "the classic member")
        consumers.append(_consumer(cluster, MIXED_GROUP, MIXED_TOPIC))  # the group is upgraded
        values = _produce_to(cluster, MIXED_TOPIC, "mixed", 100)
        _poll_until(
            consumers,
            disjoint_and(
                lambda: got >= values and all(len(c.assignment()) == 2 for c in consumers)
            ),
            got,
            "the classic and the consumer-protocol member sharing the topic",
        )
        before = _member_ids(cluster.admin())
        assert len(before) == 2
        p = partition_for(MIXED_GROUP, OFFSETS_PARTITIONS)
        victim = int(cluster.partitions(OFFSETS_TOPIC)[p].leader_id)
        cluster.brokers[victim].kill()
        after = _produce_to(cluster, MIXED_TOPIC, "after", 100)
        _poll_until(consumers, disjoint_and(lambda: got >= after), got, "both after the failover")
        survivor = next(b for i, b in cluster.brokers.items() if i != victim and b.alive())
        # The same two members, the classic one included (not rejoined under a new id).
        assert _member_ids(AdminClient({"bootstrap.servers": survivor.bootstrap})) == before
    finally:
        for c in consumers:
            c.close()


def _member_ids(admin: AdminClient) -> set[str]:
    desc = admin.describe_consumer_groups([MIXED_GROUP])[MIXED_GROUP].result(30)
    assert desc.type == ConsumerGroupType.CONSUMER
    return {m.member_id for m in desc.members}


def _produce_to(cluster: Cluster, topic: str, tag: str, count: int) -> set[bytes]:
    p = Producer({"bootstrap.servers": cluster.live()[0].bootstrap, "acks": "all", "linger.ms": 5})
    values = {f"{tag}-{i}".encode() for i in range(count)}
    for i, v in enumerate(sorted(values)):
        p.produce(topic, value=v, partition=i % PARTITIONS)
    assert p.flush(30) == 0
    return values
