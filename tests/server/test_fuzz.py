"""Random and mutated frames thrown at a live port; afterwards the broker must still serve."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections.abc import Callable
from typing import Any

import pytest
import uvloop
from kio.schema.index import api_key_map, schema_name_map

from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey, encode_request, is_known_api, request_schema
from tests.waiting import wait_until

from .conftest import (
    TEST_RULE,
    BrokerThread,
    api_versions_request,
    api_versions_round_trip,
    connect,
    no_error_response,
)
from .fuzzing import build, mutate, random_frame

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


def _valid_frames(rng: random.Random) -> list[bytes]:
    """Seed corpus: kio-encoded requests of every broker API and version, plus ApiVersions."""
    frames = [api_versions_request(v, i) for i, v in enumerate(range(5))]
    for key in ApiKey:
        for version in sorted(schema_name_map[api_key_map[key]]):
            schema = request_schema(key, version)
            assert schema is not None
            for _ in range(2):
                frames.append(encode_request(build(schema, rng), rng.randrange(2**31), "fuzz"))
    return frames


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
                batch.append(mutate(rng.choice(corpus), rng))
            elif roll < 0.9:
                batch.append(random_frame(rng))
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
    server = broker.server
    assert server is not None
    wait_until(lambda: server.connection_count == 0, 5, "every connection gone")
    # Every request's memory was given back (served, refused, or dropped with its connection).
    assert broker.server.memory.used == 0

    assert all(r.api_key == -1 or is_known_api(r.api_key) for r in broker.records)
    outcomes: dict[str, int] = {}
    for record in broker.records:
        outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
    # The fuzzing reached both sides of the decoder: requests that decoded and were handled,
    # and requests that were rejected.
    assert outcomes.get("no_response", 0) > 50, outcomes
    assert outcomes.get("closed", 0) > 200, outcomes
