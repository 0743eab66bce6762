"""Zigzag varint/varlong: known encodings, edges, bounds errors, and kafka-python as a cross-check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record import util as kafka_util

from logkeel.records.batch import InvalidBatchError
from logkeel.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

KNOWN = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (8192, "808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "hexed"), KNOWN)
def test_known_varint_encodings(value: int, hexed: str) -> None:
    assert encode_varint(value).hex() == hexed
    assert encode_varlong(value).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed)) == (value, len(hexed) // 2)
    assert decode_varlong(bytes.fromhex(hexed)) == (value, len(hexed) // 2)


@pytest.mark.parametrize("value", [0, -1, 1, INT64_MAX, INT64_MIN, INT32_MAX + 1, INT32_MIN - 1])
def test_varlong_edges_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varint(value) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))


def test_varlong_extremes_take_ten_bytes() -> None:
    assert encode_varlong(INT64_MAX).hex() == "feffffffffffffffff01"
    assert encode_varlong(INT64_MIN).hex() == "ffffffffffffffffff01"


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1, INT64_MAX])
def test_varint_rejects_values_outside_int32(value: int) -> None:
    with pytest.raises(ValueError):
        encode_varint(value)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_varlong_rejects_values_outside_int64(value: int) -> None:
    with pytest.raises(ValueError):
        encode_varlong(value)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x80",  # continuation bit, then nothing
        b"\xff\xff",
        b"\xff\xff\xff\xff",  # four bytes, all continuing
    ],
)
def test_truncated_varints_raise_invalid_batch(data: bytes) -> None:
    with pytest.raises(InvalidBatchError):
        decode_varint(data)
    with pytest.raises(InvalidBatchError):
        decode_varlong(data)


def test_varint_longer_than_five_bytes_is_invalid() -> None:
    with pytest.raises(InvalidBatchError, match="longer than 5"):
        decode_varint(b"\xff\xff\xff\xff\xff\x01")
    # The same bytes are a fine varlong.
    assert decode_varlong(b"\xff\xff\xff\xff\xff\x01")[1] == 6


def test_varlong_longer_than_ten_bytes_is_invalid() -> None:
    with pytest.raises(InvalidBatchError, match="longer than 10"):
        decode_varlong(b"\xff" * 10 + b"\x01")


def test_fifth_byte_overflowing_32_bits_is_invalid() -> None:
    # Five bytes, but the last one sets bits 32..34: no int32 encodes like this.
    with pytest.raises(InvalidBatchError, match="overflows 32"):
        decode_varint(b"\xff\xff\xff\xff\x1f")
    with pytest.raises(InvalidBatchError, match="overflows 64"):
        decode_varlong(b"\xff" * 9 + b"\x7f")


def test_decode_past_the_end_raises_invalid_batch() -> None:
    with pytest.raises(InvalidBatchError):
        decode_varint(b"\x02", 1)
    with pytest.raises(InvalidBatchError):
        decode_varint(memoryview(b"\x02\x80"), 1)


@given(st.integers(INT32_MIN, INT32_MAX), st.binary(max_size=8), st.binary(max_size=8))
def test_varint_round_trips_inside_a_buffer(value: int, before: bytes, after: bytes) -> None:
    encoded = encode_varint(value)
    buf = before + encoded + after
    assert decode_varint(buf, len(before)) == (value, len(before) + len(encoded))
    assert decode_varint(memoryview(buf), len(before)) == (value, len(before) + len(encoded))
    assert decode_varint(bytearray(buf), len(before)) == (value, len(before) + len(encoded))
    assert size_of_varint(value) == len(encoded)


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_matches_kafka_python(value: int) -> None:
    theirs = bytearray()
    kafka_util.encode_varint(value, theirs.append)
    assert encode_varlong(value) == bytes(theirs)
    assert decode_varlong(bytes(theirs)) == (value, len(theirs))
    assert kafka_util.decode_varint(encode_varlong(value), 0) == (value, len(theirs))


@given(st.integers(min_value=0, max_value=(1 << 32) - 1))
def test_unsigned_varints_round_trip(value: int) -> None:
    encoded = encode_unsigned_varint(value)
    assert decode_unsigned_varint(b"\x00" + encoded, 1) == (value, len(encoded) + 1)


def test_unsigned_varint_limits() -> None:
    assert decode_unsigned_varint(b"\x96\x01") == (150, 2)
    with pytest.raises(InvalidBatchError, match="longer than 5"):
        decode_unsigned_varint(b"\xff\xff\xff\xff\xff\x01")
    with pytest.raises(InvalidBatchError, match="overflows 32"):
        decode_unsigned_varint(b"\xff\xff\xff\xff\x1f")
