"""A fetch session's partitions answered without a read (`session_reads`), on real logs and
partitions, no sockets: which reads a session may skip, what makes it read again, and the
caught-up time of a follower whose partitions are not read (ISR expiry)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logkeel.cluster.metadata import PartitionState
from logkeel.records.builder import build_batch
from logkeel.server.replica import isr_rules, partition_reads
from logkeel.server.replica.follower_tracking import FetchClock, FollowerTracking
from logkeel.server.replica.isr_rules import FollowerState, IsrConfig
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.purgatory import DelayedOperationPurgatory
from logkeel.server.replica.results import (
    READ_COMMITTED,
    FetchPartitionRequest,
    close_records,
)
from logkeel.server.replica.session_reads import SessionReads, stamp
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

LEADER, F2, F3 = 1, 2, 3
LAG_MS = 10_000
KEY = ("t", 0)


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogManager]:
    m = LogManager([tmp_path])
    m.startup(start_background=False)
    yield m
    m.shutdown()


def leader_partition(logs: LogManager, isr: list[int] | None = None) -> Partition:
    tp = TopicPartition("t", 0)
    config = IsrConfig(
        replica_lag_time_max_ms=LAG_MS, follower_fetch_pending_reads_insync_enable=True
    )
    p = Partition(tp, "id", LEADER, config, lambda _proposal: None)
    p.shutting_down = frozenset
    p.log = logs.get_or_create_log(tp)
    p.apply_state(PartitionState("t", 0, [1, 2, 3], LEADER, 0, isr or [1, 2, 3], 0))
    p.become_leader_or_follower()
    return p


def append(p: Partition, *values: bytes) -> None:
    now = int(time.time() * 1000)
    p.append_as_leader(build_batch([(now, None, v, ()) for v in values]), origin_is_client=False)


def read(
    reads: SessionReads, p: Partition, offset: int, isolation_level: int = 0
) -> FetchPartitionRequest:
    """A read of the session's one partition, told to the session as a fetch would."""
    r = FetchPartitionRequest(p.tp, offset, 1 << 20)
    before = stamp(p, r, reads.replica_id, isolation_level)
    result, _ = partition_reads.read(p, r, reads.replica_id, 1 << 20, isolation_level, True)
    close_records([result])
    reads.read(KEY, r, before, result)
    return r


def unread(reads: SessionReads, p: Partition, isolation_level: int = 0, now_ms: int | None = None) -> bool:  # fmt: skip
    return KEY in reads.unread(lambda tp: p if tp == p.tp else None, isolation_level, now_ms)


def caught_up(logs: LogManager) -> Partition:
    """Records at 0-1, both followers at the log end, the high watermark there."""
    p = leader_partition(logs)
    append(p, b"a", b"b")
    for f in (F2, F3):
        partition_reads.read(p, FetchPartitionRequest(p.tp, 2, 1 << 20), f, 1 << 20, 0, True)
    assert p.high_watermark == 2
    return p


def test_a_follower_at_the_log_end_is_not_read_until_its_partition_changes(logs: LogManager) -> None:  # fmt: skip
    p = caught_up(logs)
    reads = SessionReads(F2)
    read(reads, p, 2)
    assert unread(reads, p) and unread(reads, p), "nothing changed: no read"
    append(p, b"c")
    assert not unread(reads, p), "an append: read again"
    assert not unread(reads, p), "and stays read until a read finds nothing again"
    read(reads, p, 2)  # returns the new record: still read
    assert not unread(reads, p)


@pytest.mark.parametrize("change", ["log start", "leader epoch", "high watermark", "forgotten"])
def test_what_makes_a_session_read_a_partition_again(logs: LogManager, change: str) -> None:
    p = caught_up(logs)
    reads = SessionReads(F2)
    read(reads, p, 2)
    assert unread(reads, p)
    if change == "log start":
        assert p.log is not None and p.log.maybe_increment_log_start_offset(1)
    elif change == "leader epoch":
        p.apply_state(PartitionState("t", 0, [1, 2, 3], LEADER, 1, [1, 2, 3], 1))
    elif change == "high watermark":
        # F2 at the log end, told the high watermark 2 (F3 is behind); F3's fetch moves it.
        append(p, b"c")
        read(reads, p, 3)
        assert unread(reads, p) and p.high_watermark == 2
        partition_reads.read(p, FetchPartitionRequest(p.tp, 3, 1 << 20), F3, 1 << 20, 0, True)
        assert p.high_watermark == 3
    else:
        reads.forget([KEY])
    assert not unread(reads, p)


