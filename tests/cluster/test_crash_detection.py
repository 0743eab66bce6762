"""`CrashDetector` against a real ZooKeeper and real sockets: a suspicion (a follower's fetch
that lost its connection) starts a probing round at once, and a broker whose listener then
refuses is declared gone without waiting for the next round."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from logkeel.cluster import crash_detection
from logkeel.cluster import zk_data as zd
from logkeel.cluster.crash_detection import CrashDetector
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_data import BrokerRegistration, EndPoint
from tests.cluster.test_zk_client import WAIT
from tests.waiting import wait_until


@pytest.fixture
def clients(zk_connect: str) -> Iterator[tuple[ZkMetadataClient, ZkMetadataClient]]:
    ours = ZkMetadataClient(zk_connect, session_timeout_ms=6000).start()
    theirs = ZkMetadataClient(zk_connect, session_timeout_ms=6000).start()
    yield ours, theirs
    theirs.close()
    ours.close()


def test_a_suspicion_probes_at_once_and_a_refusing_broker_is_declared_gone(
    clients: tuple[ZkMetadataClient, ZkMetadataClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No round of its own within the test: only the suspicions make it probe.
    monkeypatch.setattr(crash_detection, "PROBE_INTERVAL_S", 3600.0)
    ours, theirs = clients
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    theirs.register_broker(BrokerRegistration(7, (EndPoint("PLAINTEXT", "127.0.0.1", port),)))
    detector = CrashDetector(ours, 1)
    detector.start()
    try:
        detector.suspect()
        wait_until(lambda: detector.verdicts.counting(7), WAIT, "broker 7 reached once")
        assert theirs.zk.exists(zd.broker_path(7)) is not None
        listener.close()  # its process gone: connections refused
        detector.suspect()
        wait_until(lambda: ours.zk.exists(zd.broker_path(7)) is None, WAIT,
                   "broker 7's registration removed")  # fmt: skip
    finally:
        detector.stop()
        listener.close()
