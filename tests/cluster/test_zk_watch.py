"""Pipelined watches (`zk_watch.WatchedZnodes`) against a real ZooKeeper: a quiet owner (a
standby controller's context) notes the changes of the znodes it was told, and reads each once
when it catches up."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from logkeel.cluster.zk_watch import WatchedZnodes
from tests.waiting import wait_until


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_connect, timeout=10.0)
    client.start(timeout=10.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def test_a_quiet_watch_notes_changes_and_reads_each_once_when_it_catches_up(
    zk: KazooClient,
) -> None:
    for i in range(3):
        zk.create(f"/s/{i}", b"0", makepath=True)
    seen: dict[str, list[bytes | None]] = {}
    reads = [0]
    lock = threading.Lock()

    def on_data(path: str) -> Any:
        def deliver(data: bytes | None, _stat: Any) -> None:
            with lock:
                seen.setdefault(path, []).append(data)
                reads[0] += 1

        return deliver

    w = WatchedZnodes(zk, lambda path, exc: pytest.fail(f"{path}: {exc}"))
    w.children("/s", lambda names: [w.data(f"/s/{n}", on_data(f"/s/{n}")) for n in names])
    assert w.wait_loaded(10)
    assert reads[0] == 3
    noted: list[int] = []
    w.quiet(lambda path: path.startswith("/s/"), lambda: noted.append(1))
    zk.set("/s/0", b"1")
    zk.set("/s/0", b"2")  # the watch fired once and is not re-armed: no second event
    zk.set("/s/1", b"1")
    zk.create("/s/3", b"0")  # children are not quiet: the new child is read at once
    wait_until(lambda: seen.get("/s/3") == [b"0"], 10, "the new child read at once")
    # A watcher of its own sees the changes land; the quiet one has not read them.
    landed = threading.Event()
    zk.DataWatch("/s/1", lambda data, _stat: landed.set() if data == b"1" else None)
    wait_until(landed.is_set, 10, "the changes")
    assert seen["/s/0"] == [b"0"] and seen["/s/1"] == [b"0"]
    w.catch_up()
    assert w.wait_loaded(10)
    assert seen["/s/0"] == [b"0", b"2"] and seen["/s/1"] == [b"0", b"1"]
    assert len(seen["/s/2"]) == 1  # unchanged: not read again
    # Still quiet after catching up: the next change waits for the next catch-up.
    zk.set("/s/0", b"3")
    zk.set("/s/1", b"3")
    landed.clear()
    zk.DataWatch("/s/1", lambda data, _stat: landed.set() if data == b"3" else None)
    wait_until(landed.is_set, 10, "the next changes")
    assert seen["/s/0"][-1] == b"2"
    assert len(noted) == 4  # each watch fired once before the catch-up, once after
    assert w.catch_up() == 2
    assert w.wait_loaded(10)
    assert seen["/s/0"][-1] == b"3"
    w.close()
