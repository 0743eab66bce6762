"""An attacker's probes, kept as regression tests (issue 26): one `logkeel serve` with an
authorizer, a SASL_PLAINTEXT listener with PLAIN and SCRAM-SHA-256, `admin` a super user, and
`carol`, a user with no ACLs at all, who tries every API the broker advertises, the SCRAM
credential APIs that once let her take over accounts, and granting herself ALL."""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.alter_client_quotas.v1 import request as alter_quotas
from kio.schema.alter_configs.v2 import request as alter_configs
from kio.schema.alter_partition_reassignments.v0 import request as alter_reassignments
from kio.schema.alter_replica_log_dirs.v2 import request as alter_log_dirs
from kio.schema.alter_user_scram_credentials.v0 import request as alter_scram
from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.create_partitions.v3 import request as create_partitions
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.delete_acls.v3 import request as delete_acls_v3
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.describe_client_quotas.v1 import request as describe_quotas
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.describe_producers.v0 import request as describe_producers
from kio.schema.describe_topic_partitions.v0 import request as describe_partitions
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram
from kio.schema.elect_leaders.v2 import request as elect_leaders
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter
from kio.schema.join_group.v7 import request as join_group
from kio.schema.leave_group.v4 import request as leave_group
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.metadata.v12 import request as metadata
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.offset_delete.v0 import request as offset_delete
from kio.schema.offset_fetch.v8 import request as offset_fetch
from kio.schema.offset_for_leader_epoch.v4 import request as leader_epoch
from kio.schema.produce.v9 import request as produce
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit
from kio.schema.write_txn_markers.v1 import request as txn_markers
from kio.static.primitive import Records

from logkeel.cluster.scram import ScramClientExchange, salted_password
from logkeel.records.builder import build_batch
from logkeel.server.protocol import ApiKey
from logkeel.testing.broker_process import LogkeelBroker, free_port
from tests.server.test_acls import create_acls, topic_acl
from tests.server.test_security import _call, _closed, _login

pytestmark = pytest.mark.timeout(240)

USERS = ("admin", "alice", "bob", "carol")
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{u}-pw"' for u in USERS)
    + ";"
)
ALICE_SCRAM_PASSWORD = "alice-scram-pw"
TOPIC, GROUP, TXN_ID = "secure-topic", "secure-group", "secure-txn"
ZERO_UUID = uuid.UUID(int=0)


