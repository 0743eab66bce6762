from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logkeel.cluster.partition_state import PartitionRegistration, ReplicaView
from logkeel.server.replica.isr_rules import (
    FollowerState,
    IsrConfig,
    SlowLeader,
    alter_partition,
    check_min_insync,
    expand_isr,
    fetch_completed,
    fetch_failed,
    fetch_sent,
    fetch_started,
    follower_fetch_served,
    high_watermark,
    in_sync,
    shrink_isr,
    slow_leader_check,
)

LAG = 10_000
PLAIN = IsrConfig(replica_lag_time_max_ms=LAG)
KIP501 = IsrConfig(replica_lag_time_max_ms=LAG, follower_fetch_pending_reads_insync_enable=True)


def reg(isr=(1, 2, 3), leader=1) -> PartitionRegistration:
    return PartitionRegistration((1, 2, 3), leader, 4, tuple(isr), 9)


def caught_up_follower(at_ms: int, leo: int) -> FollowerState:
    return FollowerState(leo, at_ms, at_ms, leo)


def test_fetch_at_leader_end_marks_caught_up_at_fetch_start() -> None:
    f = fetch_completed(
        FollowerState(), 100, started_ms=1000, now_ms=1010, leader_log_end_offset=100, config=PLAIN
    )
    assert f.log_end_offset == 100 and f.last_caught_up_ms == 1000
    behind = fetch_completed(
        f, 150, started_ms=2000, now_ms=2010, leader_log_end_offset=300, config=PLAIN
    )
    # Reached what the leader had at the previous fetch: caught up as of that previous fetch.
    assert behind.last_caught_up_ms == 1000
    assert behind.last_fetch_leader_log_end_offset == 300


def test_shrink_drops_lagging_followers_and_may_leave_the_leader_alone() -> None:
    followers = {2: caught_up_follower(0, 50), 3: caught_up_follower(0, 50)}
    d = shrink_isr(reg(), followers, leader_log_end_offset=100, now_ms=LAG + 1, config=PLAIN)
    assert d.changed and d.state.isr == (1,)
    assert d.state.partition_epoch == 9  # a proposal; the controller bumps the epoch
    fresh = shrink_isr(reg(), followers, leader_log_end_offset=100, now_ms=LAG, config=PLAIN)
    assert not fresh.changed
    at_end = shrink_isr(reg(), followers, leader_log_end_offset=50, now_ms=10 * LAG, config=PLAIN)
    assert not at_end.changed


def test_kip501_pending_fetch_keeps_follower_in_sync_while_leader_is_slow() -> None:
    f = caught_up_follower(0, 100)
    started = fetch_started(f, 100, now_ms=1000, config=KIP501)
    assert started.pending
    leader_end = 200  # producers kept writing while the read stalls
    ok, why = in_sync(started, leader_end, now_ms=1000 + 3 * LAG, config=KIP501)
    assert ok and "being served" in why
    assert not in_sync(fetch_started(f, 100, 1000, PLAIN), leader_end, 1000 + 3 * LAG, PLAIN)[0]
    # The slow read completes: caught up as of its completion, not its start (factor 0.5).
    done_at = 1000 + 3 * LAG
    done = fetch_completed(started, 100, 1000, done_at, leader_end, KIP501)
    assert not done.pending and done.last_caught_up_ms == done_at
    assert in_sync(done, leader_end, done_at + LAG, KIP501)[0]
    assert fetch_completed(started, 100, 1000, done_at, leader_end, PLAIN).last_caught_up_ms == 0


def test_kip501_only_fetches_that_start_caught_up_are_pending() -> None:
    f = FollowerState(log_end_offset=10, last_fetch_leader_log_end_offset=100)
    assert not fetch_started(f, 10, 0, KIP501).pending
    failed = fetch_failed(fetch_started(f, 100, 5, KIP501), 100, 5)
    assert not failed.pending


def test_expand_needs_high_watermark_and_current_epoch_start() -> None:
    state = reg(isr=(1, 2))
    assert not expand_isr(state, 3, FollowerState(log_end_offset=79), 80, 0).changed
    assert not expand_isr(state, 3, FollowerState(log_end_offset=80), 80, 90).changed
    d = expand_isr(state, 3, FollowerState(log_end_offset=90), 80, 90)
    assert d.changed and d.state.isr == (1, 2, 3)


def test_a_broker_no_longer_registered_is_never_proposed_for_the_isr() -> None:
    """Its last fetch caught up, then it went: proposing it would only be refused, again and
    again, while the pending proposal holds the high watermark back."""
    state = reg(isr=(1, 2))
    caught_up = FollowerState(log_end_offset=90)
    gone = expand_isr(state, 3, caught_up, 80, 90, live={1, 2})
    assert not gone.changed and gone.error == "INELIGIBLE_REPLICA"
    assert expand_isr(state, 3, caught_up, 80, 90, live={1, 2, 3}).state.isr == (1, 2, 3)


