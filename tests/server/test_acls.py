"""ACLs with real clients: one `logkeel serve` process with an authorizer and a SASL_PLAINTEXT
(PLAIN) listener; an admin super user manages ACLs through confluent-kafka's and kafka-python's
admin clients, and alice's and bob's clients are allowed or refused by them."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import confluent_kafka
import kafka.admin as kp
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.add_partitions_to_txn.v1 import request as ap
from kio.schema.delete_records.v2 import request as dr
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.offset_commit.v2 import request as oc
from kio.schema.offset_for_leader_epoch.v4 import request as oe
from kio.schema.produce.v9 import request as pr

from logkeel.records.builder import build_batch
from logkeel.server.protocol import ApiKey
from logkeel.testing.broker_process import LogkeelBroker, free_port
from tests.server.test_security import _call, _login

pytestmark = pytest.mark.timeout(180)

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";'
)


@dataclass
class AclBroker:
    broker: LogkeelBroker
    port: int

    def conf(self, user: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-pw",
        }

    def admin(self) -> AdminClient:
        return AdminClient(self.conf("admin"))


def start_broker(work: Path, port: int, **extra: str) -> LogkeelBroker:
    overrides = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "sasl.enabled.mechanisms": "PLAIN",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        **extra,
    }
    return LogkeelBroker(work, port=port, overrides=overrides).start()


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    port = free_port()
    broker = start_broker(tmp_path_factory.mktemp("acls"), port)
    try:
        yield AclBroker(broker, port)
    finally:
        broker.stop()


def topic_acl(name: str, principal: str, op: AclOperation,
              perm: AclPermissionType = AclPermissionType.ALLOW,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:  # fmt: skip
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", op, perm)


def create_acls(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings, request_timeout=20).values():
        future.result(timeout=30)


def test_admin_creates_describes_and_deletes_acls(acl_broker: AclBroker) -> None:
    admin = acl_broker.admin()
    name = f"t-{uuid.uuid4().hex[:6]}"
    read = topic_acl(name, "User:alice", AclOperation.READ)
    deny = topic_acl(name + "-", "User:bob", AclOperation.WRITE, AclPermissionType.DENY,
                     ResourcePatternType.PREFIXED)  # fmt: skip
    create_acls(admin, [read, deny])
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    described = admin.describe_acls(everything, request_timeout=20).result(timeout=30)
    assert read in described and deny in described
    mine = AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.MATCH, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert sorted(map(str, admin.describe_acls(mine).result(timeout=30))) == [str(read)]
    deleted = admin.delete_acls([mine], request_timeout=20)[mine].result(timeout=30)
    assert deleted == [read]
    left = admin.describe_acls(everything, request_timeout=20).result(timeout=30)
    assert read not in left and deny in left


def test_a_user_without_alter_on_the_cluster_cannot_create_acls(acl_broker: AclBroker) -> None:
    admin = AdminClient(acl_broker.conf("alice"))
    futures = admin.create_acls(
        [topic_acl("x", "User:alice", AclOperation.ALL)], request_timeout=20
    )
    with pytest.raises(confluent_kafka.KafkaException) as failure:
        for future in futures.values():
            future.result(timeout=30)
    assert failure.value.args[0].code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_invalid_acl_is_refused(acl_broker: AclBroker) -> None:
    admin = acl_broker.admin()
    bad = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "alice", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    with pytest.raises(confluent_kafka.KafkaException) as failure:
        create_acls(admin, [bad])
    assert "Type:name" in str(failure.value)


def create_topics(acl_broker: AclBroker, *names: str) -> None:
    admin = acl_broker.admin()  # kept alive until the futures are done
    futures = admin.create_topics([NewTopic(n, 1, 1) for n in names], request_timeout=20)
    for future in futures.values():
        future.result(timeout=30)


def produce(
    conf: dict[str, Any], topic: str, count: int = 5
) -> list[confluent_kafka.KafkaError | None]:
    """The delivery outcome of each record: None when it was written."""
    outcomes: list[confluent_kafka.KafkaError | None] = []
    producer = confluent_kafka.Producer({**conf, "message.timeout.ms": 10000})
    for i in range(count):
        producer.produce(
            topic, value=b"v%d" % i, on_delivery=lambda err, _msg: outcomes.append(err)
        )
    producer.flush(20)
    return outcomes


def consume(
    conf: dict[str, Any], topic: str, group: str, count: int
) -> tuple[list[bytes], set[int]]:
    """Values read and the error codes the consumer surfaced, within a bounded wait."""
    consumer = confluent_kafka.Consumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    errors: set[int] = set()
    deadline = time.monotonic() + 15
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.add(msg.error().code())
                if msg.error().code() in AUTH_ERRORS:
                    break
            else:
                got.append(msg.value())
    finally:
        consumer.close()
    return got, errors


AUTH_ERRORS = {
    confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED,
    confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED,
}


def test_allowed_produce_and_consume_denied_without_acls(acl_broker: AclBroker) -> None:
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topics(acl_broker, topic)
    admin = acl_broker.admin()
    create_acls(admin, [
        topic_acl("orders-", "User:alice", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        topic_acl(topic, "User:alice", AclOperation.READ),
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ])  # fmt: skip
    assert produce(acl_broker.conf("alice"), topic) == [None] * 5
    got, _ = consume(acl_broker.conf("alice"), topic, group, 5)
    assert got == [b"v%d" % i for i in range(5)]
    bob = produce(acl_broker.conf("bob"), topic, 1)
    assert [e.code() for e in bob if e is not None] == [
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    got, errors = consume(acl_broker.conf("bob"), topic, group, 5)
    assert got == [] and errors & AUTH_ERRORS


def test_deny_wins_and_reads_need_their_own_grant(acl_broker: AclBroker) -> None:
    topic = f"deny-{uuid.uuid4().hex[:6]}"
    create_topics(acl_broker, topic)
    create_acls(acl_broker.admin(), [
        topic_acl(topic, "User:alice", AclOperation.ALL),
        topic_acl(topic, "User:*", AclOperation.WRITE, AclPermissionType.DENY),
    ])  # fmt: skip
    denied = produce(acl_broker.conf("alice"), topic, 1)
    assert [e.code() for e in denied if e is not None] == [
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    assert produce(acl_broker.conf("admin"), topic, 2) == [None, None]  # super user


def test_write_on_one_prefix_only_neither_reads_nor_writes_elsewhere(acl_broker: AclBroker) -> None:
    prefix = f"pay-{uuid.uuid4().hex[:6]}-"
    inside, outside, group = prefix + "eu", f"other-{uuid.uuid4().hex[:6]}", f"g-{prefix}"
    create_topics(acl_broker, inside, outside)
    create_acls(acl_broker.admin(), [
        topic_acl(prefix, "User:bob", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:bob", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ])  # fmt: skip
    assert produce(acl_broker.conf("bob"), inside, 3) == [None] * 3
    refused = produce(acl_broker.conf("bob"), outside, 1)
    assert [e.code() for e in refused if e is not None] == [
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    # Allowed to produce, not to consume: the group is his, the topic's records are not.
    got, errors = consume(acl_broker.conf("bob"), inside, group, 3)
    assert got == [] and confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED in errors
    got, _ = consume(acl_broker.conf("admin"), inside, f"admin-{group}", 3)
    assert got == [b"v0", b"v1", b"v2"]


def test_produce_to_an_absent_topic_without_create_is_unknown_topic(acl_broker: AclBroker) -> None:
    """WRITE on a prefix but no CREATE: a Produce to an absent topic of that prefix answers that
    partition UNKNOWN_TOPIC_OR_PARTITION (it once failed the whole request with
    UNKNOWN_SERVER_ERROR) and creates nothing."""
    prefix = f"absent-{uuid.uuid4().hex[:6]}-"
    create_acls(acl_broker.admin(), [
        topic_acl(prefix, "User:alice", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
    ])  # fmt: skip
    records = build_batch([(0, None, b"v", ())])
    with socket.create_connection(("127.0.0.1", acl_broker.port), timeout=10) as s:
        assert _login(s, "alice", "alice-pw").error_code == ErrorCode.none
        produced = _call(s, ApiKey.PRODUCE, 9, acks=1, timeout=timedelta(seconds=10),
                         topic_data=(pr.TopicProduceData(name=prefix + "t", partition_data=(
                             pr.PartitionProduceData(index=0, records=records),)),))  # fmt: skip
    [topic] = produced.responses
    assert topic.partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
    listed = acl_broker.admin().list_topics(timeout=15).topics
    assert prefix + "t" not in listed


def test_offsets_and_record_deletion_need_describe_and_delete(acl_broker: AclBroker) -> None:
    topic = f"offs-{uuid.uuid4().hex[:6]}"
    create_topics(acl_broker, topic)
    assert produce(acl_broker.conf("admin"), topic, 4) == [None] * 4
    create_acls(acl_broker.admin(), [
        topic_acl(topic, "User:alice", AclOperation.DESCRIBE),
        topic_acl(topic, "User:alice", AclOperation.DELETE),
    ])  # fmt: skip
    # Clients ask Metadata first, which hides the topic from bob: his requests go on the wire.
    with socket.create_connection(("127.0.0.1", acl_broker.port), timeout=10) as s:
        assert _login(s, "bob", "bob-pw").error_code == ErrorCode.none
        listed = _call(s, ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=(
            lo.ListOffsetsTopic(name=topic, partitions=(
                lo.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),
            )),
        ))  # fmt: skip
        assert listed.topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
        deleted = _call(s, ApiKey.DELETE_RECORDS, 2, timeout=timedelta(seconds=10), topics=(
            dr.DeleteRecordsTopic(name=topic, partitions=(
                dr.DeleteRecordsPartition(partition_index=0, offset=2),)),
        ))  # fmt: skip
        assert deleted.topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
        for replica_id, error in ((-1, ErrorCode.topic_authorization_failed),
                                  (2, ErrorCode.cluster_authorization_failed)):  # fmt: skip
            epochs = _call(s, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, replica_id=replica_id, topics=(
                oe.OffsetForLeaderTopic(topic=topic, partitions=(
                    oe.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1,
                                                leader_epoch=0),)),
            ))  # fmt: skip
            assert epochs.topics[0].partitions[0].error_code == error
    # alice may: confluent-kafka's own ListOffsets and DeleteRecords.
    tp = confluent_kafka.TopicPartition(topic, 0)
    consumer = confluent_kafka.Consumer({**acl_broker.conf("alice"), "group.id": "unused"})
    try:
        assert consumer.get_watermark_offsets(tp, timeout=15) == (0, 4)
    finally:
        consumer.close()
    admin = AdminClient(acl_broker.conf("alice"))
    futures = admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 2)])
    assert next(iter(futures.values())).result(timeout=30).low_watermark == 2


def test_configs_need_describe_configs_and_alter_configs(acl_broker: AclBroker) -> None:
    topic = f"cfg-{uuid.uuid4().hex[:6]}"
    create_topics(acl_broker, topic)
    create_acls(acl_broker.admin(), [
        topic_acl(topic, "User:alice", AclOperation.DESCRIBE_CONFIGS),
        topic_acl(topic, "User:alice", AclOperation.ALTER_CONFIGS),
    ])  # fmt: skip
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
    ])  # fmt: skip
    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "0")

    def outcome(user: str, call: str, res: ConfigResource) -> int | None:
        admin = AdminClient(acl_broker.conf(user))
        futures = getattr(admin, call)([res], request_timeout=20)
        try:
            next(iter(futures.values())).result(timeout=30)
        except confluent_kafka.KafkaException as exc:
            return int(exc.args[0].code())
        return None

    denied_topic = confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    # bob may not shorten the topic's retention (and lose its data) nor read its configs.
    assert outcome("bob", "incremental_alter_configs", resource) == denied_topic
    assert outcome("bob", "describe_configs", resource) == denied_topic
    assert outcome("bob", "describe_configs", broker_resource) == (
        confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    )
    assert outcome("alice", "describe_configs", broker_resource) == (
        confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    )  # her grants are on the topic only
    assert outcome("alice", "describe_configs", resource) is None
    assert outcome("admin", "describe_configs", broker_resource) is None
    assert outcome("alice", "incremental_alter_configs", resource) is None
    admin = acl_broker.admin()  # kept alive: a collected client cancels its futures
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    assert next(iter(described.values())).result(timeout=30)["retention.ms"].value == "1"


def test_group_apis_need_describe_and_delete_on_the_group(acl_broker: AclBroker) -> None:
    topic, group, other = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("grp", "g-alice", "g-bob"))
    create_topics(acl_broker, topic)
    assert produce(acl_broker.conf("admin"), topic, 3) == [None] * 3
    create_acls(acl_broker.admin(), [
        topic_acl(topic, "User:alice", AclOperation.READ),
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, other, ResourcePatternType.LITERAL, "User:bob", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ])  # fmt: skip
    got, _ = consume(acl_broker.conf("alice"), topic, group, 3)  # commits on close
    assert got == [b"v0", b"v1", b"v2"]
    admin = acl_broker.admin()
    committed = ConsumerGroupTopicPartitions(other, [confluent_kafka.TopicPartition(topic, 0, 2)])
    admin.alter_consumer_group_offsets([committed])[other].result(timeout=30)

    def error_of(future: Any) -> int | None:
        try:
            future.result(timeout=30)
        except confluent_kafka.KafkaException as exc:
            return int(exc.args[0].code())
        return None

    denied = confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED
    bob, alice = AdminClient(acl_broker.conf("bob")), AdminClient(acl_broker.conf("alice"))
    assert error_of(bob.describe_consumer_groups([group])[group]) == denied
    assert (
        error_of(bob.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group])
        == denied
    )
    assert error_of(bob.delete_consumer_groups([group])[group]) == denied
    listed = {g.group_id for g in bob.list_consumer_groups().result(timeout=30).valid}
    assert group not in listed and other in listed
    # bob's own group, on a topic he may not describe: its offsets are left out for him.
    mine = bob.list_consumer_group_offsets([ConsumerGroupTopicPartitions(other)])[other]
    assert mine.result(timeout=30).topic_partitions == []
    offsets = alice.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    assert [tp.offset for tp in offsets.result(timeout=30).topic_partitions] == [3]
    assert error_of(alice.describe_consumer_groups([group])[group]) is None
    assert error_of(alice.delete_consumer_groups([group])[group]) == denied  # READ is not DELETE
    assert error_of(admin.delete_consumer_groups([group])[group]) is None


def test_transactions_are_described_only_to_who_may_describe_the_id(acl_broker: AclBroker) -> None:
    topic, txn_id = f"txn-{uuid.uuid4().hex[:6]}", f"tid-{uuid.uuid4().hex[:6]}"
    create_topics(acl_broker, topic)
    producer = confluent_kafka.Producer({**acl_broker.conf("admin"), "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"x")
    producer.commit_transaction(30)
    create_acls(acl_broker.admin(), [AclBinding(
        ResourceType.TRANSACTIONAL_ID, txn_id, ResourcePatternType.LITERAL, "User:alice", "*",
        AclOperation.DESCRIBE, AclPermissionType.ALLOW,
    )])  # fmt: skip
    seen = {}
    for user in ("bob", "alice"):
        with socket.create_connection(("127.0.0.1", acl_broker.port), timeout=10) as s:
            assert _login(s, user, f"{user}-pw").error_code == ErrorCode.none
            [described] = _call(s, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                                transactional_ids=(txn_id,)).transaction_states  # fmt: skip
            listed = _call(s, ApiKey.LIST_TRANSACTIONS, 0, state_filters=(),
                           producer_id_filters=()).transaction_states  # fmt: skip
            seen[user] = (described, {t.transactional_id for t in listed})
    bob_described, bob_listed = seen["bob"]
    assert bob_described.error_code == ErrorCode.transactional_id_authorization_failed
    assert txn_id not in bob_listed
    alice_described, alice_listed = seen["alice"]
    assert alice_described.error_code == ErrorCode.none
    assert alice_described.transaction_state == "CompleteCommit"
    assert txn_id in alice_listed


def test_a_transaction_cannot_take_in_a_topic_the_producer_may_not_write(
    acl_broker: AclBroker,
) -> None:
    topic, txn_id = f"txw-{uuid.uuid4().hex[:6]}", f"tid-bob-{uuid.uuid4().hex[:6]}"
    create_topics(acl_broker, topic)
    create_acls(acl_broker.admin(), [
        AclBinding(ResourceType.TRANSACTIONAL_ID, txn_id, ResourcePatternType.LITERAL, "User:bob",
                   "*", AclOperation.WRITE, AclPermissionType.ALLOW),
        topic_acl(topic, "User:bob", AclOperation.DESCRIBE),  # he sees it, may not write it
    ])  # fmt: skip
    # On the wire: a client's Produce would be refused anyway; AddPartitionsToTxn must be first.
    with socket.create_connection(("127.0.0.1", acl_broker.port), timeout=10) as s:
        assert _login(s, "bob", "bob-pw").error_code == ErrorCode.none
        init = _call(s, ApiKey.INIT_PRODUCER_ID, 1, transactional_id=txn_id,
                     transaction_timeout=timedelta(seconds=60))  # fmt: skip
        assert init.error_code == ErrorCode.none  # WRITE on the transactional id suffices
        added = _call(s, ApiKey.ADD_PARTITIONS_TO_TXN, 1, v3_and_below_transactional_id=txn_id,
                      v3_and_below_producer_id=init.producer_id,
                      v3_and_below_producer_epoch=init.producer_epoch,
                      v3_and_below_topics=(ap.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),))  # fmt: skip
    [result] = added.results_by_topic_v3_and_below
    assert [r.partition_error_code for r in result.results_by_partition] == [
        ErrorCode.topic_authorization_failed
    ]


def test_committing_offsets_needs_read_on_the_topic(acl_broker: AclBroker) -> None:
    readable, other, group = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("rd", "wr", "g-oc"))
    create_topics(acl_broker, readable, other)
    create_acls(acl_broker.admin(), [
        topic_acl(readable, "User:bob", AclOperation.READ),
        topic_acl(other, "User:bob", AclOperation.WRITE),  # writing is not reading
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:bob", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ])  # fmt: skip
    with socket.create_connection(("127.0.0.1", acl_broker.port), timeout=10) as s:
        assert _login(s, "bob", "bob-pw").error_code == ErrorCode.none
        committed = _call(s, ApiKey.OFFSET_COMMIT, 2, group_id=group,
                          generation_id_or_member_epoch=-1, member_id="",
                          retention_time=timedelta(milliseconds=-1), topics=tuple(
            oc.OffsetCommitRequestTopic(name=name, partitions=(
                oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                                committed_metadata=""),)) for name in (readable, other)
        ))  # fmt: skip
    codes = {t.name: t.partitions[0].error_code for t in committed.topics}
    assert codes == {readable: ErrorCode.none, other: ErrorCode.topic_authorization_failed}


def test_metadata_hides_topics_the_principal_may_not_describe(acl_broker: AclBroker) -> None:
    visible, hidden = f"vis-{uuid.uuid4().hex[:6]}", f"hid-{uuid.uuid4().hex[:6]}"
    create_topics(acl_broker, visible, hidden)
    create_acls(acl_broker.admin(), [topic_acl(visible, "User:bob", AclOperation.DESCRIBE)])
    bob_sees = set(AdminClient(acl_broker.conf("bob")).list_topics(timeout=20).topics)
    assert visible in bob_sees and hidden not in bob_sees
    assert {visible, hidden} <= set(acl_broker.admin().list_topics(timeout=20).topics)


def test_acls_survive_a_restart_and_allow_everyone_applies_where_none_is(tmp_path: Path) -> None:
    port = free_port()
    extra = {"allow.everyone.if.no.acl.found": "true"}
    broker = start_broker(tmp_path, port, **extra)
    restarted: LogkeelBroker | None = None
    try:
        acl_broker = AclBroker(broker, port)
        create_topics(acl_broker, "open", "guarded")
        create_acls(acl_broker.admin(), [topic_acl("guarded", "User:alice", AclOperation.WRITE)])
        broker.stop()
        restarted = start_broker(tmp_path, port, **extra)
        acl_broker = AclBroker(restarted, port)
        assert produce(acl_broker.conf("bob"), "open", 1) == [None]
        denied = produce(acl_broker.conf("bob"), "guarded", 1)
        assert [e.code() for e in denied if e is not None] == [
            confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
        ]
        assert produce(acl_broker.conf("alice"), "guarded", 1) == [None]
    finally:
        (restarted or broker).stop()


def logkeel(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logkeel", *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_cli_adds_lists_and_removes_acls(tmp_path: Path) -> None:
    plain, sasl = free_port(), free_port()
    broker = start_broker(tmp_path, sasl, **{
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "super.users": "User:admin;User:ANONYMOUS",  # ANONYMOUS: the CLI's PLAINTEXT principal
    })  # fmt: skip
    server = f"--bootstrap-server=127.0.0.1:{plain}"
    try:
        added = logkeel("acls", "add", "--topic", "pay-", "--prefixed", "--principal", "User:bob",
                        "--operation", "write", "--operation", "describe", server)  # fmt: skip
        assert added.returncode == 0, added.stderr
        create_topics(AclBroker(broker, sasl), "pay-eu")
        assert produce(AclBroker(broker, sasl).conf("bob"), "pay-eu", 1) == [None]
        listed = logkeel("acls", "list", "--topic", "pay-eu", server)
        assert listed.returncode == 0, listed.stderr
        assert "User:bob" in listed.stdout and "PREFIXED" in listed.stdout
        removed = logkeel("acls", "remove", "--topic", "pay-", "--prefixed", "--operation", "write",
                          server)  # fmt: skip
        assert (removed.returncode, removed.stdout.strip()) == (0, "removed 1 ACL(s)")
        assert "DESCRIBE" in logkeel("acls", "list", server).stdout
        bad = logkeel("acls", "add", "--topic", "x", "--principal", "bob", "--operation", "read",
                      server)  # fmt: skip
        assert bad.returncode == 1 and "Type:name" in bad.stderr
    finally:
        broker.stop()


def test_creating_and_deleting_topics_need_create_and_delete(acl_broker: AclBroker) -> None:
    name = f"adm-{uuid.uuid4().hex[:6]}"
    create_acls(acl_broker.admin(), [
        topic_acl("adm-", "User:alice", AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED),
    ])  # fmt: skip
    bob = AdminClient(acl_broker.conf("bob"))
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        bob.create_topics([NewTopic(name, 1, 1)], request_timeout=20)[name].result(timeout=30)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice = AdminClient(acl_broker.conf("alice"))
    alice.create_topics([NewTopic(name, 1, 1)], request_timeout=20)[name].result(timeout=30)
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        alice.delete_topics([name], request_timeout=20)[name].result(timeout=30)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert name in acl_broker.admin().list_topics(timeout=20).topics


def test_kafka_python_admin_manages_acls(acl_broker: AclBroker) -> None:
    admin = kp.KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{acl_broker.port}", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN", sasl_plain_username="admin", sasl_plain_password="admin-pw",
        request_timeout_ms=20000,
    )  # fmt: skip
    try:
        name = f"kp-{uuid.uuid4().hex[:6]}"
        acl = kp.ACL("User:carol", "*", kp.ACLOperation.READ, kp.ACLPermissionType.ALLOW,
                     kp.ResourcePattern(kp.ResourceType.TOPIC, name))  # fmt: skip
        created = admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        pattern = kp.ResourcePatternFilter(
            kp.ResourceType.TOPIC, name, kp.ACLResourcePatternType.LITERAL
        )
        wanted = kp.ACLFilter(None, None, kp.ACLOperation.ANY, kp.ACLPermissionType.ANY, pattern)
        described, error = admin.describe_acls(wanted)
        assert error.errno == 0 and [a.principal for a in described] == ["User:carol"]
        deleted = admin.delete_acls([wanted])
        assert len(deleted[0][1]) == 1
        assert admin.describe_acls(wanted)[0] == []
    finally:
        admin.close()
