"""Generators of valid and mutated Kafka requests, shared by the fuzz tests (the in-process
one, test_fuzz.py, and the one against a broker process, test_fuzz_broker.py)."""

from __future__ import annotations

import dataclasses
import random
import struct
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import Records

__all__ = ["build", "mutate", "random_frame"]

_PRIMITIVES: dict[str, Callable[[random.Random], Any]] = {
    "int8": lambda r: r.randint(-(2**7), 2**7 - 1),
    "int16": lambda r: r.randint(-1, 20),
    "int32": lambda r: r.randint(-1, 2**31 - 1),
    "int64": lambda r: r.randint(-1, 2**63 - 1),
    "uint16": lambda r: r.randint(0, 2**16 - 1),
    "float64": lambda r: r.random(),
    "bool": lambda r: r.random() < 0.5,
    "string": lambda r: r.choice(["", "t", "orders", "group-1", "ü"]),
    "bytes": lambda r: r.randbytes(r.randint(0, 12)),
    "records": lambda r: Records(r.randbytes(r.randint(0, 40))),
    "uuid": lambda r: uuid.UUID(int=r.getrandbits(128)),
    "error_code": lambda r: ErrorCode.none,
    "timedelta_i32": lambda r: timedelta(milliseconds=r.randint(0, 60_000)),
    "timedelta_i64": lambda r: timedelta(milliseconds=r.randint(0, 60_000)),
    "datetime_i64": lambda r: datetime.fromtimestamp(r.randint(0, 2**31), UTC),
}


def build(entity_type: type[Any], rng: random.Random) -> Any:
    """A random valid instance of a kio entity (hypothesis' from_type is far slower)."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(entity_type):
        kind = classify_field(field)
        if is_optional(field) and rng.random() < 0.2:
            values[field.name] = None
            continue
        if isinstance(kind, PrimitiveField | PrimitiveTupleField):
            make = _PRIMITIVES[get_schema_field_type(field)]
            one: Callable[[], Any] = lambda make=make: make(rng)  # noqa: E731
        else:
            one = lambda t=kind.type_: build(t, rng)  # noqa: E731
        if kind.is_array:
            values[field.name] = tuple(one() for _ in range(rng.randint(0, 2)))
        else:
            values[field.name] = one()
    return entity_type(**values)


_BIG_LENGTHS = [
    b"\xff\xff\xff\xff\x0f",  # compact length 2^32-1
    b"\x7f\xff\xff\xff",  # int32 max
    b"\x80\x00\x00\x00",  # int32 min
    b"\xff\xff",  # int16 -1
    b"\x00",
]


def mutate(frame: bytes, rng: random.Random) -> bytes:
    body = bytearray(frame[4:])
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        op = rng.randrange(11)
        pos = rng.randint(0, len(body))
        if op == 0 and body:  # flip bits
            body[min(pos, len(body) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:  # truncate
            del body[pos:]
        elif op == 2:  # insert random bytes
            body[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 3:  # plant an extreme length
            body[pos : pos + rng.randint(0, 4)] = rng.choice(_BIG_LENGTHS)
        elif op == 4 and len(body) >= 4:  # another API key or version in the header
            struct.pack_into(">hh", body, 0, rng.randrange(-5, 100), rng.randrange(-3, 20))
        elif op == 5:  # delete a span
            del body[pos : pos + rng.randint(1, 8)]
        elif op == 6 and body:  # overwrite with random bytes
            end = min(len(body), pos + rng.randint(1, 8))
            body[pos:end] = rng.randbytes(end - pos)
        elif op == 7 and len(body) >= 10:  # odd client id length
            struct.pack_into(">h", body, 8, rng.choice([-2, -1, 0, 1, 32767]))
        elif op == 8:  # turn a small count or length (likely an array's) into a huge one
            small = [i for i in range(10, len(body)) if 1 <= body[i] <= 4]
            if small:
                i = rng.choice(small)
                body[i : i + 1] = rng.choice(_BIG_LENGTHS[:2])
        elif op == 9:  # a null (int32 -1, int16 -1 or compact 0) where a length was
            small = [i for i in range(10, len(body)) if 0 <= body[i] <= 4]
            if small:
                i = rng.choice(small)
                body[i : i + 1] = rng.choice([b"\xff\xff\xff\xff", b"\xff\xff", b"\x00"])
        elif op == 10 and body:  # garbage tagged fields in place of the last (empty) section
            tags = rng.randint(1, 3)
            garbage = bytes([tags])
            for _ in range(tags):
                size = rng.choice([0, 1, 5, 200])
                garbage += bytes([rng.randrange(128), min(size, 127)]) + rng.randbytes(
                    rng.choice([0, size])
                )
            body[-1:] = garbage
    size = len(body)
    if rng.random() < 0.1:  # and sometimes a size prefix that lies
        size = rng.choice([-1, -(2**31), size + rng.randint(1, 50), 2**31 - 1, 0])
    return struct.pack(">i", size) + bytes(body)


def random_frame(rng: random.Random) -> bytes:
    kind = rng.randrange(3)
    if kind == 0:  # pure noise
        return rng.randbytes(rng.randint(0, 64))
    body = rng.randbytes(rng.randint(0, 200))
    if kind == 1:  # a correct size around noise
        return struct.pack(">i", len(body)) + body
    # a plausible header for a random API, then noise
    header = struct.pack(">hhih", rng.randrange(0, 70), rng.randrange(0, 16), 1, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body