def test_only_empty_answers_at_the_end_are_skipped(logs: LogManager) -> None:
    p = caught_up(logs)
    follower = SessionReads(F2)
    read(follower, p, 0)  # records returned
    assert not unread(follower, p)
    consumer = SessionReads(-1)
    read(consumer, p, 2)  # at the high watermark
    assert unread(consumer, p)
    read(consumer, p, 0)  # records
    assert not unread(consumer, p)
    committed = SessionReads(-1)
    read(committed, p, 2, READ_COMMITTED)  # at the last stable offset
    assert unread(committed, p, READ_COMMITTED)
    assert not unread(committed, p, 0), "another isolation level reads again"
    # A follower outside the ISR is read every time: its read may propose it for the ISR.
    p.apply_state(PartitionState("t", 0, [1, 2, 3], LEADER, 0, [1, 3], 1))
    outside = SessionReads(F2)
    read(outside, p, 2)
    assert not unread(outside, p)
    assert stamp(p, FetchPartitionRequest(p.tp, 2, 1, client_rack="r"), -1, 0) is None


@pytest.mark.parametrize("told", [False, True], ids=["checked", "told by a feed"])
def test_an_unread_follower_stays_caught_up_and_one_that_stops_fetching_leaves_the_isr(
    logs: LogManager, told: bool
) -> None:
    """Both followers at the log end; then only F2's session fetches (its partition unread),
    for longer than the lag time. An append then puts both behind the leader's log end: F2
    fetched at the old end a moment ago and is in sync; F3 stopped and is out. Without the
    session's clock F2 would look caught up last at its last read, and be shrunk too. The
    same when the session is told of changes rather than checking each partition."""
    p = caught_up(logs)
    feed: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("fetch")
    reads = SessionReads(F2, feed if told else None)
    read(reads, p, 2)
    last_read_ms = p.followers.snapshot()[F2].last_caught_up_ms
    t = last_read_ms
    for _ in range(30):  # a Fetch every 500 ms for 15 s, none of them reading
        t += 500
        assert unread(reads, p, now_ms=t)
    assert p.followers.states[F2].last_caught_up_ms == last_read_ms  # not written per Fetch
    append(p, b"c")  # both followers now behind
    feed.check_and_complete(p.tp)  # as the append path does
    assert p.log is not None
    now = t + 200

    def shrunk() -> set[int]:
        d = isr_rules.shrink_isr(p.registration(), p.followers.snapshot(), p.log.log_end_offset,  # type: ignore[union-attr]
                                 now, p.followers.config)  # fmt: skip
        return set(p.isr) - set(d.state.isr)

    assert shrunk() == {F3}
    # The session's next Fetch finds it changed and reads it from the old end: F2 is still
    # caught up as of its last Fetch, not its last read.
    assert not unread(reads, p, now_ms=now)
    assert p.followers.states[F2].last_caught_up_ms == t
    r = FetchPartitionRequest(p.tp, 2, 1 << 20)
    result, _ = partition_reads.read(p, r, F2, 1 << 20, 0, True)
    assert result.size > 0
    close_records([result])
    assert shrunk() == {F3}


def test_a_follower_state_counts_the_session_fetches_only_while_linked() -> None:
    tracking = FollowerTracking(LEADER, IsrConfig(replica_lag_time_max_ms=LAG_MS))
    tracking.new_term([1, 2, 3], [1, 2, 3], now_ms=1_000)
    tracking.fetch_completed(F2, [1, 2, 3], 5, 2_000, 2_001, 5, sending=False)
    clock = FetchClock()
    tracking.unread(F2, clock)
    clock.fetched_ms = 9_000
    assert tracking.snapshot()[F2].last_caught_up_ms == 9_000
    assert tracking.snapshot()[F2].last_fetch_ms == 9_000
    tracking.read_again(F2)  # kept as of then, and no longer follows the clock
    clock.fetched_ms = 20_000
    assert tracking.snapshot()[F2] == FollowerState(5, 9_000, 9_000, 5)
    tracking.unread(F2, clock)
    tracking.new_term([1, 2, 3], [1, 2, 3], now_ms=30_000)  # a new term forgets the link
    clock.fetched_ms = 40_000
    assert tracking.snapshot()[F2].last_caught_up_ms == 30_000


