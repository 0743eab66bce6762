"""The controller's per-partition decisions, as pure functions (no ZooKeeper)."""

from __future__ import annotations

from dataclasses import replace

from logkeel.cluster.controller_context import isr_joins, isr_joins_seen
from logkeel.cluster.controller_decisions import (
    LiveBrokers,
    decide,
    imbalanced_partitions,
    initial_state,
    leader_moves_first,
    leaders_leaving,
    shutdown_remaining,
)
from logkeel.cluster.crash_detection import REFUSED, UNKNOWN, UP, PeerVerdicts
from logkeel.cluster.partition_state import NO_LEADER, PartitionRegistration
from logkeel.cluster.zk_data import (
    LeaderIsr,
    ReplicaLogReport,
    registration_of,
)
from logkeel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def since(zxid: int, *members: int) -> tuple[tuple[int, int], ...]:
    return tuple((r, zxid) for r in members)


def cluster(live: set[int], shutting_down: set[int] = frozenset()) -> LiveBrokers:  # type: ignore[assignment]
    return LiveBrokers(frozenset(live), frozenset(shutting_down))


def reg(
    leader: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3)
) -> PartitionRegistration:
    return PartitionRegistration(replicas, leader, 5, isr, 7)


def test_first_leader_is_the_first_live_replica_and_the_isr_the_live_ones() -> None:
    assert initial_state((2, 3, 1), cluster({1, 3})) == PartitionRegistration(
        (2, 3, 1), 3, 0, (3, 1)
    )
    assert initial_state((2, 3), cluster({2, 3}, {2})).leader == 3
    offline = initial_state((2, 3), cluster({1}))
    assert (offline.leader, offline.isr) == (NO_LEADER, (2, 3))


def test_dead_leader_is_replaced_from_the_isr_and_dead_followers_leave_it() -> None:
    after = decide(TP, reg(1, (1, 2, 3)), cluster({2, 3}), unclean=False, preferred=False).state
    assert (after.leader, after.isr, after.leader_epoch) == (2, (2, 3), 6)
    follower_died = decide(
        TP, reg(1, (1, 2, 3)), cluster({1, 2}), unclean=False, preferred=False
    ).state
    assert (follower_died.leader, follower_died.isr, follower_died.leader_epoch) == (1, (1, 2), 5)
    unchanged = reg(1, (1, 2, 3))
    assert (
        decide(TP, unchanged, cluster({1, 2, 3}), unclean=False, preferred=False).state is unchanged
    )


def test_offline_partition_leads_again_when_an_isr_member_returns() -> None:
    offline = decide(TP, reg(1, (1,)), cluster({2, 3}), unclean=False, preferred=False).state
    assert (offline.leader, offline.isr) == (NO_LEADER, (1,))
    back = decide(TP, offline, cluster({1, 2, 3}), unclean=False, preferred=False).state
    assert back.leader == 1
    unclean = decide(TP, reg(1, (1,)), cluster({2, 3}), unclean=True, preferred=False).state
    assert unclean.leader == NO_LEADER  # no replica reported its log: nothing to rank


def test_controlled_shutdown_moves_leadership_unless_it_is_the_only_isr_member() -> None:
    moved = decide(
        TP, reg(1, (1, 2, 3)), cluster({1, 2, 3}, {1}), unclean=False, preferred=False
    ).state
    assert (moved.leader, moved.isr) == (2, (2, 3))
    alone = reg(1, (1,))
    assert (
        decide(TP, alone, cluster({1, 2, 3}, {1}), unclean=False, preferred=False).state.leader == 1
    )
    follower = decide(
        TP, reg(1, (1, 2, 3)), cluster({1, 2, 3}, {3}), unclean=False, preferred=False
    ).state
    assert (follower.leader, follower.isr) == (1, (1, 2))


