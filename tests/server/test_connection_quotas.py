"""Kafka's connection limits: the pure decisions (ConnectionQuotas, a fake clock), then a real
broker process with real sockets."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logkeel.server.network.connection_quotas import ConnectionQuotas, ListenerQuota
from logkeel.testing.broker_process import LogkeelBroker, free_port

from .conftest import api_versions_request


class Conn:
    def __init__(self, quotas: ConnectionQuotas, listener: str, ip: str, now: float) -> None:
        self.state = "waiting"
        self.reason = ""
        self.listener, self.ip = listener, ip
        quotas.arrive(listener, ip, self.admit, self.refuse, now)

    def admit(self) -> None:
        self.state = "served"

    def refuse(self, reason: str) -> None:
        self.state, self.reason = "closed", reason


def test_broker_and_listener_limits_make_connections_wait_for_a_slot() -> None:
    quotas = ConnectionQuotas(max_connections=3)
    quotas.add_listener("A", ListenerQuota(max_connections=2))
    quotas.add_listener("B", ListenerQuota())
    a = [Conn(quotas, "A", "10.0.0.1", 0) for _ in range(3)]
    assert [c.state for c in a] == ["served", "served", "waiting"]  # listener A's limit
    b = [Conn(quotas, "B", "10.0.0.2", 0) for _ in range(2)]
    assert [c.state for c in b] == ["served", "waiting"]  # the broker's limit
    assert quotas.leave("A", "10.0.0.1", 1) is None
    # The oldest waiter takes the slot; the broker is full again for B's.
    assert [a[2].state, b[1].state] == ["served", "waiting"]
    quotas.leave("A", "10.0.0.1", 2)
    assert b[1].state == "served"


def test_the_inter_broker_listener_is_exempt_from_the_broker_wide_limits() -> None:
    quotas = ConnectionQuotas(max_connections=1, max_creation_rate=1)
    quotas.add_listener("CLIENT", ListenerQuota())
    quotas.add_listener("BROKER", ListenerQuota(max_connections=2, inter_broker=True))
    assert Conn(quotas, "CLIENT", "c", 0).state == "served"
    assert Conn(quotas, "CLIENT", "c", 0).state == "waiting"
    assert [Conn(quotas, "BROKER", "b", 0).state for _ in range(3)] == [
        "served", "served", "waiting",  # its own listener limit still holds
    ]  # fmt: skip


def test_per_ip_limits_and_overrides_close_the_connection() -> None:
    quotas = ConnectionQuotas(max_connections_per_ip=1, per_ip_overrides={"10.0.0.9": 3})
    first, second = Conn(quotas, "L", "10.0.0.1", 0), Conn(quotas, "L", "10.0.0.1", 0)
    assert (first.state, second.state) == ("served", "closed")
    assert "max.connections.per.ip=1" in second.reason
    assert [Conn(quotas, "L", "10.0.0.9", 0).state for _ in range(4)] == [
        "served", "served", "served", "closed",
    ]  # fmt: skip
    quotas.leave("L", "10.0.0.1", 1)
    assert Conn(quotas, "L", "10.0.0.1", 1).state == "served"


def test_creation_rate_delays_connections_to_the_next_second() -> None:
    quotas = ConnectionQuotas(max_creation_rate=2)
    quotas.add_listener("L", ListenerQuota())
    conns = [Conn(quotas, "L", "ip", 10.0) for _ in range(3)]
    assert [c.state for c in conns] == ["served", "served", "waiting"]
    assert quotas.pump(10.5) == pytest.approx(11.0)  # when the first leaves the window
    assert conns[2].state == "waiting"
    assert quotas.pump(11.0) is None and conns[2].state == "served"


def test_listener_creation_rate_applies_to_the_inter_broker_listener() -> None:
    quotas = ConnectionQuotas()
    quotas.add_listener("B", ListenerQuota(max_creation_rate=1, inter_broker=True))
    assert [Conn(quotas, "B", "ip", 0).state for _ in range(2)] == ["served", "waiting"]


def test_at_most_backlog_connections_wait_per_listener() -> None:
    quotas = ConnectionQuotas(max_connections=0, backlog=2)
    conns = [Conn(quotas, "L", "ip", 0) for _ in range(3)]
    assert [c.state for c in conns] == ["waiting", "waiting", "closed"]
    assert "socket.listen.backlog.size=2" in conns[2].reason
    quotas.withdraw(conns[0].admit)
    assert Conn(quotas, "L", "ip", 0).state == "waiting"


# -- a real broker ----------------------------------------------------------------------------


def answered(sock: socket.socket, timeout: float) -> bool:
    """Sends ApiVersions and says whether an answer came within ``timeout`` seconds (False
    if the broker closed the connection or said nothing)."""
    sock.sendall(api_versions_request(0, 7))
    sock.settimeout(timeout)
    try:
        head = sock.recv(8)
    except TimeoutError:
        return False
    return len(head) == 8 and struct.unpack(">i", head[4:])[0] == 7


def closed_by_broker(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@contextlib.contextmanager
def broker_with(tmp_path: Path, overrides: dict[str, str]) -> Iterator[LogkeelBroker]:
    port = free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", **overrides}
    with LogkeelBroker(tmp_path, port=port, overrides=overrides, verbose=True).start(60) as b:
        yield b


def test_max_connections_holds_new_ones_until_one_closes(tmp_path: Path) -> None:
    # start() itself opens (and closes) one connection to see the port listening.
    with broker_with(tmp_path, {"listener.name.plaintext.max.connections": "2"}) as b:
        first = socket.create_connection(("127.0.0.1", b.port))
        second = socket.create_connection(("127.0.0.1", b.port))
        assert answered(first, 10) and answered(second, 10)
        third = socket.create_connection(("127.0.0.1", b.port))
        assert not answered(third, 1.0)  # waits, unserved
        first.close()
        third.settimeout(10)
        head = third.recv(8)  # served once a slot is free: the answer to its request
        assert struct.unpack(">i", head[4:])[0] == 7
        second.close()
        third.close()


def test_max_connections_per_ip_closes_the_extra_ones(tmp_path: Path) -> None:
    overrides = {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "localhost:2"}
    with broker_with(tmp_path, overrides) as b:
        socks = [socket.create_connection(("127.0.0.1", b.port)) for _ in range(2)]
        assert all(answered(s, 10) for s in socks)
        extra = socket.create_connection(("127.0.0.1", b.port))
        assert closed_by_broker(extra)
        assert "max.connections.per.ip.overrides=2" in b.output()
        for s in socks:
            s.close()


def test_max_connection_creation_rate_spreads_connections_over_seconds(tmp_path: Path) -> None:
    with broker_with(tmp_path, {"max.connection.creation.rate": "2"}) as b:
        socks = [socket.create_connection(("127.0.0.1", b.port)) for _ in range(5)]
        try:
            served_at = []
            for s in socks:
                assert answered(s, 10)
                served_at.append(time.monotonic())
        finally:
            for s in socks:
                s.close()
    # At 2 per second, 5 connections opened at once are served over at least two seconds
    # (the first two at once, two a second later, the last a second after that).
    assert served_at[-1] - served_at[0] >= 1.9, served_at
