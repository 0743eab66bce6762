"""Zigzag varints as Kafka's record format uses them (protobuf-style, 7 bits per byte).

A *varint* holds an int32 (at most 5 bytes), a *varlong* an int64 (at most 10 bytes). Both are
zigzag-encoded so that small negative numbers (-1 marks a null key or value) stay one byte.

These run once or more per record, so the common case (one byte) takes the shortest path and
encodings of small values come from a precomputed table.
"""

from __future__ import annotations

from .batch import InvalidBatchError

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# Zigzag values below this come from the table: covers lengths and deltas up to +-8191,
# which is almost every field of a typical record, in two bytes or fewer.
_TABLE_LIMIT = 1 << 14


def encode_unsigned_varint(z: int) -> bytes:
    """Base-128 encoding of a non-negative int (no zigzag): the wire's compact lengths."""
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_TABLE: tuple[bytes, ...] = tuple(encode_unsigned_varint(z) for z in range(_TABLE_LIMIT))


def zigzag(value: int) -> int:
    """Maps signed to unsigned: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ... (valid for int64)."""
    return (value << 1) ^ (value >> 63)


def unzigzag(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


def encode_varint(value: int) -> bytes:
    """Zigzag varint of an int32; ValueError if ``value`` does not fit."""
    z = (value << 1) ^ (value >> 63)
    if z < _TABLE_LIMIT and z >= 0:
        return _TABLE[z]
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return encode_unsigned_varint(z)


def encode_varlong(value: int) -> bytes:
    """Zigzag varlong of an int64; ValueError if ``value`` does not fit."""
    z = (value << 1) ^ (value >> 63)
    if z < _TABLE_LIMIT and z >= 0:
        return _TABLE[z]
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return encode_unsigned_varint(z)


def size_of_varint(value: int) -> int:
    """Bytes the zigzag encoding of ``value`` takes (int32 or int64)."""
    z = (value << 1) ^ (value >> 63)
    return (max(z.bit_length(), 1) + 6) // 7


size_of_varlong = size_of_varint


def _decode(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, bits: int
) -> tuple[int, int]:
    """(raw base-128 value, position after it); callers unzigzag."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        z = b & 0x7F
        shift = 7
        start = pos
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            z |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if pos - start >= max_bytes:
                raise InvalidBatchError(
                    f"varint at position {start} is longer than {max_bytes} bytes"
                )
    except IndexError:
        raise InvalidBatchError(f"varint at position {pos} runs past the end of the data") from None
    if z >> bits:
        # The last byte carries bits beyond 32 (64): not a value Kafka could have written.
        raise InvalidBatchError(f"varint at position {start} overflows {bits} bits")
    return z, pos


def decode_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Reads a base-128 int of at most 5 bytes, no zigzag (the wire's compact lengths and
    tagged-field headers); returns (value, position after it)."""
    b = buf[pos] if pos < len(buf) else 0x100
    if b < 0x80:
        return b, pos + 1
    return _decode(buf, pos, 5, 32)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Reads an int32 varint at ``pos``; returns (value, position after it)."""
    b = buf[pos] if pos < len(buf) else 0x100
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    z, pos = _decode(buf, pos, 5, 32)
    return (z >> 1) ^ -(z & 1), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Reads an int64 varlong at ``pos``; returns (value, position after it)."""
    b = buf[pos] if pos < len(buf) else 0x100
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    z, pos = _decode(buf, pos, 10, 64)
    return (z >> 1) ^ -(z & 1), pos