def test_preferred_election_and_imbalance() -> None:
    regs = {
        TopicPartition("t", 0): reg(2, (1, 2, 3), (1, 2, 3)),
        TopicPartition("t", 1): reg(2, (2, 3), (1, 2, 3)),  # 1 is out of sync: stays
        TopicPartition("t", 2): reg(2, (1, 2), (2, 1, 3)),
    }
    assert imbalanced_partitions(regs, frozenset({1, 2, 3}), 10) == {TopicPartition("t", 0)}
    assert imbalanced_partitions(regs, frozenset({2, 3}), 10) == set()  # 1 is not live
    assert imbalanced_partitions(regs, frozenset({1, 2, 3}), 100) == set()
    back = decide(
        TP, regs[TopicPartition("t", 0)], cluster({1, 2, 3}), unclean=False, preferred=True
    ).state
    assert back.leader == 1


def test_a_replica_whose_log_dir_failed_loses_leadership_and_leaves_the_isr() -> None:
    failed = LiveBrokers(frozenset({1, 2, 3}), frozenset(), {1: {TP}})
    after = decide(TP, reg(1, (1, 2, 3)), failed, unclean=False, preferred=False).state
    assert (after.leader, after.isr) == (2, (2, 3))
    other = TopicPartition("t", 1)
    assert (
        decide(other, reg(1, (1, 2, 3)), failed, unclean=False, preferred=False).state.leader == 1
    )


def reported(
    live: set[int], logs: dict[int, tuple[int, int]], partition_epoch: int = 7, topic_id: str = "id"
) -> LiveBrokers:
    """Brokers ``live``; ``logs`` maps a broker to its reported (last epoch, log end offset)."""
    return LiveBrokers(
        frozenset(live),
        frozenset(),
        {},
        {
            b: {TP: ReplicaLogReport(topic_id, e, leo, partition_epoch)}
            for b, (e, leo) in logs.items()
        },
    )


def test_unclean_election_picks_the_longest_log_after_every_replica_reported() -> None:
    offline = PartitionRegistration((1, 2, 3), NO_LEADER, 5, (1,), 7)
    cluster_ = reported({2, 3}, {2: (4, 90), 3: (5, 60)})
    d = decide(TP, offline, cluster_, unclean=True, preferred=False, topic_id="id",
               now_ms=1000, unclean_wait_ms=3000)  # fmt: skip
    # 1 (dead) has not reported: the election waits, bounded.
    assert d.state.leader == NO_LEADER and d.retry_at_ms == 4000
    d = decide(TP, offline, cluster_, unclean=True, preferred=False, topic_id="id",
               now_ms=4000, unclean_wait_started_ms=1000, unclean_wait_ms=3000)  # fmt: skip
    assert d.state.leader == 3  # epoch 5 beats a longer log from epoch 4
    everyone = reported({1, 2, 3}, {1: (5, 70), 2: (4, 90), 3: (5, 60)})
    d = decide(TP, offline, everyone, unclean=True, preferred=False, topic_id="id",
               now_ms=1000, unclean_wait_ms=3000)  # fmt: skip
    assert d.state.leader == 1  # all reported: no wait; 1 is in the ISR and reported (clean)


def test_a_returning_replica_leads_an_offline_partition_only_once_it_reported() -> None:
    offline = PartitionRegistration((1, 2, 3), NO_LEADER, 5, (1,), 7)
    assert decide(TP, offline, reported({1}, {}), unclean=False, preferred=False,
                  topic_id="id").state.leader == NO_LEADER  # fmt: skip
    stale = reported({1}, {1: (5, 70)}, partition_epoch=6)  # made before it went offline
    assert decide(TP, offline, stale, unclean=False, preferred=False,
                  topic_id="id").state.leader == NO_LEADER  # fmt: skip
    assert decide(TP, offline, reported({1}, {1: (5, 70)}), unclean=False, preferred=False,
                  topic_id="id").state.leader == 1  # fmt: skip


def test_a_wiped_replica_never_leads_even_alone_while_the_partition_had_data() -> None:
    offline = PartitionRegistration((1, 2, 3), NO_LEADER, 5, (1,), 7)
    # 1 came back empty; 2 is dead but its last report (an older partition state) had data.
    logs = LiveBrokers(
        frozenset({1}),
        frozenset(),
        {},
        {1: {TP: ReplicaLogReport("id", -1, 0, 7)}, 2: {TP: ReplicaLogReport("id", 5, 500, 6)}},
    )
    for unclean in (False, True):
        d = decide(TP, offline, logs, unclean=unclean, preferred=False, topic_id="id")
        assert d.state.leader == NO_LEADER, d.reason
    # The same empty log for a topic created again under the same name is a new partition.
    recreated = decide(TP, offline, logs, unclean=False, preferred=False, topic_id="other")
    assert recreated.state.leader == NO_LEADER  # no report for this topic id yet
    fresh = LiveBrokers(
        frozenset({1}), frozenset(), {}, {1: {TP: ReplicaLogReport("new", -1, 0, 7)}}
    )
    assert (
        decide(TP, offline, fresh, unclean=False, preferred=False, topic_id="new").state.leader == 1
    )