@dataclass
class Target:
    broker: LogkeelBroker
    port: int

    def conf(
        self, user: str, mechanism: str = "PLAIN", password: str | None = None
    ) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password if password is not None else f"{user}-pw",
        }

    def admin(self, user: str = "admin") -> AdminClient:
        return AdminClient(self.conf(user))

    def session(self, user: str) -> socket.socket:
        """A raw connection logged in as ``user`` over PLAIN."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=15)
        assert _login(sock, user, f"{user}-pw").error_code == ErrorCode.none
        return sock


def _alice_upsertion(password: str) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode()
    )


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    port = free_port()
    overrides = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:admin",
        "auto.create.topics.enable": "true",
    }
    broker = LogkeelBroker(tmp_path_factory.mktemp("adversarial"), port=port, overrides=overrides)
    broker.start()
    try:
        t = Target(broker, port)
        admin = t.admin()
        for f in admin.create_topics([NewTopic(TOPIC, 1, 1)], request_timeout=20).values():
            f.result(timeout=30)
        for f in admin.alter_user_scram_credentials(
            [_alice_upsertion(ALICE_SCRAM_PASSWORD)]
        ).values():
            f.result(timeout=30)  # a super user may manage credentials
        producer = confluent_kafka.Producer(t.conf("admin"))
        producer.produce(TOPIC, b"secret record")
        assert producer.flush(20) == 0
        with t.session("admin") as s:  # the group has committed offsets, owned by admin
            committed = _call(s, ApiKey.OFFSET_COMMIT, 8, **_offset_commit_fields())
            assert {p.error_code for t_ in committed.topics for p in t_.partitions} == {
                ErrorCode.none
            }
        yield t
    finally:
        broker.stop()


# -- what a response says ------------------------------------------------------------------------


def error_codes(value: Any) -> list[ErrorCode]:
    """Every error code anywhere in a decoded response (top level, per topic, per partition)."""
    if isinstance(value, ErrorCode):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [c for f in dataclasses.fields(value) for c in error_codes(getattr(value, f.name))]
    if isinstance(value, tuple):
        return [c for item in value for c in error_codes(item)]
    return []


def refused(code: ErrorCode) -> Callable[[Any], None]:
    """The response carries ``code`` and no other error, and nothing was let through."""

    def expect(response: Any) -> None:
        codes = set(error_codes(response)) - {ErrorCode.none}
        assert codes == {code}, f"expected only {code.name}, got {sorted(c.name for c in codes)}"

    return expect


def reveals_nothing(**empty: Any) -> Callable[[Any], None]:
    """Served (no error), with each named field holding what a stranger may see."""

    def expect(response: Any) -> None:
        assert set(error_codes(response)) <= {ErrorCode.none}
        for name, value in empty.items():
            assert getattr(response, name) == value, name

    return expect


def _brokers_only(response: Any) -> None:
    assert set(error_codes(response)) <= {ErrorCode.none}
    assert response.brokers and response.topics == ()  # no topic is carol's to see
    assert response.cluster_id


def _cluster_without_operations(response: Any) -> None:
    assert response.error_code == ErrorCode.none and response.brokers
    assert response.cluster_authorized_operations == 0  # no DESCRIBE on the cluster


# -- one request of every API, as carol sends it --------------------------------------------------

_TXN = {"transactional_id": TXN_ID, "producer_id": 1, "producer_epoch": 0}
_TIMEOUT = timedelta(seconds=10)


def _offset_commit_fields() -> dict[str, Any]:
    return {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None,
        "topics": (offset_commit.OffsetCommitRequestTopic(name=TOPIC, partitions=(
            offset_commit.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_metadata=""),)),),
    }  # fmt: skip


def _scram_upsertion(user: str, password: str) -> alter_scram.ScramCredentialUpsertion:
    salt = os.urandom(16)
    return alter_scram.ScramCredentialUpsertion(
        name=user, mechanism=1, iterations=4096, salt=salt,
        salted_password=salted_password("SCRAM-SHA-256", password, salt, 4096),
    )  # fmt: skip


ANY, MATCH, ALL, ALLOW = 1, 3, 2, 3  # ResourceType/PatternType/AclOperation/Permission codes
PROBES: dict[ApiKey, tuple[int, dict[str, Any], Callable[[Any], None]]] = {
    ApiKey.PRODUCE: (9, {"acks": 1, "timeout": _TIMEOUT, "transactional_id": None, "topic_data": (
        produce.TopicProduceData(name=TOPIC, partition_data=(produce.PartitionProduceData(
            index=0, records=Records(build_batch([(0, None, b"forged", ())]))),)),)},
        refused(ErrorCode.topic_authorization_failed)),
    ApiKey.FETCH: (12, {"max_wait": timedelta(milliseconds=10), "min_bytes": 1, "topics": (
        fetch.FetchTopic(topic=TOPIC, partitions=(fetch.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=4096),)),),
        "forgotten_topics_data": ()}, refused(ErrorCode.topic_authorization_failed)),
    ApiKey.LIST_OFFSETS: (7, {"replica_id": -1, "isolation_level": 0, "topics": (
        list_offsets.ListOffsetsTopic(name=TOPIC, partitions=(
            list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1),)),)},
        refused(ErrorCode.topic_authorization_failed)),
    ApiKey.METADATA: (12, {"topics": None, "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": True}, _brokers_only),
    ApiKey.OFFSET_COMMIT: (8, _offset_commit_fields(), refused(ErrorCode.group_authorization_failed)),
    ApiKey.OFFSET_FETCH: (8, {"groups": (offset_fetch.OffsetFetchRequestGroup(
        group_id=GROUP, topics=None),), "require_stable": False},
        refused(ErrorCode.group_authorization_failed)),
    ApiKey.FIND_COORDINATOR: (4, {"key_type": 0, "coordinator_keys": (GROUP,)},
                              refused(ErrorCode.group_authorization_failed)),
    ApiKey.JOIN_GROUP: (7, {"group_id": GROUP, "session_timeout": _TIMEOUT,
                            "rebalance_timeout": _TIMEOUT, "member_id": "",
                            "group_instance_id": None, "protocol_type": "consumer",
                            "protocols": (join_group.JoinGroupRequestProtocol(
                                name="range", metadata=b""),)},
                        refused(ErrorCode.group_authorization_failed)),
    ApiKey.HEARTBEAT: (4, {"group_id": GROUP, "generation_id": 1, "member_id": "m",
                           "group_instance_id": None},
                       refused(ErrorCode.group_authorization_failed)),
    ApiKey.LEAVE_GROUP: (4, {"group_id": GROUP, "members": (
        leave_group.MemberIdentity(member_id="m", group_instance_id=None),)},
        refused(ErrorCode.group_authorization_failed)),
    ApiKey.SYNC_GROUP: (5, {"group_id": GROUP, "generation_id": 1, "member_id": "m",
                            "group_instance_id": None, "protocol_type": "consumer",
                            "protocol_name": "range", "assignments": ()},
                        refused(ErrorCode.group_authorization_failed)),
    ApiKey.DESCRIBE_GROUPS: (5, {"groups": (GROUP,), "include_authorized_operations": True},
                             refused(ErrorCode.group_authorization_failed)),
    ApiKey.LIST_GROUPS: (4, {"states_filter": ()}, reveals_nothing(groups=())),
    ApiKey.CREATE_TOPICS: (7, {"topics": (create_topics.CreatableTopic(
        name="carols-topic", num_partitions=1, replication_factor=1, assignments=(),
        configs=()),), "timeout": _TIMEOUT, "validate_only": False},
        refused(ErrorCode.topic_authorization_failed)),
    ApiKey.DELETE_TOPICS: (6, {"topics": (delete_topics.DeleteTopicState(
        name=TOPIC, topic_id=ZERO_UUID),), "timeout": _TIMEOUT},
        refused(ErrorCode.topic_authorization_failed)),
    ApiKey.DELETE_RECORDS: (2, {"topics": (delete_records.DeleteRecordsTopic(name=TOPIC, partitions=(
        delete_records.DeleteRecordsPartition(partition_index=0, offset=1),)),),
        "timeout": _TIMEOUT}, refused(ErrorCode.topic_authorization_failed)),
    ApiKey.INIT_PRODUCER_ID: (4, {"transactional_id": None, "transaction_timeout": _TIMEOUT,
                                  "producer_id": -1, "producer_epoch": -1},
                              refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (4, {"replica_id": -1, "topics": (
        leader_epoch.OffsetForLeaderTopic(topic=TOPIC, partitions=(
            leader_epoch.OffsetForLeaderPartition(partition=0, leader_epoch=0,
                                                  current_leader_epoch=-1),)),)},
        refused(ErrorCode.topic_authorization_failed)),
    ApiKey.ADD_PARTITIONS_TO_TXN: (3, {
        "v3_and_below_transactional_id": TXN_ID, "v3_and_below_producer_id": 1,
        "v3_and_below_producer_epoch": 0, "v3_and_below_topics": (
            add_partitions.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),)},
        refused(ErrorCode.transactional_id_authorization_failed)),
    ApiKey.ADD_OFFSETS_TO_TXN: (3, {**_TXN, "group_id": GROUP},
                                refused(ErrorCode.transactional_id_authorization_failed)),
    ApiKey.END_TXN: (3, {**_TXN, "committed": True},
                     refused(ErrorCode.transactional_id_authorization_failed)),
    ApiKey.WRITE_TXN_MARKERS: (1, {"markers": (txn_markers.WritableTxnMarker(
        producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
        topics=(txn_markers.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=(0,)),)),)},
        refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.TXN_OFFSET_COMMIT: (3, {**_TXN, "group_id": GROUP, "generation_id": -1,
                                   "member_id": "", "group_instance_id": None, "topics": (
        txn_offset_commit.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=(
            txn_offset_commit.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_metadata=""),)),)},
        refused(ErrorCode.transactional_id_authorization_failed)),
    ApiKey.DESCRIBE_ACLS: (3, {"resource_type_filter": ANY, "resource_name_filter": None,
                               "pattern_type_filter": ANY, "principal_filter": None,
                               "host_filter": None, "operation": ANY, "permission_type": ANY},
                           refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.CREATE_ACLS: (3, {"creations": (create_acls_v3.AclCreation(  # ALL on every topic
        resource_type=2, resource_name="*", resource_pattern_type=3, principal="User:carol",
        host="*", operation=ALL, permission_type=ALLOW),)},
        refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.DELETE_ACLS: (3, {"filters": (delete_acls_v3.DeleteAclsFilter(
        resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY,
        principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY),)},
        refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.DESCRIBE_CONFIGS: (4, {"resources": (describe_configs.DescribeConfigsResource(
        resource_type=2, resource_name=TOPIC, configuration_keys=None),),
        "include_synonyms": False, "include_documentation": False},
        refused(ErrorCode.topic_authorization_failed)),
    ApiKey.ALTER_CONFIGS: (2, {"resources": (alter_configs.AlterConfigsResource(
        resource_type=2, resource_name=TOPIC, configs=(
            alter_configs.AlterableConfig(name="retention.ms", value="1"),)),),
        "validate_only": False}, refused(ErrorCode.topic_authorization_failed)),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (2, {"dirs": (alter_log_dirs.AlterReplicaLogDir(
        path="/tmp/elsewhere", topics=(alter_log_dirs.AlterReplicaLogDirTopic(
            name=TOPIC, partitions=(0,)),)),)},
        refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.DESCRIBE_LOG_DIRS: (4, {"topics": None}, refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.CREATE_PARTITIONS: (3, {"topics": (create_partitions.CreatePartitionsTopic(
        name=TOPIC, count=4, assignments=None),), "timeout": _TIMEOUT, "validate_only": False},
        refused(ErrorCode.topic_authorization_failed)),
    ApiKey.DELETE_GROUPS: (2, {"groups_names": (GROUP,)},
                           refused(ErrorCode.group_authorization_failed)),
    ApiKey.ELECT_LEADERS: (2, {"election_type": 0, "timeout": _TIMEOUT, "topic_partitions": (
        elect_leaders.TopicPartitions(topic=TOPIC, partitions=(0,)),)},
        refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, {"timeout": _TIMEOUT, "topics": (
        alter_reassignments.ReassignableTopic(name=TOPIC, partitions=(
            alter_reassignments.ReassignablePartition(partition_index=0, replicas=(1,)),)),)},
        refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, {"timeout": _TIMEOUT, "topics": None},
                                          refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (1, {"resources": (incremental_alter.AlterConfigsResource(
        resource_type=4, resource_name="", configs=(incremental_alter.AlterableConfig(
            name="log.retention.ms", config_operation=0, value="1"),)),),
        "validate_only": False}, refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.OFFSET_DELETE: (0, {"group_id": GROUP, "topics": (offset_delete.OffsetDeleteRequestTopic(
        name=TOPIC, partitions=(offset_delete.OffsetDeleteRequestPartition(partition_index=0),)),)},
        refused(ErrorCode.group_authorization_failed)),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, {"users": None},
                                             refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, {"deletions": (), "upsertions": (
        _scram_upsertion("alice", "carol-was-here"),)},
        refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.DESCRIBE_CLUSTER: (1, {"include_cluster_authorized_operations": True,
                                  "endpoint_type": 1}, _cluster_without_operations),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, {"transactional_ids": (TXN_ID,)},
                                   refused(ErrorCode.transactional_id_authorization_failed)),
    ApiKey.LIST_TRANSACTIONS: (1, {"state_filters": (), "producer_id_filters": ()},
                               reveals_nothing(transaction_states=())),
    ApiKey.DESCRIBE_PRODUCERS: (0, {"topics": (describe_producers.TopicRequest(
        name=TOPIC, partition_indexes=(0,)),)}, refused(ErrorCode.topic_authorization_failed)),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, {"topics": (describe_partitions.TopicRequest(name=TOPIC),),
        "response_partition_limit": 10, "cursor": None},
        refused(ErrorCode.topic_authorization_failed)),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (1, {"group_id": GROUP, "member_id": "m", "member_epoch": 0,
        "instance_id": None, "rack_id": None, "rebalance_timeout": _TIMEOUT,
        "subscribed_topic_names": (TOPIC,), "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": ()},
        refused(ErrorCode.group_authorization_failed)),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (1, {"group_ids": (GROUP,),
        "include_authorized_operations": True}, refused(ErrorCode.group_authorization_failed)),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (1, {"components": (describe_quotas.ComponentData(
        entity_type="user", match_type=2, match=None),), "strict": False},
        refused(ErrorCode.cluster_authorization_failed)),
    ApiKey.ALTER_CLIENT_QUOTAS: (1, {"entries": (alter_quotas.EntryData(  # lift her own quota
        entity=(alter_quotas.EntityData(entity_type="user", entity_name="carol"),),
        ops=(alter_quotas.OpData(key="producer_byte_rate", value=1e12, remove=False),)),),
        "validate_only": False}, refused(ErrorCode.cluster_authorization_failed)),
}  # fmt: skip
# Anyone may call these, before logging in: they are the login (checked as carol logs in).
LOGIN_APIS = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}


def test_every_advertised_api_refuses_a_principal_without_acls(target: Target) -> None:
    with socket.create_connection(("127.0.0.1", target.port), timeout=15) as s:
        versions = _call(s, ApiKey.API_VERSIONS, 3, client_software_name="probe",
                         client_software_version="1")  # fmt: skip
        assert versions.error_code == ErrorCode.none
        advertised = {ApiKey(k.api_key) for k in versions.api_keys}
        # A new API must come with its probe here (and its rule in the broker).
        assert advertised == set(PROBES) | LOGIN_APIS
        shake = _call(s, ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        assert shake.error_code == ErrorCode.none
        assert set(shake.mechanisms) == {"PLAIN", "SCRAM-SHA-256"}
        auth = _call(s, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\0carol\0carol-pw")
        assert auth.error_code == ErrorCode.none
        failures = []
        for api, (version, fields, expect) in sorted(PROBES.items()):
            try:
                expect(_call(s, api, version, **fields))
            except AssertionError as exc:
                failures.append(f"{api.name} v{version}: {exc}")
        assert failures == []
    # Nothing carol sent changed anything.
    admin = target.admin()
    assert set(admin.list_topics(timeout=20).topics) >= {TOPIC}
    assert "carols-topic" not in admin.list_topics(timeout=20).topics
    assert len(admin.list_topics(TOPIC, timeout=20).topics[TOPIC].partitions) == 1


# The other paths of some APIs: a transactional producer, a transaction coordinator's key, a
# follower's requests, a named topic, a broker's configs.
VARIANTS: list[tuple[ApiKey, int, dict[str, Any], ErrorCode]] = [
    (ApiKey.INIT_PRODUCER_ID, 4, {**PROBES[ApiKey.INIT_PRODUCER_ID][1], "transactional_id": TXN_ID},
     ErrorCode.transactional_id_authorization_failed),
    (ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": (TXN_ID,)},
     ErrorCode.transactional_id_authorization_failed),
    (ApiKey.FIND_COORDINATOR, 3, {"key": GROUP, "key_type": 0}, ErrorCode.group_authorization_failed),
    (ApiKey.PRODUCE, 9, {**PROBES[ApiKey.PRODUCE][1], "transactional_id": TXN_ID},
     ErrorCode.transactional_id_authorization_failed),
    (ApiKey.FETCH, 12, {**PROBES[ApiKey.FETCH][1], "replica_id": 1},
     ErrorCode.topic_authorization_failed),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {**PROBES[ApiKey.OFFSET_FOR_LEADER_EPOCH][1], "replica_id": 1},
     ErrorCode.cluster_authorization_failed),
    (ApiKey.METADATA, 12, {"topics": (metadata.MetadataRequestTopic(name=TOPIC, topic_id=ZERO_UUID),),
                           "allow_auto_topic_creation": True,
                           "include_topic_authorized_operations": True},
     ErrorCode.topic_authorization_failed),
    (ApiKey.DESCRIBE_CONFIGS, 4, {**PROBES[ApiKey.DESCRIBE_CONFIGS][1], "resources": (
        describe_configs.DescribeConfigsResource(resource_type=4, resource_name="",
                                                 configuration_keys=None),)},
     ErrorCode.cluster_authorization_failed),
    # KIP-848 group configs: DESCRIBE_CONFIGS / ALTER_CONFIGS on the group.
    (ApiKey.DESCRIBE_CONFIGS, 4, {**PROBES[ApiKey.DESCRIBE_CONFIGS][1], "resources": (
        describe_configs.DescribeConfigsResource(resource_type=32, resource_name=GROUP,
                                                 configuration_keys=None),)},
     ErrorCode.group_authorization_failed),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": (incremental_alter.AlterConfigsResource(
        resource_type=32, resource_name=GROUP, configs=(incremental_alter.AlterableConfig(
            name="consumer.session.timeout.ms", config_operation=0, value="50000"),)),),
        "validate_only": False}, ErrorCode.group_authorization_failed),
]  # fmt: skip


def test_the_other_paths_of_an_api_refuse_too(target: Target) -> None:
    with target.session("carol") as s:
        for api, version, fields, code in VARIANTS:
            refused(code)(_call(s, api, version, **fields))
        # Listing every topic hides those carol may not describe, as Metadata does.
        listing = _call(s, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, topics=(),
                        response_partition_limit=10, cursor=None)  # fmt: skip
        reveals_nothing(topics=(), next_cursor=None)(listing)


# -- the right principal is served --------------------------------------------------------------


def _served(response: Any) -> None:
    authorization = {
        ErrorCode.cluster_authorization_failed,
        ErrorCode.topic_authorization_failed,
        ErrorCode.group_authorization_failed,
        ErrorCode.transactional_id_authorization_failed,
    }
    assert not set(error_codes(response)) & authorization


CLUSTER_APIS = [
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    ApiKey.DESCRIBE_LOG_DIRS,
    ApiKey.DESCRIBE_ACLS,
    ApiKey.ALTER_REPLICA_LOG_DIRS,
    ApiKey.ELECT_LEADERS,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS,
]


def test_a_super_user_and_a_user_granted_the_operation_are_served(target: Target) -> None:
    create_acls(target.admin(), [
        AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:bob",
                   "*", op, AclPermissionType.ALLOW)
        for op in (AclOperation.DESCRIBE, AclOperation.ALTER)
    ] + [topic_acl(TOPIC, "User:bob", AclOperation.DESCRIBE_CONFIGS)])  # fmt: skip
    for user in ("admin", "bob"):
        with target.session(user) as s:
            for api in CLUSTER_APIS:
                version, fields, _ = PROBES[api]
                response = _call(s, api, version, **fields)
                try:
                    _served(response)
                except AssertionError:
                    pytest.fail(f"{user}: {api.name} refused: {response}")
            described = _call(s, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None)
            assert [r.user for r in described.results] == ["alice"]
    # The SCRAM credentials change only for ALTER on the cluster: bob has it.
    with target.session("bob") as s:
        altered = _call(s, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=(),
                        upsertions=(_scram_upsertion("dave", "dave-pw"),))  # fmt: skip
    assert [(r.user, r.error_code) for r in altered.results] == [("dave", ErrorCode.none)]
    dave = confluent_kafka.admin.AdminClient(target.conf("dave", "SCRAM-SHA-256", "dave-pw"))
    assert dave.list_topics(timeout=20).brokers  # logs in; sees no topic, but is in


# -- the escalation of issue 26, step by step ----------------------------------------------------


def _logs_in(conf: dict[str, Any]) -> bool:
    admin = AdminClient({**conf, "socket.timeout.ms": 5000})
    try:
        admin.list_topics(timeout=8)
    except confluent_kafka.KafkaException:
        return False
    return True


def test_carol_cannot_list_users_take_over_alice_or_become_admin(target: Target) -> None:
    with target.session("carol") as s:
        listed = _call(s, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None)
        assert listed.error_code == ErrorCode.cluster_authorization_failed
        assert listed.results == ()  # not even the names
        named = _call(s, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                      users=(describe_scram.UserName(name="alice"),))  # fmt: skip
        assert [(r.user, r.error_code, r.credential_infos) for r in named.results] == [
            ("alice", ErrorCode.cluster_authorization_failed, ())
        ]
        for victim in ("alice", "admin"):
            altered = _call(s, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=(),
                            upsertions=(_scram_upsertion(victim, "carol-pw"),))  # fmt: skip
            assert [(r.user, r.error_code) for r in altered.results] == [
                (victim, ErrorCode.cluster_authorization_failed)
            ]
        grant = _call(s, ApiKey.CREATE_ACLS, 3, **PROBES[ApiKey.CREATE_ACLS][1])
        assert [r.error_code for r in grant.results] == [ErrorCode.cluster_authorization_failed]
    # alice's password still works, carol's does not; admin has no SCRAM login to steal.
    assert _logs_in(target.conf("alice", "SCRAM-SHA-256", ALICE_SCRAM_PASSWORD))
    assert not _logs_in(target.conf("alice", "SCRAM-SHA-256", "carol-pw"))
    assert not _logs_in(target.conf("admin", "SCRAM-SHA-256", "carol-pw"))
    carols = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol", None,
                              AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert target.admin().describe_acls(carols, request_timeout=20).result(timeout=30) == []


# -- SCRAM: authorization ids, unknown users ------------------------------------------------------


def _scram_first(s: socket.socket, client_first: bytes) -> Any:
    shake = _call(s, ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256")
    assert shake.error_code == ErrorCode.none
    return _call(s, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client_first)


def test_a_scram_authorization_id_of_another_user_is_refused(target: Target) -> None:
    with socket.create_connection(("127.0.0.1", target.port), timeout=15) as s:
        answer = _scram_first(s, b"n,a=admin,n=alice,r=abcdefgh")
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert "authorization id" in (answer.error_message or "")
        assert _closed(s)
    with socket.create_connection(("127.0.0.1", target.port), timeout=15) as s:
        assert _scram_first(s, b"n,a=alice,n=alice,r=abcdefgh").error_code == ErrorCode.none


def _attempt(target: Target, user: str, password: str) -> tuple[bytes, str | None]:
    """(server-first message, the final answer's error message) of one SCRAM login."""
    client = ScramClientExchange("SCRAM-SHA-256", user, password)
    with socket.create_connection(("127.0.0.1", target.port), timeout=15) as s:
        first = _scram_first(s, client.first())
        assert first.error_code == ErrorCode.none, first.error_message
        final = _call(s, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client.step(first.auth_bytes))
        assert final.error_code == ErrorCode.sasl_authentication_failed
        return first.auth_bytes, final.error_message


def _salt_and_iterations(server_first: bytes) -> tuple[str, str]:
    attrs = dict(item.split("=", 1) for item in server_first.decode().split(","))
    return attrs["s"], attrs["i"]


def test_an_unknown_scram_user_is_refused_like_a_wrong_password(target: Target) -> None:
    known_first, wrong_password = _attempt(target, "alice", "not-her-password")
    unknown_first, unknown_user = _attempt(target, "mallory", "whatever")
    assert unknown_user == wrong_password  # refused at the proof, in the same words
    # mallory's salt is the same at every attempt, as a real user's is, and looks like one.
    again, _ = _attempt(target, "mallory", "other guess")
    assert _salt_and_iterations(unknown_first) == _salt_and_iterations(again)
    assert _salt_and_iterations(unknown_first)[1] == _salt_and_iterations(known_first)[1]


# -- per-entry details -----------------------------------------------------------------------------


def test_alter_replica_log_dirs_refusal_names_every_partition(target: Target) -> None:
    with target.session("carol") as s:
        answer = _call(s, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, dirs=(alter_log_dirs.AlterReplicaLogDir(
            path="/tmp/elsewhere", topics=(alter_log_dirs.AlterReplicaLogDirTopic(
                name=TOPIC, partitions=(0, 1, 2)),)),))  # fmt: skip
    [topic] = answer.results
    assert topic.topic_name == TOPIC
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
        (i, ErrorCode.cluster_authorization_failed) for i in (0, 1, 2)
    ]


