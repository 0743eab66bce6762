"""The decisions of the everyday admin commands, without sockets: the bootstrap list, Kafka's
option conventions, which topics ``--topic`` selects, lag, reset targets, what a consumer
assignment names, and the replication defaults of ``cluster up``."""

from __future__ import annotations

import io
import struct

import pytest
from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment,
)
from kio.schema.consumer_protocol_assignment.v0.data import (
    TopicPartition as AssignedTopic,
)
from kio.serial import entity_writer

from logkeel.admin.group_offsets import (
    ResetError,
    assigned_partitions,
    offset_rows,
    reset_offsets,
)
from logkeel.admin.partition_info import PartitionInfo, TopicInfo
from logkeel.cli.broker_requests import parse_bootstrap
from logkeel.cli.cluster_control import Brokers, replication_defaults
from logkeel.cli.kafka_style import ConfigListError, one_action, parse_config_list
from logkeel.cli.topics import select_topics
from logkeel.storage.topic_partition import TopicPartition

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def test_bootstrap_list() -> None:
    assert parse_bootstrap("a:1, b:2,[::1]:3") == ["a:1", "b:2", "[::1]:3"]
    assert parse_bootstrap(":9092") == ["127.0.0.1:9092"]
    for bad in ("a", "a:b", "a:1,,b:2", "a:0", "a:70000"):
        with pytest.raises(ValueError, match="is not HOST:PORT"):
            parse_bootstrap(bad)


def test_one_action() -> None:
    assert one_action({"list": False, "describe": True}) == "describe"
    assert one_action({"list": False, "describe": False}) is None
    assert one_action({"list": True, "describe": True}) is None


def test_config_list_as_kafka_configs_reads_it() -> None:
    assert parse_config_list("a=1,b=[x,y],c=k=v") == {"a": "1", "b": "x,y", "c": "k=v"}
    assert parse_config_list("") == {}
    for bad in ("a", "a=[1", "a=1]", "a=1,a=2", "a=[[1]]", "=1"):
        with pytest.raises(ConfigListError):
            parse_config_list(bad)


def _topic(name: str, internal: bool = False) -> TopicInfo:
    return TopicInfo(name, None, internal, ())


def test_topic_selection_is_kafka_topics_regex() -> None:
    known = {n: _topic(n) for n in ("orders", "orders.eu", "ordersXeu", "pay")}
    known["__consumer_offsets"] = _topic("__consumer_offsets", internal=True)
    # A name the cluster has is literal even though "." is a regex character.
    assert select_topics(known, "orders.eu") == ["orders.eu"]
    assert sorted(select_topics(known, "orders.*")) == ["orders", "orders.eu", "ordersXeu"]
    assert select_topics(known, "order") == []  # a full match, not a search
    assert "__consumer_offsets" not in select_topics(known, None, exclude_internal=True)
    assert "__consumer_offsets" in select_topics(known, None)


def test_partition_health() -> None:
    ok = PartitionInfo(0, 1, 0, (1, 2, 3), (1, 2, 3), (), None)
    behind = PartitionInfo(1, 1, 0, (1, 2, 3), (1, 3), (2,), None)
    leaderless = PartitionInfo(2, -1, 0, (2,), (), (2,), "LEADER_NOT_AVAILABLE")
    on_dead = PartitionInfo(3, 2, 0, (2,), (2,), (), None)
    live = {1, 3}
    assert not ok.under_replicated and not ok.unavailable(live)
    assert behind.under_replicated and not behind.unavailable(live)
    assert leaderless.unavailable(live)
    assert on_dead.unavailable(live) and not on_dead.under_replicated
    # kafka-topics' four describe filters, with min.insync.replicas 2.
    assert ok.states(live, 2) == set()
    assert behind.states(live, 2) == {"under-replicated", "at-min-isr"}
    assert leaderless.states(live, 2) == {"unavailable", "under-replicated", "under-min-isr"}
    assert on_dead.states(live, 1) == {"unavailable", "at-min-isr"}
    assert ok.states(live, None) == set()  # min.insync.replicas unknown: no ISR verdict


def test_lag_rows() -> None:
    rows = offset_rows({T0: 4, T1: 10}, {"m1": [T1, T2]}, {T0: 10, T1: 10, T2: 7})
    assert [(r.tp, r.current, r.log_end, r.lag, r.member) for r in rows] == [
        (T0, 4, 10, 6, None),
        (T1, 10, 10, 0, "m1"),
        (T2, None, 7, None, "m1"),  # assigned, nothing committed yet: no lag to show
    ]
    # A log truncated below the committed offset is no negative lag.
    assert offset_rows({T0: 12}, {}, {T0: 10})[0].lag == 0
    assert offset_rows({T0: 3}, {}, {T0: None})[0].lag is None


def test_reset_targets() -> None:
    parts = [T0, T1]
    committed = {T0: 5, T1: 9}
    earliest = {T0: 2, T1: 0}
    latest = {T0: 10, T1: 10}

    def plan(strategy: str, **kw: object) -> dict[TopicPartition, int]:
        return reset_offsets(strategy, parts, committed, earliest, latest, **kw)  # type: ignore[arg-type]

    assert plan("to-earliest") == {T0: 2, T1: 0}
    assert plan("to-latest") == {T0: 10, T1: 10}
    assert plan("shift-by", shift=3) == {T0: 8, T1: 10}  # clamped at the log end
    assert plan("shift-by", shift=-4) == {T0: 2, T1: 5}  # clamped at the log start
    assert plan("to-offset", offset=7) == {T0: 7, T1: 7}
    # No record that late: the log end, as Kafka does.
    assert plan("to-datetime", by_time={T0: 6, T1: None}) == {T0: 6, T1: 10}
    with pytest.raises(ResetError, match="no committed offset"):
        reset_offsets("shift-by", [T2], committed, {T2: 0}, {T2: 1}, shift=1)
    with pytest.raises(ResetError, match="no log start"):
        reset_offsets("to-earliest", [T2], committed, {T2: None}, {T2: 1})


def test_assignment_of_every_protocol_version() -> None:
    buf = io.BytesIO()
    entity_writer(ConsumerProtocolAssignment)(
        buf,
        ConsumerProtocolAssignment(
            assigned_partitions=(AssignedTopic(topic="t", partitions=(0, 2)),), user_data=None
        ),
    )
    for version in (0, 1, 3):
        data = struct.pack(">h", version) + buf.getvalue()
        assert assigned_partitions(data) == [T0, T2]
    assert assigned_partitions(b"") is None
    assert assigned_partitions(b"\x00\x00\x00\x00\x00\x05ab") is None


def test_replication_defaults() -> None:
    assert replication_defaults(1) == {}
    assert replication_defaults(2) == {}
    three = replication_defaults(3)
    assert three["default.replication.factor"] == "3"
    assert three["min.insync.replicas"] == "2"
    assert three["offsets.topic.replication.factor"] == "3"
    assert three["transaction.state.log.replication.factor"] == "3"
    assert three["transaction.state.log.min.isr"] == "2"
    assert replication_defaults(5) == three


def test_control_requests_refused_clearly() -> None:
    brokers = Brokers({})
    assert brokers.handle([1]) == {"ok": False, "error": "a request is a JSON object"}
    assert brokers.handle({"op": "stop"}) == {"ok": False, "error": "name the broker by its id"}
    answer = brokers.handle({"op": "start", "broker": 4})
    assert not answer["ok"] and "no broker 4" in answer["error"]
    assert not brokers.handle({"op": "reboot", "broker": 4})["ok"]