def test_a_live_leaders_old_report_never_deposes_it() -> None:
    """An online partition's reports may be seconds old: the leader's report from before the
    first write says LEO 0 while the followers' later ones hold data. That is not a wiped disk;
    only a restart (a new broker epoch) or an offline partition gets its logs judged."""
    online = PartitionRegistration((1, 2, 3), 1, 5, (1, 2, 3), 7, leader_broker_epoch=40)
    logs = LiveBrokers(
        frozenset({1, 2, 3}),
        frozenset(),
        {},
        {
            1: {TP: ReplicaLogReport("id", -1, 0, 7, 40)},
            2: {TP: ReplicaLogReport("id", 5, 90, 7, 41)},
        },
        {1: 40, 2: 41, 3: 42},
    )
    assert decide(TP, online, logs, unclean=False, preferred=False, topic_id="id").state is online
    # The same leader back from a restart with that empty log is judged, and loses it.
    restarted = LiveBrokers(
        frozenset({1, 2, 3}),
        frozenset(),
        {},
        {
            1: {TP: ReplicaLogReport("id", -1, 0, 7, 43)},
            2: {TP: ReplicaLogReport("id", 5, 90, 7, 41)},
        },
        {1: 43, 2: 41, 3: 42},
    )
    after = decide(TP, online, restarted, unclean=False, preferred=False, topic_id="id").state
    assert after.leader == 2 and after.leader_epoch == 6


def test_a_pass_writes_new_leaderships_before_isr_only_changes() -> None:
    """A controlled shutdown is over once the broker leads nothing: its leaderships are written
    first, its followers' ISR changes after."""
    shutting = cluster({1, 2, 3}, {1})
    regs = {TopicPartition("t", p): reg(1 if p % 2 else 2, (1, 2, 3)) for p in range(6)}
    changes = [(tp, r, decide(tp, r, shutting, unclean=False, preferred=False).state)
               for tp, r in regs.items()]  # fmt: skip
    leaders, isr_only = leader_moves_first(changes)
    assert leaders == [TopicPartition("t", p) for p in (1, 3, 5)]
    assert isr_only == [TopicPartition("t", p) for p in (0, 2, 4)]


def test_a_pass_decides_the_partitions_of_leaving_leaders_first() -> None:
    """Shutting down, gone, its log dir failed, or no leader at all: those leaderships are
    decided and written before the rest of a pass is decided (a controlled shutdown waits for
    nothing else, nor does a partition whose leader crashed)."""
    tps = [TopicPartition("t", p) for p in range(6)]
    brokers = LiveBrokers(frozenset({1, 2, 3}), frozenset({1}), {2: {tps[3]}})
    leaders = [(tps[0], 1), (tps[1], 2), (tps[2], 4), (tps[3], 2), (tps[4], NO_LEADER),
               (tps[5], 3)]  # fmt: skip
    assert leaders_leaving(brokers, leaders) == {tps[0], tps[2], tps[3], tps[4]}


def test_a_controlled_shutdown_waits_only_for_leaderships_another_replica_can_take() -> None:
    """Kafka's partitionsRemaining, less those no other replica could lead: one in the ISR,
    registered, not shutting down, its log dir serving the partition."""
    tps = [TopicPartition("t", p) for p in range(6)]
    brokers = LiveBrokers(frozenset({1, 2, 3}), frozenset({1, 2}), {3: {tps[4]}})
    states = [
        (tps[0], 1, (1, 3)),  # 3 can take it
        (tps[1], 1, (1,)),  # nobody else in sync
        (tps[2], 1, (1, 2)),  # 2 is shutting down too
        (tps[3], 1, (1, 4)),  # 4 is not registered
        (tps[4], 1, (1, 3)),  # 3 cannot serve it
        (tps[5], 3, (3, 1)),  # led by a broker staying
    ]
    assert shutdown_remaining(brokers, states) == {1: 1, 2: 0}


