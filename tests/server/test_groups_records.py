"""``__consumer_offsets`` record formats and group partitioning, checked against Kafka's layouts
written out by hand from its message schemas, plus hypothesis round trips."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logkeel.server.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
)


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def compact(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


# -- hashing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("console-consumer-12345", None),
        ("polygenelubricants", -(2**31)),  # the classic String whose hashCode is MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # hashed as its two UTF-16 surrogates
    ],
)
def test_java_string_hash_matches_java(text: str, expected: int | None) -> None:
    h = java_string_hash(text)
    assert -(2**31) <= h < 2**31
    if expected is not None:
        assert h == expected


def test_java_string_hash_wraps_like_int32() -> None:
    # Computed by the recurrence h = 31*h + c in 32-bit two's complement.
    h = 0
    for ch in "my-consumer-group":
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    expected = h - 2**32 if h >= 2**31 else h
    assert java_string_hash("my-consumer-group") == expected


def test_partition_for_uses_kafkas_abs() -> None:
    assert partition_for("polygenelubricants", 50) == 0  # abs(MIN_VALUE) is 0 in Kafka's Utils
    assert partition_for("hello", 50) == 99162322 % 50
    neg = next(g for g in (f"group-{i}" for i in range(1000)) if java_string_hash(g) < 0)
    assert partition_for(neg, 50) == (-java_string_hash(neg)) % 50


@given(st.text(max_size=40), st.integers(1, 200))
def test_partition_for_is_in_range(group: str, n: int) -> None:
    assert 0 <= partition_for(group, n) < n


# -- exact bytes ----------------------------------------------------------------------------------


def test_offset_commit_key_bytes() -> None:
    key = encode_offset_commit_key("g1", "orders", 7)
    assert key == struct.pack(">h", 1) + s16("g1") + s16("orders") + struct.pack(">i", 7)
    assert decode_key(key) == OffsetCommitKey("g1", "orders", 7)


def test_offset_commit_key_v0_decodes() -> None:
    key_v0 = struct.pack(">h", 0) + s16("g") + s16("t") + struct.pack(">i", 3)
    assert decode_key(key_v0) == OffsetCommitKey("g", "t", 3)


def test_group_metadata_key_bytes() -> None:
    key = encode_group_metadata_key("g1")
    assert key == struct.pack(">h", 2) + s16("g1")
    assert decode_key(key) == GroupMetadataKey("g1")


def test_newer_protocol_keys_are_skipped() -> None:
    # Version 3+ keys belong to KIP-848 consumer groups and share groups.
    assert decode_key(struct.pack(">h", 3) + s16("g")) is None
    assert decode_key(struct.pack(">h", 11) + s16("g")) is None


def test_offset_commit_value_v3_bytes() -> None:
    value = OffsetCommitValue(
        offset=42, leader_epoch=5, metadata="meta", commit_timestamp=1_700_000_000_123
    )
    raw = encode_offset_commit_value(value)
    assert raw == (
        struct.pack(">h", 3)
        + struct.pack(">q", 42)
        + struct.pack(">i", 5)
        + s16("meta")
        + struct.pack(">q", 1_700_000_000_123)
    )
    assert decode_offset_commit_value(raw) == value


def test_offset_commit_value_with_expiry_is_v1() -> None:
    value = OffsetCommitValue(10, -1, "", 1000, expire_timestamp=5000)
    raw = encode_offset_commit_value(value)
    assert raw == (
        struct.pack(">h", 1)
        + struct.pack(">q", 10)
        + s16("")
        + struct.pack(">q", 1000)
        + struct.pack(">q", 5000)
    )
    assert decode_offset_commit_value(raw) == value


def test_offset_commit_value_older_and_flexible_versions_decode() -> None:
    v0 = struct.pack(">h", 0) + struct.pack(">q", 9) + s16("m") + struct.pack(">q", 77)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(9, -1, "m", 77)
    v2 = struct.pack(">h", 2) + struct.pack(">q", 9) + s16("m") + struct.pack(">q", 77)
    assert decode_offset_commit_value(v2) == OffsetCommitValue(9, -1, "m", 77)
    # v4 is flexible: compact string and a tagged-field section (here one unknown tag).
    v4 = (
        struct.pack(">h", 4)
        + struct.pack(">q", 9)
        + struct.pack(">i", 2)
        + compact("m")
        + struct.pack(">q", 77)
        + b"\x01"
        + b"\x05"
        + b"\x02"
        + b"xy"
    )
    assert decode_offset_commit_value(v4) == OffsetCommitValue(9, 2, "m", 77)


def test_group_metadata_value_v3_bytes() -> None:
    member = MemberMetadata(
        member_id="m-1",
        client_id="client",
        client_host="/127.0.0.1",
        session_timeout=10000,
        subscription=b"\x00\x01sub",
        assignment=b"\x00\x01asg",
        rebalance_timeout=30000,
        group_instance_id="instance-a",
    )
    value = GroupMetadataValue("consumer", 3, "range", "m-1", 1_700_000_000_000, (member,))
    raw = encode_group_metadata_value(value)
    expected = (
        struct.pack(">h", 3)
        + s16("consumer")
        + struct.pack(">i", 3)
        + s16("range")
        + s16("m-1")
        + struct.pack(">q", 1_700_000_000_000)
        + struct.pack(">i", 1)
        + s16("m-1")
        + s16("instance-a")
        + s16("client")
        + s16("/127.0.0.1")
        + struct.pack(">i", 30000)
        + struct.pack(">i", 10000)
        + b32(b"\x00\x01sub")
        + b32(b"\x00\x01asg")
    )
    assert raw == expected
    assert decode_group_metadata_value(raw) == value


def test_empty_group_metadata_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue("", 0, None, None, 123, ())
    raw = encode_group_metadata_value(value)
    assert raw == (
        struct.pack(">h", 3)
        + s16("")
        + struct.pack(">i", 0)
        + s16(None)
        + s16(None)
        + struct.pack(">q", 123)
        + struct.pack(">i", 0)
    )
    assert decode_group_metadata_value(raw) == value


def test_group_metadata_value_v0_and_v4_decode() -> None:
    v0 = (
        struct.pack(">h", 0)
        + s16("consumer")
        + struct.pack(">i", 1)
        + s16("range")
        + s16("m")
        + struct.pack(">i", 1)
        + s16("m")
        + s16("c")
        + s16("/h")
        + struct.pack(">i", 6000)
        + b32(b"s")
        + b32(b"a")
    )
    got = decode_group_metadata_value(v0)
    assert got == GroupMetadataValue(
        "consumer",
        1,
        "range",
        "m",
        -1,
        (MemberMetadata("m", "c", "/h", 6000, b"s", b"a", -1, None),),
    )
    v4 = (
        struct.pack(">h", 4)
        + compact("consumer")
        + struct.pack(">i", 1)
        + compact("range")
        + compact("m")
        + struct.pack(">q", 5)
        + b"\x02"  # one member
        + compact("m")
        + compact(None)
        + compact("c")
        + compact("/h")
        + struct.pack(">i", 7000)
        + struct.pack(">i", 6000)
        + b"\x02s"
        + b"\x02a"
        + b"\x00"
        + b"\x00"
    )
    got = decode_group_metadata_value(v4)
    assert got == GroupMetadataValue(
        "consumer",
        1,
        "range",
        "m",
        5,
        (MemberMetadata("m", "c", "/h", 6000, b"s", b"a", 7000, None),),
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00",
        struct.pack(">h", 9) + b"\x00" * 20,
        struct.pack(">h", 3) + struct.pack(">q", 1),  # truncated
        struct.pack(">h", 3) + struct.pack(">q", 1) + struct.pack(">i", 0) + struct.pack(">h", 50),
    ],
)
def test_bad_offset_values_raise(raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_offset_commit_value(raw)


def test_bad_group_values_raise() -> None:
    huge_array = (
        struct.pack(">h", 3)
        + s16("c")
        + struct.pack(">i", 1)
        + s16(None)
        + s16(None)
        + struct.pack(">q", 0)
        + struct.pack(">i", 10**9)
    )
    with pytest.raises(RecordFormatError):
        decode_group_metadata_value(huge_array)
    with pytest.raises(RecordFormatError):
        decode_group_metadata_value(struct.pack(">h", 3) + s16(None))  # null protocol type


# -- round trips --------------------------------------------------------------------------------

_text = st.text(max_size=30)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


@given(_text, _text, st.integers(0, 2**31 - 1))
def test_offset_commit_key_round_trip(group: str, topic: str, partition: int) -> None:
    assert decode_key(encode_offset_commit_key(group, topic, partition)) == OffsetCommitKey(
        group, topic, partition
    )


@given(_i64, _i32, _text, _i64, st.one_of(st.just(-1), st.integers(0, 2**63 - 1)))
def test_offset_commit_value_round_trip(
    offset: int, epoch: int, metadata: str, ts: int, expire: int
) -> None:
    value = OffsetCommitValue(offset, epoch if expire < 0 else -1, metadata, ts, expire)
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


_members = st.lists(
    st.builds(
        MemberMetadata,
        member_id=_text,
        client_id=_text,
        client_host=_text,
        session_timeout=_i32,
        subscription=st.binary(max_size=40),
        assignment=st.binary(max_size=40),
        rebalance_timeout=_i32,
        group_instance_id=st.one_of(st.none(), _text),
    ),
    max_size=5,
).map(tuple)


@given(_text, _i32, st.one_of(st.none(), _text), st.one_of(st.none(), _text), _i64, _members)
def test_group_metadata_value_round_trip(
    ptype: str,
    gen: int,
    protocol: str | None,
    leader: str | None,
    ts: int,
    members: tuple[MemberMetadata, ...],
) -> None:
    value = GroupMetadataValue(ptype, gen, protocol, leader, ts, members)
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@given(st.binary(max_size=80))
def test_decoders_never_fail_other_than_with_format_errors(raw: bytes) -> None:
    for decode in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        with contextlib.suppress(RecordFormatError):
            decode(raw)
