"""The fetch session cache (KIP-227), without sockets: lifecycle, errors, incremental
responses and Kafka's eviction rules."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from logkeel.server.fetch_sessions import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    ContextKind,
    FetchContext,
    FetchParams,
    FetchSessionCache,
    PartitionKey,
    PartitionOutcome,
    next_epoch,
)

CONSUMER = ("User:alice", False)


def parts(n: int, topic: str = "t", offset: int = 0) -> list[tuple[PartitionKey, FetchParams]]:
    return [((topic, i), FetchParams(offset, 1024)) for i in range(n)]


def idle(n: int, hw: int = 10) -> list[PartitionOutcome]:
    return [PartitionOutcome(high_watermark=hw, last_stable_offset=hw, log_start_offset=0)] * n


def context(
    cache: FetchSessionCache,
    session_id: int,
    epoch: int,
    partitions: list[tuple[PartitionKey, FetchParams]],
    forgotten: list[PartitionKey] = (),  # type: ignore[assignment]
    *,
    privileged: bool = False,
    owner: object = CONSUMER,
    ids: bool = False,
    now: int = 0,
) -> FetchContext:
    return cache.new_context(
        session_id,
        epoch,
        partitions,
        forgotten,
        privileged=privileged,
        owner=owner,
        uses_topic_ids=ids,
        now_ms=now,
    )


def open_session(
    cache: FetchSessionCache,
    n: int,
    *,
    privileged: bool = False,
    now: int = 0,
    owner: object = CONSUMER,
) -> int:
    ctx = context(cache, 0, INITIAL_EPOCH, parts(n), privileged=privileged, owner=owner, now=now)
    answer = cache.answer(ctx, idle(n), now)
    assert answer.include == [True] * n
    return answer.session_id


def test_next_epoch_wraps_to_one_and_final_stays_final() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch((1 << 31) - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_full_request_creates_a_session_and_incremental_answers_only_changes() -> None:
    cache = FetchSessionCache(10, rng=random.Random(1))
    sid = open_session(cache, 4)
    assert sid != INVALID_SESSION_ID
    session = cache.get(sid)
    assert session is not None and session.epoch == 1

    # Nothing changed: the incremental response is empty, the long poll still covers all 4.
    ctx = context(cache, sid, 1, [])
    assert ctx.kind is ContextKind.INCREMENTAL
    assert [k for k, _ in ctx.partitions] == [("t", i) for i in range(4)]
    answer = cache.answer(ctx, idle(4), 1)
    assert (answer.session_id, answer.error, answer.include) == (sid, ErrorCode.none, [False] * 4)

    # Records on one, a high watermark move on another, an error on a third.
    outcomes = [
        PartitionOutcome(
            records_size=100, high_watermark=10, last_stable_offset=10, log_start_offset=0
        ),
        PartitionOutcome(high_watermark=11, last_stable_offset=10, log_start_offset=0),
        PartitionOutcome(error=ErrorCode.not_leader_or_follower),
        PartitionOutcome(high_watermark=10, last_stable_offset=10, log_start_offset=0),
    ]
    ctx = context(cache, sid, 2, [])
    assert cache.answer(ctx, outcomes, 2).include == [True, True, True, False]
    # The partition that returned records is read last next time (Kafka's round robin).
    ctx = context(cache, sid, 3, [])
    assert [k for k, _ in ctx.partitions] == [("t", 1), ("t", 2), ("t", 3), ("t", 0)]
    # The errored partition is sent again once its error clears, though its offsets are back
    # to what they were; a last stable offset or log start move is a change too.
    outcomes = [
        PartitionOutcome(high_watermark=11, last_stable_offset=10, log_start_offset=0),
        PartitionOutcome(high_watermark=10, last_stable_offset=10, log_start_offset=0),
        PartitionOutcome(high_watermark=10, last_stable_offset=11, log_start_offset=0),
        PartitionOutcome(high_watermark=10, last_stable_offset=10, log_start_offset=3),
    ]
    assert cache.answer(ctx, outcomes, 3).include == [False, True, True, True]
    ctx = context(cache, sid, 4, [])
    preferred = PartitionOutcome(high_watermark=11, last_stable_offset=10, preferred_read_replica=2)
    diverging = PartitionOutcome(high_watermark=10, last_stable_offset=10, diverging=True)
    same = [
        PartitionOutcome(high_watermark=10, last_stable_offset=11, log_start_offset=0),
        PartitionOutcome(high_watermark=10, last_stable_offset=10, log_start_offset=3),
    ]
    include = cache.answer(ctx, [preferred, diverging, *same], 4).include
    assert include == [True, True, False, False]


def test_incremental_adds_updates_and_forgets_partitions() -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache, 3)
    ctx = context(
        cache,
        sid,
        1,
        [(("t", 1), FetchParams(7, 1024)), (("u", 0), FetchParams(0, 512))],
        forgotten=[("t", 0), ("x", 9)],  # a partition not in the session is ignored
    )
    assert ctx.kind is ContextKind.INCREMENTAL
    assert dict(ctx.partitions) == {
        ("t", 1): FetchParams(7, 1024),
        ("t", 2): FetchParams(0, 1024),
        ("u", 0): FetchParams(0, 512),
    }
    # The new partition is always answered (nothing was told of it yet).
    answer = cache.answer(ctx, idle(3), 1)
    assert answer.include == [False, False, True]


def test_forgetting_every_partition_closes_the_session() -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache, 2)
    ctx = context(cache, sid, 1, [], forgotten=[("t", 0), ("t", 1)])
    assert ctx.kind is ContextKind.SESSIONLESS
    assert cache.answer(ctx, [], 1).session_id == INVALID_SESSION_ID
    assert cache.get(sid) is None


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [(2, ErrorCode.invalid_fetch_session_epoch), (7, ErrorCode.invalid_fetch_session_epoch)],
)
def test_wrong_epoch(epoch: int, expected: ErrorCode) -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache, 2)
    ctx = context(cache, sid, epoch, [])
    assert (ctx.kind, ctx.error) == (ContextKind.ERROR, expected)
    answer = cache.answer(ctx, [], 0)
    assert (answer.session_id, answer.error, answer.include) == (0, expected, [])
    # The session is left as it was: the right epoch still works.
    assert context(cache, sid, 1, []).kind is ContextKind.INCREMENTAL


def test_unknown_session_and_another_owner_are_not_found() -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache, 2)
    assert context(cache, sid + 1, 1, []).error == ErrorCode.fetch_session_id_not_found
    intruder = ("User:mallory", False)
    assert context(cache, sid, 1, [], owner=intruder).error == ErrorCode.fetch_session_id_not_found
    # Nor can another owner close it with a full or final request.
    context(cache, sid, FINAL_EPOCH, parts(1), owner=intruder)
    context(cache, sid, INITIAL_EPOCH, parts(1), owner=intruder)
    assert cache.get(sid) is not None


def test_topic_id_usage_must_not_change_within_a_session() -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache, 2)  # created by names (below v13)
    ctx = context(cache, sid, 1, [], ids=True)
    assert ctx.error == ErrorCode.fetch_session_topic_id_error


def test_a_duplicate_request_of_the_same_epoch_is_refused_at_answer() -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache, 2)
    first = context(cache, sid, 1, [])
    # A second request with epoch 1 while the first long-polls: refused at once...
    assert context(cache, sid, 1, []).error == ErrorCode.invalid_fetch_session_epoch
    # ...and a request of epoch 2 after the first answered: then the first cannot answer.
    second = context(cache, sid, 2, [])
    assert second.kind is ContextKind.INCREMENTAL
    answer = cache.answer(first, idle(2), 1)
    assert (answer.session_id, answer.error) == (sid, ErrorCode.invalid_fetch_session_epoch)


def test_final_epoch_closes_and_initial_replaces() -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache, 2)
    ctx = context(cache, sid, INITIAL_EPOCH, parts(3))
    assert cache.get(sid) is None
    new = cache.answer(ctx, idle(3), 0).session_id
    assert new not in (INVALID_SESSION_ID, sid) and len(cache) == 1
    ctx = context(cache, new, FINAL_EPOCH, parts(3))
    assert ctx.kind is ContextKind.SESSIONLESS
    answer = cache.answer(ctx, idle(3), 0)
    assert (answer.session_id, answer.include) == (INVALID_SESSION_ID, [True] * 3)
    assert len(cache) == 0


def test_throttled_answers_carry_nothing_and_create_nothing() -> None:
    cache = FetchSessionCache(10)
    ctx = context(cache, 0, INITIAL_EPOCH, parts(2))
    answer = cache.answer(ctx, idle(2), 0, throttled=True)
    assert (answer.session_id, answer.include, len(cache)) == (0, [False, False], 0)
    sid = open_session(cache, 2)
    ctx = context(cache, sid, 1, [])
    answer = cache.answer(ctx, idle(2, hw=99), 0, throttled=True)
    assert (answer.session_id, answer.include) == (sid, [False, False])
    # What the throttled answer did not tell is told next time.
    assert cache.answer(context(cache, sid, 2, []), idle(2, hw=99), 0).include == [True, True]


def test_zero_slots_turns_sessions_off() -> None:
    cache = FetchSessionCache(0)
    ctx = context(cache, 0, INITIAL_EPOCH, parts(2))
    assert cache.answer(ctx, idle(2), 0).session_id == INVALID_SESSION_ID


def test_partitions_per_session_are_bounded() -> None:
    cache = FetchSessionCache(10, max_session_partitions=3)
    ctx = context(cache, 0, INITIAL_EPOCH, parts(4))
    assert cache.answer(ctx, idle(4), 0).session_id == INVALID_SESSION_ID  # answered sessionless
    sid = open_session(cache, 3)
    ctx = context(cache, sid, 1, [(("u", 0), FetchParams(0, 1))])
    assert ctx.error == ErrorCode.fetch_session_id_not_found
    assert cache.get(sid) is None
    # Adding one while forgetting another stays within the bound.
    sid = open_session(cache, 3)
    ctx = context(cache, sid, 1, [(("u", 0), FetchParams(0, 1))], forgotten=[("t", 0)])
    assert ctx.kind is ContextKind.INCREMENTAL


def test_full_cache_declines_a_small_new_consumer_session() -> None:
    cache = FetchSessionCache(2)
    a = open_session(cache, 5)
    b = open_session(cache, 5)
    # Young sessions of its own kind are safe from it, whatever the sizes.
    assert open_session(cache, 50, now=1000) == INVALID_SESSION_ID
    assert {a, b} == {s for s in (a, b) if cache.get(s)}


def test_a_stale_session_is_evicted_first() -> None:
    cache = FetchSessionCache(2)
    a = open_session(cache, 100, privileged=True, now=0)
    b = open_session(cache, 100, privileged=True, now=0)
    # b stays in use; a idles past the eviction time.
    context(cache, b, 1, [], privileged=True, now=EVICTION_MS)
    c = open_session(cache, 1, now=EVICTION_MS + 1)
    assert c != INVALID_SESSION_ID
    assert cache.get(a) is None and cache.get(b) is not None
    assert cache.evictions == 1


def test_a_follower_session_evicts_a_young_consumer_session() -> None:
    cache = FetchSessionCache(2)
    follower = ("User:broker", True)
    f1 = open_session(cache, 10, privileged=True, owner=follower)
    c1 = open_session(cache, 500)
    f2 = open_session(cache, 1, privileged=True, owner=follower, now=10)
    assert f2 != INVALID_SESSION_ID
    assert cache.get(c1) is None and cache.get(f1) is not None
    # A consumer cannot evict a follower session, however big.
    assert open_session(cache, 10_000, now=20) == INVALID_SESSION_ID


def test_after_the_eviction_time_a_bigger_session_evicts_the_smallest() -> None:
    cache = FetchSessionCache(3)
    small = open_session(cache, 2)
    mid = open_session(cache, 5)
    big = open_session(cache, 9)
    now = EVICTION_MS + 1
    for sid in (small, mid, big):  # all in use: none stale
        context(cache, sid, 1, [], now=now)
    # Not bigger than the smallest (equal counts do not evict): declined.
    assert open_session(cache, 2, now=now + 1) == INVALID_SESSION_ID
    new = open_session(cache, 3, now=now + 1)
    assert new != INVALID_SESSION_ID
    assert cache.get(small) is None and cache.get(mid) is not None and cache.get(big) is not None
    # A consumer session does not evict an old follower session of fewer partitions.
    cache = FetchSessionCache(1)
    f = open_session(cache, 1, privileged=True, owner=("User:broker", True))
    context(cache, f, 1, [], privileged=True, owner=("User:broker", True), now=now)
    assert open_session(cache, 1000, now=now + 1) == INVALID_SESSION_ID
    # A follower with more partitions does.
    assert open_session(cache, 2, privileged=True, owner=("User:b2", True), now=now + 1) != 0
    assert cache.get(f) is None


def test_session_ids_are_random_non_zero_and_unique() -> None:
    cache = FetchSessionCache(200)
    ids = {open_session(cache, 1) for _ in range(200)}
    assert len(ids) == 200 and INVALID_SESSION_ID not in ids
    assert all(0 < i < (1 << 31) for i in ids)


def test_a_partition_left_unread_is_not_carried_and_keeps_what_it_was_told() -> None:
    """None for a partition the broker knows unchanged without reading it (`session_reads`):
    not in the response, and what the session remembers telling it stays, so a later read
    that moved nothing is still not carried."""
    cache = FetchSessionCache(10, rng=random.Random(2))
    sid = open_session(cache, 2)
    ctx = context(cache, sid, 1, [])
    assert cache.answer(ctx, [None, idle(1, hw=11)[0]], 1).include == [False, True]
    ctx = context(cache, sid, 2, [])
    assert cache.answer(ctx, idle(1) + idle(1, hw=11), 2).include == [False, False]


def test_an_incremental_context_given_only_some_partitions_carries_only_those() -> None:
    """The caller may answer an incremental request for only the partitions it reads (the
    others unread and unchanged): the context is left unlisted, ``partitions_of`` gives the
    named ones (in that order, none the session lacks) with their parameters."""
    cache = FetchSessionCache(2)
    sid = open_session(cache, 5)
    ctx = cache.new_context(
        sid, 1, [(("t", 3), FetchParams(7, 1024))], [("t", 4)], privileged=False,
        owner=CONSUMER, uses_topic_ids=False, now_ms=1, listed=False,
    )  # fmt: skip
    assert ctx.kind is ContextKind.INCREMENTAL and ctx.partitions == []
    assert [k for k, _ in cache.partitions_of(ctx)] == [("t", i) for i in range(4)]
    ctx.partitions = cache.partitions_of(ctx, [("t", 3), ("t", 4), ("t", 1)])
    assert ctx.partitions == [(("t", 3), FetchParams(7, 1024)), (("t", 1), FetchParams(0, 1024))]
    moved = PartitionOutcome(high_watermark=11, last_stable_offset=11, log_start_offset=0)
    answer = cache.answer(ctx, [moved, idle(1)[0]], 1)
    assert answer.include == [True, False]


def test_a_session_leaving_the_cache_is_told() -> None:
    removed: list[int] = []
    cache = FetchSessionCache(1, on_removed=lambda s: removed.append(s.id))
    a = open_session(cache, 3)
    context(cache, a, FINAL_EPOCH, [])  # closed
    b = open_session(cache, 3, now=1)
    c = open_session(cache, 3, now=EVICTION_MS + 2)  # b idle past the eviction time
    assert c != INVALID_SESSION_ID and removed == [a, b]
