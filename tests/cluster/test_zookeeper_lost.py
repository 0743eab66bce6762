"""ZooKeeper lost while a broker runs (issue 9): the broker keeps serving reads, stops taking
writes as leader once its session could have expired, and takes them again once ZooKeeper is
back and it is registered anew. ZooKeeper is really frozen (SIGSTOP), so this test runs its
own server rather than the session's shared one."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_server import ZooKeeperServer
from tests.brokerproc import BrokerProcess
from tests.cluster.test_cluster_brokers import PROBE_ERRORS
from tests.server.test_produce_api import RawClient, batch, fetch_records, produce_one
from tests.waiting import wait_until

SESSION_TIMEOUT_MS = 6000
# How long ZooKeeper stays away in the reconnection test: by then kazoo's default pause
# between attempts has grown to 6-18 s.
OUTAGE_S = 13.0


def broker_on(zk: ZooKeeperServer, tmp_path: Path, chroot: str, node_id: int) -> BrokerProcess:
    """A broker of the test's own ZooKeeper, with the short session these tests wait out."""
    return BrokerProcess(
        tmp_path / f"b{node_id}",
        overrides={"zookeeper.connect": zk.connect_string + chroot,
                   "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)},
        extra_args=["--node-id", str(node_id)],
    )  # fmt: skip


def controller_id(admin: AdminClient) -> int | None:
    try:
        return admin.list_topics(timeout=5).controller_id
    except KafkaException:
        return None


def test_reads_go_on_and_writes_stop_while_zookeeper_is_gone(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path / "zk") as zk:
        broker = broker_on(zk, tmp_path, "/lost", 1)
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            # This test is about losing ZooKeeper, not about start-up: the topic is created
            # once the broker has won the controller election (the test's own ZooKeeper is a
            # fresh JVM, slow to answer on a loaded machine).
            wait_until(
                lambda: controller_id(admin) == 1,
                30,
                "broker 1 to be the controller",
                retry_on=PROBE_ERRORS,
            )
            admin.create_topics([NewTopic("t", 1, 1)])["t"].result(30)
            with RawClient(broker.port) as client:
                wait_until(
                    lambda: (
                        produce_one(client, 9, "t", 0, batch([b"a", b"b"])).error_code
                        == ErrorCode.none
                    ),
                    15.0,
                    "the first write",
                    retry_on=PROBE_ERRORS,
                )
                assert zk.process is not None
                os.kill(zk.process.pid, signal.SIGSTOP)
                try:
                    # Within the session timeout the broker cannot tell a blip from an outage.
                    assert (
                        produce_one(client, 9, "t", 0, batch([b"c"])).error_code == ErrorCode.none
                    )
                    time.sleep(SESSION_TIMEOUT_MS / 1000 + 3)
                    refused = produce_one(client, 9, "t", 0, batch([b"lost?"]))
                    assert refused.error_code == ErrorCode.not_leader_or_follower
                    assert [r.value for r in fetch_records(client, "t", 0, 0)] == [b"a", b"b", b"c"]
                finally:
                    os.kill(zk.process.pid, signal.SIGCONT)
                wait_until(
                    lambda: (
                        produce_one(client, 9, "t", 0, batch([b"d"])).error_code == ErrorCode.none
                    ),
                    SESSION_TIMEOUT_MS / 1000 + 30,
                    "writes accepted again after ZooKeeper returned",
                    retry_on=PROBE_ERRORS,
                )
                values = [r.value for r in fetch_records(client, "t", 0, 0)]
                assert values[:3] == [b"a", b"b", b"c"] and b"lost?" not in values
        finally:
            broker.kill()


def test_a_session_is_back_within_seconds_of_a_long_outage(tmp_path: Path) -> None:
    """kazoo doubles its pause between attempts to reach ZooKeeper, up to an hour by default:
    after ZooKeeper was away a while, a broker came back many seconds after it (a failover test
    under load missed its bound). The pause is capped at a second, as ZooKeeper's own client
    does."""
    with ZooKeeperServer(tmp_path / "zk") as zk:
        client = ZkMetadataClient(zk.connect_string, session_timeout_ms=60_000).start()
        try:
            zk.stop()
            wait_until(lambda: not client.zk.connected, 10, "the connection lost")
            time.sleep(OUTAGE_S)  # the outage itself, during which kazoo's pauses grow
            zk.start(60)
            started = time.monotonic()
            wait_until(lambda: client.zk.connected, 4, "connected again")
            print(f"connected again {time.monotonic() - started:.2f}s after ZooKeeper's restart")
        finally:
            client.close()


def test_brokers_told_to_stop_while_zookeeper_is_frozen_stop_cleanly(tmp_path: Path) -> None:
    """SIGTERM with ZooKeeper frozen: a broker stuck for ever in its controlled shutdown's first
    write (kazoo holds a call made while its connection is down until it is back) never exited.
    Now each broker, the controller's and another, gives its controlled shutdown the session
    timeout, skips what needs ZooKeeper and stops cleanly (its logs marked clean: no recovery at
    the next start)."""
    with ZooKeeperServer(tmp_path / "zk") as zk:
        brokers = [broker_on(zk, tmp_path, "/frozen", i) for i in (1, 2)]
        for broker in brokers:
            broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
            wait_until(
                lambda: (
                    controller_id(admin) in (1, 2)
                    and len(admin.list_topics(timeout=5).brokers) == 2
                ),
                30,
                "both brokers registered and a controller elected",
                retry_on=PROBE_ERRORS,
            )
            # Leaderships on both brokers, so that each has something to move.
            admin.create_topics([NewTopic("t", 4, 2)])["t"].result(30)
            wait_until(
                lambda: (
                    {
                        p.leader
                        for p in admin.list_topics("t", timeout=5).topics["t"].partitions.values()
                    }
                    == {1, 2}
                ),  # fmt: skip
                30,
                "leaders on both brokers",
                retry_on=PROBE_ERRORS,
            )
            assert zk.process is not None
            os.kill(zk.process.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                bound = SESSION_TIMEOUT_MS / 1000 + 20
                with ThreadPoolExecutor(2) as pool:
                    codes = list(pool.map(lambda b: b.stop(bound), brokers))
                took = time.monotonic() - started
            finally:
                os.kill(zk.process.pid, signal.SIGCONT)
            print(f"both brokers stopped {took:.1f}s after SIGTERM")
            assert codes == [0, 0]
            for broker in brokers:
                out = broker.output(200_000)
                assert "log manager shut down cleanly" in out, broker.output_tail(20)
                assert "left the cluster" in out
        finally:
            for broker in brokers:
                broker.kill()
