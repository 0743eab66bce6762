"""KIP-848 regex subscriptions against a broker with an authorizer (SASL PLAIN): a member
subscribed to ``^rx-.*`` is assigned only the matching topics its principal may DESCRIBE,
follows matching topics as they are created and deleted, and picks up a DESCRIBE granted
later. Both librdkafka with ``group.protocol=consumer`` and a raw ConsumerGroupHeartbeat
carrying SubscribedTopicRegex (the broker resolves the regex) are checked: librdkafka 2.16 may
resolve a regex itself from Metadata, which the authorizer filters too."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from logkeel.server.protocol import ApiKey
from logkeel.testing.broker_process import free_port
from tests.server.test_acls import AclBroker, create_acls, start_broker, topic_acl
from tests.server.test_security import _call, _login
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {
    "group.consumer.min.heartbeat.interval.ms": "200",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "6000",
}


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[AclBroker]:
    port = free_port()
    broker = start_broker(tmp_path / "broker", port, **OVERRIDES)
    try:
        yield AclBroker(broker, port)
    finally:
        broker.stop()


def topic_names(admin: AdminClient) -> dict[uuid.UUID, str]:
    """Every topic's name by id, as the admin (a super user) sees them."""
    names = list(admin.list_topics(timeout=10).topics)
    described = admin.describe_topics(confluent_kafka.TopicCollection(names))
    out = {}
    for name, future in described.items():
        tid = future.result(10).topic_id
        msb, lsb = tid.get_most_significant_bits(), tid.get_least_significant_bits()
        out[uuid.UUID(int=((msb % 2**64) << 64) | (lsb % 2**64))] = name
    return out


class RawRegexMember:
    """Alice's member of group ``rx-raw`` sending SubscribedTopicRegex itself."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert _login(self.sock, "alice", "alice-pw").error_code == ErrorCode.none
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: tuple[object, ...] = ()

    def heartbeat(self, admin: AdminClient) -> set[tuple[str, int]]:
        first = self.epoch == 0
        r = _call(
            self.sock,
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            group_id="rx-raw",
            member_id=self.member_id,
            member_epoch=self.epoch,
            rebalance_timeout=timedelta(seconds=30),
            subscribed_topic_regex="^rx-.*" if first else None,
            topic_partitions=self.owned,
        )
        assert r.error_code == ErrorCode.none, (r.error_code, r.error_message)
        self.epoch = int(r.member_epoch)
        if r.assignment is not None:
            self.owned = r.assignment.topic_partitions
        return {
            (topic_names(admin).get(tp.topic_id, "?"), int(p))
            for tp in self.owned
            for p in tp.partitions
        }


def test_regex_resolves_to_describable_topics_only(acl_broker: AclBroker) -> None:
    admin = acl_broker.admin()
    for f in admin.create_topics(
        [NewTopic(t, 2, 1) for t in ("rx-ok-1", "rx-secret", "other")]
    ).values():
        f.result(30)
    create_acls(
        admin,
        [
            AclBinding(
                ResourceType.GROUP,
                "rx",
                ResourcePatternType.PREFIXED,
                "User:alice",
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            ),
            topic_acl(
                "rx-ok-", "User:alice", AclOperation.READ, pattern=ResourcePatternType.PREFIXED
            ),
            topic_acl("other", "User:alice", AclOperation.READ),
        ],
    )
    consumer = confluent_kafka.Consumer(
        {
            **acl_broker.conf("alice"),
            "group.id": "rx",
            "group.protocol": "consumer",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.subscribe(["^rx-.*"])
    raw = RawRegexMember(acl_broker.port)

    def assigned() -> set[tuple[str, int]]:
        consumer.poll(0.1)
        mine = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        theirs = raw.heartbeat(admin)
        return mine if mine == theirs else {("librdkafka and the raw member differ", -1)}

    try:
        # READ implies DESCRIBE: rx-ok-1 only; rx-secret matches but is not describable,
        # other is describable but does not match.
        wait_until(
            lambda: assigned() == {("rx-ok-1", 0), ("rx-ok-1", 1)}, 30, "rx-ok-1 alone assigned"
        )
        admin.create_topics([NewTopic("rx-ok-2", 1, 1)])["rx-ok-2"].result(30)
        wait_until(lambda: ("rx-ok-2", 0) in assigned(), 30, "the new rx-ok-2 assigned")
        admin.delete_topics(["rx-ok-1"])["rx-ok-1"].result(30)
        wait_until(lambda: assigned() == {("rx-ok-2", 0)}, 30, "the deleted rx-ok-1 gone")
        assert all(t != "rx-secret" for t, _ in assigned())
        create_acls(admin, [topic_acl("rx-secret", "User:alice", AclOperation.DESCRIBE)])
        wait_until(
            lambda: assigned() == {("rx-ok-2", 0), ("rx-secret", 0), ("rx-secret", 1)},
            30,
            "rx-secret assigned once describable",
        )
    finally:
        consumer.close()
        raw.sock.close()