def test_the_views_of_a_shutdown_differ_only_in_the_shutting_down_replicas() -> None:
    r = reg(1, (1, 2, 3))
    brokers = LiveBrokers(
        frozenset({1, 2}), frozenset({2}), {1: {TP}},
        {1: {TP: ReplicaLogReport("id", 5, 90, 7, 41)}}, {1: 41, 2: 42},
    )  # fmt: skip
    plain, shutdown = (brokers.views(TP, r, shutdown=s, topic_id="id") for s in (False, True))
    assert shutdown == {**plain, 2: replace(plain[2], shutting_down=True)}
    assert not plain[2].shutting_down and not plain[3].live and not plain[1].log_dir_online
    # A shutting-down follower leaves the ISR (the decision sees it shutting down).
    shutting = cluster({1, 2, 3}, {2})
    assert decide(TP, r, shutting, unclean=False, preferred=False).state.isr == (1, 3)


def test_the_reason_logged_is_that_of_the_decision_applied() -> None:
    d = decide(TP, reg(3, (3, 1, 2), (3, 1, 2)), cluster({1, 2, 3}, {3}), unclean=False,
               preferred=False)  # fmt: skip
    assert d.changed and d.state.leader == 1
    assert "controlled shutdown of 3" in d.reason and "still eligible" not in d.reason


def test_a_broker_is_declared_gone_only_after_refusals_in_a_row_once_it_was_reached() -> None:
    v = PeerVerdicts(refusals=2)
    # Never reached (a listener not bound yet, an address this host cannot reach): never gone,
    # so its refusals are not confirmed at once either.
    assert not any(v.observe(1, 10, REFUSED) for _ in range(5))
    assert not v.counting(1) and not v.counting(2)
    assert not v.observe(1, 10, UP)
    assert v.counting(1)
    assert not v.observe(1, 10, REFUSED)
    assert not v.observe(1, 10, UNKNOWN)  # silence (a cut, a frozen process) resets the count
    assert not v.observe(1, 10, REFUSED)
    assert v.observe(1, 10, REFUSED)
    # Registered again (a new broker epoch): judged afresh.
    assert not v.observe(1, 11, REFUSED)
    assert not v.observe(1, 11, REFUSED)
    assert not v.counting(1)


def test_a_follower_registered_after_the_isr_was_written_leaves_it_and_never_leads() -> None:
    """Broker epochs are registration zxids: a follower whose epoch is above the zxid of the
    state's last write restarted since that ISR vouched for it, even if the controller never
    saw it gone (a restart inside its session, a paused controller). It leaves the ISR, and a
    controlled shutdown or a preferred election does not hand it the leadership."""
    state = PartitionRegistration((1, 2, 3), 1, 5, (1, 2, 3), 7, isr_since=since(100, 1, 2, 3))
    bounced = LiveBrokers(frozenset({1, 2, 3}), frozenset(), epochs={1: 10, 2: 150, 3: 20})
    after = decide(TP, state, bounced, unclean=False, preferred=False).state
    assert (after.leader, after.isr) == (1, (1, 3))
    # Leader 1 shuts down cleanly before that write: 3 takes over, never the bounced 2.
    closing = LiveBrokers(frozenset({1, 2, 3}), frozenset({1}), epochs={1: 10, 2: 150, 3: 20})
    moved = decide(TP, state, closing, unclean=False, preferred=False).state
    assert (moved.leader, moved.isr) == (3, (3,))
    preferred = PartitionRegistration((2, 1, 3), 1, 5, (1, 2, 3), 7, isr_since=since(100, 1, 2, 3))
    kept = decide(TP, preferred, bounced, unclean=False, preferred=True).state
    assert kept.leader == 1 and 2 not in kept.isr
    # Registered before the write (it rejoined after catching up): in sync, may lead.
    rejoined = PartitionRegistration((2, 1, 3), 1, 5, (1, 2, 3), 8, isr_since=since(200, 1, 2, 3))
    assert decide(TP, rejoined, bounced, unclean=False, preferred=True).state.leader == 2
    # The write's zxid not known (a state just created): nothing is judged by it.
    unknown = PartitionRegistration((1, 2, 3), 1, 5, (1, 2, 3), 7)
    assert decide(TP, unknown, bounced, unclean=False, preferred=False).state is unknown