def test_high_watermark_is_min_isr_log_end_and_never_decreases() -> None:
    followers = {2: FollowerState(log_end_offset=70), 3: FollowerState(log_end_offset=20)}
    assert high_watermark(0, 1, 100, (1, 2), followers) == 70
    assert high_watermark(0, 1, 100, (1, 2, 3), followers) == 20
    assert high_watermark(50, 1, 100, (1, 2, 3), followers) == 50
    assert high_watermark(0, 1, 100, (1,), followers) == 100


def test_min_insync_only_gates_acks_all() -> None:
    assert check_min_insync(1, 2) == "NOT_ENOUGH_REPLICAS"
    assert check_min_insync(2, 2) is None


def test_alter_partition_fences_stale_proposals() -> None:
    current = reg(isr=(1, 2))
    views = {1: ReplicaView(True), 2: ReplicaView(True), 3: ReplicaView(True)}
    grow = PartitionRegistration((1, 2, 3), 1, 4, (1, 2, 3), 9)
    d = alter_partition(current, grow, 1, views)
    assert d.changed and d.state.isr == (1, 2, 3) and d.state.partition_epoch == 10
    assert alter_partition(d.state, grow, 1, views).error == "INVALID_UPDATE_VERSION"
    assert alter_partition(current, grow, 2, views).error == "NOT_LEADER_OR_FOLLOWER"
    old_term = PartitionRegistration((1, 2, 3), 1, 3, (1, 2, 3), 9)
    assert alter_partition(current, old_term, 1, views).error == "FENCED_LEADER_EPOCH"
    dead3 = {**views, 3: ReplicaView(False)}
    assert alter_partition(current, grow, 1, dead3).error == "INELIGIBLE_REPLICA"
    no_leader = PartitionRegistration((1, 2, 3), 1, 4, (2,), 9)
    assert alter_partition(current, no_leader, 1, views).error == "INVALID_REQUEST"


