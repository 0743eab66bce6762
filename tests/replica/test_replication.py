"""Replication between real brokers driven by partition states set directly (the seam a
controller will use): confluent-kafka clients produce with acks=all and read back."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from logkeel.storage.topic_partition import TopicPartition
from tests.replica.cluster import Cluster, log_batches
from tests.waiting import wait_until

TOPIC = "replicated"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, 2)
    try:
        c.start(0)
        c.start(1)
        yield c
    finally:
        c.stop_all()


def create_topic(cluster: Cluster, configs: dict[str, str] | None = None) -> None:
    cluster.metadata.create_topic(TOPIC, 1, 2, configs or {})
    for node in cluster.procs:
        wait_until(
            lambda node=node: cluster.broker(node).replica_manager.partition(TP) is not None,
            10.0,
            f"broker {node} holds {TP}",
        )


def producer(cluster: Cluster, bootstrap: str | None = None, **conf: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap or cluster.bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 15000,
            **conf,
        }
    )


def produce(p: Producer, values: list[bytes], timeout: float = 15) -> list[tuple[int, object]]:
    """Sends ``values`` to partition 0; (offset, error) per message in delivery order."""
    reports: list[tuple[int, object]] = []

    def report(err: object, msg: object) -> None:
        reports.append((msg.offset() if err is None else -1, err))  # type: ignore[attr-defined]

    for v in values:
        p.produce(TOPIC, v, partition=0, on_delivery=report)
    remaining = p.flush(timeout)
    assert remaining == 0, f"{remaining} messages not delivered within {timeout}s"
    return reports


def consume_all(cluster: Cluster, count: int, timeout: float = 15) -> list[tuple[int, bytes]]:
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "replication-test",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([KafkaTopicPartition(TOPIC, 0, 0)])
        got: list[tuple[int, bytes]] = []

        def poll() -> bool:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))
            return len(got) >= count

        wait_until(poll, timeout, f"{count} records consumed")
        return got
    finally:
        c.close()


def high_watermark(cluster: Cluster, node: int) -> int:
    p = cluster.broker(node).replica_manager.partition(TP)
    assert p is not None
    return p.high_watermark


def test_records_replicate_with_the_leaders_offsets_and_epochs(cluster: Cluster) -> None:
    create_topic(cluster)
    p = producer(cluster)
    reports = produce(p, [f"v{i}".encode() for i in range(20)])
    assert [err for _, err in reports] == [None] * 20
    assert [off for off, _ in reports] == list(range(20))
    # acks=all answered: the follower holds every record already.
    leader_log = log_batches(cluster.broker(0), TP)
    assert leader_log[-1][2] == 19
    assert log_batches(cluster.broker(1), TP) == leader_log
    assert all(epoch == 0 for _, epoch, _ in leader_log)
    assert high_watermark(cluster, 0) == 20
    wait_until(lambda: high_watermark(cluster, 1) == 20, 10.0, "the follower learns the HW")
    assert consume_all(cluster, 20) == [(i, f"v{i}".encode()) for i in range(20)]


def test_acks_all_waits_for_the_follower(cluster: Cluster) -> None:
    create_topic(cluster)
    cluster.stop(1)  # the follower is down but still in the ISR: the leader must wait for it
    p = producer(cluster, bootstrap=f"127.0.0.1:{cluster.ports[0]}")
    reports: list[tuple[int, object]] = []
    p.produce(
        TOPIC,
        b"waits",
        partition=0,
        on_delivery=lambda err, msg: reports.append((msg.offset(), err)),
    )
    leader = cluster.broker(0).replica_manager.partition(TP)
    assert leader is not None and leader.log is not None
    wait_until(lambda: (p.poll(0.05), leader.log.log_end_offset == 1)[1], 10.0, "appended")
    for _ in range(10):  # a second: still unanswered, the high watermark has not moved
        p.poll(0.1)
    assert reports == []
    assert leader.high_watermark == 0
    cluster.start(1)
    wait_until(lambda: (p.poll(0.05), reports)[1], 15, "the produce is answered")
    assert reports == [(0, None)]
    assert leader.high_watermark == 1
    assert log_batches(cluster.broker(1), TP) == log_batches(cluster.broker(0), TP)


def test_min_insync_replicas(cluster: Cluster) -> None:
    create_topic(cluster, {"min.insync.replicas": "2"})
    p = producer(cluster, retries=0, **{"enable.idempotence": False})
    assert produce(p, [b"both"]) == [(0, None)]

    # Below min.insync.replicas before the append: refused, nothing written.
    cluster.metadata.set_isr(TP, [0])
    [(_, err)] = produce(p, [b"refused"])
    assert isinstance(err, KafkaError) and err.code() == KafkaError.NOT_ENOUGH_REPLICAS
    leader = cluster.broker(0).replica_manager.partition(TP)
    assert leader is not None and leader.log is not None
    assert leader.log.log_end_offset == 1

    # Enough at the append, too few by the time the high watermark passes it.
    cluster.metadata.set_isr(TP, [0, 1])
    cluster.stop(1)
    reports: list[tuple[int, object]] = []
    p.produce(TOPIC, b"late", partition=0, on_delivery=lambda e, m: reports.append((0, e)))
    wait_until(lambda: (p.poll(0.05), leader.log.log_end_offset == 2)[1], 10.0, "appended")
    cluster.metadata.set_isr(TP, [0])
    wait_until(lambda: (p.poll(0.05), reports)[1], 10, "the produce is answered")
    [(_, err)] = reports
    assert isinstance(err, KafkaError)
    assert err.code() == KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_old_leader_truncates_its_divergent_tail_by_epoch(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="logkeel.storage")
    create_topic(cluster)
    p = producer(cluster)
    assert produce(p, [f"v{i}".encode() for i in range(5)]) == [(i, None) for i in range(5)]

    # The follower goes away and leaves the ISR; the leader takes writes only it holds.
    cluster.stop(1)
    cluster.metadata.set_isr(TP, [0])
    solo = producer(cluster, bootstrap=f"127.0.0.1:{cluster.ports[0]}", acks="1")
    assert produce(solo, [f"x{i}".encode() for i in range(3)]) == [(i, None) for i in range(5, 8)]
    old = cluster.broker(0)
    assert log_batches(old, TP)[-1][1:] == (0, 7)

    # The controller elects broker 1 (epoch 1); broker 0 becomes its follower while it is down.
    cluster.metadata.set_leader(TP, 1, [1])
    new = cluster.start(1)
    p2 = producer(cluster, bootstrap=f"127.0.0.1:{cluster.ports[1]}")
    assert produce(p2, [b"w0", b"w1"]) == [(5, None), (6, None)]

    wanted = log_batches(new, TP)
    assert [(e, last) for b, e, last in wanted if b >= 5][-1] == (1, 6)
    assert all(e == 1 for b, e, _ in wanted if b >= 5)
    wait_until(lambda: log_batches(old, TP) == wanted, 15, "the old leader follows")
    epochs = old.replica_manager.partition(TP).log.leader_epochs.entries  # type: ignore[union-attr]
    assert [(e.epoch, e.start_offset) for e in epochs] == [(0, 0), (1, 5)]
    # Cut at the end of epoch 0 on the new leader, the 3 records only the old leader had.
    assert f"{TP}: truncated to offset 5" in caplog.text
    values = [v for _, v in consume_all(cluster, 7)]
    assert values == [b"v0", b"v1", b"v2", b"v3", b"v4", b"w0", b"w1"]


def test_isr_shrinks_and_a_follower_that_was_down_catches_up(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 2, {"replica.lag.time.max.ms": "1000"})
    try:
        c.start(0)
        c.start(1)
        create_topic(c)
        p = producer(c, bootstrap=f"127.0.0.1:{c.ports[0]}")
        assert produce(p, [b"a"]) == [(0, None)]
        c.stop(1)
        # A follower at the leader's log end stays in sync (Kafka's rule) until the log moves on.
        one = producer(c, bootstrap=f"127.0.0.1:{c.ports[0]}", acks="1")
        assert produce(one, [b"b"]) == [(1, None)]
        # Then the leader's periodic check wants the silent follower out of the ISR.
        wait_until(lambda: (0, TP, (0,)) in c.isr_requests, 10, "a shrink is proposed")
        c.metadata.set_isr(TP, [0])  # the controller applies it
        reports = produce(p, [f"m{i}".encode() for i in range(200)])
        assert [off for off, _ in reports] == list(range(2, 202))
        c.start(1)
        wait_until(lambda: (0, TP, (0, 1)) in c.isr_requests, 15, "an expansion is proposed")
        assert log_batches(c.broker(1), TP) == log_batches(c.broker(0), TP)
        follower = c.broker(0).replica_manager.partition(TP).followers.snapshot()[1]  # type: ignore[union-attr]
        assert follower.log_end_offset == 202
        assert follower.last_caught_up_ms > 0
    finally:
        c.stop_all()


@pytest.mark.parametrize("slots", ["1000", "0"], ids=["sessions", "leaders-declining-sessions"])
def test_three_brokers_with_two_fetchers_per_source(tmp_path: Path, slots: str) -> None:
    """With fetch sessions, and with leaders that decline them (every Fetch full, answered
    without a session: the fetchers append what a sessionless answer carries)."""
    overrides = {"num.replica.fetchers": "2", "max.incremental.fetch.session.cache.slots": slots}
    c = Cluster(tmp_path, 3, overrides)
    try:
        for node in range(3):
            c.start(node)
        c.metadata.create_topic("wide", 6, 3, {"min.insync.replicas": "2"})
        tps = [TopicPartition("wide", i) for i in range(6)]
        wait_until(
            lambda: all(
                c.broker(n).replica_manager.partition(tp) is not None
                for n in range(3)
                for tp in tps
            ),
            10.0,
            "every broker holds every partition",
        )
        p = producer(c)
        delivered: list[object] = []
        for i in range(120):
            p.produce(
                "wide",
                f"r{i}".encode(),
                partition=i % 6,
                on_delivery=lambda e, m: delivered.append(e),
            )
        assert p.flush(15) == 0
        assert delivered == [None] * 120
        for tp in tps:
            state = c.metadata.partition(tp)
            assert state is not None
            leader_log = log_batches(c.broker(state.leader), tp)
            assert sum(last - base + 1 for base, _, last in leader_log) == 20
            for follower in state.replicas:
                assert log_batches(c.broker(follower), tp) == leader_log
        for node in range(3):
            fetchers = c.broker(node).replica_manager.fetcher_manager.fetchers()
            by_source: dict[int, int] = {}
            for f in fetchers:
                by_source[f.source.node_id] = by_source.get(f.source.node_id, 0) + 1
                assert f.fetcher_id in (0, 1)
            assert node not in by_source
            assert all(count <= 2 for count in by_source.values())
            followed = sorted(tp for f in fetchers for tp in f.partitions)
            assert followed == sorted(
                tp
                for tp in tps
                if c.metadata.partition(tp).leader != node  # type: ignore[union-attr]
            )
    finally:
        c.stop_all()
