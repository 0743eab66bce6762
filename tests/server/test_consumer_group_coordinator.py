"""Consumer-protocol groups in the coordinator, in-process (ManualTimer, a real
``__consumer_offsets`` log in tmp_path): offsets shared with classic groups under the member
epoch rules, the group's kind as ListGroups/DescribeGroups/JoinGroup/DeleteGroups see it, and
session expiry on the coordinator's timer."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.group.classic_protocol import assignment_bytes, parse_assignment
from logkeel.server.group.consumer_group import (
    ConsumerGroupSettings,
    GroupHeartbeat,
    HeartbeatResult,
)
from logkeel.server.group.coordinator import GroupCoordinator
from logkeel.server.group.results import CommitOffset
from tests.server.test_consumer_group_migration import subscription
from tests.server.test_groups_coordinator import Env, done, form_group, settle

TOPICS = {"t": 2}
TOPIC_IDS = {"t": uuid.UUID(int=7)}


class ConsumerEnv(Env):
    def _open(self) -> None:
        super()._open()
        self.coord = GroupCoordinator(
            None,
            settings=self.settings,
            store=self.store,
            timer=self.timer,
            topics=lambda: TOPICS,
            topic_ids=lambda: TOPIC_IDS,
        )

    async def beat(
        self, member: str, epoch: int, owned: dict[str, frozenset[int]] | None = None
    ) -> HeartbeatResult:
        req = GroupHeartbeat(
            member,
            epoch,
            rebalance_timeout_ms=5000 if epoch == 0 else -1,
            subscribed_topic_names=("t",) if epoch == 0 else None,
            owned={} if epoch == 0 else owned,
        )
        return await self.coord.consumer.heartbeat("g", req, "client", "/127.0.0.1")


def run_consumer(
    scenario: Callable[[ConsumerEnv], Coroutine[Any, Any, None]], root: Path, **overrides: Any
) -> None:
    async def main() -> None:
        env = ConsumerEnv(
            root, initial_rebalance_delay_ms=0, min_session_timeout_ms=100, **overrides
        )
        await env.coord.start()
        try:
            await scenario(env)
        finally:
            await env.close()

    asyncio.run(asyncio.wait_for(main(), 30))


async def _ensure_topic(env: ConsumerEnv) -> None:
    assert await env.coord.ensure_offsets_topic() == ErrorCode.none
    await env.coord.wait_loaded()


def test_offset_commit_uses_the_member_epoch(tmp_path: Path) -> None:
    async def scenario(env: ConsumerEnv) -> None:
        await _ensure_topic(env)
        r = await env.beat("m1", 0)
        assert r.error == ErrorCode.none and r.member_epoch == 1
        commit = [CommitOffset("t", 0, 42)]
        code, errors = await env.coord.commit_offsets("g", 1, "m1", None, commit, api_version=9)
        assert code == ErrorCode.none and errors == {("t", 0): ErrorCode.none}
        for epoch, member, version, expected in [
            (0, "m1", 9, ErrorCode.stale_member_epoch),
            (2, "m1", 9, ErrorCode.fenced_member_epoch),
            (1, "other", 9, ErrorCode.unknown_member_id),
            (1, "m1", 8, ErrorCode.unsupported_version),
            (-1, "", 9, ErrorCode.unknown_member_id),  # a manual commit while members consume
        ]:
            code, _ = await env.coord.commit_offsets(
                "g", epoch, member, None, commit, api_version=version
            )
            assert code == expected, (epoch, member, version)
        code, fetched = env.coord.fetch_offsets("g", None)
        assert code == ErrorCode.none and [(f.topic, f.partition, f.offset) for f in fetched] == [
            ("t", 0, 42)
        ]
        # Retention and DeleteGroups leave a group in use alone; OffsetDelete its topics.
        assert await env.coord.delete_groups(["g"]) == {"g": ErrorCode.non_empty_group}
        code, errors = await env.coord.delete_offsets("g", [("t", [0])])
        assert code == ErrorCode.none and errors == {("t", 0): ErrorCode.group_subscribed_to_topic}
        # Once everyone left, a manual commit is accepted and the group can be deleted.
        assert (await env.beat("m1", -1)).error == ErrorCode.none
        code, _ = await env.coord.commit_offsets("g", -1, "", None, [CommitOffset("t", 1, 7)])
        assert code == ErrorCode.none
        assert await env.coord.delete_groups(["g"]) == {"g": ErrorCode.none}
        assert env.coord.fetch_offsets("g", None)[1] == []
        assert "g" not in env.coord.consumer.groups

    run_consumer(scenario, tmp_path)


def test_the_group_is_one_kind_at_a_time(tmp_path: Path) -> None:
    async def scenario(env: ConsumerEnv) -> None:
        await _ensure_topic(env)
        assert (await env.beat("m1", 0)).error == ErrorCode.none
        code, listed = env.coord.list_groups()
        assert code == ErrorCode.none
        assert [(g.group_id, g.group_type, g.protocol_type, g.state) for g in listed] == [
            ("g", "consumer", "consumer", "Stable")
        ]
        assert env.coord.list_groups(types_filter=["classic"])[1] == []
        described = env.coord.describe_group("g", not_found_error=True)
        assert described.error == ErrorCode.group_id_not_found
        # With group.consumer.migration.policy=disabled, a new classic member is refused
        # (KAFKA-20640) and a classic group with members refuses consumer-protocol members.
        joined = await env.join("g", "")
        assert joined.error == ErrorCode.inconsistent_group_protocol
        await form_group(env, "classic", 1)
        r = await env.coord.consumer.heartbeat(
            "classic",
            GroupHeartbeat("x", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned={}),
            "c",
            "/h",
        )
        assert r.error == ErrorCode.group_id_not_found
        assert r.error_message is not None and "online upgrade is disabled" in r.error_message
        assert env.coord.consumer.describe("nope").error == ErrorCode.group_id_not_found

    run_consumer(scenario, tmp_path, consumer=ConsumerGroupSettings(migration_policy="disabled"))


def test_session_expiry_on_the_coordinator_timer(tmp_path: Path) -> None:
    async def scenario(env: ConsumerEnv) -> None:
        await _ensure_topic(env)
        r1 = await env.beat("m1", 0)
        env.timer.advance(20_000)
        r2 = await env.beat("m2", 0)
        assert r2.member_epoch == 2
        await env.beat("m2", 2, {})
        env.timer.advance(25_000)  # m1 silent for 45 s: expired
        assert set(env.coord.consumer.groups["g"].members) == {"m2"}
        r = await env.beat("m2", 2, {})
        assert r.assignment == {"t": frozenset({0, 1})} and r.member_epoch == 3
        assert r1.member_epoch == 1

    run_consumer(scenario, tmp_path)


def test_the_group_survives_a_restart(tmp_path: Path) -> None:
    async def scenario(env: ConsumerEnv) -> None:
        await _ensure_topic(env)
        r1 = await env.beat("m1", 0)
        await env.beat("m2", 0)
        kept = (await env.beat("m1", 1, r1.assignment)).assignment  # told to revoke one
        assert kept is not None and len(kept["t"]) == 1
        code, _ = await env.coord.commit_offsets("g", 1, "m1", None, [CommitOffset("t", 1, 9)])
        assert code == ErrorCode.none
        before = env.coord.consumer.groups["g"]
        members = {
            m.member_id: (m.member_epoch, m.state, m.assigned, m.pending_revocation)
            for m in before.members.values()
        }
        await env.restart()
        after = env.coord.consumer.groups["g"]
        assert (after.group_epoch, after.assignment_epoch) == (2, 2)
        assert after.target == before.target
        assert {
            m.member_id: (m.member_epoch, m.state, m.assigned, m.pending_revocation)
            for m in after.members.values()
        } == members
        # m1 carries on where it was: it revokes, reaches epoch 2; m2 then gets its partition.
        assert (await env.beat("m1", 1, kept)).member_epoch == 2
        r = await env.beat("m2", 2, {})
        assert r.assignment is not None and len(r.assignment["t"]) == 1
        code, fetched = env.coord.fetch_offsets("g", None)
        assert [(f.partition, f.offset) for f in fetched] == [(1, 9)]
        # Members leaving and DeleteGroups write tombstones: nothing comes back.
        await env.beat("m1", -1)
        await env.beat("m2", -1)
        assert await env.coord.delete_groups(["g"]) == {"g": ErrorCode.none}
        await env.restart()
        assert "g" not in env.coord.consumer.groups

    run_consumer(scenario, tmp_path)


def test_online_upgrade_and_downgrade(tmp_path: Path) -> None:
    """A classic group with two members is upgraded by a consumer-protocol member; its classic
    members heartbeat, commit (any OffsetCommit version, generation = member epoch), rejoin
    and sync through the consumer group, across a coordinator restart; when the
    consumer-protocol member leaves the group is classic again and rebalances."""

    async def scenario(env: ConsumerEnv) -> None:
        await _ensure_topic(env)
        sub = [("range", subscription(["t"]))]
        ids = [await env.new_member("g", f"c{i}") for i in range(2)]
        joins = [env.join("g", m, protocols=sub, client=f"c{i}") for i, m in enumerate(ids)]
        await settle()
        env.timer.advance(0)
        results = [await done(t) for t in joins]
        generation = results[0].generation_id
        leader = results[0].leader
        follower = next(m for m in ids if m != leader)
        plan = {leader: frozenset({0}), follower: frozenset({1})}
        follower_sync = asyncio.ensure_future(
            env.coord.sync_group("g", generation, follower, None, "consumer", "range", [])
        )
        await settle()
        lead = await done(
            env.coord.sync_group(
                "g",
                generation,
                leader,
                None,
                "consumer",
                "range",
                [(m, assignment_bytes({"t": ps})) for m, ps in plan.items()],
            )
        )
        assert lead.error == ErrorCode.none and (await done(follower_sync)).error == ErrorCode.none

        upgraded = await env.beat("n1", 0)
        assert upgraded.error == ErrorCode.none and upgraded.assignment == {}
        assert upgraded.member_epoch == generation + 1
        listed = env.coord.list_groups()[1]
        assert [(g.group_id, g.group_type, g.state) for g in listed] == [
            ("g", "consumer", "Reconciling")
        ]
        assert env.coord.heartbeat("g", generation, leader, None) == (
            ErrorCode.rebalance_in_progress
        )
        code, _ = await env.coord.commit_offsets(
            "g", generation, leader, None, [CommitOffset("t", 0, 11)], api_version=2
        )
        assert code == ErrorCode.none
        # The leader rejoins (eager: owning nothing) and syncs its share of the new target.
        rejoined = await done(env.join("g", leader, protocols=sub))
        assert rejoined.error == ErrorCode.none and rejoined.leader == ""
        assert (rejoined.generation_id, rejoined.protocol_name) == (generation + 1, "range")
        synced = await env.coord.sync_group(
            "g", rejoined.generation_id, leader, None, "consumer", "range", []
        )
        assert synced.error == ErrorCode.none
        mine = parse_assignment(synced.assignment)
        assert mine is not None and mine[0] == {"t": frozenset({0})}

        await env.restart()
        group = env.coord.consumer.groups["g"]
        assert {m for m, x in group.members.items() if x.classic is not None} == set(ids)
        assert env.coord.heartbeat("g", generation + 1, leader, None) == ErrorCode.none

        # The consumer-protocol member leaves: downgraded, the classic members rejoin.
        assert (await env.beat("n1", -1)).error == ErrorCode.none
        listed = env.coord.list_groups()[1]
        assert [(g.group_id, g.group_type, g.state) for g in listed] == [
            ("g", "classic", "PreparingRebalance")
        ]
        assert env.coord.consumer.describe("g").error == ErrorCode.group_id_not_found
        # A stray heartbeat of the member that left does not convert the group again.
        assert (await env.beat("n1", -1)).error == ErrorCode.group_id_not_found
        assert [g.group_type for g in env.coord.list_groups()[1]] == ["classic"]
        classic = env.coord.groups["g"]
        epoch = classic.generation_id
        assert env.coord.heartbeat("g", epoch, leader, None) == ErrorCode.rebalance_in_progress
        again = [env.join("g", m, protocols=sub) for m in ids]
        await settle()
        back = [await done(t) for t in again]
        assert all(r.error == ErrorCode.none for r in back)
        assert {r.generation_id for r in back} == {epoch + 1}
        await env.restart()
        assert "g" not in env.coord.consumer.groups
        assert env.coord.fetch_offsets("g", None)[1][0].offset == 11

    run_consumer(scenario, tmp_path)
