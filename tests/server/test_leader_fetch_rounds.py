"""A leader's answers to a follower's incremental Fetches (KIP-227) when each costs what changed
(`session_reads` with the fetch purgatory as its change feed): in-process, a real broker's
Fetch handler, logs and partitions, no sockets. Every changed partition is in the response and
no unchanged one, whatever changed it: records, the high watermark, the log start, the leader
epoch; a parked long poll is woken by a partition it does not watch itself."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from logkeel.records.builder import build_batch
from logkeel.server.broker import Broker
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.follower_fetches import FollowerSession, leader_with_followers

TOPIC = "rounds"
N = 40


def run(
    tmp_path: Path, fn: Callable[[Broker, FollowerSession, FollowerSession], Awaitable[None]]
) -> None:
    async def main() -> None:
        async with leader_with_followers(tmp_path, TOPIC, N) as (broker, f2, f3):
            await fn(broker, f2, f3)

    asyncio.run(main())


async def fetch(f: FollowerSession, max_wait_ms: int = 0, *, close: bool = False) -> dict[int, Any]:  # fmt: skip
    return (await f.fetch(max_wait_ms, close=close))[1]


async def append(broker: Broker, index: int) -> None:
    now = int(time.time() * 1000)
    result = await broker.replica_manager.appends.append_records(
        TopicPartition(TOPIC, index), build_batch([(now, None, b"v", ())]), acks=1
    )
    assert result.error == ErrorCode.none


def test_each_round_answers_exactly_what_changed(tmp_path: Path) -> None:
    async def rounds(broker: Broker, f2: FollowerSession, f3: FollowerSession) -> None:
        await append(broker, 7)
        parts = await fetch(f2)
        assert list(parts) == [7] and parts[7].records, "the record, and nothing else"
        assert parts[7].high_watermark == 0
        assert list(await fetch(f3)) == [7]
        assert await fetch(f2) == {}, "f2 at the new end, f3 not yet: no high watermark move"
        parts = await fetch(f3)
        assert list(parts) == [7] and parts[7].high_watermark == 1, "f3's fetch moved it"
        parts = await fetch(f2)
        assert list(parts) == [7] and parts[7].high_watermark == 1, "told to f2"
        assert await fetch(f2) == {} and await fetch(f3) == {}
        # The log start moved (DeleteRecords), and a leader epoch: both told, only them.
        code, _ = await broker.replica_manager.offsets.delete_records(TopicPartition(TOPIC, 7), 1)
        assert code == ErrorCode.none
        parts = await fetch(f2)
        assert list(parts) == [7] and parts[7].log_start_offset == 1
        state = broker.metadata.topics()[TOPIC].partitions[12]
        broker.metadata.update_partition(replace(state, leader_epoch=1, partition_epoch=1))
        parts = await fetch(f2)
        assert list(parts) == [12], sorted(parts)
        assert parts[12].error_code == ErrorCode.fenced_leader_epoch, "fetched in epoch 0"
        f2.epochs[12] = 1
        f2.moved[12] = f2.offsets[12]
        parts = await fetch(f2)
        assert list(parts) == [12] and parts[12].error_code == ErrorCode.none, "the error cleared"
        assert await fetch(f2) == {}

    run(tmp_path, rounds)


def test_a_parked_long_poll_is_woken_by_a_partition_left_unread(tmp_path: Path) -> None:
    async def wake(broker: Broker, f2: FollowerSession, f3: FollowerSession) -> None:
        purgatory = broker.replica_manager.fetch_purgatory
        assert purgatory.listeners() == N, "every partition unread, told by the purgatory"
        task = asyncio.ensure_future(fetch(f2, max_wait_ms=30_000))
        while purgatory.pending == 0:
            await asyncio.sleep(0)
        assert purgatory.watched_keys() == 0, "the long poll watches no partition itself"
        started = time.monotonic()
        await append(broker, 25)
        parts = await asyncio.wait_for(task, 10)
        assert time.monotonic() - started < 5, "woken by the append, not at its deadline"
        assert list(parts) == [25] and parts[25].records

    run(tmp_path, wake)


def test_a_closed_session_is_no_longer_told_of_changes(tmp_path: Path) -> None:
    async def close(broker: Broker, f2: FollowerSession, f3: FollowerSession) -> None:
        purgatory = broker.replica_manager.fetch_purgatory
        assert purgatory.listeners() == N
        await fetch(f2, close=True)  # epoch -1: the session ends
        await fetch(f3, close=True)
        assert purgatory.listeners() == 0

    run(tmp_path, close)


def test_a_follower_refused_cluster_action_is_refused_every_partition(tmp_path: Path) -> None:
    """CLUSTER_ACTION is checked on every request of a follower's session: refused, every
    partition answers TOPIC_AUTHORIZATION_FAILED, the unread ones too; allowed again, every
    partition is answered again (its error cleared), then the session is idle again."""
    deny = AclBinding(
        ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:ANONYMOUS", "*",
        AclOperation.CLUSTER_ACTION, AclPermissionType.DENY,
    )  # fmt: skip

    async def refused(broker: Broker, f2: FollowerSession, f3: FollowerSession) -> None:
        broker.metadata.alter_acls([deny], [])
        parts = await fetch(f2)
        assert len(parts) == N
        assert {p.error_code for p in parts.values()} == {ErrorCode.topic_authorization_failed}
        broker.metadata.alter_acls([], [deny])
        parts = await fetch(f2)
        assert len(parts) == N and {p.error_code for p in parts.values()} == {ErrorCode.none}
        assert await fetch(f2) == {}

    async def main() -> None:
        async with leader_with_followers(
            tmp_path, TOPIC, N,
            **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
               "allow.everyone.if.no.acl.found": "true"},
        ) as (broker, f2, f3):  # fmt: skip
            await refused(broker, f2, f3)

    asyncio.run(main())
