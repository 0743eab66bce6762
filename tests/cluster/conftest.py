"""A real ZooKeeper for the cluster tests: one server per test session, one chroot per test,
so that tests stay independent without paying ZooKeeper's start-up each time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from logkeel.cluster.zk_server import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test's own, to be stopped and restarted (the session's is shared)."""
    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        yield server


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """`host:port/chroot` (Kafka's zookeeper.connect form) private to this test."""
    chroot = "/" + re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
    root = KazooClient(hosts=zookeeper.connect_string, timeout=10.0)
    root.start(timeout=10.0)
    try:
        if root.exists(chroot):
            root.delete(chroot, recursive=True)
        root.ensure_path(chroot)
    finally:
        root.stop()
        root.close()
    return zookeeper.connect_string + chroot
