"""Replication between real brokers driven by partition states set directly (the seam a
controller will use): confluent-kafka clients produce with acks=all and read back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from logkeel.storage.topic_partition import TopicPartition
from tests.replica.cluster import Cluster, log_batches, wait_until

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
            what=f"broker {node} holds {TP}",
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
    wait_until(lambda: high_watermark(cluster, 1) == 20, what="the follower learns the HW")
    assert consume_all(cluster, 20) == [(i, f"v{i}".encode()) for i in range(20)]
