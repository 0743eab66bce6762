"""A consumer-protocol group (KIP-848) as a pure state machine: no sockets, no asyncio, time
given by the caller.

The group has an epoch, bumped whenever what the assignment depends on changes (a member joins
or leaves, a subscription changes, a subscribed topic gains partitions). The broker computes
the target assignment of that epoch with the group's assignor; each member then converges to
its target through its own member epoch, one heartbeat at a time, with incremental
revocation:

- a member that owns partitions no longer in its target is told to revoke them and keeps its
  epoch (UNREVOKED_PARTITIONS) until a heartbeat shows it no longer owns them; past its
  rebalance timeout it is fenced (removed);
- a member gets a partition of its target only once no other member holds it, neither
  assigned nor pending revocation (UNRELEASED_PARTITIONS until then), so no partition is ever
  held by two members at once;
- once it owns nothing it must give up it reaches the target epoch.

Static members (``group.instance.id``) leave with epoch -2 and keep their assignment for a
session timeout; rejoining with the same instance id takes it over under the new member id.
Subscriptions are topic names or a regex. Kafka takes RE2/J syntax; this uses Python's ``re``
with a full match, which agrees for the common patterns (character classes, ``.*``,
alternation, anchors); ``topic_regex`` refuses at subscription what does not compile, what RE2
lacks and what would backtrack exponentially.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from logkeel.server.group.assignors import (
    Assignment,
    MemberSubscription,
    assignor_named,
    to_assignment,
)
from logkeel.server.group.topic_regex import TopicRegexError, compile_topic_regex

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "STATIC_LEAVE_EPOCH",
    "ConsumerGroup",
    "ConsumerGroupSettings",
    "ClassicJoin",
    "ClassicJoinResult",
    "ClassicMemberMetadata",
    "ConsumerGroupState",
    "ConsumerMember",
    "GroupHeartbeat",
    "HeartbeatResult",
    "MemberState",
]

JOIN_EPOCH = 0
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings:
    """The broker's ``group.consumer.*`` settings (Kafka's names and defaults)."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    # group.consumer.{min,max}.{session.timeout,heartbeat.interval}.ms: the broker's config
    # checks them against the two values above; kept here for what they bound.
    session_timeout_bounds_ms: tuple[int, int] = (45_000, 60_000)
    heartbeat_interval_bounds_ms: tuple[int, int] = (5_000, 15_000)
    # group.consumer.migration.policy: which conversions between a classic and a consumer
    # group are allowed (disabled, upgrade, downgrade, bidirectional; Kafka 4's default).
    migration_policy: str = "bidirectional"

    def __post_init__(self) -> None:
        if self.migration_policy not in MIGRATION_POLICIES:
            raise ValueError(f"group.consumer.migration.policy {self.migration_policy!r}")
        for value, (low, high), what in (
            (self.session_timeout_ms, self.session_timeout_bounds_ms, "session timeout"),
            (self.heartbeat_interval_ms, self.heartbeat_interval_bounds_ms, "heartbeat interval"),
        ):
            if not low <= value <= high:
                raise ValueError(f"consumer group {what} {value} not within [{low}, {high}]")
        if not self.assignors:
            raise ValueError("group.consumer.assignors needs at least one assignor")
        unknown = [a for a in self.assignors if assignor_named(a) is None]
        if unknown:
            raise ValueError(f"group.consumer.assignors: unknown assignor(s) {unknown}")


class ConsumerGroupState(enum.StrEnum):
    """Kafka's ConsumerGroup states, as ListGroups/ConsumerGroupDescribe show them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


class MemberState(enum.StrEnum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class GroupHeartbeat:
    """A ConsumerGroupHeartbeat request, decoded (topic ids already resolved to names). None
    means "unchanged since the last heartbeat", as on the wire."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    # Which topics the member's principal may DESCRIBE (None: every topic): a regex only
    # resolves to those, as in Kafka.
    topic_filter: Callable[[str], bool] | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member using the classic protocol (JoinGroup/SyncGroup/Heartbeat) in a consumer
    group has that the others do not: its own session timeout and its protocols."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    def protocol_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.protocols)


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A classic JoinGroup to a consumer group, its subscription already parsed."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    topics: tuple[str, ...]
    owned: Assignment
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClassicJoinResult:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_name: str | None = None


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0
    # Set while the member owes a revocation: past it the member is fenced.
    rebalance_deadline_ms: int | None = None
    # What the member was last told, so an unchanged assignment is not resent.
    last_sent: Assignment | None = None
    # A static member that left with epoch -2: kept for its session, to be taken over.
    left_temporarily: bool = False
    # Set for a member that speaks the classic protocol (online migration).
    classic: ClassicMemberMetadata | None = None
    # The DESCRIBE check of its last heartbeat's principal, for its regex (not written to the
    # log: a member read back resolves its regex unfiltered until it heartbeats again).
    topic_filter: Callable[[str], bool] | None = None

    def subscribes_to(self, topic: str) -> bool:
        if topic in self.subscribed_topic_names:
            return True
        return (
            self.subscribed_topic_regex is not None
            and re.fullmatch(self.subscribed_topic_regex, topic) is not None
            and (self.topic_filter is None or self.topic_filter(topic))
        )

    def held(self) -> set[tuple[str, int]]:
        """What the member may still hold: its assignment and what it has yet to revoke."""
        return _pairs(self.assigned) | _pairs(self.pending_revocation)