def _metadata(s: socket.socket, name: str, auto_create: bool) -> Any:
    answer = _call(s, ApiKey.METADATA, 12, topics=(metadata.MetadataRequestTopic(
        name=name, topic_id=ZERO_UUID),), allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False)  # fmt: skip
    [topic] = answer.topics
    return topic.error_code


def test_auto_creation_a_principal_may_not_do_is_refused_not_unknown(target: Target) -> None:
    """Issue 22: bob may describe ``auto-*`` topics but not create them."""
    create_acls(target.admin(), [topic_acl("auto-", "User:bob", AclOperation.DESCRIBE,
                                           pattern=ResourcePatternType.PREFIXED)])  # fmt: skip
    with target.session("bob") as s:
        assert _metadata(s, "auto-denied", True) == ErrorCode.topic_authorization_failed
        # Not asking for creation: the topic is simply unknown, as in Kafka.
        assert _metadata(s, "auto-denied", False) == ErrorCode.unknown_topic_or_partition
        # Not even describable: refused whether or not it exists.
        assert _metadata(s, "other-denied", True) == ErrorCode.topic_authorization_failed
    # librdkafka's producer asks for auto-creation: it is told at once that it may not.
    outcomes: list[confluent_kafka.KafkaError | None] = []
    producer = confluent_kafka.Producer({**target.conf("bob"), "message.timeout.ms": 20000})
    producer.produce("auto-producer", b"v", on_delivery=lambda err, _msg: outcomes.append(err))
    producer.flush(30)
    assert [e.code() if e is not None else None for e in outcomes] == [
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    assert not {"auto-denied", "auto-producer"} & set(target.admin().list_topics(timeout=20).topics)
    create_acls(target.admin(), [topic_acl("auto-", "User:bob", AclOperation.CREATE,
                                           pattern=ResourcePatternType.PREFIXED)])  # fmt: skip
    with target.session("bob") as s:
        assert _metadata(s, "auto-allowed", True) == ErrorCode.none
    assert "auto-allowed" in target.admin().list_topics(timeout=20).topics


def _bits(*ops: AclOperation) -> int:
    return sum(1 << op.value for op in ops)


def test_authorized_operations_are_the_principals(target: Target) -> None:
    group = f"ops-{uuid.uuid4().hex[:6]}"
    create_acls(target.admin(), [
        topic_acl(TOPIC, "User:alice", AclOperation.READ),
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                   "User:alice", "*", AclOperation.DESCRIBE_CONFIGS, AclPermissionType.ALLOW),
    ])  # fmt: skip

    def operations(user: str) -> tuple[int, int, int, int]:
        with target.session(user) as s:
            meta = _call(s, ApiKey.METADATA, 10, topics=(metadata.MetadataRequestTopic(
                name=TOPIC, topic_id=ZERO_UUID),), allow_auto_topic_creation=False,
                include_cluster_authorized_operations=True,
                include_topic_authorized_operations=True)  # fmt: skip
            cluster = _call(s, ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=True,
                            endpoint_type=1)  # fmt: skip
            groups = _call(s, ApiKey.DESCRIBE_GROUPS, 5, groups=(group,),
                           include_authorized_operations=True)  # fmt: skip
            partitions = _call(s, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, topics=(
                describe_partitions.TopicRequest(name=TOPIC),), response_partition_limit=10,
                cursor=None)  # fmt: skip
        [topic] = meta.topics
        # DescribeTopicPartitions always reports them, from the same ACLs as Metadata.
        assert partitions.topics[0].topic_authorized_operations == topic.topic_authorized_operations
        return (topic.topic_authorized_operations, meta.cluster_authorized_operations,
                cluster.cluster_authorized_operations, groups.groups[0].authorized_operations)  # fmt: skip

    read, describe = AclOperation.READ, AclOperation.DESCRIBE
    # READ implies DESCRIBE; no DESCRIBE on the cluster: no cluster operations are shown.
    assert operations("alice") == (_bits(read, describe), 0, 0, _bits(read, describe))
    everything_topic = _bits(read, AclOperation.WRITE, AclOperation.CREATE, describe,
                             AclOperation.DELETE, AclOperation.ALTER,
                             AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)  # fmt: skip
    everything_cluster = _bits(AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                               AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                               AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, describe)  # fmt: skip
    assert operations("admin") == (
        everything_topic, everything_cluster, everything_cluster,
        _bits(read, describe, AclOperation.DELETE),
    )  # fmt: skip


