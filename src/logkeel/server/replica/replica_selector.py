"""Which replica a consumer should read a partition from (KIP-392), decided by its leader.

``replica.selector.class`` names the rule: unset, consumers read from the leader only (Kafka's
default); ``org.apache.kafka.common.replica.RackAwareReplicaSelector``, the leader tells a
consumer whose ``client.rack`` (Fetch v11's ``rack_id``) matches the ``broker.rack`` of an
in-sync follower to read from that follower (``preferred_read_replica``). Kafka's semantics:

- the candidates are the leader and the in-sync followers that hold the fetch offset (their
  log end at or past it and their log start at or below it): a follower that lags or has
  deleted the offset would only send the consumer back;
- no client rack, or no candidate in it: the leader; the leader in it: the leader;
- else the candidate in the rack with the highest log end offset, then the one caught up most
  recently, then the highest broker id.

The leader itself is never named in a response (-1: keep reading from the leader).
Pure functions: the fetch path gathers the views (``partition_reads``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "FollowerView",
    "ReplicaView",
    "candidates",
    "preferred_read_replica",
    "rack_aware_select",
]

NO_PREFERRED_REPLICA = -1


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the leader knows of one replica (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int = 0


@dataclass(frozen=True, slots=True)
class FollowerView:
    """A follower as its leader tracks it, before the fetch offset filters it."""

    broker_id: int
    in_sync: bool
    log_start_offset: int
    log_end_offset: int
    last_caught_up_ms: int


def candidates(
    followers: Iterable[FollowerView],
    racks: Mapping[int, str | None],
    fetch_offset: int,
    now_ms: int,
) -> list[ReplicaView]:
    """The followers a consumer at ``fetch_offset`` may be sent to: in sync, holding the
    offset, and registered (``racks`` has the live brokers; a gone one has no endpoint)."""
    return [
        ReplicaView(
            f.broker_id,
            racks[f.broker_id],
            f.log_end_offset,
            max(0, now_ms - f.last_caught_up_ms),
        )
        for f in followers
        if f.in_sync
        and f.broker_id in racks
        and f.log_start_offset <= fetch_offset <= f.log_end_offset
    ]


def rack_aware_select(
    client_rack: str | None, leader: ReplicaView, followers: Iterable[ReplicaView]
) -> ReplicaView:
    """Kafka's RackAwareReplicaSelector over the leader and the candidate followers."""
    if not client_rack:
        return leader
    same_rack = [r for r in (leader, *followers) if r.rack == client_rack]
    if not same_rack or leader in same_rack:
        return leader
    return max(
        same_rack,
        key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms, r.broker_id),
    )


def preferred_read_replica(
    client_rack: str | None, leader: ReplicaView, followers: Iterable[ReplicaView]
) -> int:
    """The follower to name in the response, or -1 (read on from the leader)."""
    chosen = rack_aware_select(client_rack, leader, followers)
    return NO_PREFERRED_REPLICA if chosen is leader else chosen.broker_id