def test_slow_leader_resigns_only_after_sustained_slowness() -> None:
    cfg = IsrConfig(replica_lag_time_max_ms=LAG, follower_fetch_process_time_max_ms=500)
    fast = follower_fetch_served(SlowLeader(), 20, 100, cfg)
    assert fast.slow_since_ms is None and not slow_leader_check(fast, None, 100, cfg)[1]
    slow = follower_fetch_served(fast, 800, 1000, cfg)
    assert slow.slow_since_ms == 200  # the spell began when the slow fetch did
    for now in range(2000, 200 + LAG, 1000):  # slow fetches go on
        slow = follower_fetch_served(slow, 900, now, cfg)
        assert slow.slow_since_ms == 200
    tracking, resign, _ = slow_leader_check(slow, None, 200 + LAG, cfg)
    assert not resign
    tracking, resign, why = slow_leader_check(tracking, None, 200 + LAG + 1, cfg)
    assert resign and "slower than 500 ms" in why
    assert follower_fetch_served(tracking, 30, 300 + LAG, cfg) == SlowLeader()
    # A response that never finishes sending (a disk that hangs) is slow too.
    hung, resign, _ = slow_leader_check(SlowLeader(), 1000, 1400, cfg)
    assert hung.slow_since_ms is None and not resign
    hung, resign, _ = slow_leader_check(SlowLeader(), 1000, 1600, cfg)
    assert hung.slow_since_ms == 1000 and not resign
    assert slow_leader_check(hung, 1000, 1001 + LAG, cfg)[1]
    # A response still being sent counts only once it has hung for the whole lag time: a big
    # response on a busy machine is slow to send with every disk healthy.
    sending, resign, _ = slow_leader_check(SlowLeader(), None, 1000 + LAG // 2, cfg, 1000)
    assert sending.slow_since_ms is None and not resign
    assert slow_leader_check(SlowLeader(), None, 1001 + LAG, cfg, 1000)[1]


offsets = st.integers(0, 1000)


@given(
    st.lists(st.tuples(offsets, st.integers(0, 100), st.integers(0, 30_000), offsets), max_size=20),
    st.integers(0, 10**6),
    offsets,
    st.booleans(),
)
def test_shrink_keeps_the_leader_and_exactly_the_in_sync_followers(
    fetches, now, leader_end, kip
) -> None:
    cfg = KIP501 if kip else PLAIN
    f = FollowerState()
    t = 0
    for fetch_offset, gap, duration, end in fetches:
        t += gap
        f = fetch_started(f, min(fetch_offset, end), t, cfg)
        f = fetch_completed(f, min(fetch_offset, end), t, t + duration, end, cfg)
        t += duration
    now = max(now, t)
    assert not f.pending  # every started fetch completed
    d = shrink_isr(reg(), {2: f}, leader_end, now, cfg)
    assert 1 in d.state.isr
    # 3 never fetched: in sync only while its log end (0) is the leader's, or within the lag time.
    assert (3 in d.state.isr) == (leader_end == 0 or now <= LAG)
    assert (2 in d.state.isr) == in_sync(f, leader_end, now, cfg)[0]
    if f.log_end_offset >= leader_end:
        assert 2 in d.state.isr


@given(st.lists(offsets, min_size=1, max_size=4), st.integers(0, 1000), st.integers(0, 1000))
def test_high_watermark_bounded_by_isr_ends(ends, leader_end, current) -> None:
    followers = {i + 2: FollowerState(log_end_offset=e) for i, e in enumerate(ends)}
    isr = (1, *followers)
    hw = high_watermark(current, 1, leader_end, isr, followers)
    assert hw >= current
    assert hw == current or hw == min([leader_end, *ends])


def test_a_fetch_stays_pending_until_its_records_are_sent() -> None:
    """With zero-copy reads the slow part is the send: under KIP-501 the fetch is pending until
    its records reached the follower, and a send that took long makes the follower caught up
    at its end."""
    f = fetch_started(caught_up_follower(0, 10), 10, 1_000, KIP501)
    f = fetch_completed(f, 10, 1_000, 1_001, 20, KIP501, sending=True)
    assert f.pending and in_sync(f, 30, 1_000 + LAG + 5_000, KIP501)[0]
    late = 1_000 + LAG  # the send took the whole lag time
    sent = fetch_sent(f, 10, 1_000, late, KIP501)
    assert sent.pending == () and sent.last_caught_up_ms == late
    assert fetch_sent(sent, 10, 1_000, late + 1, KIP501) == sent  # once
    quick = fetch_sent(f, 10, 1_000, 1_050, KIP501)
    assert quick.pending == () and quick.last_caught_up_ms == f.last_caught_up_ms
    # One fetch at a time: a new one replaces a pending one whose response was lost.
    again = fetch_started(f, 20, 2_000, KIP501)
    assert [p.started_ms for p in again.pending] == [2_000]


def test_a_read_that_returned_nothing_does_not_end_a_slow_spell() -> None:
    """A slow dir's follower reads: the reads of records take seconds, and between them reads
    of the same partitions at their log end take no time (nothing to return touches no record
    on the disk). Those must not end the spell the slow reads started, or the leader never
    stays slow for the lag time (the flake of test_cluster_slow_disk: "still led from the slow
    dir after 55s"). A read that returns records in time does end it."""
    cfg = IsrConfig(replica_lag_time_max_ms=LAG, follower_fetch_process_time_max_ms=500)
    tracking, now = SlowLeader(), 0
    while now < LAG + 3000:
        now += 2500
        tracking = follower_fetch_served(tracking, 2000, now, cfg)  # a read of records, late
        now += 50
        tracking = follower_fetch_served(tracking, 0, now, cfg, read_records=False)
        assert tracking.slow_since_ms == 500
        if now < 6000:
            # Then only reads that find nothing for longer than half the lag time (the
            # producer waits on the slow leader): the follower still reads, the spell goes on.
            for _ in range(8):
                now += 1000
                tracking = follower_fetch_served(tracking, 0, now, cfg, read_records=False)
                tracking, _, why = slow_leader_check(tracking, None, now, cfg)
                assert tracking.slow_since_ms == 500, why
    tracking, resign, why = slow_leader_check(tracking, None, now, cfg)
    assert resign, why
    assert follower_fetch_served(tracking, 30, now + 10, cfg, read_records=True) == SlowLeader()


def test_a_lone_slow_read_followed_by_no_reads_fades_without_a_resignation() -> None:
    """One read stretched past the budget that read no record from the disk (a file region
    located while the CPU was loaded), then no read at all (an idle follower's session leaves
    its partitions unread): the disk was not seen slow, and half the lag time later the spell
    is over. One that read records slowly showed the disk slow: only a read of records in time
    ends that spell, however long the partitions have nothing to read."""
    cfg = IsrConfig(replica_lag_time_max_ms=LAG, follower_fetch_process_time_max_ms=500)
    tracking = follower_fetch_served(SlowLeader(), 700, 1000, cfg, read_records=False)
    tracking, resign, _ = slow_leader_check(tracking, None, 1000 + LAG // 2, cfg)
    assert tracking.slow_since_ms == 300 and not resign
    tracking, resign, _ = slow_leader_check(tracking, None, 1001 + LAG // 2, cfg)
    assert tracking == SlowLeader() and not resign
    disk = follower_fetch_served(SlowLeader(), 700, 1000, cfg, read_records=True)
    disk, resign, why = slow_leader_check(disk, None, 1000 + LAG, cfg)
    assert disk.slow_since_ms == 300 and resign, why
    # A read under way counts as seen slow at every check: a hung disk never fades.
    hung = SlowLeader()
    for now in range(1600, 2000 + LAG, LAG // 2):
        hung, resign, _ = slow_leader_check(hung, 1000, now, cfg)
    assert hung.slow_since_ms == 1000 and hung.on_disk
    assert slow_leader_check(hung, 1000, 1001 + LAG, cfg)[1]
