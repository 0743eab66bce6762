"""Issue 13 against a real `logkeel serve` with real clients: one admin request never costs a
log dir or the internal topics.

- Kafka's longest topic name (249 characters) through create, produce, roll, compaction,
  retention, DeleteRecords, delete and restart, next to a topic that must keep serving.
- The broker's topics (``__consumer_offsets``, ``__transaction_state``) refuse CreateTopics
  (INVALID_REQUEST), DeleteTopics and CreatePartitions (TOPIC_AUTHORIZATION_FAILED),
  DeleteRecords and Produce (INVALID_TOPIC_EXCEPTION), and nothing changes.
- A deletion interrupted by kill -9, or by a crash between the metadata write and the renames
  of the dirs, is finished at the next start; the dirs are never served or adopted again.
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from tests.brokerproc import BrokerProcess
from tests.server.admin_clients import (
    TIMEOUT,
    admin,
    offline_log_dirs,
    outcome,
    partition_dirs,
    produce,
    read_partition,
    set_topic_config,
)
from tests.waiting import wait_until

LONG_A = "a" * 249
LONG_B = "b." * 124 + "b"  # 249 characters with '.' in it
FAST_BACKGROUND = {"log.retention.check.interval.ms": "200"}


def _values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def test_the_longest_topic_names_live_and_die_without_costing_the_dir(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", overrides=FAST_BACKGROUND)
    logs = broker.log_dirs[0]
    with broker:
        a = admin(broker.bootstrap)
        segment = {"segment.bytes": "400"}
        created = a.create_topics(
            [
                NewTopic("neighbour", 1, 1),
                NewTopic(LONG_A, 3, 1, config={**segment, "cleanup.policy": "compact"}),
                NewTopic(LONG_B, 1, 1, config=segment),
            ],
            operation_timeout=TIMEOUT,
        )
        assert {t: outcome(f) for t, f in created.items()} == dict.fromkeys(created, "OK")
        assert produce(broker.bootstrap, "neighbour", 0, _values("n", 5)) == ["OK"] * 5
        for p in range(3):  # the same 5 keys again and again: compaction keeps 5
            keyed = [f"key-{i % 5}".encode() for i in range(60)]
            assert produce(broker.bootstrap, LONG_A, p, keyed, separately=True) == ["OK"] * 60
        assert (
            produce(broker.bootstrap, LONG_B, 0, _values("b", 60), separately=True) == ["OK"] * 60
        )
        rolled = [d for d in partition_dirs(logs, LONG_A) if d.endswith("-0")]
        assert len(list((logs / rolled[0]).glob("*.log"))) > 3  # rolled many times

        # Retention on the '.' name, DeleteRecords on a compacted partition.
        assert set_topic_config(a, LONG_B, "retention.ms", "1") == "OK"
        wait_until(lambda: read_partition(broker.bootstrap, LONG_B, 0)[0] > 0, what="retention")
        [deleted] = a.delete_records([KafkaTopicPartition(LONG_A, 2, 30)]).values()
        assert deleted.result(TIMEOUT).low_watermark == 30
        assert read_partition(broker.bootstrap, LONG_A, 2)[0] == 30
        # The cleaner runs every 15 s: wait for it to compact partition 0.
        wait_until(
            lambda: len(read_partition(broker.bootstrap, LONG_A, 0)[1]) < 60,
            timeout=45,
            what="compaction",
        )
        assert offline_log_dirs(broker.bootstrap) == []

        deletions = a.delete_topics([LONG_A, LONG_B], operation_timeout=TIMEOUT)
        assert {t: outcome(f) for t, f in deletions.items()} == {LONG_A: "OK", LONG_B: "OK"}
        wait_until(
            lambda: partition_dirs(logs, LONG_A) == partition_dirs(logs, LONG_B) == [],
            what="the deleted dirs to be removed",
        )
        assert offline_log_dirs(broker.bootstrap) == []
        assert read_partition(broker.bootstrap, "neighbour", 0) == (0, _values("n", 5))
        assert produce(broker.bootstrap, "neighbour", 0, _values("m", 2)) == ["OK"] * 2
        assert "is offline" not in broker.output()

        broker.restart()
        topics = admin(broker.bootstrap).list_topics(timeout=TIMEOUT).topics
        assert LONG_A not in topics and LONG_B not in topics
        assert read_partition(broker.bootstrap, "neighbour", 0)[1] == [
            *_values("n", 5),
            *_values("m", 2),
        ]
        assert offline_log_dirs(broker.bootstrap) == []
        ours = [p.name for p in logs.iterdir() if p.is_dir() and not p.name.startswith("__")]
        assert ours == ["neighbour-0"]


def test_internal_topics_are_the_brokers(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "b", overrides={"offsets.topic.num.partitions": "3"}) as broker:
        a = admin(broker.bootstrap)
        [f] = a.create_topics([NewTopic("data", 1, 1)]).values()
        assert outcome(f) == "OK"
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "keepers"})
        committed = [KafkaTopicPartition("data", 0, 7)]
        consumer.commit(offsets=committed, asynchronous=False)

        for name in ("__consumer_offsets", "__transaction_state"):
            [f] = a.create_topics([NewTopic(name, 1, 1)]).values()
            assert outcome(f) == "INVALID_REQUEST"
        [f] = a.delete_topics(["__consumer_offsets"]).values()
        assert outcome(f) == "TOPIC_AUTHORIZATION_FAILED"
        [f] = a.create_partitions([NewPartitions("__consumer_offsets", 10)]).values()
        assert outcome(f) == "TOPIC_AUTHORIZATION_FAILED"
        [f] = a.delete_records([KafkaTopicPartition("__consumer_offsets", 0, 1)]).values()
        # TOPIC_EXCEPTION is librdkafka's name for INVALID_TOPIC_EXCEPTION (code 17).
        assert outcome(f) == "TOPIC_EXCEPTION"
        assert produce(broker.bootstrap, "__consumer_offsets", 0, [b"x"]) == ["TOPIC_EXCEPTION"]
        assert produce(broker.bootstrap, "__transaction_state", 0, [b"x"]) != ["OK"]

        topics = a.list_topics(timeout=TIMEOUT).topics
        assert len(topics["__consumer_offsets"].partitions) == 3
        assert "__transaction_state" not in topics
        [mine] = consumer.committed([KafkaTopicPartition("data", 0)], TIMEOUT)
        assert mine.offset == 7
        consumer.close()


def test_an_interrupted_deletion_is_finished_at_start_up(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b")
    logs = broker.log_dirs[0]
    with broker:
        a = admin(broker.bootstrap)
        for f in a.create_topics([NewTopic(t, 2, 1) for t in (LONG_A, LONG_B, "kept")]).values():
            assert outcome(f) == "OK"
        for topic in (LONG_A, LONG_B, "kept"):
            for p in range(2):
                assert produce(broker.bootstrap, topic, p, _values(topic[:3], 4)) == ["OK"] * 4
        # kill -9 right after the deletion: the dirs are renamed, not yet removed.
        [f] = a.delete_topics([LONG_A]).values()
        assert outcome(f) == "OK"
        broker.kill()
        # A crash between the metadata write and the renames leaves the topic gone from
        # the metadata, its deletion pending, and its dirs under their own names.
        metadata_file = logs / "logkeel-metadata.json"
        doc = json.loads(metadata_file.read_text())
        [entry] = [t for t in doc["topics"] if t["name"] == LONG_B]
        doc["topics"].remove(entry)
        doc["pending_deletions"].append(
            {"name": LONG_B, "topic_id": entry["topic_id"], "partitions": [0, 1]}
        )
        metadata_file.write_text(json.dumps(doc))
        assert partition_dirs(logs, LONG_B) == [f"{LONG_B}-0", f"{LONG_B}-1"]

        broker.start()
        a = admin(broker.bootstrap)
        topics = a.list_topics(timeout=TIMEOUT).topics
        assert LONG_A not in topics and LONG_B not in topics
        wait_until(lambda: partition_dirs(logs, LONG_A) == partition_dirs(logs, LONG_B) == [])
        assert "has no topic in the metadata" not in broker.output()
        # Created again, the names start empty: nothing of the old data is adopted.
        for f in a.create_topics([NewTopic(t, 2, 1) for t in (LONG_A, LONG_B)]).values():
            assert outcome(f) == "OK"
        for topic in (LONG_A, LONG_B):
            assert read_partition(broker.bootstrap, topic, 0) == (0, [])
        assert read_partition(broker.bootstrap, "kept", 1) == (0, _values("kep", 4))
        assert offline_log_dirs(broker.bootstrap) == []
        broker.restart()
        assert json.loads(metadata_file.read_text())["pending_deletions"] == []
        assert read_partition(broker.bootstrap, LONG_B, 1) == (0, [])
