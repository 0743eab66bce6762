"""Committed offsets survive the broker: a clean restart (SIGTERM) and a ``kill -9`` right after
the commit was acknowledged. A new consumer in the group resumes exactly at the committed
offsets, for each real client."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import confluent_kafka
import pytest
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
PER_PARTITION = 10
OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "8",
    # Nothing is fsynced on its own before the kill: what survives, survives in the page cache,
    # as for Kafka (acks do not wait for fsync).
    "log.flush.interval.ms": "600000",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("groups-durable"), overrides=OVERRIDES) as b:
        yield b


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
@pytest.mark.parametrize("client", list(CLIENTS))
def test_committed_offsets_survive_restart(broker: BrokerProcess, client: str, how: str) -> None:
    topic, group = f"durable-{client}-{how}", f"group-durable-{client}-{how}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produced = produce(broker.bootstrap, topic, PER_PARTITION, PARTITIONS, "d")
    make = CLIENTS[client]
    commit_at = {p: 2 + p for p in range(PARTITIONS)}
    first = make(broker.bootstrap, group, topic)
    members: list[Member] = [first]
    try:
        seen: list[Rec] = []
        poll_until([first], lambda: len(seen) >= len(produced), seen, what="the first read")
        first.commit(commit_at)  # returns once the broker acknowledged it
        if how == "kill9":
            broker.kill()
        else:
            broker.stop()
        broker.start()
        # The old member carries on (its group was reloaded with it in it), finds nothing new
        # to read, and leaves.
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert first.poll(0.1) == []
        with contextlib.suppress(Exception, asyncio.CancelledError):
            first.close()
        members.remove(first)

        second = make(broker.bootstrap, group, topic)
        members.append(second)
        assert second.committed(range(PARTITIONS)) == commit_at
        resumed: list[Rec] = []
        expected = {(p, o) for p in range(PARTITIONS) for o in range(commit_at[p], PER_PARTITION)}
        poll_until(
            [second], lambda: len(resumed) >= len(expected), resumed, what="the resumed read"
        )
        assert sorted((p, o) for p, o, _ in resumed) == sorted(expected)
    finally:
        close_all(members)


def test_groups_and_simple_commits_reload_after_kill(broker: BrokerProcess) -> None:
    """Many commits to many groups, then ``kill -9``: every group's last commit is reloaded."""
    topic = "durable-many"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    groups = [f"many-{i}" for i in range(6)]
    for i, g in enumerate(groups):
        c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": g})
        for round_ in range(3):
            c.commit(
                offsets=[
                    confluent_kafka.TopicPartition(topic, p, 10 * round_ + i + p)
                    for p in range(PARTITIONS)
                ],
                asynchronous=False,
            )
        c.close()
    broker.kill()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = {g.group_id for g in admin.list_consumer_groups(request_timeout=15).result().valid}
    assert set(groups) <= listed
    for i, g in enumerate(groups):
        result = admin.list_consumer_group_offsets(
            [confluent_kafka.ConsumerGroupTopicPartitions(g)], request_timeout=15
        )[g].result()
        assert {tp.partition: tp.offset for tp in result.topic_partitions} == {
            p: 20 + i + p for p in range(PARTITIONS)
        }
