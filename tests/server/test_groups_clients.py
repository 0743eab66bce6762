"""Consumer groups with real clients against a real ``logkeel serve``: rebalances on join and
leave, offsets, kcat's balanced consumer, and the admin client's group operations."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from tests.brokerproc import BrokerProcess
from tests.server.groups_clients import (
    CLIENTS,
    Member,
    Rec,
    close_all,
    create_topic,
    poll_until,
    produce,
)

PARTITIONS = 4
OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "8",
    "log.flush.interval.ms": "1000",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("groups-broker"), overrides=OVERRIDES) as b:
        yield b


def _split(a: Member, b: Member) -> bool:
    pa, pb = a.assignment(), b.assignment()
    return bool(pa) and bool(pb) and not pa & pb and pa | pb == set(range(PARTITIONS))


@pytest.mark.parametrize("client", list(CLIENTS))
def test_two_members_split_partitions_and_rebalance_on_join_and_leave(
    broker: BrokerProcess, client: str
) -> None:
    topic, group = f"rebalance-{client}", f"group-rebalance-{client}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    make = CLIENTS[client]
    members: list[Member] = []
    consumed: list[Rec] = []
    try:
        # Phase 1: one member has every partition.
        expected = produce(broker.bootstrap, topic, 10, PARTITIONS, "one")
        a = make(broker.bootstrap, group, topic)
        members.append(a)
        poll_until([a], lambda: len(consumed) >= len(expected), consumed, what="phase 1 records")
        assert a.assignment() == set(range(PARTITIONS))
        a.commit()

        # Phase 2: a second member joins; the partitions are split between the two.
        b = make(broker.bootstrap, group, topic)
        members.append(b)
        poll_until([a, b], lambda: _split(a, b), consumed, what="the split after a join")
        more = produce(broker.bootstrap, topic, 10, PARTITIONS, "two")
        expected |= more
        per_member: dict[int, list[Rec]] = {0: [], 1: []}
        deadline = time.monotonic() + 40
        while sum(len(v) for v in per_member.values()) < len(more) and time.monotonic() < deadline:
            for i, m in enumerate((a, b)):
                per_member[i].extend(m.poll(0.1))
        for i, m in enumerate((a, b)):
            owned = m.assignment()
            assert {p for p, _, _ in per_member[i]} <= owned, (
                "a member read a partition it does not own"
            )
            assert len(owned) == PARTITIONS // 2
        consumed += per_member[0] + per_member[1]
        a.commit()
        b.commit()

        # Phase 3: the second member leaves; the first takes every partition back.
        b.close()
        members.remove(b)
        poll_until(
            [a],
            lambda: a.assignment() == set(range(PARTITIONS)),
            consumed,
            what="the first member to own everything again",
        )
        expected |= produce(broker.bootstrap, topic, 10, PARTITIONS, "three")
        poll_until([a], lambda: len(consumed) >= len(expected), consumed, what="phase 3 records")
        a.commit()

        values = Counter(v for _, _, v in consumed)
        assert set(values) == expected
        assert [v for v, n in values.items() if n > 1] == [], "records consumed more than once"
        committed = a.committed(range(PARTITIONS))
        assert committed == {p: 30 for p in range(PARTITIONS)}
    finally:
        close_all(members)


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def test_admin_list_describe_offsets_delete(broker: BrokerProcess) -> None:
    topic, group, idle = "admin-groups", "admin-active", "admin-idle"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(broker.bootstrap, topic, 5, PARTITIONS, "adm")
    member = CLIENTS["confluent"](
        broker.bootstrap, group, topic, **{"client.id": "admin-test-client"}
    )
    helper = CLIENTS["confluent"](broker.bootstrap, idle, topic)
    try:
        got: list[Rec] = []
        poll_until([member], lambda: len(got) >= 5 * PARTITIONS, got, what="records")
        member.commit()
        # An idle group: offsets committed from outside group management, no members.
        helper.close()
        c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": idle})
        c.commit(offsets=[confluent_kafka.TopicPartition(topic, 1, 3)], asynchronous=False)
        c.close()

        admin = _admin(broker)
        listed = admin.list_consumer_groups(request_timeout=10).result()
        by_id = {g.group_id: g for g in listed.valid}
        assert by_id[group].state == ConsumerGroupState.STABLE
        assert by_id[idle].state == ConsumerGroupState.EMPTY
        stable_only = admin.list_consumer_groups(
            states={ConsumerGroupState.STABLE}, request_timeout=10
        ).result()
        assert group in {g.group_id for g in stable_only.valid}
        assert idle not in {g.group_id for g in stable_only.valid}

        described = admin.describe_consumer_groups([group, idle], request_timeout=10)
        active = described[group].result()
        assert active.state == ConsumerGroupState.STABLE
        assert active.partition_assignor == "range"
        (m,) = active.members
        assert m.client_id == "admin-test-client"
        assert {tp.partition for tp in m.assignment.topic_partitions} == set(range(PARTITIONS))
        assert described[idle].result().state == ConsumerGroupState.EMPTY

        offsets = admin.list_consumer_group_offsets(
            [confluent_kafka.ConsumerGroupTopicPartitions(group)], request_timeout=10
        )[group].result()
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {
            p: 5 for p in range(PARTITIONS)
        }
        idle_offsets = admin.list_consumer_group_offsets(
            [
                confluent_kafka.ConsumerGroupTopicPartitions(
                    idle,
                    [
                        confluent_kafka.TopicPartition(topic, 1),
                        confluent_kafka.TopicPartition(topic, 2),
                    ],
                )
            ],
            request_timeout=10,
        )[idle].result()
        assert [(tp.partition, tp.offset) for tp in idle_offsets.topic_partitions] == [
            (1, 3),
            (2, -1001),
        ]

        # Deleting a group with members is refused; an empty one goes, offsets and all.
        results = admin.delete_consumer_groups([group, idle], request_timeout=10)
        with pytest.raises(confluent_kafka.KafkaException) as err:
            results[group].result()
        assert err.value.args[0].code() == confluent_kafka.KafkaError.NON_EMPTY_GROUP
        results[idle].result()
        listed = admin.list_consumer_groups(request_timeout=10).result()
        assert idle not in {g.group_id for g in listed.valid}
        with pytest.raises(confluent_kafka.KafkaException) as err:
            admin.delete_consumer_groups(["never-existed"], request_timeout=10)[
                "never-existed"
            ].result()
        assert err.value.args[0].code() == confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND
    finally:
        close_all([member])


def test_kcat_balanced_consumer(broker: BrokerProcess) -> None:
    topic, group = "kcat-groups", "kcat-group"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    expected = produce(broker.bootstrap, topic, 5, PARTITIONS, "kcat")
    out = subprocess.run(
        [
            "kcat",
            "-b",
            broker.bootstrap,
            "-G",
            group,
            topic,
            "-o",
            "beginning",
            "-c",
            str(len(expected)),
            "-f",
            "%s\\n",
            "-q",
            "-X",
            "session.timeout.ms=6000",
            "-X",
            "heartbeat.interval.ms=300",
        ],
        capture_output=True,
        timeout=60,
        check=True,
    )
    values = out.stdout.split(b"\n")[:-1]
    assert Counter(values) == Counter(expected)
    # kcat commits as it goes (auto commit) and on exit: the group resumes from the end.
    admin = _admin(broker)
    offsets = admin.list_consumer_group_offsets(
        [confluent_kafka.ConsumerGroupTopicPartitions(group)], request_timeout=10
    )[group].result()
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {
        p: 5 for p in range(PARTITIONS)
    }


def test_static_member_restart_keeps_assignment_without_rebalance(broker: BrokerProcess) -> None:
    topic, group = "static-groups", "static-group"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(broker.bootstrap, topic, 5, PARTITIONS, "s1")
    static = {"group.instance.id": "instance-1"}
    first = CLIENTS["confluent"](broker.bootstrap, group, topic, **static)
    members: list[Member] = [first]
    try:
        got: list[Rec] = []
        poll_until([first], lambda: len(got) >= 5 * PARTITIONS, got, what="first records")
        first.commit()
        admin = _admin(broker)  # kept: a collected AdminClient never completes its futures
        before = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
        (old_member,) = before.members
        # A static member does not leave on close: its place waits for it (session timeout).
        first.close()
        members.remove(first)
        second = CLIENTS["confluent"](broker.bootstrap, group, topic, **static)
        members.append(second)
        more = produce(broker.bootstrap, topic, 5, PARTITIONS, "s2")
        got2: list[Rec] = []
        poll_until([second], lambda: len(got2) >= len(more), got2, what="records after the restart")
        assert {v for _, _, v in got2} == more  # it resumed at the committed offsets
        after = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
        (new_member,) = after.members
        assert new_member.group_instance_id == "instance-1"
        assert new_member.member_id != old_member.member_id
        owned = {tp.partition for tp in new_member.assignment.topic_partitions}
        assert owned == set(range(PARTITIONS))
    finally:
        close_all(members)
