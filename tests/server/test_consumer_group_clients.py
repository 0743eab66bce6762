"""KIP-848 consumer groups with a real client: confluent-kafka (librdkafka 2.x) consumers with
``group.protocol=consumer`` against a `logkeel serve` process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from tests.brokerproc import BrokerProcess
from tests.server.groups_clients import create_topic, produce

# Fast timings for the test broker (Kafka's minimums are 5 s heartbeat and 45 s session).
OVERRIDES = {
    "group.consumer.min.heartbeat.interval.ms": "200",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "6000",
    "log.flush.interval.ms": "1000",
}
PARTITIONS = 4


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "broker", overrides=OVERRIDES) as b:
        yield b


class Consumer:
    """A ``group.protocol=consumer`` consumer; ``poll`` returns (partition, offset, value)."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, pattern: str | None = None, **extra: Any
    ) -> None:
        self.topic = topic
        self.c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
                **extra,
            }
        )
        self.c.subscribe([pattern or topic])

    def poll(self, timeout: float = 0.1) -> list[tuple[int, int, bytes]]:
        out = []
        for m in self.c.consume(num_messages=500, timeout=timeout):
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(m.error())
                continue
            out.append((m.partition(), m.offset(), m.value()))
        return out

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self, offsets: dict[int, int]) -> None:
        tps = [confluent_kafka.TopicPartition(self.topic, p, o) for p, o in offsets.items()]
        for tp in self.c.commit(offsets=tps, asynchronous=False):
            assert tp.error is None, tp.error

    def committed(self) -> dict[int, int]:
        tps = [confluent_kafka.TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in self.c.committed(tps, timeout=10)}

    def close(self) -> None:
        self.c.close()


def poll_until(consumers: list[Consumer], done: Any, sink: list[Any], what: str) -> None:
    from tests.server.groups_clients import poll_until as poll_members

    poll_members(consumers, done, sink, timeout=40.0, what=what)  # type: ignore[arg-type]


