"""Converting a group between the classic and the consumer protocol, as Kafka 4 does (KIP-848's
online migration, ``group.consumer.migration.policy``). Pure: no timers, no IO.

- **Upgrade**: the first ConsumerGroupHeartbeat to a classic group that has members turns it
  into a consumer group. Every classic member becomes a member of it that keeps speaking the
  classic protocol, with its subscription (from its JoinGroup metadata), its current assignment
  (from the assignment its leader gave it) and the group's generation as its member epoch; the
  target assignment is what they hold, so the new member gets partitions only as they revoke
  them. Refused (GROUP_ID_NOT_FOUND, with Kafka's reason) when the policy forbids it, the
  group does not use the ``consumer`` protocol type, a member's assignment carries user data
  (a custom client-side assignor the broker cannot stand in for), or it is too big.
- **Downgrade**: when the last consumer-protocol member is gone and only classic members
  remain, the group becomes a classic group again: its members with their current assignments
  at a generation equal to the group epoch; the coordinator then starts a rebalance, so they
  rejoin it through the classic protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

from logkeel.server.group.assignors import Assignment
from logkeel.server.group.classic_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    assignment_bytes,
    parse_assignment,
    parse_subscription,
)
from logkeel.server.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupSettings,
    ConsumerMember,
)
from logkeel.server.group.state import ClassicGroup, GroupState, Member

__all__ = [
    "ClassicGeneration",
    "MigrationRefused",
    "downgrade_allowed",
    "from_classic",
    "install",
    "to_classic",
    "upgrade_allowed",
]


class MigrationRefused(Exception):
    """The group cannot be converted; the message is Kafka's reason."""


def upgrade_allowed(policy: str) -> bool:
    return policy in ("upgrade", "bidirectional")


def downgrade_allowed(policy: str) -> bool:
    return policy in ("downgrade", "bidirectional")


def from_classic(
    classic: ClassicGroup, settings: ConsumerGroupSettings, now_ms: int
) -> ConsumerGroup:
    """The consumer group a classic group with members becomes; raises MigrationRefused."""
    gid = classic.group_id
    if not upgrade_allowed(settings.migration_policy):
        raise MigrationRefused(
            f"Cannot upgrade classic group {gid} to consumer group because the online upgrade "
            "is disabled."
        )
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise MigrationRefused(
            f"Cannot upgrade classic group {gid} to consumer group because it is not using "
            "the consumer embedded protocol."
        )
    if len(classic.members) > settings.max_size:
        raise MigrationRefused(
            f"Cannot upgrade classic group {gid} to consumer group because its group size "
            "exceeds the consumer group maximum size."
        )
    group = ConsumerGroup(gid, settings)
    epoch = classic.generation_id
    for m in classic.members.values():
        assignment = _current_assignment(m, gid)
        protocol = classic.protocol_name if classic.protocol_name else m.protocols[0][0]
        subscription = parse_subscription(m.metadata(protocol)) if m.protocols else None
        if subscription is None:
            raise MigrationRefused(
                f"Cannot upgrade classic group {gid} to consumer group because member "
                f"{m.member_id} has no valid consumer protocol subscription."
            )
        member = ConsumerMember(
            m.member_id,
            m.group_instance_id,
            subscription.rack_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(subscription.topics)),
            member_epoch=epoch,
            previous_member_epoch=epoch,
            assigned=assignment,
            session_deadline_ms=now_ms + m.session_timeout_ms,
            classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)),
        )
        group.members[m.member_id] = member
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
        group.target[m.member_id] = dict(assignment)
    group.group_epoch = group.assignment_epoch = epoch
    return group


def _current_assignment(member: Member, group_id: str) -> Assignment:
    parsed = parse_assignment(member.assignment)
    if parsed is None:
        raise MigrationRefused(
            f"Cannot upgrade classic group {group_id} to consumer group because member "
            f"{member.member_id}'s assignment is not a consumer protocol assignment."
        )
    assignment, user_data = parsed
    if user_data:
        raise MigrationRefused(
            f"Cannot upgrade classic group {group_id} to consumer group because an "
            "unsupported custom assignor is in use. Please refer to the documentation or "
            "switch to a default assignor before re-attempting the upgrade."
        )
    return assignment


@dataclass(frozen=True, slots=True)
class ClassicGeneration:
    """What the classic group takes over: its generation, protocol and members."""

    generation: int
    protocol_name: str
    members: list[Member]

    def assignments(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members}


def to_classic(group: ConsumerGroup, max_size: int) -> ClassicGeneration | None:
    """The classic generation a consumer group with only classic members left becomes, or
    None if it must stay a consumer group (a consumer-protocol member is in, a static one
    away included, the policy forbids it, or there are more members than group.max.size)."""
    members = list(group.members.values())
    if not members or not downgrade_allowed(group.settings.migration_policy):
        return None
    classic = [m.classic for m in members]
    if any(c is None for c in classic) or len(members) > max_size:
        return None
    names = group.classic_protocol_names()
    first = members[0].classic
    assert first is not None
    protocol = next((n for n in first.protocol_names() if names and n in names), None)
    if protocol is None:
        return None
    out = []
    for m in members:
        meta = m.classic
        assert meta is not None
        # What it may still hold: its assignment and what it has yet to revoke. The rebalance
        # the coordinator starts makes it give up whatever the new leader does not give it.
        held = dict(m.assigned)
        for t, ps in m.pending_revocation.items():
            held[t] = held.get(t, frozenset()) | ps
        out.append(
            Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                meta.session_timeout_ms,
                CONSUMER_PROTOCOL_TYPE,
                list(meta.protocols),
                assignment_bytes(held),
            )
        )
    # The generation the members know: their epoch (the leave that left them alone moved the
    # group epoch past it), so their commits and heartbeats until they rejoin are accepted.
    return ClassicGeneration(max(m.member_epoch for m in members), protocol, out)


def install(classic: ClassicGroup, generation: ClassicGeneration, now_ms: int) -> None:
    """Puts the downgraded members into the classic group entry (which kept the offsets), as
    a stable generation; the coordinator starts the rebalance."""
    classic.clear_members(now_ms)
    classic.generation_id = generation.generation
    classic.protocol_type = CONSUMER_PROTOCOL_TYPE
    classic.protocol_name = generation.protocol_name
    for member in generation.members:
        classic.add(member)
    classic.state = GroupState.STABLE
    classic.previous_state = GroupState.EMPTY
    classic.state_timestamp = now_ms
