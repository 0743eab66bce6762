"""A consumer group's records in ``__consumer_offsets`` (Kafka's key types 3, 5-8): their bytes,
and the group rebuilt from them, tombstones included."""

from __future__ import annotations

import struct
import uuid

from logkeel.server.group.consumer_group import ConsumerGroup, ConsumerGroupSettings, GroupHeartbeat
from logkeel.server.group.consumer_records import (
    decode_consumer_key,
    replay_consumer_groups,
    snapshot,
)
from logkeel.server.group.records import decode_key

TOPICS = {"a": 3, "b": 1}
IDS = {"a": uuid.UUID(int=1), "b": uuid.UUID(int=2)}
NAMES = {v: k for k, v in IDS.items()}
SETTINGS = ConsumerGroupSettings()


def _group() -> ConsumerGroup:
    g = ConsumerGroup("grp", SETTINGS)
    join = GroupHeartbeat("m1", 0, instance_id="i1", rack_id="r", rebalance_timeout_ms=9000,
                          subscribed_topic_names=("a", "b"), owned={})  # fmt: skip
    r1 = g.heartbeat(join, TOPICS, 0, client_id="cid", client_host="/h")
    g.heartbeat(
        GroupHeartbeat("m2", 0, rebalance_timeout_ms=1, subscribed_topic_regex="a", owned={}),
        TOPICS,
        0,
    )
    g.heartbeat(GroupHeartbeat("m1", 1, owned=r1.assignment), TOPICS, 0)  # m1 must revoke now
    return g


def test_keys_are_kafkas() -> None:
    records = snapshot(_group(), IDS)
    group_key = struct.pack(">hh", 3, 3) + b"grp"
    member_key = struct.pack(">hh", 5, 3) + b"grp" + struct.pack(">h", 2) + b"m1"
    assert group_key in records and member_key in records
    assert {decode_consumer_key(k).record_type for k in records} == {3, 5, 6, 7, 8}  # type: ignore[union-attr]
    # The classic decoder leaves them alone (it only knows types 0-2).
    assert all(decode_key(k) is None for k in records)
    # ConsumerGroupMetadataValue v0: version, epoch, no tagged fields.
    assert records[group_key] == struct.pack(">hi", 0, 2) + b"\x00"


def test_replay_rebuilds_the_group() -> None:
    g = _group()
    rebuilt = replay_consumer_groups(snapshot(g, IDS).items(), SETTINGS, NAMES.get, 5)["grp"]
    assert (rebuilt.group_epoch, rebuilt.assignment_epoch) == (g.group_epoch, g.assignment_epoch)
    assert rebuilt.target == g.target and rebuilt.static_members == {"i1": "m1"}
    for m in g.members.values():
        r = rebuilt.members[m.member_id]
        assert (r.instance_id, r.rack_id, r.client_id, r.client_host) == (
            m.instance_id,
            m.rack_id,
            m.client_id,
            m.client_host,
        )
        assert (r.subscribed_topic_names, r.subscribed_topic_regex, r.rebalance_timeout_ms) == (
            m.subscribed_topic_names, m.subscribed_topic_regex, m.rebalance_timeout_ms)  # fmt: skip
        assert (r.member_epoch, r.previous_member_epoch, r.state) == (
            m.member_epoch,
            m.previous_member_epoch,
            m.state,
        )
        assert (r.assigned, r.pending_revocation) == (m.assigned, m.pending_revocation)
        assert r.session_deadline_ms == 5 + SETTINGS.session_timeout_ms
    assert rebuilt.members["m1"].rebalance_deadline_ms == 5 + 9000


def test_tombstones_and_unknown_topics() -> None:
    g = _group()
    before = snapshot(g, IDS)
    g.remove("m2", TOPICS)
    after = snapshot(g, IDS)
    log = list(before.items()) + [(k, v) for k, v in after.items() if before.get(k) != v]
    log += [(k, None) for k in before if k not in after]
    rebuilt = replay_consumer_groups(log, SETTINGS, NAMES.get, 0)["grp"]
    assert set(rebuilt.members) == {"m1"} and set(rebuilt.target) == {"m1"}
    # A topic deleted while away: its partitions are dropped from the assignments.
    only_a = replay_consumer_groups(log, SETTINGS, {IDS["a"]: "a"}.get, 0)["grp"]
    assert "b" not in only_a.target["m1"]
    # A whole group's tombstones: gone.
    log += [(k, None) for k in after]
    assert replay_consumer_groups(log, SETTINGS, NAMES.get, 0) == {}


def test_a_static_member_away_is_written_with_epoch_minus_two() -> None:
    g = _group()
    epoch = g.members["m1"].member_epoch
    g.heartbeat(GroupHeartbeat("m1", -2, instance_id="i1"), TOPICS, 0)
    rebuilt = replay_consumer_groups(snapshot(g, IDS).items(), SETTINGS, NAMES.get, 0)["grp"]
    m = rebuilt.members["m1"]
    assert m.left_temporarily and m.member_epoch == epoch