def test_two_consumers_share_then_one_takes_all(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    values = produce(broker.bootstrap, "t", 5, PARTITIONS, "a")
    a = Consumer(broker.bootstrap, "g", "t")
    b = Consumer(broker.bootstrap, "g", "t")
    got: list[Any] = []
    try:
        poll_until(
            [a, b],
            lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2,
            got,
            "two members with two partitions each",
        )
        assert not a.assignment() & b.assignment()
        poll_until([a, b], lambda: {v for *_, v in got} >= values, got, "every record")
        # The group as Kafka's admin client describes it (ConsumerGroupDescribe).
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        desc = admin.describe_consumer_groups(["g"])["g"].result(10)
        assert desc.type == confluent_kafka.ConsumerGroupType.CONSUMER
        assert len(desc.members) == 2
        assert {p.partition for m in desc.members for p in m.assignment.topic_partitions} == set(
            range(PARTITIONS)
        )
        listed = admin.list_consumer_groups().result(10).valid
        assert [(g.group_id, g.type) for g in listed] == [
            ("g", confluent_kafka.ConsumerGroupType.CONSUMER)
        ]
        a.commit({p: 5 for p in a.assignment()})
        b.close()
        poll_until([a], lambda: a.assignment() == set(range(PARTITIONS)), got, "a takes all")
        assert set(a.committed().values()) >= {5}
    finally:
        a.close()


def test_committed_offsets_survive_a_broker_restart(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    produce(broker.bootstrap, "t", 3, PARTITIONS, "before")
    a = Consumer(broker.bootstrap, "g", "t")
    got: list[Any] = []
    try:
        poll_until([a], lambda: len(got) == 3 * PARTITIONS, got, "every record")
        a.commit({p: 3 for p in range(PARTITIONS)})
    finally:
        a.close()
    broker.restart()
    after = produce(broker.bootstrap, "t", 2, PARTITIONS, "after")
    b = Consumer(broker.bootstrap, "g", "t")
    got = []
    try:
        poll_until([b], lambda: {v for *_, v in got} >= after, got, "the records after the commit")
        assert {v for *_, v in got} == after  # nothing before the committed offsets again
        assert b.committed() == {p: 3 for p in range(PARTITIONS)}
    finally:
        b.close()


def test_static_member_rejoins_with_its_partitions(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    a = Consumer(broker.bootstrap, "g", "t", **{"group.instance.id": "a"})
    b = Consumer(broker.bootstrap, "g", "t", **{"group.instance.id": "b"})
    got: list[Any] = []
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        poll_until(
            [a, b],
            lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2,
            got,
            "two static members with two partitions each",
        )
        before = b.assignment()
        epoch = admin.describe_consumer_groups(["g"])["g"].result(10)
        b.close()  # a static member leaves with epoch -2: its partitions wait for it
        desc = admin.describe_consumer_groups(["g"])["g"].result(10)
        assert {m.group_instance_id for m in desc.members} == {"a", "b"}
        b = Consumer(broker.bootstrap, "g", "t", **{"group.instance.id": "b"})
        poll_until([a, b], lambda: b.assignment() == before, got, "b back with its partitions")
        assert len(a.assignment()) == 2
        desc = admin.describe_consumer_groups(["g"])["g"].result(10)
        assert len(desc.members) == 2 and epoch.state == desc.state
    finally:
        a.close()
        b.close()


def test_the_group_outlives_a_broker_restart(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", PARTITIONS)
    a = Consumer(broker.bootstrap, "g", "t")
    b = Consumer(broker.bootstrap, "g", "t")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    got: list[Any] = []
    try:
        poll_until(
            [a, b],
            lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2,
            got,
            "two members with two partitions each",
        )
        before = admin.describe_consumer_groups(["g"])["g"].result(10)
        members = {
            m.member_id: {p.partition for p in m.assignment.topic_partitions}
            for m in before.members
        }
        broker.restart()
        values = produce(broker.bootstrap, "t", 3, PARTITIONS, "after")
        poll_until(
            [a, b], lambda: {v for *_, v in got} >= values, got, "the records after the restart"
        )
        # A new admin client: the one from before the restart may sit in librdkafka's
        # reconnect backoff (up to 10 s plus jitter), which is not what this test is about.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        after = admin.describe_consumer_groups(["g"])["g"].result(30)
        # The same members with the same partitions: the group was read back, not rebuilt.
        assert {
            m.member_id: {p.partition for p in m.assignment.topic_partitions} for m in after.members
        } == members
        output = broker.output(10_000_000)
        assert output.count("group g: created by consumer-protocol member") == 1
        assert "group g: loaded at epoch 2 with 2 members" in output
    finally:
        a.close()
        b.close()


def test_regex_subscription_follows_new_topics(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "rx-1", 2)
    create_topic(broker.bootstrap, "other", 1)
    member = Consumer(broker.bootstrap, "rx", "rx-1", pattern="^rx-.*")
    c = member.c
    got: list[Any] = []

    def topics() -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in c.assignment()}

    try:
        poll_until([member], lambda: topics() == {("rx-1", 0), ("rx-1", 1)}, got, "rx-1 assigned")
        create_topic(broker.bootstrap, "rx-2", 1)
        poll_until([member], lambda: ("rx-2", 0) in topics(), got, "the new topic rx-2 assigned")
        assert not any(t == "other" for t, _ in topics())
    finally:
        c.close()


def test_offline_upgrade_and_downgrade_keep_the_offsets(broker: BrokerProcess) -> None:
    """A group whose members all left can be taken by the other protocol, committed offsets
    and all (the online conversion is test_consumer_group_migration_clients')."""
    create_topic(broker.bootstrap, "t", PARTITIONS)
    first = produce(broker.bootstrap, "t", 2, PARTITIONS, "one")
    classic = Consumer(broker.bootstrap, "g", "t", **{"group.protocol": "classic"})
    got: list[Any] = []
    try:
        poll_until([classic], lambda: {v for *_, v in got} >= first, got, "classic reads all")
        classic.commit({p: 2 for p in range(PARTITIONS)})
    finally:
        classic.close()
    second = produce(broker.bootstrap, "t", 2, PARTITIONS, "two")
    upgraded = Consumer(broker.bootstrap, "g", "t")
    got = []
    try:
        poll_until([upgraded], lambda: {v for *_, v in got} >= second, got, "upgraded reads on")
        assert {v for *_, v in got} == second
        upgraded.commit({p: 4 for p in range(PARTITIONS)})
    finally:
        upgraded.close()
    third = produce(broker.bootstrap, "t", 2, PARTITIONS, "three")
    downgraded = Consumer(broker.bootstrap, "g", "t", **{"group.protocol": "classic"})
    got = []
    try:
        poll_until([downgraded], lambda: {v for *_, v in got} >= third, got, "classic again")
        assert {v for *_, v in got} == third
    finally:
        downgraded.close()