def test_no_probe_made_the_broker_fail(target: Target) -> None:
    assert "Traceback" not in target.broker.output()


def test_a_described_transaction_shows_only_the_topics_the_principal_may_describe(
    target: Target,
) -> None:
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    with target.session("admin") as s:  # an ongoing transaction over TOPIC
        init = _call(s, ApiKey.INIT_PRODUCER_ID, 4, transactional_id=txn_id,
                     transaction_timeout=timedelta(seconds=60), producer_id=-1, producer_epoch=-1)  # fmt: skip
        assert init.error_code == ErrorCode.none
        added = _call(s, ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=txn_id,
                      v3_and_below_producer_id=init.producer_id,
                      v3_and_below_producer_epoch=init.producer_epoch,
                      v3_and_below_topics=(add_partitions.AddPartitionsToTxnTopic(
                          name=TOPIC, partitions=(0,)),))  # fmt: skip
        assert set(error_codes(added)) == {ErrorCode.none}
    create_acls(target.admin(), [
        AclBinding(ResourceType.TRANSACTIONAL_ID, txn_id, ResourcePatternType.LITERAL, "User:bob",
                   "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    ])  # fmt: skip
    seen = {}
    for user in ("admin", "bob"):
        with target.session(user) as s:
            [state] = _call(s, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                            transactional_ids=(txn_id,)).transaction_states  # fmt: skip
        assert (state.error_code, state.transaction_state) == (ErrorCode.none, "Ongoing")
        seen[user] = [t.topic for t in state.topics]
    assert seen == {"admin": [TOPIC], "bob": []}
