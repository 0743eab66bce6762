"""KIP-848 online migration without sockets: a classic group upgraded by a consumer-protocol
member, its classic members reconciled through JoinGroup/SyncGroup/Heartbeat (eager and
cooperative), the group downgraded when the last consumer-protocol member leaves, the policy's
refusals, and the classic members' records read back."""

from __future__ import annotations

import dataclasses
import struct
import uuid

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from logkeel.server.group.classic_protocol import (
    assignment_bytes,
    parse_assignment,
    parse_subscription,
)
from logkeel.server.group.consumer_group import (
    ClassicJoin,
    ConsumerGroup,
    ConsumerGroupSettings,
    ConsumerGroupState,
    GroupHeartbeat,
    HeartbeatResult,
    MemberState,
)
from logkeel.server.group.consumer_records import replay_consumer_groups, snapshot
from logkeel.server.group.migration import MigrationRefused, from_classic, install, to_classic
from logkeel.server.group.state import ClassicGroup, GroupState, Member

TOPICS = {"t": 4}
IDS = {"t": uuid.UUID(int=5)}


def subscription(topics: list[str], owned: dict[str, list[int]] | None = None) -> bytes:
    """A ConsumerProtocolSubscription: version 0 without owned partitions, else version 1."""

    def s(v: str) -> bytes:
        return struct.pack(">h", len(v)) + v.encode()

    out = struct.pack(">h", 0 if owned is None else 1)
    out += struct.pack(">i", len(topics)) + b"".join(s(t) for t in topics)
    out += struct.pack(">i", -1)  # no user data
    if owned is not None:
        out += struct.pack(">i", len(owned))
        for t, ps in owned.items():
            out += s(t) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out


def classic_group(assignments: dict[str, list[int]], protocol: str = "range") -> ClassicGroup:
    g = ClassicGroup("g", 0)
    for member_id, parts in assignments.items():
        g.add(
            Member(
                member_id,
                None,
                "client",
                "/h",
                30_000,
                10_000,
                "consumer",
                [(protocol, subscription(["t"]))],
                assignment_bytes({"t": frozenset(parts)}),
            )
        )
    g.generation_id = 3
    g.protocol_name = protocol
    g.state = GroupState.STABLE
    return g


def rejoin(
    g: ConsumerGroup, member: str, owned: dict[str, list[int]] | None, now: int = 0
) -> tuple[ErrorCode, int]:
    meta = subscription(["t"], owned)
    r = g.join_classic(
        ClassicJoin(
            member,
            None,
            "client",
            "/h",
            30_000,
            10_000,
            "consumer",
            (("range", meta),),
            ("t",),
            parse_subscription(meta).owned,  # type: ignore[union-attr]
        ),
        TOPICS,
        now,
    )
    assert r.error != ErrorCode.none or r.protocol_name == "range"
    return r.error, r.generation


