from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from logkeel.cluster import zk_data as zd
from logkeel.cluster.metadata import PartitionState
from logkeel.cluster.partition_state import PartitionRegistration
from logkeel.cluster.zk_data import BrokerRegistration, EndPoint, LeaderIsr, TopicAssignment
from logkeel.storage.topic_partition import TopicPartition


def test_paths_follow_kafkas_layout() -> None:
    assert zd.broker_path(3) == "/brokers/ids/3"
    assert zd.topic_path("t") == "/brokers/topics/t"
    assert zd.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert zd.topic_config_path("t") == "/config/topics/t"
    assert zd.delete_topic_path("t") == "/admin/delete_topics/t"
    assert zd.PREFERRED_REPLICA_ELECTION == "/admin/preferred_replica_election"


def test_broker_registration_has_kafkas_v5_fields() -> None:
    reg = BrokerRegistration(
        1,
        (EndPoint("PLAINTEXT", "127.0.0.1", 9092), EndPoint("SSL", "127.0.0.1", 9093, "SSL")),
        rack="r1",
        timestamp_ms=1234,
        log_dir_ids=("a", "b"),
        offline_log_dir_ids=("b",),
    )
    obj = json.loads(zd.encode_broker(reg))
    assert obj["version"] == 5 and obj["host"] == "127.0.0.1" and obj["port"] == 9092
    assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9092", "SSL://127.0.0.1:9093"]
    assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert obj["jmx_port"] == -1 and obj["timestamp"] == "1234" and obj["rack"] == "r1"
    back = zd.decode_broker(1, zd.encode_broker(reg), czxid=77)
    assert back.broker_epoch == 77
    assert back.endpoints == reg.endpoints and back.log_dir_ids == ("a", "b")
    assert back.offline_log_dir_ids == ("b",) and back.rack == "r1"


def test_decodes_a_kafka_written_registration() -> None:
    kafka = (
        b'{"features":{},"listener_security_protocol_map":{"CLIENT":"SASL_SSL"},'
        b'"endpoints":["CLIENT://[::1]:9094"],"jmx_port":9999,"port":-1,"host":null,'
        b'"version":5,"timestamp":"1700000000000"}'
    )
    reg = zd.decode_broker(5, kafka)
    assert reg.endpoints == (EndPoint("CLIENT", "::1", 9094, "SASL_SSL"),)
    assert reg.rack is None and reg.jmx_port == 9999 and reg.plaintext is None
    v1 = zd.decode_broker(6, b'{"version":1,"host":"h","port":9092,"jmx_port":-1,"timestamp":"1"}')
    assert v1.endpoints == (EndPoint("PLAINTEXT", "h", 9092),)


def test_topic_assignment_round_trip_and_format() -> None:
    a = TopicAssignment(
        "t", "AAAAAAAAAAAAAAAAAAAAAA", {1: (2, 3), 0: (1, 2)}, removing_replicas={1: (3,)}
    )
    obj = json.loads(zd.encode_topic(a))
    assert obj["partitions"] == {"0": [1, 2], "1": [2, 3]} and obj["topic_id"] == a.topic_id
    assert obj["removing_replicas"] == {"1": [3]} and obj["adding_replicas"] == {}
    back = zd.decode_topic("t", zd.encode_topic(a))
    assert back.partitions == {0: (1, 2), 1: (2, 3)} and back.removing_replicas == {1: (3,)}
    assert zd.decode_topic("old", b'{"version":1,"partitions":{"0":[1]}}').topic_id is None


