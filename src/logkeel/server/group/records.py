"""The records of ``__consumer_offsets``, in Kafka's own formats, and which partition holds a group.

Every record key and value starts with an int16 schema version, followed by the fields of
Kafka's ``group-coordinator`` message schemas (``OffsetCommitKey/Value``, ``GroupMetadataKey/
Value``). Keys: versions 0 and 1 are offset commits (group, topic, partition), version 2 a group's
metadata (group); 3 to 8 belong to consumer-protocol groups (``consumer_records``), higher ones
to share groups, which this coordinator does not speak, so loading skips them. A record with a
null value is a tombstone: the offset, or the whole group's metadata, is gone.

Writing follows what a current Kafka broker writes: offset commit keys v1, values v3 (v1 when
the commit carries an explicit expiry, from OffsetCommit v2-v4's retention time), group metadata
keys v2, values v3. Reading accepts every value version Kafka ever wrote, the flexible v4
included, so a log dir written by Kafka loads too.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from logkeel.records.batch import InvalidBatchError
from logkeel.records.varint import decode_unsigned_varint

__all__ = [
    "RecordReader",
    "RecordWriter",
    "record_version",
    "OFFSETS_TOPIC",
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordFormatError",
    "decode_key",
    "decode_group_metadata_value",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "group_metadata_record",
    "java_string_hash",
    "offset_commit_record",
    "partition_for",
]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value that does not parse as any version of its schema."""


# ---------------------------------------------------------------------------------------------
# Which partition


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: over UTF-16 code units, wrapping at 32 bits (signed)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group, as Kafka computes it.

    Kafka's ``Utils.abs`` maps Integer.MIN_VALUE to 0 (Java's ``Math.abs`` would leave it
    negative), so a group whose hash is MIN_VALUE lands in partition 0.
    """
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# ---------------------------------------------------------------------------------------------
# Data


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only v1 stores it; -1: none


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)


# ---------------------------------------------------------------------------------------------
# Writing


class RecordWriter:
    __slots__ = ("parts",)

    def __init__(self, version: int) -> None:
        self.parts: list[bytes] = [_I16.pack(version)]

    def int8(self, v: int) -> None:
        self.parts.append(_I8.pack(v))

    def int16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def int32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def int64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def string(self, v: str | None) -> None:
        if v is None:
            self.parts.append(_I16.pack(-1))
            return
        raw = v.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise RecordFormatError(f"string of {len(raw)} bytes is too long for an int16 length")
        self.parts.append(_I16.pack(len(raw)))
        self.parts.append(raw)

    def bytes_(self, v: bytes) -> None:
        self.parts.append(_I32.pack(len(v)))
        self.parts.append(bytes(v))

    def build(self) -> bytes:
        return b"".join(self.parts)


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = RecordWriter(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return w.build()


def encode_group_metadata_key(group: str) -> bytes:
    w = RecordWriter(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.build()


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """v3, or v1 when the commit has an explicit expiry (v1 is the only version that keeps it)."""
    if value.expire_timestamp >= 0:
        w = RecordWriter(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY)
        w.int64(value.offset)
        w.string(value.metadata)
        w.int64(value.commit_timestamp)
        w.int64(value.expire_timestamp)
        return w.build()
    w = RecordWriter(OFFSET_COMMIT_VALUE_VERSION)
    w.int64(value.offset)
    w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp)
    return w.build()


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = RecordWriter(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.build()


# ---------------------------------------------------------------------------------------------
# Reading


class RecordReader:
    """Reads one message; ``flexible`` switches to compact lengths and tagged fields."""

    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: bytes, pos: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise RecordFormatError("record runs past its end")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def _uvarint(self) -> int:
        try:
            value, self.pos = decode_unsigned_varint(self.buf, self.pos)
        except InvalidBatchError as exc:
            raise RecordFormatError(str(exc)) from None
        return value

    def uvarint(self) -> int:
        return self._uvarint()

    def int8(self) -> int:
        return int(_I8.unpack(self._take(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self._uvarint() - 1
        return self.int32() if wide else int(_I16.unpack(self._take(2))[0])

    def nullable_string(self) -> str | None:
        n = self._length(False)
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordFormatError("null in a non-nullable string")
        return s

    def bytes_(self) -> bytes:
        n = self._length(True)
        return b"" if n < 0 else self._take(n)

    def array_length(self) -> int:
        n = self._length(True)
        if n > len(self.buf) - self.pos:
            raise RecordFormatError(f"array of {n} elements cannot fit in the record")
        return max(n, 0)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self._uvarint()):
            self._uvarint()
            self._take(self._uvarint())


def record_version(buf: bytes) -> int:
    if len(buf) < 2:
        raise RecordFormatError("record shorter than its version")
    return int(_I16.unpack_from(buf, 0)[0])


def decode_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key of a ``__consumer_offsets`` record; None for record types of other protocols."""
    version = record_version(key)
    r = RecordReader(key, 2, False)
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    return None


def decode_offset_commit_value(value: bytes) -> OffsetCommitValue:
    version = record_version(value)
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r = RecordReader(value, 2, version >= 4)
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(value: bytes) -> GroupMetadataValue:
    version = record_version(value)
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r = RecordReader(value, 2, version >= 4)
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp = r.int64() if version >= 2 else -1
    members: list[MemberMetadata] = []
    for _ in range(r.array_length()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(
            MemberMetadata(
                member_id,
                client_id,
                client_host,
                session_timeout,
                subscription,
                assignment,
                rebalance_timeout,
                instance_id,
            )
        )
    r.tagged_fields()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
    )


def offset_commit_record(
    group: str, topic: str, partition: int, value: OffsetCommitValue | None
) -> tuple[bytes, bytes | None]:
    """(key, value) of an offset commit; a None value makes the tombstone."""
    key = encode_offset_commit_key(group, topic, partition)
    return key, None if value is None else encode_offset_commit_value(value)


def group_metadata_record(
    group: str, value: GroupMetadataValue | None
) -> tuple[bytes, bytes | None]:
    """(key, value) of a group's metadata; a None value makes the tombstone."""
    key = encode_group_metadata_key(group)
    return key, None if value is None else encode_group_metadata_value(value)
