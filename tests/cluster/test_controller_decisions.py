"""The controller's per-partition decisions, as pure functions (no ZooKeeper)."""

from __future__ import annotations

from logkeel.cluster.controller import LiveBrokers, decide, imbalanced_partitions, initial_state
from logkeel.cluster.partition_state import NO_LEADER, PartitionRegistration
from logkeel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def cluster(live: set[int], shutting_down: set[int] = frozenset()) -> LiveBrokers:  # type: ignore[assignment]
    return LiveBrokers(frozenset(live), frozenset(shutting_down))


def reg(leader: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionRegistration:
    return PartitionRegistration(replicas, leader, 5, isr, 7)


def test_first_leader_is_the_first_live_replica_and_the_isr_the_live_ones() -> None:
    assert initial_state((2, 3, 1), cluster({1, 3})) == PartitionRegistration((2, 3, 1), 3, 0, (3, 1))
    assert initial_state((2, 3), cluster({2, 3}, {2})).leader == 3
    offline = initial_state((2, 3), cluster({1}))
    assert (offline.leader, offline.isr) == (NO_LEADER, (2, 3))


def test_dead_leader_is_replaced_from_the_isr_and_dead_followers_leave_it() -> None:
    after = decide(TP, reg(1, (1, 2, 3)), cluster({2, 3}), unclean=False, preferred=False)
    assert (after.leader, after.isr, after.leader_epoch) == (2, (2, 3), 6)
    follower_died = decide(TP, reg(1, (1, 2, 3)), cluster({1, 2}), unclean=False, preferred=False)
    assert (follower_died.leader, follower_died.isr, follower_died.leader_epoch) == (1, (1, 2), 5)
    unchanged = reg(1, (1, 2, 3))
    assert decide(TP, unchanged, cluster({1, 2, 3}), unclean=False, preferred=False) is unchanged


def test_offline_partition_leads_again_when_an_isr_member_returns() -> None:
    offline = decide(TP, reg(1, (1,)), cluster({2, 3}), unclean=False, preferred=False)
    assert (offline.leader, offline.isr) == (NO_LEADER, (1,))
    back = decide(TP, offline, cluster({1, 2, 3}), unclean=False, preferred=False)
    assert back.leader == 1
    unclean = decide(TP, reg(1, (1,)), cluster({2, 3}), unclean=True, preferred=False)
    assert unclean.leader == NO_LEADER  # no replica reported its log: nothing to rank


def test_controlled_shutdown_moves_leadership_unless_it_is_the_only_isr_member() -> None:
    moved = decide(TP, reg(1, (1, 2, 3)), cluster({1, 2, 3}, {1}), unclean=False, preferred=False)
    assert (moved.leader, moved.isr) == (2, (2, 3))
    alone = reg(1, (1,))
    assert decide(TP, alone, cluster({1, 2, 3}, {1}), unclean=False, preferred=False).leader == 1
    follower = decide(TP, reg(1, (1, 2, 3)), cluster({1, 2, 3}, {3}), unclean=False, preferred=False)
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
    back = decide(TP, regs[TopicPartition("t", 0)], cluster({1, 2, 3}), unclean=False, preferred=True)
    assert back.leader == 1


def test_a_replica_whose_log_dir_failed_loses_leadership_and_leaves_the_isr() -> None:
    failed = LiveBrokers(frozenset({1, 2, 3}), frozenset(), {1: {TP}})
    after = decide(TP, reg(1, (1, 2, 3)), failed, unclean=False, preferred=False)
    assert (after.leader, after.isr) == (2, (2, 3))
    other = TopicPartition("t", 1)
    assert decide(other, reg(1, (1, 2, 3)), failed, unclean=False, preferred=False).leader == 1
