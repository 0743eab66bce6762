"""DescribeTopicPartitions (KIP-966) and DescribeProducers against a real `logkeel serve`:
raw kio frames for paging, cursors and errors, kafka-python's KafkaAdminClient (which sends
both), confluent-kafka's AdminClient, and the producer state that real idempotent and
transactional producers leave."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, TopicPartition
from kio.schema.errors import ErrorCode

from logkeel.server.api.topic_partitions import Page, paginate
from logkeel.server.protocol import ApiKey
from tests.brokerproc import BrokerProcess
from tests.server.test_admin_wire import Wire, request_types

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("describe-apis")
    with BrokerProcess(data, extra_args=["--node-id", "3"]) as b:
        yield b


@pytest.fixture
def wire(server: BrokerProcess) -> Iterator[Wire]:
    w = Wire(server.port)
    yield w
    w.close()


def _describe(wire: Wire, names: list[str], limit: int = 2000, cursor: Any = None) -> Any:
    m = request_types(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    return wire.call(
        m.DescribeTopicPartitionsRequest(
            topics=tuple(m.TopicRequest(name=n) for n in names),
            response_partition_limit=limit,
            cursor=cursor,
        )
    )


def _cursor(topic: str, partition: int) -> Any:
    m = request_types(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    return m.Cursor(topic_name=topic, partition_index=partition)


def test_paginate_pure() -> None:
    counts = [("a", 3), ("b", 0), ("c", 2)]
    assert paginate(counts, None, 10) == Page((("a", 0, 3), ("b", 0, 0), ("c", 0, 2)), None)
    assert paginate(counts, None, 2) == Page((("a", 0, 2),), ("a", 2))
    assert paginate(counts, ("a", 2), 1) == Page((("a", 2, 3),), ("b", 0))
    assert paginate(counts, ("b", 0), 1) == Page((("b", 0, 0), ("c", 0, 1)), ("c", 1))
    assert paginate(counts, ("c", 1), 5) == Page((("c", 1, 2),), None)
    assert paginate([], None, 5) == Page((), None)
    # A cursor beyond the topic's last partition gives nothing of it, and no extra room.
    assert paginate(counts, ("a", 9), 1) == Page((("a", 3, 3), ("b", 0, 0), ("c", 0, 1)), ("c", 1))


def test_describe_topic_partitions_pages_through_named_topics(wire: Wire) -> None:
    created = wire.create_topics(
        [{"name": "dtp-a", "partitions": 3}, {"name": "dtp-b", "partitions": 2}]
    )
    ids = {t.name: t.topic_id for t in created}
    seen: list[tuple[str, int]] = []
    cursor = None
    pages = 0
    while True:
        answer = _describe(wire, ["dtp-b", "dtp-a", "dtp-missing"], limit=2, cursor=cursor)
        pages += 1
        for topic in answer.topics:
            if topic.name == "dtp-missing":
                assert topic.error_code == ErrorCode.unknown_topic_or_partition
                continue
            assert topic.error_code == ErrorCode.none
            assert topic.topic_id == ids[topic.name]
            assert topic.topic_authorized_operations > 0  # no authorizer: every operation
            for p in topic.partitions:
                assert (p.leader_id, p.replica_nodes, p.isr_nodes) == (3, (3,), (3,))
                assert (p.eligible_leader_replicas, p.last_known_elr) == ((), ())
                assert p.offline_replicas == ()
                seen.append((topic.name, p.partition_index))
        cursor = answer.next_cursor
        if cursor is None:
            break
        assert pages < 10
    assert seen == [("dtp-a", 0), ("dtp-a", 1), ("dtp-a", 2), ("dtp-b", 0), ("dtp-b", 1)]
    assert pages == 3


def test_describe_topic_partitions_all_topics_and_bad_cursor(wire: Wire) -> None:
    wire.create_topics([{"name": "dtp-all", "partitions": 1}])
    everything = _describe(wire, [])
    assert "dtp-all" in {t.name for t in everything.topics}
    assert everything.next_cursor is None
    # From a cursor on, the topics before it are left out.
    after = _describe(wire, [], cursor=_cursor("dtp-all", 0))
    assert min(t.name for t in after.topics) == "dtp-all"
    bad = _describe(wire, ["dtp-all"], cursor=_cursor("not-requested", 0))
    assert [t.error_code for t in bad.topics] == [ErrorCode.invalid_request]


def test_confluent_describe_topics(server: BrokerProcess, wire: Wire) -> None:
    # librdkafka 2.16's DescribeTopics sends Metadata v13 with the topic's authorized
    # operations, even to a broker advertising DescribeTopicPartitions (seen with
    # debug=protocol): this checks the two agree on what a client is shown.
    wire.create_topics([{"name": "dtp-confluent", "partitions": 4}])
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.port}"})
    request = confluent_kafka.TopicCollection(["dtp-confluent"])
    [future] = admin.describe_topics(request, include_authorized_operations=True).values()
    described = future.result(timeout=30)
    assert described.name == "dtp-confluent"
    assert [p.id for p in described.partitions] == [0, 1, 2, 3]
    assert all(p.leader.id == 3 for p in described.partitions)
    assert confluent_kafka.admin.AclOperation.READ in described.authorized_operations


def _describe_producers(wire: Wire, topic: str, partitions: tuple[int, ...]) -> Any:
    m = request_types(ApiKey.DESCRIBE_PRODUCERS, 0)
    answer = wire.call(
        m.DescribeProducersRequest(
            topics=(m.TopicRequest(name=topic, partition_indexes=partitions),)
        )
    )
    [t] = answer.topics
    return {p.partition_index: p for p in t.partitions}


def test_describe_producers_shows_idempotent_and_open_transactions(
    server: BrokerProcess, wire: Wire
) -> None:
    wire.create_topics([{"name": "dp-topic", "partitions": 2}])
    conf = {"bootstrap.servers": f"127.0.0.1:{server.port}"}
    idempotent = confluent_kafka.Producer({**conf, "enable.idempotence": True})
    for i in range(3):
        idempotent.produce("dp-topic", b"v%d" % i, partition=0)
    assert idempotent.flush(30) == 0
    txn = confluent_kafka.Producer({**conf, "transactional.id": "dp-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("dp-topic", b"open", partition=1)
    assert txn.flush(30) == 0

    described = _describe_producers(wire, "dp-topic", (0, 1, 7))
    assert described[7].error_code == ErrorCode.unknown_topic_or_partition
    [p0] = described[0].active_producers
    assert described[0].error_code == ErrorCode.none
    assert (p0.last_sequence, p0.current_txn_start_offset) == (2, -1)
    assert p0.last_timestamp > 0
    [p1] = described[1].active_producers
    assert p1.producer_id != p0.producer_id
    assert p1.current_txn_start_offset == 0  # the open transaction's first offset
    assert p1.last_sequence == 0

    txn.commit_transaction(30)
    [after] = _describe_producers(wire, "dp-topic", (1,))[1].active_producers
    assert after.current_txn_start_offset == -1
    assert after.coordinator_epoch >= 0
    missing = _describe_producers(wire, "dp-nowhere", (0,))
    assert missing[0].error_code == ErrorCode.unknown_topic_or_partition


def test_kafka_python_admin_calls_both(server: BrokerProcess, wire: Wire) -> None:
    """kafka-python 3's KafkaAdminClient sends DescribeTopicPartitions and DescribeProducers."""
    wire.create_topics([{"name": "kp-dtp", "partitions": 3}])
    conf = {"bootstrap.servers": f"127.0.0.1:{server.port}"}
    producer = confluent_kafka.Producer({**conf, "enable.idempotence": True})
    producer.produce("kp-dtp", b"x", partition=2)
    assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=conf["bootstrap.servers"])
    try:
        first = admin.describe_topic_partitions(["kp-dtp"], response_partition_limit=2)
        [topic] = first["topics"]
        assert [p["partition_index"] for p in topic["partitions"]] == [0, 1]
        assert first["next_cursor"] == {"topic_name": "kp-dtp", "partition_index": 2}
        rest = admin.describe_topic_partitions(["kp-dtp"], cursor=first["next_cursor"])
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2]
        assert rest["next_cursor"] is None
        states = admin.describe_producers(
            [TopicPartition("kp-dtp", 2), TopicPartition("kp-dtp", 0)]
        )
        assert states[TopicPartition("kp-dtp", 0)].active_producers == []
        [active] = states[TopicPartition("kp-dtp", 2)].active_producers
        assert (active.last_sequence, active.current_transaction_start_offset) == (0, -1)
    finally:
        admin.close()
