"""Random and mutated frames thrown at a live port; afterwards the broker must still serve."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import socket
import struct
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import uvloop
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial._introspect import (
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import Records

from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey, encode_request, is_known_api, request_schema

from .conftest import (
    TEST_RULE,
    BrokerThread,
    api_versions_request,
    api_versions_round_trip,
    connect,
    no_error_response,
)

SEED = 20240917
FRAMES = 2000
# Mostly one frame per connection (a bad one ends it); sometimes a pipelined burst.
BURSTS = [1, 1, 1, 1, 2, 4]


async def _discard(ctx: RequestContext, request: Any) -> None:
    return None


def _register_every_broker_api(registry: HandlerRegistry) -> None:
    """Every API a broker serves, at every version kio has, with a handler that answers nothing,
    so that mutated Produce, Fetch, ... requests go all the way through decoding."""
    for key in ApiKey:
        if key == ApiKey.API_VERSIONS:
            continue
        versions = sorted(schema_name_map[api_key_map[key]])
        registry.register(
            key, versions[0], versions[-1], _discard,
            rule=TEST_RULE, error_response=no_error_response,
        )  # fmt: skip


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


def _build(entity_type: type[Any], rng: random.Random) -> Any:
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
            one = lambda t=kind.type_: _build(t, rng)  # noqa: E731
        if kind.is_array:
            values[field.name] = tuple(one() for _ in range(rng.randint(0, 2)))
        else:
            values[field.name] = one()
    return entity_type(**values)


def _valid_frames(rng: random.Random) -> list[bytes]:
    """Seed corpus: kio-encoded requests of every broker API and version, plus ApiVersions."""
    frames = [api_versions_request(v, i) for i, v in enumerate(range(5))]
    for key in ApiKey:
        for version in sorted(schema_name_map[api_key_map[key]]):
            schema = request_schema(key, version)
            assert schema is not None
            for _ in range(2):
                frames.append(encode_request(_build(schema, rng), rng.randrange(2**31), "fuzz"))
    return frames


_BIG_LENGTHS = [
    b"\xff\xff\xff\xff\x0f",  # compact length 2^32-1
    b"\x7f\xff\xff\xff",  # int32 max
    b"\x80\x00\x00\x00",  # int32 min
    b"\xff\xff",  # int16 -1
    b"\x00",
]


def _mutate(frame: bytes, rng: random.Random) -> bytes:
    body = bytearray(frame[4:])
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        op = rng.randrange(9)
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
    size = len(body)
    if rng.random() < 0.1:  # and sometimes a size prefix that lies
        size = rng.choice([-1, -(2**31), size + rng.randint(1, 50), 2**31 - 1, 0])
    return struct.pack(">i", size) + bytes(body)


def _random_frame(rng: random.Random) -> bytes:
    kind = rng.randrange(3)
    if kind == 0:  # pure noise
        return rng.randbytes(rng.randint(0, 64))
    body = rng.randbytes(rng.randint(0, 200))
    if kind == 1:  # a correct size around noise
        return struct.pack(">i", len(body)) + body
    # a plausible header for a random API, then noise
    header = struct.pack(">hhih", rng.randrange(0, 70), rng.randrange(0, 16), 1, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


def _drain(sock: socket.socket, timeout: float) -> None:
    """Reads until the server closes (it does, once it has seen our EOF) or time runs out."""
    sock.settimeout(timeout)
    with contextlib.suppress(OSError):
        while sock.recv(65536):
            pass


@pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_fuzzed_frames_do_not_break_the_broker(
    make_broker: Callable[..., BrokerThread], loop_factory: Callable[[], Any]
) -> None:
    rng = random.Random(SEED)
    broker = make_broker(_register_every_broker_api, loop_factory, max_request_bytes=64 * 1024)
    corpus = _valid_frames(rng)
    sent = 0
    while sent < FRAMES:
        batch = []
        for _ in range(rng.choice(BURSTS)):
            roll = rng.random()
            if roll < 0.7:
                batch.append(_mutate(rng.choice(corpus), rng))
            elif roll < 0.9:
                batch.append(_random_frame(rng))
            else:
                batch.append(rng.choice(corpus))
        sent += len(batch)
        with connect(broker.port) as sock:
            with contextlib.suppress(OSError):  # the server may hang up mid-send
                sock.sendall(b"".join(batch))
                sock.shutdown(socket.SHUT_WR)
            _drain(sock, timeout=5)

    # Still serving: raw ApiVersions, then every connection is eventually gone.
    frame = api_versions_round_trip(broker.port, version=3)
    assert struct.unpack_from(">h", frame, 4)[0] == 0
    deadline = time.monotonic() + 5
    assert broker.server is not None
    while broker.server.connection_count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert broker.server.connection_count == 0

    assert all(r.api_key == -1 or is_known_api(r.api_key) for r in broker.records)
    outcomes: dict[str, int] = {}
    for record in broker.records:
        outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
    # The fuzzing reached both sides of the decoder: requests that decoded and were handled,
    # and requests that were rejected.
    assert outcomes.get("no_response", 0) > 50, outcomes
    assert outcomes.get("closed", 0) > 200, outcomes
