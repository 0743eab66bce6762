"""kazoo's connection thread on `zk_handler.PollingHandler` (one `poll` per select instead of a
new epoll selector): select's contract on real sockets, and a real ZooKeeper session through it
(pipelined reads, a watch, a transaction, a reconnect after its connection broke)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from logkeel.cluster.zk_handler import GaveUp, PollingHandler, poll_select
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.cluster.zk_session import ZkSession
from tests.waiting import wait_until


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_poll_select_answers_as_select_does(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    # Nothing to read: the timeout passes and nothing is ready to read, both are writable.
    started = time.monotonic()
    assert poll_select([a, b], [], [], 0.05) == ([], [], [])
    assert time.monotonic() - started >= 0.04
    assert poll_select([], [a, b], [], 0) == ([], [a, b], [])
    b.sendall(b"x")
    assert poll_select([a, b], [a], [], 1.0) == ([a], [a], [])
    # The same socket asked for both: reported in each list it was asked in.
    assert poll_select([a], [a], [], 0) == ([a], [a], [])
    # A peer gone counts as readable (the read then returns b"" and the caller reconnects).
    a.recv(1)
    b.close()
    assert poll_select([a], [], [], 1.0)[0] == [a]
    with pytest.raises(ValueError):
        poll_select([a], [], [], -1)


def test_a_broker_session_uses_the_polling_handler(zk_connect: str) -> None:
    session = ZkSession(zk_connect, session_timeout_ms=10_000)
    try:
        assert isinstance(session.zk.handler, PollingHandler)
        session.start()
        assert session.zk.exists("/brokers/ids") is not None
    finally:
        session.close()


def test_a_real_session_through_it_reads_watches_commits_and_reconnects(zk_connect: str) -> None:
    zk = KazooClient(hosts=zk_connect, timeout=10.0, handler=PollingHandler())
    zk.start(timeout=10.0)
    try:
        for r in [zk.create_async(f"/n{i}", str(i).encode()) for i in range(500)]:
            r.get(timeout=30)
        answers = [zk.get_async(f"/n{i}") for i in range(500)]
        assert [a.get(timeout=30)[0] for a in answers] == [str(i).encode() for i in range(500)]

        fired = threading.Event()
        zk.get("/n0", watch=lambda _event: fired.set())
        txn = zk.transaction()
        txn.set_data("/n0", b"new", version=0)
        txn.set_data("/n1", b"new", version=0)
        assert [stat.version for stat in txn.commit()] == [1, 1]
        assert fired.wait(10)

        # The connection breaks under it (the session stays): the select must report the dead
        # socket, and kazoo reconnects through the same handler; the session's reads go on.
        states: list[str] = []
        zk.add_listener(lambda state: states.append(state))
        zk._connection._socket.shutdown(socket.SHUT_RDWR)
        wait_until(lambda: KazooState.SUSPENDED in states and zk.connected, 30,
                   "reconnected after the server dropped the connection")  # fmt: skip
        assert zk.get("/n1")[0] == b"new"
    finally:
        zk.stop()
        zk.close()


def test_once_leaving_a_call_waits_for_no_connection_that_is_down(
    own_zookeeper: ZooKeeperServer,
) -> None:
    """kazoo holds a call made while its connection is down until it is back, and a blocking
    call waits without a bound: a broker stopping with ZooKeeper out of reach hung for ever.
    Once the session is leaving, a call waiting on a down connection fails (GaveUp), the one
    already waiting included, and a new one at once; with the connection up, calls answer as
    before."""
    session = ZkSession(own_zookeeper.connect_string, session_timeout_ms=30_000).start()
    try:
        session.zk.create("/n", b"v")
        own_zookeeper.stop()
        wait_until(lambda: not session.zk.connected, 10, "the connection lost")
        outcome: list[object] = []
        waiting = threading.Thread(target=lambda: outcome.append(_get(session, "/n")))
        waiting.start()
        waiting.join(1.5)
        assert waiting.is_alive(), f"answered with ZooKeeper down: {outcome}"
        session.leaving()
        waiting.join(2)
        assert not waiting.is_alive()
        assert isinstance(outcome[0], GaveUp)
        started = time.monotonic()
        assert isinstance(_get(session, "/n"), GaveUp)
        assert time.monotonic() - started < 2

        own_zookeeper.start(60)
        wait_until(lambda: session.zk.connected, 30, "connected again")
        assert _get(session, "/n") == b"v"
    finally:
        session.close()


def _get(session: ZkSession, path: str) -> object:
    try:
        return session.zk.get(path)[0]
    except GaveUp as exc:
        return exc
