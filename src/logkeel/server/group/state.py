"""A classic consumer group's state: members, generation, protocol, and the state machine.

Plain data with no clocks, timers, sockets or disk; the coordinator drives it. The states and
their allowed transitions are Kafka's:

- **Empty**: no members (also a "simple" group that only stores offsets). Joining starts a
  rebalance.
- **PreparingRebalance**: members are (re)joining; JoinGroup requests are parked until every
  known member has rejoined or the rebalance timeout passes.
- **CompletingRebalance**: the join phase is over; the leader computes the assignment and sends
  it in its SyncGroup, followers' SyncGroups are parked until it arrives.
- **Stable**: everyone has its assignment; heartbeats keep sessions alive.
- **Dead**: the group was deleted (or unloaded); nothing more happens to it.

A member parked in JoinGroup or SyncGroup waits on an ``asyncio.Future`` stored with it; the
coordinator completes those futures, the group only counts them.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TypeVar

from kio.schema.errors import ErrorCode

from logkeel.server.group.records import OffsetCommitValue

__all__ = [
    "ClassicGroup",
    "GroupState",
    "JoinResult",
    "Member",
    "SyncResult",
]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class GroupError(Exception):
    """A request that the group's state refuses; ``code`` is the Kafka error to answer."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = code
        super().__init__(message or code.name.upper())


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup is answered with (fields of JoinGroupResponse)."""

    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    # (member id, group instance id, metadata): only the leader gets them.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata), in the member's order of preference
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    # A member added in the current join phase: its session only starts once it has joined,
    # and it can be expired while it waits (a client that gave up would otherwise linger).
    is_new: bool = False

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def has_satisfied_heartbeat(self) -> bool:
        """A session expiry is ignored for an old member parked in a rebalance: it is alive."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise ValueError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


T = TypeVar("T")


def _complete(future: asyncio.Future[T] | None, result: T) -> bool:
    if future is None or future.done():
        return False
    future.set_result(result)
    return True


class ClassicGroup:
    """One group's membership and protocol state, and its committed offsets."""

    def __init__(
        self,
        group_id: str,
        now_ms: int,
        state: GroupState = GroupState.EMPTY,
        *,
        generation_id: int = 0,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        leader_id: str | None = None,
        state_timestamp: int | None = None,
    ) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = state
        self.state_timestamp: int | None = now_ms if state_timestamp is None else state_timestamp
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.members: dict[str, Member] = {}  # insertion order: the next leader is the oldest
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_join_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self._protocol_votes: Counter[str] = Counter()
        self.new_member_added = False
        self.offsets: dict[tuple[str, int], OffsetCommitValue] = {}

    def __repr__(self) -> str:
        return (
            f"ClassicGroup({self.group_id!r}, {self.state}, generation {self.generation_id}, "
            f"{len(self.members)} members)"
        )

    # -- state --------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def is_empty(self) -> bool:
        return self.state == GroupState.EMPTY

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise RuntimeError(
                f"group {self.group_id}: illegal transition from {self.state} to {target}"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp = now_ms

    # -- members ------------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> Member:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        self.pending_join_members.add(member_id)

    def has_static_member(self, instance_id: str) -> bool:
        return instance_id in self.static_members

    def static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def add(self, member: Member, join_future: asyncio.Future[JoinResult] | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._protocol_votes.update(member.protocol_names())
        member.join_future = join_future
        if join_future is not None:
            self.num_awaiting_join += 1
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._protocol_votes.subtract(member.protocol_names())
            if member.is_awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(
        self,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_future: asyncio.Future[JoinResult] | None,
    ) -> None:
        self._protocol_votes.subtract(member.protocol_names())
        member.protocols = protocols
        self._protocol_votes.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        replaced = member.join_future
        if join_future is not None and replaced is None:
            self.num_awaiting_join += 1
        elif join_future is None and replaced is not None:
            self.num_awaiting_join -= 1
        member.join_future = join_future
        if replaced is not None and replaced is not join_future:
            # A retried JoinGroup (the client gave up on the first): the older one is answered
            # so that nothing waits forever.
            _complete(replaced, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """A static member rejoined without its member id: it gets a new one and keeps the rest.

        Whoever still waits under the old id is fenced (FENCED_INSTANCE_ID).
        """
        old = self.members.pop(old_id)
        self.complete_join(old, JoinResult(ErrorCode.fenced_instance_id, old_id))
        self.complete_sync(old, SyncResult(ErrorCode.fenced_instance_id))
        new = Member(
            new_id,
            old.group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            list(old.protocols),
            old.assignment,
        )
        self.members[new_id] = new
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        return new

    def clear_members(self, now_ms: int) -> list[Member]:
        """Removes every member at once, keeping the offsets: the group became a consumer
        group (online migration). Whoever waits in JoinGroup or SyncGroup is answered
        REBALANCE_IN_PROGRESS, so it comes back to the consumer group."""
        gone = list(self.members.values())
        for member in gone:
            self.complete_join(
                member, JoinResult(ErrorCode.rebalance_in_progress, member.member_id)
            )
            self.complete_sync(member, SyncResult(ErrorCode.rebalance_in_progress))
        self.members = {}
        self.static_members = {}
        self.pending_join_members.clear()
        self.pending_sync_members.clear()
        self.num_awaiting_join = 0
        self._protocol_votes.clear()
        self.leader_id = None
        self.protocol_name = None
        self.previous_state = self.state
        self.state = GroupState.EMPTY
        self.state_timestamp = now_ms
        return gone

    def validate_member(self, member_id: str, instance_id: str | None) -> None:
        """Raises GroupError: UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID for a stale static id."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                raise GroupError(ErrorCode.unknown_member_id)
            if existing != member_id:
                raise GroupError(ErrorCode.fenced_instance_id)
        if member_id not in self.members:
            raise GroupError(ErrorCode.unknown_member_id)

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"

    # -- join / sync bookkeeping ---------------------------------------------------------------

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def complete_join(self, member: Member, result: JoinResult) -> bool:
        if member.join_future is None:
            return False
        future, member.join_future = member.join_future, None
        self.num_awaiting_join -= 1
        return _complete(future, result)

    def complete_sync(self, member: Member, result: SyncResult) -> bool:
        if member.sync_future is None:
            return False
        future, member.sync_future = member.sync_future, None
        return _complete(future, result)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keeps the leader if it rejoined, else picks a member that did; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def has_received_sync_from_all(self) -> bool:
        return not self.pending_sync_members

    # -- protocols ------------------------------------------------------------------------------

    def _candidates(self) -> set[str]:
        n = len(self.members)
        return {name for name, votes in self._protocol_votes.items() if votes == n}

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Can a member with these protocols join? In an empty group anything non-empty can."""
        if self.state == GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self._protocol_votes.get(name, 0) == n for name in names
        )

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support."""
        if not self.members:
            raise RuntimeError("cannot select a protocol for an empty group")
        candidates = self._candidates()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        # Ties go to the protocol first voted for, so the choice does not depend on hashing.
        return next(name for name in votes if votes[name] == best)

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        return [
            (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, from their "consumer" protocol metadata; None when
        unknown (another protocol type, or metadata that does not parse)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None if self.members or self.protocol_type else set()
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics


def parse_subscription_topics(data: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: they all start with version
    int16 then an array of strings), or None if it does not parse."""
    import struct

    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or n > len(data):
            return None
        topics = []
        for _ in range(n):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if length < 0 or pos + length > len(data):
                return None
            topics.append(data[pos : pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
