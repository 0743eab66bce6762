"""Memory follows what clients send, not what they declare (issues 26 and 27): a real broker
process, held open connections that declare huge frames and send a few bytes, and its
resident memory read from /proc. Meanwhile real clients must keep producing and consuming."""

from __future__ import annotations

import contextlib
import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from logkeel.testing.broker_process import LogkeelBroker, free_port
from tests.waiting import wait_until

MiB = 1024 * 1024
PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
)
# An ApiVersions v0 header (key 18, version 0, correlation 1, client id "x"): the first bytes
# of a plausible request, after a size prefix that lies.
HEADER = struct.pack(">hhih", 18, 0, 1, 1) + b"x"


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of ``pid``, in kB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def report(what: str, pid: int, baseline: dict[str, int]) -> dict[str, int]:
    now = memory_kb(pid)
    print(
        f"{what}: VmRSS {now['VmRSS'] // 1024} MB, VmHWM {now['VmHWM'] // 1024} MB "
        f"(before: VmRSS {baseline['VmRSS'] // 1024} MB, VmHWM {baseline['VmHWM'] // 1024} MB)"
    )
    return now


def assert_grew_less_than(kb: int, now: dict[str, int], baseline: dict[str, int]) -> None:
    """Resident memory now, and its peak since (a new peak above the one before), stayed
    within ``kb`` of the baseline."""
    assert now["VmRSS"] - baseline["VmRSS"] < kb, (now, baseline)
    assert now["VmHWM"] - max(baseline["VmHWM"], baseline["VmRSS"] + kb) <= 0, (now, baseline)


def produce_and_consume(conf: dict[str, Any], count: int = 20) -> None:
    topic = f"mem-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer({**conf, "message.timeout.ms": 30_000})
    for i in range(count):
        producer.produce(topic, value=b"m%d" % i)
    assert producer.flush(40) == 0
    consumer = confluent_kafka.Consumer(
        {**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        wait_until(
            lambda: bool(
                (msg := consumer.poll(0.5)) is not None
                and msg.error() is None
                and got.append(msg.value()) is None
                and len(got) == count
            ),
            timeout=40,
            what=f"{count} records of {topic}",
        )
    finally:
        consumer.close()
    assert got == [b"m%d" % i for i in range(count)]


class DebugBroker(LogkeelBroker):
    """Logs at DEBUG (-vv): the tests wait for its lines on accepted and paused connections."""

    def command(self) -> list[str]:
        cmd = super().command()
        at = cmd.index("serve")
        return [*cmd[:at], "-v", *cmd[at:]]


@contextlib.contextmanager
def held_connections(port: int, count: int, prefix: bytes) -> Iterator[list[socket.socket]]:
    """``count`` connections that each sent ``prefix`` and then nothing, held open."""
    socks = []
    try:
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(prefix)
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DebugBroker, int]]:
    work = tmp_path_factory.mktemp("memory")
    port, sasl_port = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "socket.request.max.bytes": str(100 * MiB),
        "queued.max.request.bytes": str(128 * MiB),
    }
    with DebugBroker(work, port=port, overrides=overrides, verbose=True).start() as b:
        yield b, sasl_port


def test_unauthenticated_frames_are_capped_and_their_memory_returned(
    broker: tuple[DebugBroker, int],
) -> None:
    """Before a SASL login, sasl.server.max.receive.size (512 KiB) caps every frame: 50
    connections declaring 100 MiB are closed at once; 50 sending 500 KB frames cost what they
    sent and give it back when they close. A client that logs in keeps working."""
    b, sasl_port = broker
    assert b.pid is not None
    conf = {
        "bootstrap.servers": f"127.0.0.1:{sasl_port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    produce_and_consume(conf)
    baseline = memory_kb(b.pid)
    refusals = b.output(10**9).count("larger than sasl.server.max.receive.size (524288)")
    with held_connections(sasl_port, 50, struct.pack(">i", 100 * MiB) + HEADER) as socks:
        for s in socks:  # the broker hangs up: recv sees the end of the stream
            s.settimeout(10)
            assert s.recv(1) == b""
    wait_until(
        lambda: (
            b.output(10**9).count("larger than sasl.server.max.receive.size (524288)")
            >= refusals + 50
        ),
        what="50 refusals logged",
    )
    frame = HEADER + bytes(500_000)
    body = struct.pack(">i", len(frame)) + frame
    with held_connections(sasl_port, 50, body[: len(body) - 10]):
        produce_and_consume(conf)
        held = report("50 unauthenticated 500 KB frames", b.pid, baseline)
    wait_until(
        lambda: memory_kb(b.pid)["VmRSS"] - baseline["VmRSS"] < 15 * 1024,  # type: ignore[arg-type]
        what="the memory of closed unauthenticated connections given back",
    )
    after = report("after they closed", b.pid, baseline)
    assert_grew_less_than(100 * 1024, held, baseline)
    produce_and_consume(conf)
    assert after["VmRSS"] - baseline["VmRSS"] < 15 * 1024


def test_declared_sizes_cost_nothing_and_clients_keep_working(
    broker: tuple[DebugBroker, int],
) -> None:
    b, _ = broker
    assert b.pid is not None
    conf = {"bootstrap.servers": b.bootstrap}
    produce_and_consume(conf)
    baseline = memory_kb(b.pid)
    lines_before = b.output(10**9).count("accepted connection")
    with held_connections(b.port, 200, struct.pack(">i", 100 * MiB) + HEADER):
        # Every one of them accepted (and so read: its bytes came with the handshake).
        wait_until(
            lambda: b.output(10**9).count("accepted connection") >= lines_before + 200,
            what="200 connections accepted",
        )
        produce_and_consume(conf)
        held = report("200 connections declaring 100 MiB", b.pid, baseline)
    # bytearray(size) per declared frame was 200 x 100 MiB; now each costs a 64 KiB buffer.
    assert_grew_less_than(100 * 1024, held, baseline)


def test_request_bytes_beyond_the_budget_are_not_read(broker: tuple[DebugBroker, int]) -> None:
    """60 connections each send 4 MiB of a declared 90 MiB frame: 240 MiB, twice
    queued.max.request.bytes (128 MiB). The broker reads up to the budget and pauses the rest;
    small requests of other clients still go through."""
    b, _ = broker
    assert b.pid is not None
    conf = {"bootstrap.servers": b.bootstrap}
    baseline = memory_kb(b.pid)
    chunk = struct.pack(">i", 90 * MiB) + HEADER + bytes(4 * MiB)
    socks = []
    try:
        for _ in range(60):
            s = socket.create_connection(("127.0.0.1", b.port), timeout=10)
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.send(chunk)  # as much as the socket buffers take; the rest is never sent
            socks.append(s)
        wait_until(
            lambda: "queued.max.request.bytes spent" in b.output(2_000_000),
            what="a connection paused for request memory",
        )
        produce_and_consume(conf)
        held = report("60 connections sending 4 MiB of 90 MiB", b.pid, baseline)
    finally:
        for s in socks:
            s.close()
    # The budget (128 MiB) plus the interpreter's own, not the 240 MiB sent.
    assert_grew_less_than(200 * 1024, held, baseline)
