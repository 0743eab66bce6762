"""The group coordinator driven in-process: time moves only when a test says so (ManualTimer),
and ``__consumer_offsets`` is a real partition log in tmp_path."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from logkeel.server.group.context import GroupContext
from logkeel.server.group.coordinator import GroupCoordinator
from logkeel.server.group.log import (
    CoordinatorRecord,
    LogManagerOffsetsStore,
    OpenTxns,
    read_partition_records,
)
from logkeel.server.group.membership import GroupMembership
from logkeel.server.group.persistence import REPLAY_BATCH, replay
from logkeel.server.group.records import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    offset_commit_record,
    partition_for,
)
from logkeel.server.group.results import CommitOffset, CoordinatorSettings
from logkeel.server.group.state import GroupState, JoinResult
from logkeel.server.group.timers import ManualTimer
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

T = TypeVar("T")
PARTITIONS = 4
SESSION = 1000
REBALANCE = 2000
RANGE = [("range", b"sub-range")]


class Env:
    """A coordinator over a real log dir; ``restart()`` reopens everything from disk."""

    def __init__(self, root: Path, **overrides: Any) -> None:
        self.root = root
        opts: dict[str, Any] = dict(
            initial_rebalance_delay_ms=0,
            min_session_timeout_ms=100,
            max_session_timeout_ms=60_000,
        )
        opts.update(overrides)
        self.settings = CoordinatorSettings(**opts)
        self.timer = ManualTimer()
        self._open()

    def _open(self) -> None:
        self.log_manager = LogManager([self.root / "logs"])
        self.log_manager.startup(start_background=False)
        self.store = LogManagerOffsetsStore(self.log_manager, PARTITIONS)
        self.coord = GroupCoordinator(
            None, settings=self.settings, store=self.store, timer=self.timer
        )

    async def restart(self) -> None:
        await self.coord.stop()
        self.log_manager.shutdown()
        self._open()
        await self.coord.start()
        await self.coord.wait_loaded()

    async def close(self) -> None:
        await self.coord.stop()
        self.log_manager.shutdown()

    def records(self, group_id: str) -> list[tuple[Any, Any]]:
        plog = self.log_manager.get_log(
            TopicPartition(OFFSETS_TOPIC, partition_for(group_id, PARTITIONS))
        )
        assert plog is not None
        out = []
        for key, value in read_partition_records(plog):
            k = decode_key(key)
            if isinstance(k, OffsetCommitKey) and k.group == group_id:
                out.append((k, None if value is None else decode_offset_commit_value(value)))
            elif isinstance(k, GroupMetadataKey) and k.group == group_id:
                out.append((k, None if value is None else decode_group_metadata_value(value)))
        return out

    # -- client-side helpers ----------------------------------------------------------------------

    def join(
        self,
        group: str,
        member: str = "",
        *,
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        client: str = "client",
        version: int = 9,
        session: int = SESSION,
        rebalance: int = REBALANCE,
    ) -> asyncio.Task[JoinResult]:
        return asyncio.ensure_future(
            self.coord.join_group(
                group,
                member,
                instance,
                "consumer",
                protocols or RANGE,
                session,
                rebalance,
                client_id=client,
                client_host="/127.0.0.1",
                api_version=version,
            )
        )

    async def new_member(self, group: str, client: str = "client") -> str:
        """The MEMBER_ID_REQUIRED round trip of JoinGroup v4+: returns the assigned id."""
        first = await self.join(group, client=client)
        assert first.error == ErrorCode.member_id_required
        assert first.member_id.startswith(f"{client}-")
        return first.member_id


def run(scenario: Callable[[Env], Coroutine[Any, Any, None]], root: Path, **overrides: Any) -> None:
    async def main() -> None:
        env = Env(root, **overrides)
        await env.coord.start()
        try:
            await scenario(env)
        finally:
            await env.close()

    asyncio.run(asyncio.wait_for(main(), 30))


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def done(task: Awaitable[T]) -> T:
    return await asyncio.wait_for(task, 5)


async def form_group(env: Env, group: str, n: int) -> tuple[list[str], int]:
    """n members joined, synced, stable: returns (member ids with the leader first, generation)."""
    ids = [await env.new_member(group, f"c{i}") for i in range(n)]
    tasks = [env.join(group, m, client=f"c{i}") for i, m in enumerate(ids)]
    await settle()
    env.timer.advance(0)
    results = [await done(t) for t in tasks]
    generation = results[0].generation_id
    assert all(r.error == ErrorCode.none and r.generation_id == generation for r in results)
    leader = results[0].leader
    assert leader in ids
    followers = [m for m in ids if m != leader]
    syncs = [
        asyncio.ensure_future(
            env.coord.sync_group(group, generation, m, None, "consumer", "range", [])
        )
        for m in followers
    ]
    await settle()
    assignment = [(m, f"assign-{m}".encode()) for m in ids]
    lead = await done(
        env.coord.sync_group(group, generation, leader, None, "consumer", "range", assignment)
    )
    assert lead.error == ErrorCode.none and lead.assignment == f"assign-{leader}".encode()
    for m, s in zip(followers, syncs, strict=True):
        r = await done(s)
        assert r.error == ErrorCode.none and r.assignment == f"assign-{m}".encode()
    assert env.coord.groups[group].state == GroupState.STABLE
    return [leader, *followers], generation


# ---------------------------------------------------------------------------------------------


def test_first_join_needs_member_id_then_forms_generation(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        m1 = await env.new_member("g")
        group = env.coord.groups["g"]
        assert group.state == GroupState.EMPTY and group.is_pending_member(m1)
        t1 = env.join("g", m1)
        await settle()
        assert not t1.done() and group.state == GroupState.PREPARING_REBALANCE
        env.timer.advance(0)  # group.initial.rebalance.delay.ms = 0
        r1 = await done(t1)
        assert (r1.error, r1.generation_id, r1.leader, r1.member_id) == (ErrorCode.none, 1, m1, m1)
        assert r1.protocol_name == "range" and r1.protocol_type == "consumer"
        assert r1.members == [(m1, None, b"sub-range")]
        assert group.state == GroupState.COMPLETING_REBALANCE
        # A commit mid-sync is refused; the group is not stable yet.
        code, _ = await env.coord.commit_offsets("g", 1, m1, None, [CommitOffset("t", 0, 5)])
        assert code == ErrorCode.rebalance_in_progress
        s1 = await done(env.coord.sync_group("g", 1, m1, None, "consumer", "range", [(m1, b"A")]))
        assert (s1.error, s1.assignment, s1.protocol_name) == (ErrorCode.none, b"A", "range")
        assert group.state == GroupState.STABLE
        # The assignment was stored before it was handed out.
        ((key, value),) = [r for r in env.records("g") if isinstance(r[0], GroupMetadataKey)]
        assert value.generation == 1 and value.leader == m1 and value.protocol == "range"
        assert [(m.member_id, m.assignment, m.subscription) for m in value.members] == [
            (m1, b"A", b"sub-range")
        ]

    run(scenario, tmp_path)


def test_second_member_triggers_rebalance_and_both_get_assignments(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        (m1,), gen = await form_group(env, "g", 1)
        m2 = await env.new_member("g", "c2")
        t2 = env.join("g", m2)
        await settle()
        group = env.coord.groups["g"]
        assert group.state == GroupState.PREPARING_REBALANCE and not t2.done()
        assert env.coord.heartbeat("g", gen, m1, None) == ErrorCode.rebalance_in_progress
        # A sync of the old generation is told to rejoin.
        s = await env.coord.sync_group("g", gen, m1, None, "consumer", "range", [])
        assert s.error == ErrorCode.rebalance_in_progress
        t1 = env.join("g", m1)
        r1, r2 = await done(t1), await done(t2)
        assert r1.generation_id == r2.generation_id == gen + 1
        assert r1.leader == r2.leader == m1  # the old leader rejoined and stays leader
        assert sorted(m for m, _, _ in r1.members) == sorted([m1, m2]) and r2.members == []
        f = asyncio.ensure_future(
            env.coord.sync_group("g", gen + 1, m2, None, "consumer", "range", [])
        )
        await settle()
        assert not f.done()  # followers wait for the leader's assignment
        lead = await done(
            env.coord.sync_group(
                "g", gen + 1, m1, None, "consumer", "range", [(m1, b"p0,p1"), (m2, b"p2,p3")]
            )
        )
        assert lead.assignment == b"p0,p1" and (await done(f)).assignment == b"p2,p3"
        assert env.coord.heartbeat("g", gen + 1, m2, None) == ErrorCode.none
        assert env.coord.heartbeat("g", gen, m2, None) == ErrorCode.illegal_generation
        assert env.coord.heartbeat("g", gen + 1, "stranger", None) == ErrorCode.unknown_member_id
        assert env.coord.heartbeat("nope", gen + 1, m2, None) == ErrorCode.unknown_member_id

    run(scenario, tmp_path)


def test_session_expiry_removes_member_and_rebalances(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        (m1, m2), gen = await form_group(env, "g", 2)
        env.timer.advance(SESSION - 400)
        assert env.coord.heartbeat("g", gen, m1, None) == ErrorCode.none
        env.timer.advance(500)  # m2 has been silent for longer than its session timeout
        group = env.coord.groups["g"]
        assert not group.has_member(m2) and group.state == GroupState.PREPARING_REBALANCE
        assert env.coord.heartbeat("g", gen, m1, None) == ErrorCode.rebalance_in_progress
        assert env.coord.heartbeat("g", gen, m2, None) == ErrorCode.unknown_member_id
        r = await done(env.join("g", m1))
        assert r.generation_id == gen + 1 and [m for m, _, _ in r.members] == [m1]

    run(scenario, tmp_path)


def test_members_that_do_not_rejoin_are_dropped_at_rebalance_timeout(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        (m1, m2), gen = await form_group(env, "g", 2)
        # m2 changes its subscription: a rebalance; m1 keeps heartbeating but never rejoins.
        t2 = env.join("g", m2, protocols=[("range", b"other-topics")])
        await settle()
        for _ in range(3):
            env.timer.advance(REBALANCE // 4)
            assert env.coord.heartbeat("g", gen, m1, None) == ErrorCode.rebalance_in_progress
        assert not t2.done()
        env.timer.advance(REBALANCE // 4)
        r2 = await done(t2)
        assert r2.generation_id == gen + 1 and r2.leader == m2
        assert [m for m, _, _ in r2.members] == [m2]
        assert env.coord.heartbeat("g", gen, m1, None) == ErrorCode.unknown_member_id

    run(scenario, tmp_path)


def test_members_that_never_sync_are_dropped(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        ids = [await env.new_member("g", f"c{i}") for i in range(2)]
        tasks = [env.join("g", m) for m in ids]
        await settle()
        env.timer.advance(0)
        results = [await done(t) for t in tasks]
        leader = results[0].leader
        follower = next(m for m in ids if m != leader)
        lead = asyncio.ensure_future(env.coord.sync_group("g", 1, leader, None, None, None, []))
        await settle()
        # The leader's sync completes (nothing was assigned to the silent follower)...
        assert (await done(lead)).error == ErrorCode.none
        # ...but the follower, alive (it heartbeats), never syncs: at the rebalance timeout it
        # is removed.
        assert env.coord.groups["g"].state == GroupState.STABLE
        for _ in range(3):
            env.timer.advance(REBALANCE // 4)
            for m in (leader, follower):
                assert env.coord.heartbeat("g", 1, m, None) == ErrorCode.none
        env.timer.advance(REBALANCE // 4)
        group = env.coord.groups["g"]
        assert not group.has_member(follower) and group.state == GroupState.PREPARING_REBALANCE

    run(scenario, tmp_path)


def test_initial_rebalance_delay_waits_for_more_members(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        t1 = env.join("g", version=3, rebalance=10_000)  # v3: no MEMBER_ID_REQUIRED round trip
        await settle()
        env.timer.advance(1000)
        t2 = env.join("g", version=3, rebalance=10_000)
        await settle()
        env.timer.advance(2000)  # the first delay ends at 3000; a member arrived: wait 3000 more
        await settle()
        assert not t1.done() and not t2.done()
        env.timer.advance(2999)
        await settle()
        assert not t1.done()
        env.timer.advance(1)
        r1, r2 = await done(t1), await done(t2)
        assert r1.generation_id == r2.generation_id == 1
        assert sorted(m for m, _, _ in r1.members + r2.members) == sorted(
            [r1.member_id, r2.member_id]
        )

    run(scenario, tmp_path, initial_rebalance_delay_ms=3000)


def test_join_validation_errors(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        assert (await env.join("g", session=50)).error == ErrorCode.invalid_session_timeout
        assert (await env.join("g", session=61_000)).error == ErrorCode.invalid_session_timeout
        assert (await env.join("")).error == ErrorCode.invalid_group_id
        assert (await env.join("missing", "someone")).error == ErrorCode.unknown_member_id
        (m1,), _ = await form_group(env, "g", 1)
        other = await env.join("g", protocols=[("roundrobin", b"x")])
        assert other.error == ErrorCode.inconsistent_group_protocol
        assert (await env.join("g", "not-a-member")).error == ErrorCode.unknown_member_id
        sync = await env.coord.sync_group("g", 1, m1, None, "consumer", "roundrobin", [])
        assert sync.error == ErrorCode.inconsistent_group_protocol

    run(scenario, tmp_path)


def test_group_max_size(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await form_group(env, "g", 2)
        third = await env.join("g", version=3)
        assert third.error == ErrorCode.group_max_size_reached

    run(scenario, tmp_path, max_group_size=2)


def test_protocol_vote_picks_common_preferred_protocol(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        a = env.join("g", version=3, protocols=[("cooperative-sticky", b"a1"), ("range", b"a2")])
        b = env.join("g", version=3, protocols=[("range", b"b2"), ("cooperative-sticky", b"b1")])
        c = env.join("g", version=3, protocols=[("cooperative-sticky", b"c1"), ("range", b"c2")])
        await settle()
        env.timer.advance(10)  # members kept arriving during the delay: it is extended once
        await settle()
        assert not a.done()
        env.timer.advance(10)
        results = [await done(t) for t in (a, b, c)]
        assert {r.protocol_name for r in results} == {"cooperative-sticky"}
        leader = next(r for r in results if r.members)
        assert sorted(md for _, _, md in leader.members) == [b"a1", b"b1", b"c1"]

    run(scenario, tmp_path, initial_rebalance_delay_ms=10)


def test_leave_group_batched_and_persisted_empty_generation(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        (m1, m2), gen = await form_group(env, "g", 2)
        code, results = env.coord.leave_group(
            "g", [(m1, None, "bye"), (m2, None, None), ("x", None, None)]
        )
        assert code == ErrorCode.none
        assert results == [
            (m1, None, ErrorCode.none),
            (m2, None, ErrorCode.none),
            ("x", None, ErrorCode.unknown_member_id),
        ]
        group = env.coord.groups["g"]
        assert group.state == GroupState.EMPTY and group.generation_id == gen + 1
        await until(
            lambda: any(
                isinstance(k, GroupMetadataKey) and v.generation == gen + 1 and not v.members
                for k, v in env.records("g")
            )
        )
        assert env.coord.leave_group("nope", [(m1, None, None)])[0] == ErrorCode.unknown_member_id

    run(scenario, tmp_path)


def test_leave_during_rebalance_completes_join_for_the_rest(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        (m1, m2), gen = await form_group(env, "g", 2)
        t1 = env.join("g", m1)  # the leader rejoins: a rebalance waiting for m2
        await settle()
        assert not t1.done()
        env.coord.leave_group("g", [(m2, None, None)])
        r1 = await done(t1)
        assert r1.generation_id == gen + 1 and [m for m, _, _ in r1.members] == [m1]

    run(scenario, tmp_path)


def test_static_member_rejoins_without_rebalance_and_fences_old_id(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        t = env.join("g", instance="inst-1")
        await settle()
        env.timer.advance(0)
        r = await done(t)
        old = r.member_id
        assert r.error == ErrorCode.none and old.startswith("inst-1-")
        s = await done(
            env.coord.sync_group("g", 1, old, "inst-1", "consumer", "range", [(old, b"A")])
        )
        assert s.assignment == b"A"
        # The process restarts and joins again with its instance id but no member id.
        again = await done(env.join("g", instance="inst-1"))
        new = again.member_id
        assert again.error == ErrorCode.none and new != old
        assert again.generation_id == 1 and again.skip_assignment  # leader, nothing to reassign
        group = env.coord.groups["g"]
        assert group.state == GroupState.STABLE and group.generation_id == 1
        assert env.coord.heartbeat("g", 1, old, "inst-1") == ErrorCode.fenced_instance_id
        assert env.coord.heartbeat("g", 1, new, "inst-1") == ErrorCode.none
        s = await done(env.coord.sync_group("g", 1, new, "inst-1", "consumer", "range", []))
        assert s.assignment == b"A"  # it keeps its assignment
        # An administrator removes it by instance id alone.
        code, results = env.coord.leave_group("g", [("", "inst-1", None)])
        assert results == [("", "inst-1", ErrorCode.none)]
        assert group.state == GroupState.EMPTY

    run(scenario, tmp_path)


def test_offset_commit_rules_and_fetch(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        c = env.coord
        # A simple commit (generation -1) creates a group with no members.
        code, errs = await c.commit_offsets(
            "simple", -1, "", None, [CommitOffset("t", 0, 10, 3, "m")]
        )
        assert code == ErrorCode.none and errs == {("t", 0): ErrorCode.none}
        assert c.groups["simple"].state == GroupState.EMPTY
        code, fetched = c.fetch_offsets("simple", [("t", [0, 1])])
        assert [(f.partition, f.offset, f.leader_epoch, f.metadata) for f in fetched] == [
            (0, 10, 3, "m"),
            (1, -1, -1, ""),
        ]
        # Generation checks for a managed group.
        (m1, m2), gen = await form_group(env, "g", 2)
        assert (await c.commit_offsets("g", gen + 1, m1, None, [CommitOffset("t", 0, 1)]))[0] == (
            ErrorCode.illegal_generation
        )
        assert (await c.commit_offsets("g", gen, "zz", None, [CommitOffset("t", 0, 1)]))[0] == (
            ErrorCode.unknown_member_id
        )
        assert (await c.commit_offsets("g", -1, "", None, [CommitOffset("t", 0, 1)]))[0] == (
            ErrorCode.unknown_member_id
        )
        assert (await c.commit_offsets("nope", 3, "m", None, [CommitOffset("t", 0, 1)]))[0] == (
            ErrorCode.group_id_not_found
        )
        assert (
            await c.commit_offsets("nope", 3, "m", None, [CommitOffset("t", 0, 1)], api_version=8)
        )[0] == (ErrorCode.illegal_generation)
        big = CommitOffset("t", 1, 5, -1, "x" * 5000)
        code, errs = await c.commit_offsets("g", gen, m2, None, [CommitOffset("t", 0, 7), big])
        assert errs == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.offset_metadata_too_large}
        code, fetched = c.fetch_offsets("g", None)
        assert [(f.topic, f.partition, f.offset) for f in fetched] == [("t", 0, 7)]
        # A commit restarts the member's session.
        env.timer.advance(SESSION - 100)
        assert env.coord.heartbeat("g", gen, m1, None) == ErrorCode.none
        await c.commit_offsets("g", gen, m2, None, [CommitOffset("t", 0, 8)])
        env.timer.advance(SESSION - 100)
        assert c.groups["g"].has_member(m2)

    run(scenario, tmp_path)


def test_offsets_and_groups_survive_restart(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        (m1, m2), gen = await form_group(env, "g", 2)
        await env.coord.commit_offsets(
            "g", gen, m1, None, [CommitOffset("t", p, 100 + p) for p in range(4)]
        )
        await env.coord.commit_offsets("g", gen, m1, None, [CommitOffset("t", 0, 500, 2, "later")])
        await env.coord.commit_offsets("solo", -1, "", None, [CommitOffset("u", 0, 9)])
        await env.restart()
        c = env.coord
        _, fetched = c.fetch_offsets("g", None)
        assert [(f.partition, f.offset) for f in fetched] == [
            (0, 500),
            (1, 101),
            (2, 102),
            (3, 103),
        ]
        assert fetched[0].metadata == "later" and fetched[0].leader_epoch == 2
        assert c.fetch_offsets("solo", [("u", [0])])[1][0].offset == 9
        group = c.groups["g"]
        assert group.state == GroupState.STABLE and group.generation_id == gen
        assert group.leader_id == m1 and set(group.members) == {m1, m2}
        # The members carry on as if nothing happened...
        assert c.heartbeat("g", gen, m1, None) == ErrorCode.none
        s = await done(c.sync_group("g", gen, m2, None, "consumer", "range", []))
        assert s.assignment == f"assign-{m2}".encode()
        # ...and one that does not come back is expired.
        env.timer.advance(SESSION - 1)
        assert c.heartbeat("g", gen, m1, None) == ErrorCode.none
        env.timer.advance(SESSION)
        assert not group.has_member(m2)
        _, listed = c.list_groups()
        assert {(g.group_id, g.protocol_type) for g in listed} == {("g", "consumer"), ("solo", "")}

    run(scenario, tmp_path)


def test_delete_groups(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        c = env.coord
        await form_group(env, "busy", 1)
        await c.commit_offsets(
            "idle", -1, "", None, [CommitOffset("t", 0, 1), CommitOffset("t", 1, 2)]
        )
        results = await c.delete_groups(["busy", "idle", "ghost"])
        assert results == {
            "busy": ErrorCode.non_empty_group,
            "idle": ErrorCode.none,
            "ghost": ErrorCode.group_id_not_found,
        }
        assert "idle" not in c.groups
        assert [f.offset for f in c.fetch_offsets("idle", [("t", [0, 1])])[1]] == [-1, -1]
        tail = env.records("idle")[-3:]
        assert [v for _, v in tail] == [
            None,
            None,
            None,
        ]  # two offset tombstones, one group tombstone
        await env.restart()
        assert "idle" not in env.coord.groups and "busy" in env.coord.groups
        assert env.coord.describe_group("idle").state == "Dead"
        assert (
            env.coord.describe_group("idle", not_found_error=True).error
            == ErrorCode.group_id_not_found
        )

    run(scenario, tmp_path)


def test_list_and_describe(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        c = env.coord
        (m1, m2), gen = await form_group(env, "g", 2)
        await c.commit_offsets("s", -1, "", None, [CommitOffset("t", 0, 1)])
        _, groups = c.list_groups(["stable"])
        assert [g.group_id for g in groups] == ["g"]
        _, groups = c.list_groups(["Empty", "PreparingRebalance"])
        assert [g.group_id for g in groups] == ["s"]
        _, groups = c.list_groups([], ["consumer"])
        assert groups == []
        d = c.describe_group("g")
        assert (d.state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
        assert {(m.member_id, m.client_id, m.metadata, m.assignment) for m in d.members} == {
            (m, f"c{i}", b"sub-range", f"assign-{m}".encode())
            for i, m in enumerate(sorted([m1, m2], key=lambda x: x.split("-")[0]))
        }
        env.join("g", m2, protocols=[("range", b"changed")])
        await settle()
        d = c.describe_group("g")
        assert d.state == "PreparingRebalance" and d.protocol_data == ""
        assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)

    run(scenario, tmp_path)


def test_offset_delete(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        c = env.coord
        await c.commit_offsets(
            "s", -1, "", None, [CommitOffset("t", 0, 1), CommitOffset("u", 0, 2)]
        )
        code, errs = await c.delete_offsets("s", [("t", [0, 5])])
        assert code == ErrorCode.none and errs == {
            ("t", 0): ErrorCode.none,
            ("t", 5): ErrorCode.none,
        }
        assert [(f.topic, f.offset) for f in c.fetch_offsets("s", None)[1]] == [("u", 2)]
        assert (await c.delete_offsets("ghost", [("t", [0])]))[0] == ErrorCode.group_id_not_found
        await env.restart()
        assert [(f.topic, f.offset) for f in env.coord.fetch_offsets("s", None)[1]] == [("u", 2)]

    run(scenario, tmp_path)


def test_offsets_expire_after_retention(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        c = env.coord
        await c.commit_offsets("s", -1, "", None, [CommitOffset("t", 0, 1)])
        env.timer.advance(30_000)
        await c.commit_offsets("s", -1, "", None, [CommitOffset("t", 1, 1)])
        env.timer.advance(30_000)  # t-0 is 60 s old: gone; t-1 is 30 s old: kept
        assert await c.expire_offsets() == 1
        assert [f.partition for f in c.fetch_offsets("s", None)[1]] == [1]
        env.timer.advance(30_000)
        assert await c.expire_offsets() == 1
        assert "s" not in c.groups  # an empty group without offsets goes away
        await env.restart()
        assert "s" not in env.coord.groups

    run(scenario, tmp_path, offsets_retention_ms=60_000)


class GatedStore(LogManagerOffsetsStore):
    """A real store whose loading waits for the test to open the gate."""

    gate: asyncio.Event

    async def read(
        self, partition: int, open_txns: OpenTxns | None = None
    ) -> list[tuple[bytes, bytes | None]]:
        await self.gate.wait()
        return await super().read(partition, open_txns)


def test_requests_during_load_get_load_in_progress(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        await env.coord.commit_offsets("g", -1, "", None, [CommitOffset("t", 0, 42)])
        await env.coord.stop()
        env.log_manager.shutdown()
        env.log_manager = LogManager([env.root / "logs"])
        env.log_manager.startup(start_background=False)
        store = GatedStore(env.log_manager, PARTITIONS)
        store.gate = asyncio.Event()
        env.coord = GroupCoordinator(None, settings=env.settings, store=store, timer=env.timer)
        await env.coord.start()
        c = env.coord
        assert c.fetch_offsets("g", None)[0] == ErrorCode.coordinator_load_in_progress
        assert (await env.join("g")).error == ErrorCode.coordinator_load_in_progress
        assert c.list_groups()[0] == ErrorCode.coordinator_load_in_progress
        assert c.describe_group("g").error == ErrorCode.coordinator_load_in_progress
        store.gate.set()
        await c.wait_loaded()
        assert c.fetch_offsets("g", [("t", [0])])[1][0].offset == 42

    run(scenario, tmp_path)


def test_stop_answers_parked_requests(tmp_path: Path) -> None:
    async def scenario(env: Env) -> None:
        m = await env.new_member("g")
        t = env.join("g", m)
        await settle()
        await env.coord.stop()
        assert (await done(t)).error == ErrorCode.not_coordinator
        env.coord._active = True  # let close() stop it again harmlessly

    run(scenario, tmp_path)


# -- a property: random membership churn keeps the group's bookkeeping consistent -------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.integers(0, 4)),
        st.tuples(st.just("rejoin"), st.integers(0, 4)),
        st.tuples(st.just("leave"), st.integers(0, 4)),
        st.tuples(st.just("heartbeat"), st.integers(0, 4)),
        st.tuples(st.just("sync"), st.integers(0, 4)),
        st.tuples(st.just("advance"), st.sampled_from([0, 1, 100, 600, 1500, 2500])),
    ),
    max_size=25,
)


def _check_invariants(env: Env) -> None:
    group = env.coord.groups.get("g")
    if group is None:
        return
    members = group.members
    assert group.num_awaiting_join == sum(1 for m in members.values() if m.join_future is not None)
    assert (group.leader_id is None) == (not members)
    assert group.leader_id is None or group.leader_id in members
    assert set(group.static_members.values()) <= set(members)
    if group.state == GroupState.EMPTY:
        assert not members
    if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        assert members and group.generation_id >= 1 and group.protocol_name == "range"
    if group.state != GroupState.PREPARING_REBALANCE:
        assert group.num_awaiting_join == 0
    assert group.pending_sync_members <= set(members)
    for member_id, member in members.items():
        # As in Kafka, a session that expires while its member is parked in JoinGroup or
        # SyncGroup is ignored (the member is alive) and restarts when the parking ends; so a
        # parked member may be without a timer while, say, the leader's assignment is written.
        parked = member.is_awaiting_join or member.is_awaiting_sync
        assert parked or f"heartbeat-g-{member_id}" in env.timer.pending()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops)
def test_membership_churn_keeps_invariants(ops: list[tuple[str, int]]) -> None:
    async def scenario(env: Env) -> None:
        known: list[str] = []
        parked: list[asyncio.Future[Any]] = []
        for op, arg in ops:
            group = env.coord.groups.get("g")
            if op == "join":
                r = await env.join("g", version=4)
                known.append(r.member_id)
                parked.append(env.join("g", r.member_id))
            elif op == "rejoin" and known:
                parked.append(env.join("g", known[arg % len(known)]))
            elif op == "leave" and known:
                env.coord.leave_group("g", [(known[arg % len(known)], None, None)])
            elif op == "heartbeat" and known and group is not None:
                env.coord.heartbeat("g", group.generation_id, known[arg % len(known)], None)
            elif op == "sync" and known and group is not None:
                member_id = known[arg % len(known)]
                assignment = [(m, b"x") for m in group.members]
                parked.append(
                    asyncio.ensure_future(
                        env.coord.sync_group(
                            "g", group.generation_id, member_id, None, None, None, assignment
                        )
                    )
                )
            elif op == "advance":
                env.timer.advance(arg)
            await settle()
            await asyncio.sleep(0.001)  # let stored assignments land
            _check_invariants(env)
        await env.coord.stop()
        for f in parked:
            assert (await done(f)).error in set(ErrorCode)

    with tempfile.TemporaryDirectory() as d:
        run(scenario, Path(d))


@pytest.mark.parametrize("n", [1, 3])
def test_many_generations_then_restart(tmp_path: Path, n: int) -> None:
    async def scenario(env: Env) -> None:
        ids, gen = await form_group(env, "g", n)
        for _ in range(3):
            tasks = [env.join("g", m) for m in ids]
            results = [await done(t) for t in tasks]
            gen = results[0].generation_id
            leader = results[0].leader
            follower_syncs = [
                asyncio.ensure_future(env.coord.sync_group("g", gen, m, None, None, None, []))
                for m in ids
                if m != leader
            ]
            await settle()
            await done(
                env.coord.sync_group(
                    "g", gen, leader, None, None, None, [(m, m.encode()) for m in ids]
                )
            )
            for f in follower_syncs:
                await done(f)
        await env.restart()
        group = env.coord.groups["g"]
        assert group.generation_id == gen and group.state == GroupState.STABLE
        assert {m.member_id: m.assignment for m in group.members.values()} == {
            m: m.encode() for m in ids
        }

    run(scenario, tmp_path)


def test_static_leader_rejoining_with_an_old_join_version_is_told_the_old_leader(
    tmp_path: Path,
) -> None:
    async def scenario(env: Env) -> None:
        t = env.join("g", instance="inst-1", version=5)
        await settle()
        env.timer.advance(0)
        old = (await done(t)).member_id
        await done(env.coord.sync_group("g", 1, old, "inst-1", None, None, [(old, b"A")]))
        again = await done(env.join("g", instance="inst-1", version=5))
        assert again.member_id != old and again.leader == old and not again.skip_assignment
        assert again.members == []  # it acts as a follower: sync, no reassignment
        s = await done(env.coord.sync_group("g", 1, again.member_id, "inst-1", None, None, []))
        assert s.assignment == b"A"
        assert env.coord.groups["g"].generation_id == 1

    run(scenario, tmp_path)


# -- the membership machine on its own: no coordinator, no log, time moved by hand -----------------


def test_membership_machine_runs_a_rebalance_and_expires_a_session_by_itself() -> None:
    """``GroupMembership`` needs only its context: the written records are kept in a list."""

    async def main() -> None:
        written: list[tuple[str, list[CoordinatorRecord]]] = []
        tasks: set[asyncio.Task[Any]] = set()

        async def write(group_id: str, records: Sequence[CoordinatorRecord]) -> ErrorCode:
            written.append((group_id, list(records)))
            return ErrorCode.none

        async def ready() -> ErrorCode:
            return ErrorCode.none

        def spawn(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
            task = asyncio.ensure_future(coro)
            tasks.add(task)
            return task

        timer = ManualTimer()
        groups: dict[str, Any] = {}
        machine = GroupMembership(
            GroupContext(
                groups=groups,
                timer=timer,
                settings=CoordinatorSettings(
                    initial_rebalance_delay_ms=0, min_session_timeout_ms=100
                ),
                check_group=lambda group_id: ErrorCode.none,
                ensure_offsets_topic=ready,
                write=write,
                spawn=spawn,
                is_active=lambda: True,
            )
        )

        def join(member: str, client: str) -> asyncio.Task[JoinResult]:
            return asyncio.ensure_future(
                machine.join_group(
                    "g", member, None, "consumer", RANGE, SESSION, REBALANCE, client_id=client
                )
            )

        ids = [(await join("", c)).member_id for c in ("a", "b")]
        joins = [join(m, c) for m, c in zip(ids, ("a", "b"), strict=True)]
        await settle()
        timer.advance(0)  # the initial rebalance delay
        results = [await done(t) for t in joins]
        assert {r.generation_id for r in results} == {1}
        leader = results[0].leader
        syncs = [
            asyncio.ensure_future(
                machine.sync_group(
                    "g",
                    1,
                    m,
                    None,
                    None,
                    None,
                    [(x, x.encode()) for x in ids] if m == leader else [],
                )
            )
            for m in ids
        ]
        assert [(await done(s)).assignment for s in syncs] == [m.encode() for m in ids]
        assert groups["g"].state == GroupState.STABLE
        assert [decode_key(k) for _, records in written for k, _ in records] == [
            GroupMetadataKey("g")
        ]

        # Only the leader keeps heartbeating: the other's session runs out and it is removed.
        for _ in range(3):
            timer.advance(SESSION // 2)
            assert machine.heartbeat("g", groups["g"].generation_id, leader, None) in (
                ErrorCode.none,
                ErrorCode.rebalance_in_progress,
            )
        assert list(groups["g"].members) == [leader]
        assert groups["g"].state == GroupState.PREPARING_REBALANCE
        await asyncio.gather(*tasks)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_replay_hands_the_loop_back_between_batches() -> None:
    """Loading a large partition is CPU work on the loop: other tasks run while it goes on."""
    n = 3 * REPLAY_BATCH + 1
    records = [
        offset_commit_record("g", "t", p, OffsetCommitValue(p, -1, "", 0, -1)) for p in range(n)
    ]

    async def main() -> None:
        ticks = 0
        finished = False

        async def ticker() -> None:
            nonlocal ticks
            while not finished:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = ticks
        groups: dict[str, Any] = {}
        loaded = await replay(groups, records, 0, 0)
        during = ticks - before
        finished = True
        await task
        assert loaded == {"g"} and len(groups["g"].offsets) == n
        assert during >= n // REPLAY_BATCH

    asyncio.run(asyncio.wait_for(main(), 30))
