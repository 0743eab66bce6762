"""The group coordinator's state as ``__consumer_offsets`` records: the GroupMetadata record
written for each generation, and replay of a partition's records into groups at load time.

Replay is CPU work on the event loop (the groups live there), so ``replay`` hands the loop back
every ``REPLAY_BATCH`` records: a large partition does not stall requests while it loads (its
own groups answer COORDINATOR_LOAD_IN_PROGRESS until it is done).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from logkeel.server.group.log import CoordinatorRecord
from logkeel.server.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    group_metadata_record,
)
from logkeel.server.group.state import ClassicGroup, GroupState, Member

__all__ = ["REPLAY_BATCH", "apply_record", "group_from_metadata", "metadata_record", "replay"]

log = logging.getLogger(__name__)

# Records applied between two yields to the event loop.
REPLAY_BATCH = 1000


async def replay(
    groups: dict[str, ClassicGroup],
    records: Sequence[tuple[bytes, bytes | None]],
    now_ms: int,
    partition: int,
) -> set[str]:
    """Applies a partition's records in order; returns the ids of the groups they concern."""
    loaded: set[str] = set()
    for i, (key, value) in enumerate(records, 1):
        try:
            group_id = apply_record(groups, key, value, now_ms)
        except (RecordFormatError, ValueError) as exc:
            log.warning("__consumer_offsets-%d: skipping a bad record: %s", partition, exc)
            continue
        if group_id is not None:
            loaded.add(group_id)
        if i % REPLAY_BATCH == 0:
            await asyncio.sleep(0)
    return loaded


def apply_record(
    groups: dict[str, ClassicGroup], key: bytes, value: bytes | None, now_ms: int
) -> str | None:
    """Applies one record at load time; returns the group it concerns, if any."""
    k = decode_key(key)
    if isinstance(k, OffsetCommitKey):
        group = groups.get(k.group)
        if value is None:
            if group is not None:
                group.offsets.pop((k.topic, k.partition), None)
            return k.group
        if group is None:
            group = groups[k.group] = ClassicGroup(k.group, now_ms)
        group.offsets[(k.topic, k.partition)] = decode_offset_commit_value(value)
        return k.group
    if isinstance(k, GroupMetadataKey):
        old = groups.get(k.group)
        if value is None:
            if old is not None and old.offsets:
                simple = ClassicGroup(k.group, now_ms)
                simple.offsets = old.offsets
                groups[k.group] = simple
            else:
                groups.pop(k.group, None)
            return k.group
        group = group_from_metadata(k.group, decode_group_metadata_value(value), now_ms)
        if old is not None:
            group.offsets = old.offsets
        groups[k.group] = group
        return k.group
    return None


def group_from_metadata(group_id: str, value: GroupMetadataValue, now_ms: int) -> ClassicGroup:
    group = ClassicGroup(
        group_id,
        now_ms,
        GroupState.STABLE if value.members else GroupState.EMPTY,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        leader_id=value.leader,
        state_timestamp=None
        if value.current_state_timestamp < 0
        else value.current_state_timestamp,
    )
    for m in value.members:
        member = Member(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.session_timeout if m.rebalance_timeout < 0 else m.rebalance_timeout,
            m.session_timeout,
            value.protocol_type,
            [(value.protocol or "", m.subscription)],
            m.assignment,
        )
        group.add(member)
    return group


def metadata_record(group: ClassicGroup, assignment: dict[str, bytes]) -> CoordinatorRecord:
    """The group's current generation as a GroupMetadata record."""
    members = tuple(
        MemberMetadata(
            member_id=m.member_id,
            client_id=m.client_id,
            client_host=m.client_host,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata(group.protocol_name),
            assignment=assignment.get(m.member_id, b""),
            rebalance_timeout=m.rebalance_timeout_ms,
            group_instance_id=m.group_instance_id,
        )
        for m in group.members.values()
    )
    value = GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=-1 if group.state_timestamp is None else group.state_timestamp,
        members=members,
    )
    return group_metadata_record(group.group_id, value)
