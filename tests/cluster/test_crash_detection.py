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


def test_a_late_second_verdict_deletes_neither_a_new_registration_nor_a_new_office(
    clients: tuple[ZkMetadataClient, ZkMetadataClient], zk_connect: str
) -> None:
    """Two brokers declare the same crash; the second checked the registration before the
    first deleted it, and commits after the live broker (wrongly declared) registered again
    and another broker took the office. Every registration is created at version 0, so only
    the verdict znode's version stops the second from deleting what is there now."""
    ours, theirs = clients
    late_client = ZkMetadataClient(zk_connect, session_timeout_ms=6000).start()
    try:
        reg = BrokerRegistration(7, (EndPoint("PLAINTEXT", "127.0.0.1", 9),))
        theirs.register_broker(reg)
        assert theirs.try_become_controller(7) is not None
        first, late = CrashDetector(ours, 1), CrashDetector(late_client, 2)
        seen = ours.brokers()[7]
        stale = late.declaration(seen)  # checked: the registration probed is still there
        assert stale is not None and stale.held_office
        first._declare_gone(seen)
        assert ours.zk.exists(zd.broker_path(7)) is None
        assert ours.controller() is None
        new_epoch = theirs.register_broker(reg)  # the live broker registers again
        assert ours.try_become_controller(1) is not None
        late.commit(stale)
        assert ours.brokers()[7].broker_epoch == new_epoch
        assert ours.controller() == 1
        assert late.declaration(seen) is None  # declared already: nothing to do
    finally:
        late_client.close()


def test_a_verdict_checked_before_a_session_expiry_never_deletes_the_registration_after_it(
    clients: tuple[ZkMetadataClient, ZkMetadataClient],
) -> None:
    """The registration a broker probed went without any verdict (its session expired, here
    deleted by hand as the expiry would), the broker registered again, and only then does
    the declaration checked before commit: registering moved the verdict znode on, so it
    fails."""
    ours, theirs = clients
    reg = BrokerRegistration(7, (EndPoint("PLAINTEXT", "127.0.0.1", 9),))
    theirs.register_broker(reg)
    detector = CrashDetector(ours, 1)
    seen = ours.brokers()[7]
    stale = detector.declaration(seen)
    assert stale is not None
    theirs.zk.delete(zd.broker_path(7))  # what the session's expiry does
    new_epoch = theirs.register_broker(reg)
    detector.commit(stale)
    assert ours.brokers()[7].broker_epoch == new_epoch