def test_after_the_whole_cluster_went_down_a_returning_follower_is_judged_on_its_report() -> None:
    """Every broker died at once, so the state still names leader 1. Follower 2 is back first
    (registered after the ISR was written) with a log cut below what was acknowledged: it does
    not lead before it reports, nor on a report that shows the cut; with its whole log it
    does. A follower that never restarted, after an ordinary leader crash, still takes over
    on its older report at once."""
    state = PartitionRegistration((1, 2, 3), 1, 5, (1, 2, 3), 7, isr_since=since(100, 1, 2, 3))

    def report(broker_epoch: int, end: int, hw: int = -1) -> ReplicaLogReport:
        return ReplicaLogReport(
            topic_id="id", partition_epoch=7, last_epoch=5, log_end_offset=end,
            high_watermark=hw, broker_epoch=broker_epoch,
        )  # fmt: skip

    def back(logs: dict[int, dict[TopicPartition, ReplicaLogReport]]) -> PartitionRegistration:
        live = LiveBrokers(frozenset({2}), frozenset(), logs=logs, epochs={2: 150})
        return decide(TP, state, live, unclean=False, preferred=False, topic_id="id").state

    earlier = {1: {TP: report(10, 400, hw=400)}}
    assert back(earlier).leader == NO_LEADER  # no report of this run yet
    assert back({**earlier, 2: {TP: report(150, 120)}}).leader == NO_LEADER
    whole = back({**earlier, 2: {TP: report(150, 400)}})
    assert (whole.leader, whole.isr) == (2, (2,))
    crash = LiveBrokers(
        frozenset({2, 3}), frozenset(), logs={**earlier, 2: {TP: report(20, 120)}},
        epochs={2: 20, 3: 30},
    )  # fmt: skip
    assert decide(TP, state, crash, unclean=False, preferred=False, topic_id="id").state.leader == 2


def test_a_replica_back_from_a_crash_of_its_machine_waits_for_the_others() -> None:
    """All died at once; broker 2 comes back first after a power loss (its logs may lack what
    was not flushed, whatever their length): it does not lead while replicas that may hold
    more can return; once all have reported, the longest leads (here one that was killed
    without losing its page cache)."""
    state = PartitionRegistration((2, 1, 3), 1, 5, (1, 2, 3), 7, isr_since=since(100, 1, 2, 3))

    def report(broker_epoch: int, end: int, *, lost: bool = False) -> ReplicaLogReport:
        return ReplicaLogReport(
            topic_id="id", partition_epoch=7, last_epoch=5, log_end_offset=end,
            high_watermark=300, broker_epoch=broker_epoch, unflushed_lost=lost,
        )  # fmt: skip

    alone = LiveBrokers(
        frozenset({2}), frozenset(), logs={2: {TP: report(150, 320, lost=True)}}, epochs={2: 150}
    )
    first = decide(TP, state, alone, unclean=False, preferred=False, topic_id="id")
    assert first.state.leader == NO_LEADER
    assert "went down uncleanly" in first.reason
    logs = {2: {TP: report(150, 320, lost=True)}, 1: {TP: report(160, 400)}}
    both = LiveBrokers(frozenset({1, 2}), frozenset(), logs=logs, epochs={2: 150, 1: 160})
    assert decide(TP, state, both, unclean=False, preferred=False, topic_id="id").state.leader == 1


