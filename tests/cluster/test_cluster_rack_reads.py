"""Reading from the nearest replica (KIP-392) on three real brokers in racks r1, r2, r3 with
Kafka's RackAwareReplicaSelector, on the session's real ZooKeeper: what the leader and a
follower answer on the wire, and a confluent-kafka consumer with client.rack that reads from
its rack's follower (librdkafka's statistics name the broker it fetches from) and falls back
to the leader when that follower stops. Every wait is bounded."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.server.protocol import ApiKey
from tests.cluster.test_cluster_brokers import PROBE_ERRORS, Cluster, three_brokers
from tests.server.test_fetch_api import list_offsets, values_of
from tests.server.test_produce_api import RawClient, _fill, fetch_request, ms, schema_module
from tests.waiting import wait_until

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LATEST = -1
_attempts = itertools.count()


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with three_brokers(
        zookeeper,
        tmp_path_factory.mktemp("racks"),
        "/cluster_rack_reads",
        overrides={"replica.selector.class": SELECTOR, "replica.lag.time.max.ms": "4000"},
        per_broker={i: {"broker.rack": f"r{i}"} for i in (1, 2, 3)},
    ) as c:
        yield c


def fetch(
    port: int,
    topic: str,
    offset: int,
    *,
    version: int = 12,
    rack: str = "",
    leader_epoch: int = -1,
    isolation_level: int = 0,
) -> Any:
    """One partition-0 Fetch from a consumer, answered at once."""
    mod = schema_module(ApiKey.FETCH, version)
    part = _fill(
        mod.FetchPartition,
        partition=0,
        fetch_offset=offset,
        partition_max_bytes=1 << 20,
        current_leader_epoch=leader_epoch,
        last_fetched_epoch=-1,
        log_start_offset=-1,
    )
    request = _fill(
        mod.FetchRequest,
        replica_id=-1,
        max_wait=ms(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=(mod.FetchTopic(topic=topic, partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id=rack,
    )
    with RawClient(port) as client:
        (t,) = client.call(request).responses
    (p,) = t.partitions
    return p


def in_session(
    client: RawClient, topic: str, offsets: dict[int, int], sid: int, epoch: int, rack: str
) -> dict[int, Any]:
    """A Fetch v12 in a fetch session (KIP-227): partition -> what the response carries."""
    request = fetch_request(12, topic, offsets, session_id=sid, session_epoch=epoch)
    response = client.call(dataclasses.replace(request, rack_id=rack))
    assert response.error_code == ErrorCode.none
    parts = {p.partition_index: p for t in response.responses for p in t.partitions}
    return {"session": response.session_id, **parts}


def produce_all(cluster: Cluster, topic: str, values: list[bytes]) -> None:
    producer = Producer(
        {"bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()), "acks": "all"}
    )
    failed: list[Any] = []
    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=lambda e, _m: e and failed.append(e))
    assert producer.flush(60) == 0, "messages left unsent"
    assert not failed, failed


def new_topic(cluster: Cluster, name: str) -> str:
    """A topic of its own for this attempt (the suite reruns a failed cluster test once, on
    the same module's cluster), with all three brokers running."""
    cluster.ensure_all_running()
    topic = f"{name}-{next(_attempts)}"
    cluster.create_topic(topic, 1, 3)
    return topic


def leader_and_follower(cluster: Cluster, topic: str) -> tuple[int, int, int]:
    """(leader, a follower, its leader epoch) once every replica of partition 0 is in sync."""

    def settled() -> Any:
        p = cluster.partitions(topic)[0]
        return p if sorted(p.isr_nodes) == [1, 2, 3] and p.leader_id > 0 else None

    p = wait_until(settled, 30.0, f"{topic} in sync on three brokers", retry_on=PROBE_ERRORS)
    follower = next(r for r in p.replica_nodes if r != p.leader_id)
    return p.leader_id, follower, p.leader_epoch


def test_the_leader_names_the_follower_in_the_consumers_rack_and_the_follower_serves_it(
    cluster: Cluster,
) -> None:
    topic = new_topic(cluster, "near")
    values = [f"v{i}".encode() for i in range(20)]
    produce_all(cluster, topic, values)
    leader, follower, epoch = leader_and_follower(cluster, topic)
    leader_port = cluster.brokers[leader].port
    follower_port = cluster.brokers[follower].port

    # The leader sends a consumer in the follower's rack there, with no records.
    sent = wait_until(
        lambda: (
            (p := fetch(leader_port, topic, 0, rack=f"r{follower}")).preferred_read_replica
            == follower
            and p
        ),
        15.0,
        "the leader to know the follower caught up",
    )
    assert sent.error_code == ErrorCode.none and not values_of(sent.records)
    assert sent.high_watermark == len(values)
    # In the leader's own rack, in no broker's rack, or with no rack: read from the leader.
    for rack in (f"r{leader}", "elsewhere", ""):
        p = fetch(leader_port, topic, 0, rack=rack)
        assert (p.preferred_read_replica, values_of(p.records)) == (-1, values), rack
    # Fetch v10 has no rack: the leader serves it.
    assert values_of(fetch(leader_port, topic, 0, version=10).records) == values

    # The follower serves a v11+ consumer up to its high watermark, everything acked.
    served = wait_until(
        lambda: (
            (p := fetch(follower_port, topic, 0, rack=f"r{follower}")).high_watermark == len(values)
            and p
        ),
        15.0,
        "the follower to learn the high watermark",
    )
    assert served.error_code == ErrorCode.none
    assert values_of(served.records) == values
    assert served.preferred_read_replica == -1
    # Past its log: OFFSET_OUT_OF_RANGE for a consumer that gave its leader epoch (it goes
    # back to the leader); answered empty for one that did not (it may be on stale metadata).
    beyond = len(values) + 5
    refused = fetch(follower_port, topic, beyond, leader_epoch=epoch)
    assert refused.error_code == ErrorCode.offset_out_of_range
    empty = fetch(follower_port, topic, beyond)
    assert empty.error_code == ErrorCode.none and not values_of(empty.records)
    # A consumer of Fetch v10 only reads from the leader; ListOffsets is the leader's alone.
    old = fetch(follower_port, topic, 0, version=10)
    assert old.error_code == ErrorCode.not_leader_or_follower
    with RawClient(follower_port) as client:
        listed = list_offsets(client, 7, topic, LATEST)
    assert listed.error_code == ErrorCode.not_leader_or_follower


def test_read_committed_on_a_follower_stops_at_its_last_stable_offset(cluster: Cluster) -> None:
    topic = new_topic(cluster, "near-txn")
    bootstrap = ",".join(b.bootstrap for b in cluster.live())
    produce_all(cluster, topic, [b"before"])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(30) == 0
    try:
        leader, follower, _ = leader_and_follower(cluster, topic)
        port = cluster.brokers[follower].port
        # The open transaction's record is replicated (high watermark 2) but not stable.
        p = wait_until(
            lambda: (
                (p := fetch(port, topic, 0, rack=f"r{follower}", isolation_level=1)).high_watermark
                == 2
                and p
            ),
            15.0,
            "the follower to learn the high watermark",
        )
        assert (p.last_stable_offset, values_of(p.records)) == (1, [b"before"])
        uncommitted = fetch(port, topic, 0, rack=f"r{follower}")
        assert values_of(uncommitted.records) == [b"before", b"open"]
    finally:
        producer.abort_transaction(30)


def test_a_consumer_reads_from_its_racks_follower_and_falls_back_when_it_stops(
    cluster: Cluster,
) -> None:
    topic = new_topic(cluster, "nearest")
    first = [f"a{i}".encode() for i in range(200)]
    produce_all(cluster, topic, first)
    leader, follower, _ = leader_and_follower(cluster, topic)
    fetched_from: list[tuple[int, int]] = []  # (leader, broker fetched from), from statistics

    def stats(text: str) -> None:
        part = json.loads(text).get("topics", {}).get(topic, {}).get("partitions", {})
        if "0" in part:
            fetched_from.append((part["0"]["leader"], part["0"]["broker"]))

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
            "group.id": "rack-reads",
            "enable.auto.commit": False,
            "client.rack": f"r{follower}",
            "statistics.interval.ms": 200,
            "stats_cb": stats,
            # A gone broker leaves the metadata within a refresh (librdkafka then goes back
            # to the leader); the default refresh is five minutes.
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    got: list[bytes] = []

    def read(count: int, timeout: float, what: str) -> None:
        def enough() -> bool:
            more()
            return len(got) >= count

        wait_until(enough, timeout, what, interval=0)

    def fetching_from(broker: int) -> bool:
        """Statistics (served by the consumer's polls) say it fetches from ``broker``."""
        more()
        return bool(fetched_from) and fetched_from[-1] == (leader, broker)

    def more() -> None:
        for m in consumer.consume(100, 0.2):
            assert m.error() is None, m.error()
            got.append(m.value())

    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        read(len(first), 30.0, "the first records")
        wait_until(
            lambda: fetching_from(follower), 10.0, f"fetching from follower {follower}", interval=0
        )
        cluster.brokers[follower].kill()
        second = [f"b{i}".encode() for i in range(50)]
        produce_all(cluster, topic, second)  # acked once the ISR left the dead follower
        read(len(first) + len(second), 60.0, "the records after the follower stopped")
        assert got == first + second
        wait_until(
            lambda: fetching_from(leader), 10.0, "fetching from the leader again", interval=0
        )
    finally:
        print(f"(leader, broker fetched from) in librdkafka's statistics: {fetched_from}")
        consumer.close()


def test_fetch_sessions_carry_the_preferred_replica_and_serve_on_a_follower(
    cluster: Cluster,
) -> None:
    topic = new_topic(cluster, "near-session")
    produce_all(cluster, topic, [b"a", b"b"])
    leader, follower, _ = leader_and_follower(cluster, topic)
    rack = f"r{follower}"
    epochs = itertools.count(1)
    with RawClient(cluster.brokers[leader].port) as client:
        full = wait_until(
            lambda: (
                (a := in_session(client, topic, {0: 0}, 0, 0, rack))[0].preferred_read_replica
                == follower
                and a
            ),
            15.0,
            "the leader to name the follower",
        )
        assert full["session"] > 0
        # Each incremental fetch names it again: a client keeps being told where to go.
        again = in_session(client, topic, {}, full["session"], next(epochs), rack)
        assert again[0].preferred_read_replica == follower and not values_of(again[0].records)
    epochs = itertools.count(1)
    with RawClient(cluster.brokers[follower].port) as client:
        first = wait_until(
            lambda: (
                (a := in_session(client, topic, {0: 0}, 0, 0, rack))[0].high_watermark == 2 and a
            ),
            15.0,
            "the follower to learn the high watermark",
        )
        assert values_of(first[0].records) == [b"a", b"b"]
        sid = first["session"]
        quiet = in_session(client, topic, {0: 2}, sid, next(epochs), rack)
        assert quiet == {"session": sid}  # nothing changed: nothing sent
        produce_all(cluster, topic, [b"c"])
        # The follower's session answers with what it replicated, once its high watermark says.
        news = wait_until(
            lambda: in_session(client, topic, {}, sid, next(epochs), rack).get(0),
            15.0,
            "the follower's session to carry the new record",
        )
        assert (news.high_watermark, values_of(news.records)) == (3, [b"c"])