def _pairs(a: Mapping[str, frozenset[int]]) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


class GroupFailure(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class ConsumerGroup:
    """One consumer-protocol group: members, epochs, target and current assignments."""

    def __init__(self, group_id: str, settings: ConsumerGroupSettings) -> None:
        self.group_id = group_id
        self.settings = settings
        # The group's own timings: the broker's, or its group configs' (set by the coordinator).
        self.session_timeout_ms = settings.session_timeout_ms
        self.heartbeat_interval_ms = settings.heartbeat_interval_ms
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}
        # The partition counts of the subscribed topics when the epoch was last bumped.
        self.subscribed_partitions: dict[str, int] = {}

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup({self.group_id!r}, epoch {self.group_epoch}, "
            f"{len(self.members)} members)"
        )

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch != self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(
            m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
            for m in self.members.values()
        ):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owners(self) -> dict[tuple[str, int], str]:
        """Who may hold each partition now (assigned or pending revocation)."""
        out: dict[tuple[str, int], str] = {}
        for m in self.members.values():
            for tp in m.held():
                out[tp] = m.member_id
        return out

    def preferred_assignor(self) -> str:
        """The assignor most members ask for, else the first of ``group.consumer.assignors``."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor is not None:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return self.settings.assignors[0]
        return max(sorted(votes), key=lambda a: votes[a])

    def subscribed_topics(self, topics: Mapping[str, int]) -> dict[str, int]:
        """The existing topics some member subscribes to, with their partition counts."""
        return {
            t: n
            for t, n in topics.items()
            if any(m.subscribes_to(t) for m in self.members.values())
        }

    def next_deadline(self) -> int | None:
        deadlines = [m.session_deadline_ms for m in self.members.values()]
        deadlines += [
            m.rebalance_deadline_ms
            for m in self.members.values()
            if m.rebalance_deadline_ms is not None
        ]
        return min(deadlines, default=None)

    # -- heartbeat -----------------------------------------------------------------------------

    def heartbeat(
        self,
        req: GroupHeartbeat,
        topics: Mapping[str, int],
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
    ) -> HeartbeatResult:
        """Serves one ConsumerGroupHeartbeat; ``topics`` is the cluster's topics and their
        partition counts now."""
        try:
            self._validate(req)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(req, topics, now_ms)
            member = self._member_for(req, client_id, client_host)
        except GroupFailure as exc:
            return HeartbeatResult(exc.code, exc.message, req.member_id or None, req.member_epoch)
        changed = self._update_member(member, req)
        member.session_deadline_ms = now_ms + self.session_timeout_ms
        if changed or self._metadata_changed(topics):
            self._bump(topics)
        self._maybe_assign(topics)
        self._reconcile(member, req.owned, now_ms)
        return self._answer(member, full=req.member_epoch == JOIN_EPOCH or req.owned is not None)

    def _validate(self, req: GroupHeartbeat) -> None:
        """Kafka's request checks (INVALID_REQUEST with its messages, and the others)."""
        if not req.member_id:
            raise GroupFailure(ErrorCode.invalid_request, "MemberId can't be empty.")
        if req.member_epoch < STATIC_LEAVE_EPOCH:
            raise GroupFailure(ErrorCode.invalid_request, "MemberEpoch is invalid.")
        if req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            raise GroupFailure(ErrorCode.invalid_request, "InstanceId can't be null.")
        if req.member_epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms == -1:
                raise GroupFailure(
                    ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided."
                )
            if req.owned is None or any(req.owned.values()):
                raise GroupFailure(ErrorCode.invalid_request, "TopicPartitions must be empty.")
            if not req.subscribed_topic_names and req.subscribed_topic_regex is None:
                raise GroupFailure(
                    ErrorCode.invalid_request,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
        if req.subscribed_topic_regex is not None:
            try:
                compile_topic_regex(req.subscribed_topic_regex)
            except TopicRegexError as exc:
                raise GroupFailure(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex {req.subscribed_topic_regex!r} is not a valid "
                    f"regular expression: {exc}",
                ) from None
        if req.server_assignor is not None and req.server_assignor not in self._assignor_names():
            raise GroupFailure(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self._assignor_names())}.",
            )

    def _assignor_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in map(assignor_named, self.settings.assignors) if a is not None)

    def _member_for(self, req: GroupHeartbeat, client_id: str, client_host: str) -> ConsumerMember:
        member = self.members.get(req.member_id)
        if member is not None and member.classic is not None:
            raise GroupFailure(
                ErrorCode.unknown_member_id,
                f"Member {req.member_id} uses the classic protocol in group {self.group_id}.",
            )
        if req.member_epoch != JOIN_EPOCH:
            if member is None:
                raise GroupFailure(
                    ErrorCode.unknown_member_id,
                    f"Member {req.member_id} is not a member of group {self.group_id}.",
                )
            self._check_epoch(member, req)
            return member
        if req.instance_id is not None:
            old_id = self.static_members.get(req.instance_id)
            old = self.members.get(old_id) if old_id is not None else None
            # A static classic member that stopped (it sends no LeaveGroup) is taken over by
            # its instance restarted with the consumer protocol: the rolling upgrade.
            if old is not None and (old.left_temporarily or old.classic is not None):
                old.classic = None
                return self._replace_static(old, req.member_id, req.instance_id)
            if old is not None and old_id != req.member_id:
                raise GroupFailure(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {old_id} with instance id {req.instance_id} is still "
                    "in the group.",
                )
        if member is not None:
            # A known member that joins again has lost its state: it starts over owning nothing.
            member.member_epoch = 0
            member.assigned = {}
            member.pending_revocation = {}
            member.state = MemberState.STABLE
            member.rebalance_deadline_ms = None
            member.last_sent = None
            return member
        if len(self.members) >= self.settings.max_size:
            raise GroupFailure(
                ErrorCode.group_max_size_reached,
                f"The group {self.group_id} has reached its maximum capacity of "
                f"{self.settings.max_size} members.",
            )
        member = ConsumerMember(
            req.member_id,
            req.instance_id,
            req.rack_id,
            client_id,
            client_host,
            req.rebalance_timeout_ms,
        )
        self.members[req.member_id] = member
        if req.instance_id is not None:
            self.static_members[req.instance_id] = req.member_id
        return member

    @staticmethod
    def _check_epoch(member: ConsumerMember, req: GroupHeartbeat) -> None:
        """FENCED_MEMBER_EPOCH for an epoch from the future, or from the past unless it is the
        previous one and the member owns no more than it was given (a lost response)."""
        epoch = req.member_epoch
        if epoch > member.member_epoch:
            raise GroupFailure(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}).",
            )
        if epoch < member.member_epoch:
            owned = _pairs(req.owned) if req.owned is not None else None
            if epoch != member.previous_member_epoch or (
                owned is not None and not owned <= _pairs(member.assigned)
            ):
                raise GroupFailure(
                    ErrorCode.fenced_member_epoch,
                    f"The consumer group member has a smaller member epoch ({epoch}) than the "
                    f"one known by the group coordinator ({member.member_epoch}).",
                )

    def _replace_static(
        self, old: ConsumerMember, member_id: str, instance_id: str
    ) -> ConsumerMember:
        """A static member back under a new member id keeps its epoch and assignment."""
        del self.members[old.member_id]
        target = self.target.pop(old.member_id, None)
        if target is not None:
            self.target[member_id] = target
        old.member_id = member_id
        old.left_temporarily = False
        old.last_sent = None
        self.members[member_id] = old
        self.static_members[instance_id] = member_id
        return old

    def _update_member(self, member: ConsumerMember, req: GroupHeartbeat) -> bool:
        """Applies the changed fields; True if the assignment depends on a change."""
        changed = member.member_epoch == 0 and member.member_id not in self.target
        if req.topic_filter is not None:
            member.topic_filter = req.topic_filter
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None and req.rack_id != member.rack_id:
            member.rack_id = req.rack_id
            changed = True
        if (
            req.subscribed_topic_names is not None
            and tuple(sorted(req.subscribed_topic_names)) != member.subscribed_topic_names
        ):
            member.subscribed_topic_names = tuple(sorted(req.subscribed_topic_names))
            changed = True
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None  # "" clears it
            if regex != member.subscribed_topic_regex:
                member.subscribed_topic_regex = regex
                changed = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            changed = True
        return changed

    def _metadata_changed(self, topics: Mapping[str, int]) -> bool:
        return self.subscribed_topics(topics) != self.subscribed_partitions

    def _bump(self, topics: Mapping[str, int]) -> None:
        self.group_epoch = max(self.group_epoch, self.assignment_epoch) + 1
        self.subscribed_partitions = self.subscribed_topics(topics)

    def _maybe_assign(self, topics: Mapping[str, int]) -> None:
        """Computes the target assignment of the group epoch if it is not computed yet."""
        if self.assignment_epoch == self.group_epoch:
            return
        partitions = self.subscribed_topics(topics)
        subs = {
            m.member_id: MemberSubscription(
                frozenset(t for t in partitions if m.subscribes_to(t)), m.rack_id
            )
            for m in self.members.values()
        }
        assignor = assignor_named(self.preferred_assignor())
        assert assignor is not None, "validated with the settings"
        self.target = assignor.assign(subs, partitions, self.target)
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, member: ConsumerMember, owned: Assignment | None, now_ms: int) -> None:
        """Moves the member towards its target (Kafka's CurrentAssignmentBuilder)."""
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if owned is None or _pairs(owned) & _pairs(member.pending_revocation):
                return  # it stays until it shows it revoked them, or its rebalance timeout
            member.pending_revocation = {}
            member.rebalance_deadline_ms = None
            member.state = MemberState.STABLE
        if member.member_epoch == self.assignment_epoch and member.state == MemberState.STABLE:
            return
        target = _pairs(self.target.get(member.member_id, {}))
        current = _pairs(member.assigned)
        keep = current & target
        revoke = current - target
        if revoke:
            member.assigned = to_assignment(keep)
            member.pending_revocation = to_assignment(revoke)
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.rebalance_deadline_ms = now_ms + member.rebalance_timeout_ms
            return
        held_by_others = {tp for m in self.members.values() if m is not member for tp in m.held()}
        free = (target - current) - held_by_others
        member.assigned = to_assignment(keep | free)
        member.state = (
            MemberState.UNRELEASED_PARTITIONS
            if (target - current) & held_by_others
            else MemberState.STABLE
        )
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch

    def _answer(self, member: ConsumerMember, *, full: bool) -> HeartbeatResult:
        assignment = None
        if full or member.last_sent != member.assigned:
            assignment = dict(member.assigned)
            member.last_sent = assignment
        return HeartbeatResult(
            ErrorCode.none,
            None,
            member.member_id,
            member.member_epoch,
            self.heartbeat_interval_ms,
            assignment,
        )

    # -- classic members (online migration) ---------------------------------------------------

    def classic_protocol_names(self, excluding: str | None = None) -> set[str] | None:
        """The protocols every classic member supports (None: there are no classic members)."""
        names: set[str] | None = None
        for m in self.members.values():
            if m.classic is None or m.member_id == excluding:
                continue
            mine = set(m.classic.protocol_names())
            names = mine if names is None else names & mine
        return names

    def has_consumer_members(self) -> bool:
        return any(m.classic is None for m in self.members.values())

    def join_classic(
        self, req: ClassicJoin, topics: Mapping[str, int], now_ms: int
    ) -> ClassicJoinResult:
        """A classic member's JoinGroup: it joins (or rejoins) like a consumer-protocol member
        whose heartbeat carries its subscription and what it still owns, and is answered with
        its member epoch as the generation. An eager member owns nothing as it joins, so what
        it had to revoke is released at once."""
        fail = ClassicJoinResult(ErrorCode.inconsistent_group_protocol, req.member_id)
        shared = self.classic_protocol_names(excluding=req.member_id)
        names = [n for n, _ in req.protocols]
        if req.protocol_type != "consumer" or not names:
            return fail
        usable = [n for n in names if shared is None or n in shared]
        if not usable:
            return fail
        member = self.members.get(req.member_id)
        if member is not None and member.classic is None:
            return ClassicJoinResult(ErrorCode.unknown_member_id, req.member_id)
        if req.instance_id is not None:
            old_id = self.static_members.get(req.instance_id)
            if old_id is not None and old_id != req.member_id:
                # The instance restarted (with either protocol before): it takes the place over.
                member = self._replace_static(self.members[old_id], req.member_id, req.instance_id)
            elif member is not None and member.instance_id != req.instance_id:
                return ClassicJoinResult(ErrorCode.fenced_instance_id, req.member_id)
        if member is None:
            if len(self.members) >= self.settings.max_size:
                return ClassicJoinResult(ErrorCode.group_max_size_reached, req.member_id)
            member = ConsumerMember(
                req.member_id,
                req.instance_id,
                req.rack_id,
                req.client_id,
                req.client_host,
                req.rebalance_timeout_ms,
            )
            self.members[req.member_id] = member
            if req.instance_id is not None:
                self.static_members[req.instance_id] = req.member_id
        member.classic = ClassicMemberMetadata(req.session_timeout_ms, req.protocols)
        member.session_deadline_ms = now_ms + req.session_timeout_ms
        heartbeat = GroupHeartbeat(
            req.member_id,
            member.member_epoch,
            req.instance_id,
            req.rack_id,
            req.rebalance_timeout_ms,
            req.topics,
            None,
            None,
            req.owned,
        )
        if self._update_member(member, heartbeat) or self._metadata_changed(topics):
            self._bump(topics)
        self._maybe_assign(topics)
        if member.state != MemberState.UNREVOKED_PARTITIONS:
            member.rebalance_deadline_ms = None  # it rejoined as asked
        self._reconcile(member, req.owned, now_ms)
        if member.state == MemberState.UNREVOKED_PARTITIONS and not (
            _pairs(req.owned) & _pairs(member.pending_revocation)
        ):
            self._reconcile(member, req.owned, now_ms)
        return ClassicJoinResult(ErrorCode.none, member.member_id, member.member_epoch, usable[0])

    def _classic_member(self, member_id: str, instance_id: str | None) -> ConsumerMember:
        member = self.members.get(member_id)
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is not None and known != member_id:
                raise GroupFailure(ErrorCode.fenced_instance_id)
        if member is None or member.classic is None:
            raise GroupFailure(ErrorCode.unknown_member_id)
        return member

    def sync_classic(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        now_ms: int,
    ) -> tuple[ErrorCode, Assignment]:
        """A classic member's SyncGroup: its current assignment at its member epoch."""
        try:
            member = self._classic_member(member_id, instance_id)
        except GroupFailure as exc:
            return exc.code, {}
        assert member.classic is not None
        if generation != member.member_epoch:
            return ErrorCode.illegal_generation, {}
        if (protocol_type is not None and protocol_type != "consumer") or (
            protocol_name is not None and protocol_name not in member.classic.protocol_names()
        ):
            return ErrorCode.inconsistent_group_protocol, {}
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        member.last_sent = dict(member.assigned)
        return ErrorCode.none, dict(member.assigned)

    def heartbeat_classic(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> ErrorCode:
        """A classic member's Heartbeat: REBALANCE_IN_PROGRESS when it must rejoin (to revoke,
        to take partitions freed for it, or to move to the group's epoch), within its
        rebalance timeout."""
        try:
            member = self._classic_member(member_id, instance_id)
        except GroupFailure as exc:
            return exc.code
        assert member.classic is not None
        if generation != member.member_epoch:
            return ErrorCode.illegal_generation
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        if not self._classic_must_rejoin(member):
            return ErrorCode.none
        if member.rebalance_deadline_ms is None:
            member.rebalance_deadline_ms = now_ms + member.rebalance_timeout_ms
        return ErrorCode.rebalance_in_progress

    def _classic_must_rejoin(self, member: ConsumerMember) -> bool:
        if member.member_epoch != self.assignment_epoch:
            return True
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            return True
        if member.state == MemberState.UNRELEASED_PARTITIONS:
            wanted = _pairs(self.target.get(member.member_id, {})) - _pairs(member.assigned)
            held = {tp for m in self.members.values() if m is not member for tp in m.held()}
            return bool(wanted - held)
        return False

    def leave_classic(
        self, member_id: str, instance_id: str | None, topics: Mapping[str, int]
    ) -> ErrorCode:
        try:
            member = self._classic_member(member_id, instance_id)
        except GroupFailure as exc:
            return exc.code
        self.remove(member.member_id, topics)
        return ErrorCode.none

    # -- leaving and expiry --------------------------------------------------------------------

    def _leave(
        self, req: GroupHeartbeat, topics: Mapping[str, int], now_ms: int
    ) -> HeartbeatResult:
        member = self.members.get(req.member_id)
        if member is None and req.instance_id is not None:
            known = self.static_members.get(req.instance_id)
            member = self.members.get(known) if known is not None else None
            if member is not None:
                raise GroupFailure(
                    ErrorCode.fenced_instance_id,
                    f"Static member {req.member_id} with instance id {req.instance_id} was "
                    f"replaced by {member.member_id}.",
                )
        if member is None:
            raise GroupFailure(
                ErrorCode.unknown_member_id,
                f"Member {req.member_id} is not a member of group {self.group_id}.",
            )
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # Kept, assignment and all, for its session: the instance is expected back.
            member.left_temporarily = True
            member.session_deadline_ms = now_ms + self.session_timeout_ms
            member.rebalance_deadline_ms = None
            # The closed instance owns nothing: what it had to revoke is released; what it
            # still waits for it gets when it is back (the state keeps it reconciling).
            member.pending_revocation = {}
            at_target = _pairs(member.assigned) == _pairs(self.target.get(member.member_id, {}))
            member.state = MemberState.STABLE if at_target else MemberState.UNRELEASED_PARTITIONS
        else:
            self.remove(member.member_id, topics)
        return HeartbeatResult(ErrorCode.none, None, req.member_id, req.member_epoch)

    def remove(self, member_id: str, topics: Mapping[str, int]) -> None:
        """The member is gone (left, fenced or expired): the epoch moves on without it."""
        member = self.members.pop(member_id, None)
        if member is None:
            return
        if member.instance_id is not None and self.static_members.get(member.instance_id) == (
            member_id
        ):
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        self._bump(topics)
        self._maybe_assign(topics)

    def expire(self, now_ms: int, topics: Mapping[str, int]) -> list[str]:
        """Removes the members whose session ended, or who did not revoke within their
        rebalance timeout; returns their ids."""
        gone = [
            m.member_id
            for m in self.members.values()
            if m.session_deadline_ms <= now_ms
            or (m.rebalance_deadline_ms is not None and m.rebalance_deadline_ms <= now_ms)
        ]
        for member_id in gone:
            self.remove(member_id, topics)
        return gone

    def metadata_changed(self, topics: Mapping[str, int]) -> bool:
        """A topic appeared, went or grew: bumps the epoch if a subscription is affected."""
        if not self.members or not self._metadata_changed(topics):
            return False
        self._bump(topics)
        self._maybe_assign(topics)
        return True

    # -- offsets -------------------------------------------------------------------------------

    def validate_offset_commit(
        self, member_id: str, member_epoch: int, api_version: int, transactional: bool = False
    ) -> None:
        """Kafka's rules for OffsetCommit (and TxnOffsetCommit, ``transactional``) to a consumer
        group: raises GroupFailure."""
        if member_epoch < 0 and not self.members:
            return  # admin or manual commit while nobody consumes
        if transactional and member_epoch < 0 and not member_id:
            return  # an old TxnOffsetCommit: the transaction coordinator fences zombies
        member = self._member_of(member_id)
        if member.classic is not None:
            # A classic member commits with its generation, which is its member epoch.
            if member_epoch != member.member_epoch:
                raise GroupFailure(ErrorCode.illegal_generation)
            return
        if api_version < 9 and not transactional:
            raise GroupFailure(
                ErrorCode.unsupported_version,
                "OffsetCommit version 9 or above must be used by members using the consumer "
                "group protocol",
            )
        self._check_offset_epoch(member, member_epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        """Kafka's rules for OffsetFetch v9+ naming a member of a consumer group: raises
        GroupFailure. Without a member (admin tools) anyone may fetch."""
        if member_id is None and member_epoch < 0:
            return
        self._check_offset_epoch(self._member_of(member_id or ""), member_epoch)

    def _member_of(self, member_id: str) -> ConsumerMember:
        member = self.members.get(member_id)
        if member is None:
            raise GroupFailure(ErrorCode.unknown_member_id)
        return member

    @staticmethod
    def _check_offset_epoch(member: ConsumerMember, member_epoch: int) -> None:
        if member_epoch > member.member_epoch:
            raise GroupFailure(ErrorCode.fenced_member_epoch)
        if member_epoch < member.member_epoch:
            raise GroupFailure(ErrorCode.stale_member_epoch)