def test_a_leaders_later_write_keeping_a_restarted_follower_does_not_vouch_for_it() -> None:
    """Broker 2 joined the ISR at zxid 100 and restarted unseen (epoch 150); the leader then
    wrote its ISR again at zxid 300 (another member left), keeping 2. What counts is when 2
    joined, not the last write: it still leaves the ISR and cannot lead."""
    v5 = LeaderIsr(1, 5, (1, 2, 3), 1, zk_version=5, written_zxid=100)
    v5 = replace(v5, isr_since=isr_joins(None, v5))
    v6 = LeaderIsr(1, 5, (1, 2), 1, zk_version=6, written_zxid=300)
    v6 = replace(v6, isr_since=isr_joins(v5, v6))
    assert v6.isr_since == ((1, 100), (2, 100))
    v7 = LeaderIsr(1, 5, (1, 2, 3), 1, zk_version=7, written_zxid=400)
    assert isr_joins(v6, v7) == ((1, 100), (2, 100), (3, 400))  # 3 rejoined at 400
    reg = registration_of((1, 2, 3), v6)
    bounced = LiveBrokers(frozenset({1, 2, 3}), frozenset(), epochs={1: 10, 2: 150, 3: 20})
    after = decide(TP, reg, bounced, unclean=False, preferred=False).state
    assert (after.leader, after.isr) == (1, (1,))


def test_an_in_sync_followers_empty_report_from_before_the_first_records_is_no_loss() -> None:
    """Leader 3 dies with records its last report shows; followers 1 and 2 last reported
    against this very state, before those records reached them: empty logs. The high
    watermark never passes an in-sync member's log end, so that says nothing was acknowledged
    then, not that their disks were wiped: 1 takes over at once (at 10,000 partitions 1,413
    partitions went offline for 46 s on this). The same report made against an earlier state,
    or by a member whose joining the ISR no write of this run of its broker shows, is still a
    suspicion that waits for current reports."""
    members = since(100, 3, 1, 2)
    state = PartitionRegistration(
        (3, 1, 2), 3, 5, (3, 1, 2), 7, isr_since=members, isr_seen_joining=frozenset({1, 2, 3})
    )

    def after_crash(
        follower_epoch: int = 7, state: PartitionRegistration = state
    ) -> PartitionRegistration:
        logs = {
            3: {TP: ReplicaLogReport("id", 5, 40, 7, 30, 40)},
            1: {TP: ReplicaLogReport("id", -1, 0, follower_epoch, 10, 0)},
            2: {TP: ReplicaLogReport("id", -1, 0, follower_epoch, 20, 0)},
        }
        live = LiveBrokers(frozenset({1, 2}), frozenset(), logs=logs, epochs={1: 10, 2: 20})
        return decide(TP, state, live, unclean=False, preferred=False, topic_id="id").state

    took_over = after_crash()
    assert (took_over.leader, took_over.isr, took_over.leader_epoch) == (1, (1, 2), 6)
    assert after_crash(follower_epoch=6).leader == NO_LEADER
    unknown_join = replace(state, isr_since=())
    assert after_crash(state=unknown_join).leader == NO_LEADER
    joined_before_this_run = replace(state, isr_since=since(5, 3, 1, 2))
    assert after_crash(state=joined_before_this_run).leader == NO_LEADER
    # The joins dated by a context's load (the state's last write), not seen: a follower
    # restarted unseen and kept in the ISR by a leader's later write would look joined since.
    joins_not_seen = replace(state, isr_seen_joining=frozenset())
    assert after_crash(state=joins_not_seen).leader == NO_LEADER


def test_only_joins_the_controller_saw_happen_are_dated_exactly() -> None:
    created = LeaderIsr(1, 0, (1, 2), 1, zk_version=0, written_zxid=50)
    assert isr_joins_seen(None, created) == {1, 2}  # created with them
    loaded = LeaderIsr(1, 0, (1, 2), 1, zk_version=4, written_zxid=90)
    assert isr_joins_seen(None, loaded) == frozenset()  # read at a load: when, not known
    seen = replace(created, isr_seen_joining=isr_joins_seen(None, created))
    grown = LeaderIsr(1, 0, (1, 2, 3), 1, zk_version=1, written_zxid=60)
    assert isr_joins_seen(seen, grown) == {1, 2, 3}  # 3 added by the next version
    skipped = LeaderIsr(1, 0, (1, 2, 3), 1, zk_version=3, written_zxid=80)
    assert isr_joins_seen(seen, skipped) == {1, 2}  # 3 joined in a version not seen
    after_load = replace(loaded, isr_seen_joining=frozenset())
    kept = LeaderIsr(1, 0, (1, 2, 3), 1, zk_version=5, written_zxid=95)
    assert isr_joins_seen(after_load, kept) == {3}  # 1 and 2 still dated by the load