def join_n1(g: ConsumerGroup) -> HeartbeatResult:
    """The consumer-protocol member n1 joins."""
    req = GroupHeartbeat("n1", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",))
    return g.heartbeat(dataclasses.replace(req, owned={}), TOPICS, 0)


def held_once(g: ConsumerGroup) -> None:
    seen: set[tuple[str, int]] = set()
    for m in g.members.values():
        assert not (m.held() & seen), f"{m.member_id} holds a partition another holds"
        seen |= m.held()


def test_subscription_and_assignment_bytes() -> None:
    s = parse_subscription(subscription(["t", "u"], {"t": [1, 2]}))
    assert s is not None and s.topics == ("t", "u") and s.owned == {"t": frozenset({1, 2})}
    s0 = parse_subscription(subscription(["t"]))
    assert s0 is not None and s0.owned == {}
    assert parse_subscription(b"\x00") is None
    assert parse_subscription(b"\x00\x00\x7f\xff\xff\xff") is None
    assert parse_assignment(assignment_bytes({"t": frozenset({0, 3})})) == (
        {"t": frozenset({0, 3})},
        None,
    )
    assert parse_assignment(b"") == ({}, None)


def test_upgrade_then_eager_classic_member_reconciles_then_downgrade() -> None:
    settings = ConsumerGroupSettings()
    g = from_classic(classic_group({"c1": [0, 1, 2, 3]}), settings, 0)
    assert g.group_epoch == g.assignment_epoch == 3
    assert g.members["c1"].assigned == {"t": frozenset(range(4))}
    assert g.members["c1"].classic is not None and g.state == ConsumerGroupState.STABLE
    # The consumer-protocol member joins: nothing is free yet.
    r = join_n1(g)
    assert r.error == ErrorCode.none and r.member_epoch == 4 and r.assignment == {}
    held_once(g)
    # The classic member is told to rejoin (wrong generation is its own error).
    assert g.heartbeat_classic("c1", None, 4, 0) == ErrorCode.illegal_generation
    assert g.heartbeat_classic("c1", None, 3, 0) == ErrorCode.rebalance_in_progress
    assert g.heartbeat_classic("nobody", None, 3, 0) == ErrorCode.unknown_member_id
    # Eager: it revoked everything before rejoining; it moves to the new epoch at once.
    assert rejoin(g, "c1", None) == (ErrorCode.none, 4)
    held_once(g)
    code, mine = g.sync_classic("c1", None, 4, "consumer", "range", 0)
    assert code == ErrorCode.none and len(mine["t"]) == 2
    assert g.sync_classic("c1", None, 3, None, None, 0)[0] == ErrorCode.illegal_generation
    assert g.sync_classic("c1", None, 4, "connect", None, 0)[0] == (
        ErrorCode.inconsistent_group_protocol
    )
    # The consumer-protocol member gets the rest.
    r = g.heartbeat(GroupHeartbeat("n1", 4, owned={}), TOPICS, 0)
    assert r.assignment == {"t": frozenset(range(4)) - mine["t"]}
    held_once(g)
    assert g.heartbeat_classic("c1", None, 4, 0) == ErrorCode.none
    assert g.state == ConsumerGroupState.STABLE
    # The consumer-protocol member leaves: only classic members remain, downgrade.
    g.heartbeat(GroupHeartbeat("n1", -1), TOPICS, 0)
    generation = to_classic(g, max_size=100)
    assert generation is not None and generation.protocol_name == "range"
    classic = ClassicGroup("g", 0)
    install(classic, generation, 0)
    assert classic.state == GroupState.STABLE and classic.generation_id == 4 < g.group_epoch
    assert parse_assignment(classic.members["c1"].assignment) == (mine, None)


def test_cooperative_classic_member_revokes_in_two_joins() -> None:
    g = from_classic(classic_group({"c1": [0, 1, 2, 3]}), ConsumerGroupSettings(), 0)
    join_n1(g)
    # Cooperative: it rejoins still owning everything; it keeps its epoch and is told to drop
    # what goes, then rejoins once it has.
    assert rejoin(g, "c1", {"t": [0, 1, 2, 3]}) == (ErrorCode.none, 3)
    assert g.members["c1"].state == MemberState.UNREVOKED_PARTITIONS
    code, kept = g.sync_classic("c1", None, 3, None, None, 0)
    assert code == ErrorCode.none and len(kept["t"]) == 2
    held_once(g)
    assert g.heartbeat_classic("c1", None, 3, 0) == ErrorCode.rebalance_in_progress
    assert rejoin(g, "c1", {"t": sorted(kept["t"])}) == (ErrorCode.none, 4)
    assert g.members["c1"].state == MemberState.STABLE
    r = g.heartbeat(GroupHeartbeat("n1", 4, owned={}), TOPICS, 0)
    assert r.assignment == {"t": frozenset(range(4)) - kept["t"]}
    held_once(g)


def test_a_classic_member_that_does_not_rejoin_is_fenced() -> None:
    g = from_classic(classic_group({"c1": [0, 1, 2, 3]}), ConsumerGroupSettings(), 0)
    join_n1(g)
    assert g.heartbeat_classic("c1", None, 3, 1000) == ErrorCode.rebalance_in_progress
    assert g.heartbeat_classic("c1", None, 3, 20_000) == ErrorCode.rebalance_in_progress
    assert g.expire(31_001, TOPICS) == ["c1"]


def test_new_classic_member_in_a_consumer_group() -> None:
    g = ConsumerGroup("g", ConsumerGroupSettings())
    join_n1(g)
    assert rejoin(g, "c1", None) == (ErrorCode.none, 2)
    assert g.sync_classic("c1", None, 2, None, None, 0) == (ErrorCode.none, {})
    assert g.members["c1"].state == MemberState.UNRELEASED_PARTITIONS
    # Nothing freed yet: no rejoin asked.
    assert g.heartbeat_classic("c1", None, 2, 0) == ErrorCode.none
    r = g.heartbeat(GroupHeartbeat("n1", 1, owned={"t": frozenset(range(4))}), TOPICS, 0)
    revoking = g.members["n1"].pending_revocation
    assert r.error == ErrorCode.none and revoking
    r = g.heartbeat(GroupHeartbeat("n1", 1, owned=g.members["n1"].assigned), TOPICS, 0)
    assert g.heartbeat_classic("c1", None, 2, 0) == ErrorCode.rebalance_in_progress
    # Another protocol name than the classic members share is refused.
    other = g.join_classic(
        ClassicJoin("c2", None, "c", "/h", 1, 1, "consumer", (("roundrobin", b""),), ("t",), {}),
        TOPICS,
        0,
    )
    assert other.error == ErrorCode.inconsistent_group_protocol


def test_upgrade_refusals() -> None:
    with pytest.raises(MigrationRefused, match="online upgrade is disabled"):
        from_classic(
            classic_group({"c1": [0]}), ConsumerGroupSettings(migration_policy="downgrade"), 0
        )
    custom = classic_group({"c1": [0]})
    custom.members["c1"].assignment = assignment_bytes({"t": frozenset({0})})[:-4] + (
        struct.pack(">i", 1) + b"x"
    )
    with pytest.raises(MigrationRefused, match="custom assignor"):
        from_classic(custom, ConsumerGroupSettings(), 0)
    connect = classic_group({"c1": [0]})
    connect.protocol_type = "connect"
    with pytest.raises(MigrationRefused, match="consumer embedded protocol"):
        from_classic(connect, ConsumerGroupSettings(), 0)
    # A downgrade the policy forbids leaves the group as it is.
    g = from_classic(
        classic_group({"c1": [0]}), ConsumerGroupSettings(migration_policy="upgrade"), 0
    )
    assert to_classic(g, max_size=100) is None


def test_classic_members_are_written_and_read_back() -> None:
    settings = ConsumerGroupSettings()
    g = from_classic(classic_group({"c1": [0, 1], "c2": [2, 3]}), settings, 0)
    records = list(snapshot(g, IDS).items())
    back = replay_consumer_groups(records, settings, {v: k for k, v in IDS.items()}.get, 0)["g"]
    for member_id in ("c1", "c2"):
        before, after = g.members[member_id], back.members[member_id]
        assert after.classic is not None and before.classic is not None
        assert after.classic == before.classic  # session timeout and protocols
        assert after.assigned == before.assigned and after.member_epoch == 3


# -- no partition owned twice with classic members, in any interleaving ---------------------------


@dataclasses.dataclass
class ClassicClient:
    """A classic consumer in a consumer group: eager (revokes everything before it rejoins) or
    cooperative (rejoins owning what it has; gives up what its new assignment lacks before it
    joins again). It takes a synced assignment at once."""

    member_id: str
    cooperative: bool
    generation: int = -1  # -1: not in the group
    owned: dict[str, frozenset[int]] = dataclasses.field(default_factory=dict)
    synced: dict[str, frozenset[int]] | None = None
    restarts: int = 0


MIXED_ACTIONS = st.lists(
    st.tuples(
        # Joins, syncs and heartbeats weigh more: they are where ownership changes.
        st.sampled_from(
            ["join"] * 3 + ["sync"] * 3 + ["beat"] * 3 + ["revoke"] * 2 + ["leave", "tick", "grow"]
        ),  # fmt: skip
        st.integers(0, 3),
    ),
    max_size=60,
)


@settings(max_examples=500, deadline=None)
@given(MIXED_ACTIONS)
# A classic member syncing while a consumer-protocol member still holds part of its target.
@example([("join", 0), ("join", 2), ("sync", 2), ("beat", 0), ("join", 2), ("sync", 2)])
@example([("join", 0), ("join", 3), ("sync", 3), ("revoke", 3), ("beat", 0), ("join", 3)])
def test_no_partition_owned_twice_with_classic_members(actions: list[tuple[str, int]]) -> None:
    """Members 0 and 1 speak the consumer protocol (they apply every assignment at once), 2 is
    an eager classic member, 3 a cooperative one."""
    g = ConsumerGroup("g", ConsumerGroupSettings())
    topics = {"t": 4}
    now = 0
    consumers: dict[int, tuple[str, int, dict[str, frozenset[int]]]] = {}
    classic = {2: ClassicClient("e", False), 3: ClassicClient("k", True)}

    def owned_by_all() -> list[tuple[str, dict[str, frozenset[int]]]]:
        out = [(m, owned) for m, _, owned in consumers.values()]
        return out + [(c.member_id, c.owned) for c in classic.values()]

    def check() -> None:
        seen: dict[tuple[str, int], str] = {}
        for member_id, owned in owned_by_all():
            for tp in {(t, p) for t, ps in owned.items() for p in ps}:
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {member_id}"
                seen[tp] = member_id

    def consumer_beat(i: int, epoch: int | None) -> None:
        member_id, known, owned = consumers.get(i, (f"n{i}.{now}", 0, {}))
        req = GroupHeartbeat(
            member_id,
            known if epoch is None else epoch,
            rebalance_timeout_ms=20_000,
            subscribed_topic_names=("t",),
            owned=owned,
        )
        r = g.heartbeat(req, topics, now)
        if r.error != ErrorCode.none or epoch == -1:
            consumers.pop(i, None)
            return
        consumers[i] = (member_id, r.member_epoch, owned if r.assignment is None else r.assignment)

    for action, i in actions:
        c = classic.get(i)
        if action == "tick":
            now += 11_000
            gone = set(g.expire(now, topics))
            for j, (member_id, _, _) in list(consumers.items()):
                if member_id in gone:
                    del consumers[j]
            for cc in classic.values():
                if cc.member_id in gone:
                    cc.generation, cc.owned, cc.synced = -1, {}, None
        elif action == "grow":
            topics["t"] += 1
            g.metadata_changed(topics)
        elif c is None:
            if action == "join" and i not in consumers:
                consumer_beat(i, 0)
            elif action == "beat" and i in consumers:
                consumer_beat(i, None)
            elif action == "leave" and i in consumers:
                consumer_beat(i, -1)
        elif action == "join" and c.synced is None:
            if not c.cooperative:
                c.owned = {}  # eager: everything is revoked before JoinGroup
            if c.generation < 0:
                c.restarts += 1
                c.member_id = f"{c.member_id.split('.')[0]}.{c.restarts}"
            meta = subscription(["t"], {t: sorted(ps) for t, ps in c.owned.items()})
            r = g.join_classic(
                ClassicJoin(
                    c.member_id, None, "c", "/h", 20_000, 10_000, "consumer",
                    (("range", meta),), ("t",), dict(c.owned),
                ),
                topics,
                now,
            )  # fmt: skip
            assert r.error == ErrorCode.none, r
            c.generation = r.generation
            c.synced = {}
        elif action == "sync" and c.synced is not None and c.generation >= 0:
            code, assignment = g.sync_classic(c.member_id, None, c.generation, None, None, now)
            if code != ErrorCode.none:
                c.generation, c.owned, c.synced = -1, {}, None
            else:
                c.owned = {t: c.owned.get(t, frozenset()) | assignment.get(t, frozenset())
                           for t in set(c.owned) | set(assignment)}  # fmt: skip
                c.synced = assignment
        elif action == "revoke" and c.synced is not None:
            c.owned = {t: ps for t, ps in c.synced.items() if ps}  # what it lost is given up
            c.synced = None
        elif action == "beat" and c.generation >= 0:
            code = g.heartbeat_classic(c.member_id, None, c.generation, now)
            if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                c.generation, c.owned, c.synced = -1, {}, None
        elif action == "leave" and c.generation >= 0:
            c.owned, c.synced = {}, None
            g.leave_classic(c.member_id, None, topics)
            c.generation = -1
        check()


def test_static_members_roll_between_protocols() -> None:
    """A static classic member stopped without leaving is taken over by its instance restarted
    with the consumer protocol (partitions, epoch and all), and the other way round."""
    g = from_classic(classic_group({"c1": [0, 1], "c2": [2, 3]}), ConsumerGroupSettings(), 0)
    g.members["c1"].instance_id = "i1"
    g.static_members["i1"] = "c1"
    r = g.heartbeat(
        GroupHeartbeat(
            "n1", 0, instance_id="i1", rebalance_timeout_ms=30_000,
            subscribed_topic_names=("t",), owned={},
        ),
        TOPICS,
        0,
    )  # fmt: skip
    assert r.error == ErrorCode.none and r.assignment == {"t": frozenset({0, 1})}
    assert "c1" not in g.members and g.members["n1"].classic is None
    assert g.heartbeat_classic("c1", "i1", 3, 0) == ErrorCode.fenced_instance_id
    held_once(g)
    # Back to the classic protocol under another member id: it takes n1's place over.
    meta = subscription(["t"])
    back = g.join_classic(
        ClassicJoin(
            "c1b", "i1", "client", "/h", 30_000, 10_000, "consumer", (("range", meta),),
            ("t",), {},
        ),
        TOPICS,
        0,
    )  # fmt: skip
    assert back.error == ErrorCode.none and "n1" not in g.members
    assert g.members["c1b"].classic is not None and not g.has_consumer_members()
    held_once(g)
    assert to_classic(g, max_size=100) is not None