def test_partition_state_format_and_epoch_mapping() -> None:
    s = LeaderIsr(leader=2, leader_epoch=7, isr=(2, 3), controller_epoch=4)
    assert json.loads(zd.encode_partition_state(s)) == {
        "controller_epoch": 4,
        "leader": 2,
        "version": 1,
        "leader_epoch": 7,
        "isr": [2, 3],
    }
    back = zd.decode_partition_state(zd.encode_partition_state(s), zk_version=9)
    reg = zd.registration_of((1, 2, 3), back)
    assert reg == PartitionRegistration((1, 2, 3), 2, 7, (2, 3), 9)
    assert zd.leader_isr_of(reg, 4) == back
    # The broker's shape of the same partition converts to the same registration: one
    # partition epoch (the znode version) in all three shapes.
    broker_view = PartitionState("t", 0, [1, 2, 3], 2, 7, [2, 3], 9)
    assert broker_view.registration() == reg


def test_controller_and_epoch_and_config() -> None:
    obj = json.loads(zd.encode_controller(3, 99))
    assert obj == {"version": 1, "brokerid": 3, "timestamp": "99"}
    assert zd.decode_controller(zd.encode_controller(3, 99)) == 3
    assert zd.encode_controller_epoch(12) == b"12" and zd.decode_controller_epoch(b"12") == 12
    cfg = {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    assert json.loads(zd.encode_topic_config(cfg)) == {"version": 1, "config": cfg}
    assert zd.decode_topic_config(zd.encode_topic_config(cfg)) == cfg
    assert zd.decode_topic_config(None) == {}


def test_notifications() -> None:
    tps = {TopicPartition("a", 1), TopicPartition("b", 0)}
    obj = json.loads(zd.encode_partitions(tps))
    assert obj == {
        "version": 1,
        "partitions": [{"topic": "a", "partition": 1}, {"topic": "b", "partition": 0}],
    }
    assert zd.decode_partitions(zd.encode_partitions(tps)) == tps
    kafkas = zd.LogDirEvent(4)
    assert json.loads(zd.encode_log_dir_event(kafkas)) == {"version": 1, "broker": 4, "event": 1}
    assert zd.decode_log_dir_event(zd.encode_log_dir_event(kafkas)) == kafkas
    back = zd.LogDirEvent(4, "/data/d1", online=True, reason="back online", time_ms=17)
    assert json.loads(zd.encode_log_dir_event(back))["event"] == zd.LOG_DIR_ONLINE_EVENT
    assert zd.decode_log_dir_event(zd.encode_log_dir_event(back)) == back
    # Kafka's own notification (no dir) reads as a failure of an unnamed dir.
    assert zd.decode_log_dir_event(b'{"version":1,"broker":2,"event":1}') == zd.LogDirEvent(2)


ids = st.integers(0, 2**31 - 1)


@given(
    st.dictionaries(st.integers(0, 500), st.lists(ids, max_size=5).map(tuple), max_size=20),
    st.none() | st.text("ABCDEFGHabcdefgh0123456789-_", min_size=22, max_size=22),
)
def test_topic_round_trip_property(partitions, topic_id) -> None:
    a = TopicAssignment("t", topic_id, partitions)
    back = zd.decode_topic("t", zd.encode_topic(a))
    assert back.partitions == partitions and back.topic_id == topic_id


@given(ids, st.integers(-1, 2**31 - 1), st.lists(ids, max_size=5).map(tuple), ids, ids)
def test_partition_state_round_trip_property(leader, epoch, isr, ctl_epoch, version) -> None:
    s = LeaderIsr(leader, epoch, isr, ctl_epoch, version)
    assert zd.decode_partition_state(zd.encode_partition_state(s), version) == s


def test_election_loss_round_trips() -> None:
    loss = zd.ElectionLoss(TopicPartition("t", 2), 3, 7, 1200, {1: 40, 2: 5}, "why", 99)
    assert zd.decode_election_loss(zd.encode_election_loss(loss)) == loss


def test_a_controlled_shutdown_request_and_its_answer() -> None:
    assert zd.decode_controlled_shutdown(zd.encode_controlled_shutdown(42)) == (42, None)
    assert zd.decode_controlled_shutdown(zd.encode_controlled_shutdown(42, 0)) == (42, 0)
    assert zd.decode_controlled_shutdown(b"") == (-1, None)  # an older broker's empty request
