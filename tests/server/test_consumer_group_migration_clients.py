"""KIP-848 online migration with real clients against a `logkeel serve` process: a group rolled
one consumer at a time from the classic protocol (librdkafka and kafka-python) to
``group.protocol=consumer`` (librdkafka) and back, consuming all along. After every poll round
no partition is in two members' assignments, every record is read exactly once (each member
commits what it read before its next poll), and the committed offsets carry across both
conversions."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from logkeel.server.protocol import ApiKey
from tests.brokerproc import BrokerProcess
from tests.server.groups_clients import (
    ConfluentMember,
    KafkaPythonMember,
    Member,
    Rec,
    close_all,
    create_topic,
    poll_until,
    produce,
)
from tests.server.test_consumer_group_clients import Consumer
from tests.server.test_security import _call

PARTITIONS = 4
OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.min.heartbeat.interval.ms": "200",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "6000",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "broker", overrides=OVERRIDES) as b:
        yield b


class Roll:
    """The group's members, polled in turn; each commits what it read after every poll."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.members: dict[str, Member] = {}
        self.read: list[Rec] = []

    def start(self, name: str, kind: str) -> None:
        if kind == "kafka-python":
            self.members[name] = KafkaPythonMember(self.bootstrap, "g", "t")
        elif kind == "consumer":
            self.members[name] = Consumer(self.bootstrap, "g", "t")  # type: ignore[assignment]
        elif kind == "cooperative":
            self.members[name] = ConfluentMember(
                self.bootstrap, "g", "t", **{"partition.assignment.strategy": "cooperative-sticky"}
            )
        else:
            self.members[name] = ConfluentMember(self.bootstrap, "g", "t")

    def stop(self, name: str) -> None:
        self.members.pop(name).close()

    def _round(self) -> None:
        for member in self.members.values():
            recs = member.poll(0.1)
            if recs:
                next_offsets: dict[int, int] = {}
                for p, o, _ in recs:
                    next_offsets[p] = max(next_offsets.get(p, 0), o + 1)
                member.commit(next_offsets)
                self.read.extend(recs)
        owned = [m.assignment() for m in self.members.values()]
        assert sum(map(len, owned)) == len(set().union(*owned)), (
            f"a partition is assigned to two members at once: {owned}"
        )

    def until_read(self, values: set[bytes], what: str) -> None:
        """Polls until every value was read and all partitions are assigned."""

        def done() -> bool:
            self._round()
            owned = set().union(*(m.assignment() for m in self.members.values()))
            return owned == set(range(PARTITIONS)) and values <= {v for *_, v in self.read}

        poll_until([], done, timeout=60.0, what=what)

    def close(self) -> None:
        close_all(list(self.members.values()))


def group_type(bootstrap: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(10).valid
    return {g.group_id: g.type for g in listed}.get("g")


def member_types(bootstrap: str) -> list[int]:
    """ConsumerGroupDescribe v1's MemberType of each member (0 classic, 1 consumer)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        r = _call(
            s,
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            1,
            group_ids=("g",),
            include_authorized_operations=False,
        )
    return sorted(int(m.member_type) for m in r.groups[0].members)


@pytest.mark.parametrize(
    ("first", "second"),
    [("classic", "kafka-python"), ("cooperative", "cooperative")],
    ids=["eager", "cooperative"],
)
def test_rolling_upgrade_and_downgrade_between_protocols(
    broker: BrokerProcess, first: str, second: str
) -> None:
    """Eager classic members (librdkafka's range, kafka-python's) revoke everything to rejoin;
    cooperative-sticky ones (librdkafka) keep what stays theirs and rejoin twice."""
    create_topic(broker.bootstrap, "t", PARTITIONS)
    roll = Roll(broker.bootstrap)
    produced: set[bytes] = set()

    def step(label: str) -> None:
        batch = produce(broker.bootstrap, "t", 3, PARTITIONS, label)
        produced.update(batch)
        roll.until_read(batch, f"the records of step {label!r}")

    try:
        roll.start("a", first)
        roll.start("b", second)
        step("classic")
        assert group_type(broker.bootstrap) == confluent_kafka.ConsumerGroupType.CLASSIC
        # Upgrade: a restarts with the consumer protocol; the group becomes a consumer group
        # and b keeps working through JoinGroup/SyncGroup/Heartbeat.
        roll.stop("a")
        roll.start("a", "consumer")
        step("mixed-upgrade")
        assert group_type(broker.bootstrap) == confluent_kafka.ConsumerGroupType.CONSUMER
        assert member_types(broker.bootstrap) == [0, 1]  # one classic, one consumer member
        roll.stop("b")
        roll.start("b", "consumer")
        step("consumer")
        # Downgrade: back to classic one at a time; the last consumer-protocol member leaving
        # turns it into a classic group again.
        roll.stop("a")
        roll.start("a", first)
        step("mixed-downgrade")
        assert group_type(broker.bootstrap) == confluent_kafka.ConsumerGroupType.CONSUMER
        roll.stop("b")
        roll.start("b", second)
        step("classic-again")
        assert group_type(broker.bootstrap) == confluent_kafka.ConsumerGroupType.CLASSIC
        values = [v for *_, v in roll.read]
        assert len(values) == len(set(values)), "a record was read twice"
        assert set(values) == produced
        committed = roll.members["a"].committed(range(PARTITIONS))
        assert sum(o or 0 for o in committed.values()) == len(produced)
    finally:
        roll.close()
