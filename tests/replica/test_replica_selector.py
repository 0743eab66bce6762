"""KIP-392's rack-aware choice of the replica a consumer reads from: pure functions, no IO."""

from __future__ import annotations

from logkeel.server.replica.replica_selector import (
    FollowerView,
    ReplicaView,
    candidates,
    preferred_read_replica,
)

LEADER = ReplicaView(1, "r1", 100)


def test_no_client_rack_or_no_replica_in_it_reads_from_the_leader() -> None:
    followers = [ReplicaView(2, "r2", 100)]
    assert preferred_read_replica(None, LEADER, followers) == -1
    assert preferred_read_replica("", LEADER, followers) == -1
    assert preferred_read_replica("r9", LEADER, followers) == -1
    assert preferred_read_replica("r2", LEADER, []) == -1


def test_the_leader_wins_in_its_own_rack_even_over_a_follower_there() -> None:
    followers = [ReplicaView(2, "r1", 100)]
    assert preferred_read_replica("r1", LEADER, followers) == -1


def test_the_follower_in_the_clients_rack_is_named() -> None:
    followers = [ReplicaView(2, "r2", 100), ReplicaView(3, "r3", 100)]
    assert preferred_read_replica("r2", LEADER, followers) == 2
    assert preferred_read_replica("r3", LEADER, followers) == 3


def test_in_one_rack_the_furthest_then_most_recently_caught_up_then_highest_id_wins() -> None:
    furthest = [ReplicaView(2, "r2", 90), ReplicaView(3, "r2", 95)]
    assert preferred_read_replica("r2", LEADER, furthest) == 3
    fresher = [ReplicaView(2, "r2", 95, 10), ReplicaView(3, "r2", 95, 500)]
    assert preferred_read_replica("r2", LEADER, fresher) == 2
    tied = [ReplicaView(4, "r2", 95, 10), ReplicaView(2, "r2", 95, 10)]
    assert preferred_read_replica("r2", LEADER, tied) == 4


def test_candidates_are_in_sync_registered_followers_holding_the_offset() -> None:
    racks = {1: "r1", 2: "r2", 3: "r2", 4: "r2", 5: "r2"}
    followers = [
        FollowerView(2, True, 0, 50, last_caught_up_ms=900),  # holds offset 40
        FollowerView(3, False, 0, 50, last_caught_up_ms=900),  # out of the ISR
        FollowerView(4, True, 0, 30, last_caught_up_ms=900),  # behind the offset
        FollowerView(5, True, 45, 50, last_caught_up_ms=900),  # deleted it
        FollowerView(6, True, 0, 50, last_caught_up_ms=900),  # not registered
    ]
    assert candidates(followers, racks, 40, now_ms=1000) == [ReplicaView(2, "r2", 50, 100)]
    # At the follower's log end exactly: it holds the offset (the next record to come).
    assert [c.broker_id for c in candidates(followers, racks, 50, 1000)] == [2, 5]
