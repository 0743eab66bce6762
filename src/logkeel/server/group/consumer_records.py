"""A consumer-protocol group's records in ``__consumer_offsets``, in Kafka's formats (the
``group-coordinator`` message schemas), and the group rebuilt from them at load time.

Keys (non-flexible, an int16 record type then the fields): 3 ConsumerGroupMetadata (group),
5 ConsumerGroupMemberMetadata (group, member), 6 ConsumerGroupTargetAssignmentMetadata (group),
7 ConsumerGroupTargetAssignmentMember (group, member), 8 ConsumerGroupCurrentMemberAssignment
(group, member). Values are flexible version 0. Type 4 (ConsumerGroupPartitionMetadata, dropped
by Kafka 4.1) is not written and skipped when read: the subscribed topics' partition counts are
taken from the cluster metadata at load instead. Assignments name topics by id, so writing
needs the topics' ids and reading their names; a partition of a topic unknown at load is
dropped (the topic is gone).

The group's records are a snapshot (``snapshot``): the coordinator writes the entries that
changed since its last write and tombstones for those that went, so replaying a partition in
order rebuilds the last state written.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from logkeel.records.varint import encode_unsigned_varint
from logkeel.server.group.assignors import Assignment
from logkeel.server.group.consumer_group import (
    STATIC_LEAVE_EPOCH,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupSettings,
    ConsumerMember,
    MemberState,
)
from logkeel.server.group.records import RecordFormatError, RecordReader, record_version

__all__ = [
    "CONSUMER_KEY_TYPES",
    "ConsumerRecordKey",
    "decode_consumer_key",
    "replay_consumer_groups",
    "snapshot",
]

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_MEMBER = 8
CONSUMER_KEY_TYPES = frozenset(range(3, 9))

# Kafka's MemberState codes.
_STATE_CODES = {
    MemberState.STABLE: 1,
    MemberState.UNREVOKED_PARTITIONS: 2,
    MemberState.UNRELEASED_PARTITIONS: 3,
}
_STATES = {code: state for state, code in _STATE_CODES.items()}
_I8, _I16, _I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class ConsumerRecordKey:
    record_type: int
    group_id: str
    member_id: str | None = None


# -- writing ------------------------------------------------------------------------------------


class _Flexible:
    """A flexible message body: compact strings and arrays, tagged fields (none written)."""

    def __init__(self) -> None:
        self.buf = bytearray(_I16.pack(0))

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def string(self, v: str | None) -> None:
        if v is None:
            self.buf += encode_unsigned_varint(0)
            return
        data = v.encode("utf-8")
        self.buf += encode_unsigned_varint(len(data) + 1) + data

    def length(self, n: int) -> None:
        self.buf += encode_unsigned_varint(n + 1)

    def no_tags(self) -> None:
        self.buf += encode_unsigned_varint(0)

    def topic_partitions(self, a: Assignment, ids: Mapping[str, uuid.UUID]) -> None:
        topics = [(ids[t], sorted(ps)) for t, ps in sorted(a.items()) if ps and t in ids]
        self.length(len(topics))
        for topic_id, partitions in topics:
            self.buf += topic_id.bytes
            self.length(len(partitions))
            for p in partitions:
                self.int32(p)
            self.no_tags()


def _key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    out = bytearray(_I16.pack(record_type))
    for s in (group_id,) if member_id is None else (group_id, member_id):
        data = s.encode("utf-8")
        out += _I16.pack(len(data)) + data
    return bytes(out)


def _member_metadata(m: ConsumerMember) -> bytes:
    w = _Flexible()
    w.string(m.instance_id)
    w.string(m.rack_id)
    w.string(m.client_id)
    w.string(m.client_host)
    w.length(len(m.subscribed_topic_names))
    for name in m.subscribed_topic_names:
        w.string(name)
    w.string(m.subscribed_topic_regex)
    w.int32(m.rebalance_timeout_ms)
    w.string(m.server_assignor)
    if m.classic is None:
        w.no_tags()
    else:
        # Tagged field 0, ClassicMemberMetadata: a classic member's session timeout and
        # protocols (Kafka 4's layout).
        body = _Flexible()
        del body.buf[:]  # a nested struct has no version prefix
        body.int32(m.classic.session_timeout_ms)
        body.length(len(m.classic.protocols))
        for name, metadata in m.classic.protocols:
            body.string(name)
            body.length(len(metadata))
            body.buf += metadata
            body.no_tags()
        body.no_tags()
        w.buf += encode_unsigned_varint(1) + encode_unsigned_varint(0)
        w.buf += encode_unsigned_varint(len(body.buf)) + body.buf
    return bytes(w.buf)


def _current(m: ConsumerMember, ids: Mapping[str, uuid.UUID]) -> bytes:
    w = _Flexible()
    # Kafka writes a static member away for a while with epoch -2; its epoch to come back
    # with then goes where the previous epoch is (the one thing lost on a reload).
    if m.left_temporarily:
        w.int32(STATIC_LEAVE_EPOCH)
        w.int32(m.member_epoch)
    else:
        w.int32(m.member_epoch)
        w.int32(m.previous_member_epoch)
    w.int8(_STATE_CODES[m.state])
    w.topic_partitions(m.assigned, ids)
    w.topic_partitions(m.pending_revocation, ids)
    w.no_tags()
    return bytes(w.buf)


def _epoch_value(epoch: int) -> bytes:
    w = _Flexible()
    w.int32(epoch)
    w.no_tags()
    return bytes(w.buf)


def _target(a: Assignment, ids: Mapping[str, uuid.UUID]) -> bytes:
    w = _Flexible()
    w.topic_partitions(a, ids)
    w.no_tags()
    return bytes(w.buf)


def snapshot(group: ConsumerGroup, ids: Mapping[str, uuid.UUID]) -> dict[bytes, bytes]:
    """Every record of the group's current state, by key. A static member that left for a
    while is written like any other (it is kept for its session)."""
    g = group.group_id
    out: dict[bytes, bytes] = {}
    for m in group.members.values():
        out[_key(MEMBER_METADATA, g, m.member_id)] = _member_metadata(m)
        out[_key(CURRENT_MEMBER, g, m.member_id)] = _current(m, ids)
    for member_id, a in group.target.items():
        out[_key(TARGET_MEMBER, g, member_id)] = _target(a, ids)
    out[_key(TARGET_METADATA, g)] = _epoch_value(group.assignment_epoch)
    out[_key(GROUP_METADATA, g)] = _epoch_value(group.group_epoch)
    return out


# -- reading ------------------------------------------------------------------------------------


def decode_consumer_key(key: bytes) -> ConsumerRecordKey | None:
    """The key of a consumer group record; None for any other record type."""
    record_type = record_version(key)
    if record_type not in CONSUMER_KEY_TYPES:
        return None
    r = RecordReader(key, 2, False)
    group_id = r.string()
    member = r.string() if record_type in (MEMBER_METADATA, TARGET_MEMBER, CURRENT_MEMBER) else None
    return ConsumerRecordKey(record_type, group_id, member)


def _reader(value: bytes) -> RecordReader:
    version = record_version(value)
    if version != 0:
        raise RecordFormatError(f"unknown consumer group value version {version}")
    return RecordReader(value, 2, True)


def _read_partitions(r: RecordReader, names: Callable[[uuid.UUID], str | None]) -> Assignment:
    out: dict[str, frozenset[int]] = {}
    for _ in range(r.array_length()):
        topic_id = r.uuid()
        partitions = frozenset(r.int32() for _ in range(r.array_length()))
        r.tagged_fields()
        name = names(topic_id)
        if name is not None:
            out[name] = partitions
    return out


def _strings(r: RecordReader) -> Iterable[str]:
    return [r.string() for _ in range(r.array_length())]


def replay_consumer_groups(
    records: Iterable[tuple[bytes, bytes | None]],
    settings: ConsumerGroupSettings,
    names: Callable[[uuid.UUID], str | None],
    now_ms: int,
) -> dict[str, ConsumerGroup]:
    """The consumer groups a partition's records describe (tombstones applied). Every member
    gets a fresh session: its clock did not run while the coordinator was away."""
    groups: dict[str, ConsumerGroup] = {}
    for key, value in records:
        k = decode_consumer_key(key)
        if k is None or k.record_type == PARTITION_METADATA:
            continue
        group = groups.get(k.group_id)
        if group is None:
            if value is None:
                continue
            group = groups[k.group_id] = ConsumerGroup(k.group_id, settings)
        if k.record_type == GROUP_METADATA:
            if value is None:
                del groups[k.group_id]
            else:
                group.group_epoch = _reader(value).int32()
        elif k.record_type == TARGET_METADATA:
            if value is not None:
                group.assignment_epoch = _reader(value).int32()
        elif k.record_type == TARGET_MEMBER:
            assert k.member_id is not None
            if value is None:
                group.target.pop(k.member_id, None)
            else:
                group.target[k.member_id] = _read_partitions(_reader(value), names)
        else:
            _apply_member(group, k, value, names, now_ms)
    return groups


def _apply_member(
    group: ConsumerGroup,
    k: ConsumerRecordKey,
    value: bytes | None,
    names: Callable[[uuid.UUID], str | None],
    now_ms: int,
) -> None:
    assert k.member_id is not None
    if value is None:
        if k.record_type == MEMBER_METADATA:
            gone = group.members.pop(k.member_id, None)
            if gone is not None and gone.instance_id is not None:
                group.static_members.pop(gone.instance_id, None)
        return
    member = group.members.get(k.member_id)
    if member is None:
        member = ConsumerMember(k.member_id, None, None, "", "", -1)
        member.session_deadline_ms = now_ms + group.settings.session_timeout_ms
        group.members[k.member_id] = member
    r = _reader(value)
    if k.record_type == MEMBER_METADATA:
        member.instance_id = r.nullable_string()
        member.rack_id = r.nullable_string()
        member.client_id = r.string()
        member.client_host = r.string()
        member.subscribed_topic_names = tuple(_strings(r))
        member.subscribed_topic_regex = r.nullable_string()
        member.rebalance_timeout_ms = r.int32()
        member.server_assignor = r.nullable_string()
        member.classic = _classic_metadata(r)
        if member.classic is not None:
            member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
    else:
        member.member_epoch = r.int32()
        member.previous_member_epoch = r.int32()
        member.left_temporarily = member.member_epoch == STATIC_LEAVE_EPOCH
        if member.left_temporarily:
            member.member_epoch = member.previous_member_epoch
        member.state = _STATES.get(r.int8(), MemberState.STABLE)
        member.assigned = _read_partitions(r, names)
        member.pending_revocation = _read_partitions(r, names)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            member.rebalance_deadline_ms = now_ms + member.rebalance_timeout_ms


def _classic_metadata(r: RecordReader) -> ClassicMemberMetadata | None:
    """The tagged ClassicMemberMetadata of a member record, if any."""
    out = None
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        end = r.pos + size
        if tag == 0:
            session_timeout_ms = r.int32()
            protocols = []
            for _ in range(r.array_length()):
                name = r.string()
                protocols.append((name, r.bytes_()))
                r.tagged_fields()
            out = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
        r.pos = end
    return out