def test_fetched_unchanged_never_moves_a_follower_back() -> None:
    f = FollowerState(5, 3_000, 3_000, 5)
    assert isr_rules.fetched_unchanged(f, 2_000) is f
    assert isr_rules.fetched_unchanged(f, 4_000) == FollowerState(5, 4_000, 4_000, 5)


def test_a_partition_the_leader_reads_anyway_is_not_left_unread(logs: LogManager) -> None:
    """A follower's partitions on a slow log dir are read on every Fetch (`Fetches.on_slow_dir`):
    each read tells the slow-leader rule about the disk, for all of the dir's partitions at
    once; the follower's link to the session's clock ends as for any change."""
    p = caught_up(logs)
    reads = SessionReads(F2)
    read(reads, p, 2)
    lookup = {p.tp: p}.get
    assert KEY in reads.unread(lookup, 0, read_anyway=lambda _p: False)
    assert KEY not in reads.unread(lookup, 0, read_anyway=lambda _p: True)
    assert len(reads) == 0


def test_with_a_change_feed_a_fetch_checks_only_what_it_was_told_changed(logs: LogManager) -> None:  # fmt: skip
    """A follower's session told of changes by the fetch purgatory: a Fetch looks up only the
    partitions told changed, a change nobody told (the log start moved by retention) is found
    by the check of every partition due every ``full_check_ms``, and a closed session is no
    longer told."""
    p = caught_up(logs)
    feed: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("fetch")
    reads = SessionReads(F2, feed, full_check_ms=1_000)
    looked_up: list[TopicPartition] = []

    def lookup(tp: TopicPartition) -> Partition | None:
        looked_up.append(tp)
        return p if tp == p.tp else None

    reads.forget([KEY])  # the session's partition, read by the first Fetch
    assert reads.to_read() == [KEY]
    read(reads, p, 2)
    assert reads.to_read() == [] and feed.listeners() == 1
    assert KEY in reads.unread(lookup, 0, now_ms=10_000)  # the first check: every partition
    looked_up.clear()
    assert KEY in reads.unread(lookup, 0, now_ms=10_500)
    assert looked_up == [], "nothing told: nothing looked up"
    assert p.log is not None and p.log.maybe_increment_log_start_offset(1)  # untold
    assert KEY in reads.unread(lookup, 0, now_ms=10_900), "not before the full check is due"
    assert KEY not in reads.unread(lookup, 0, now_ms=11_000), "the full check finds it"
    assert reads.to_read() == [KEY] and feed.listeners() == 0
    read(reads, p, 2)
    append(p, b"c")
    feed.check_and_complete(p.tp)  # as the append path does
    assert KEY not in reads.unread(lookup, 0, now_ms=11_100), "told: checked, changed"
    assert reads.to_read() == [KEY]
    read(reads, p, 2)  # the record returned: read again next time
    assert reads.to_read() == [KEY]
    read(reads, p, 3)
    assert reads.to_read() == [] and feed.listeners() == 1
    reads.close()
    assert feed.listeners() == 0


def test_a_parked_session_is_woken_only_by_a_change(logs: LogManager) -> None:
    p = caught_up(logs)
    feed: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("fetch")
    reads = SessionReads(F2, feed)
    read(reads, p, 2)
    assert KEY in reads.unread(lambda tp: p, 0)
    woken: list[int] = []
    reads.park(lambda: woken.append(1))
    feed.check_and_complete(p.tp)  # told, but nothing changed
    assert woken == [] and reads.changed() == []
    append(p, b"c")
    feed.check_and_complete(p.tp)
    assert woken == [1]
    ((key, request),) = reads.changed()
    assert key == KEY and request.fetch_offset == 2 and KEY not in reads.unread(lambda tp: p, 0)
