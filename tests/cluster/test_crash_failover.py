"""Failover after a process crash in about a second, with Kafka's 18 s session (issue 19 item 4):
a broker whose port refuses connections is taken for gone by its peers (`crash_detection`), a
frozen one still waits for its session to expire, and a broker wrongly declared gone registers
again and rejoins. The history checker runs on every scenario that writes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.testing.history import History
from tests.cluster.test_cluster_brokers import PROBE_ERRORS, Cluster, three_brokers
from tests.cluster.test_cluster_history import (
    TOPIC,
    Reader,
    Writer,
    agreed,
    final_logs,
    run_rounds,
)
from tests.waiting import wait_until

SESSION_MS = 18_000
# Well below the session: only the refused connections can explain a failover this fast.
CRASH_BOUND_S = 6.0


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    with three_brokers(zookeeper, tmp_path, "/crash_failover",
                       {"zookeeper.session.timeout.ms": str(SESSION_MS)}) as c:  # fmt: skip
        yield c


def zk(cluster: Cluster) -> KazooClient:
    client = KazooClient(hosts=cluster.connect, timeout=10.0)
    client.start(timeout=10.0)
    return client


def test_sigkilled_leaders_fail_over_before_their_session_expires(cluster: Cluster) -> None:
    resumed = run_rounds(cluster, ["kill", "kill"])
    assert max(resumed) < CRASH_BOUND_S, resumed


@pytest.mark.xfail(
    strict=False,
    reason="intermittent (2 of 4 runs in its module on a loaded machine, never alone): the "
    "controller SIGKILLed right after the topic is created is sometimes not declared gone by "
    "the other brokers' crash detectors (no 'refuses connections' line), so failover waits for "
    "the session; open in issue 19's note. Not reproduced since in 7 runs of the module's two "
    "SIGKILL tests at load 9-23; the detectors now log why a crash goes undeclared (a peer never "
    "reached, a failed probing round, a removal refused)",
)
def test_sigkilled_controller_is_replaced_at_once(cluster: Cluster) -> None:
    cluster.create_topic("ctl", 6, 3)
    wait_until(lambda: all(len(p.isr_nodes) == 3 for p in cluster.partitions("ctl").values()), 15.0, "all in sync", retry_on=PROBE_ERRORS)  # fmt: skip
    client = zk(cluster)
    try:
        old = zd.decode_controller(client.get(zd.CONTROLLER)[0])
        epoch = zd.decode_controller_epoch(client.get(zd.CONTROLLER_EPOCH)[0])
        started = time.monotonic()
        cluster.brokers[old].kill()
        peer = next(i for i in cluster.brokers if i != old)

        def led_elsewhere() -> bool:
            parts = cluster.partitions("ctl", peer)
            return all(p.leader_id not in (old, -1) for p in parts.values())

        wait_until(
            led_elsewhere,
            CRASH_BOUND_S,
            "every partition led by a live broker",
            retry_on=PROBE_ERRORS,
        )
        took = time.monotonic() - started
        new = zd.decode_controller(client.get(zd.CONTROLLER)[0])
        assert new != old
        assert zd.decode_controller_epoch(client.get(zd.CONTROLLER_EPOCH)[0]) > epoch
        seen = "".join(b.output(400_000) for i, b in cluster.brokers.items() if i != old)
        assert f"broker {old} refuses connections" in seen
        print(f"controller {old} killed: every partition led elsewhere after {took:.2f}s")
        # Restarted at once: its old registration is gone already, nothing waits for a session.
        cluster.brokers[old].start(30)
        wait_until(lambda: all(len(p.isr_nodes) == 3 for p in cluster.partitions("ctl").values()), 30, "back in every ISR", retry_on=PROBE_ERRORS)  # fmt: skip
    finally:
        client.stop()


def test_a_frozen_leader_still_waits_for_its_session(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """SIGSTOP: the port still accepts connections (the kernel completes them), so nothing is
    declared gone until the session expires (6 s here); the history stays clean."""
    with three_brokers(zookeeper, tmp_path, "/crash_failover_frozen") as c:
        resumed = run_rounds(c, ["freeze"])
    assert min(resumed) >= 5.0, resumed


def test_a_broker_wrongly_declared_gone_registers_again_and_loses_nothing(
    cluster: Cluster,
) -> None:
    """What a peer does to a broker it takes for crashed (its registration deleted) done to the
    live leader of partition 0: it registers again under a new broker epoch, leadership moves,
    it rejoins every ISR, and no acknowledged write is lost."""
    admin = cluster.admin()
    admin.create_topics([NewTopic(TOPIC, 2, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(
        20
    )
    wait_until(lambda: agreed(cluster) and all(
        len(p.isr_nodes) == 3 for p in cluster.partitions(TOPIC).values()), 15.0, "all in sync", retry_on=PROBE_ERRORS)  # fmt: skip
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())
    history = History()
    writer, reader = Writer(bootstrap, history), Reader(bootstrap, history)
    writer.start()
    reader.start()
    client = zk(cluster)
    try:
        wait_until(lambda: len(history.acked) > 200, 30, "first acks", retry_on=PROBE_ERRORS)
        victim = cluster.partitions(TOPIC)[0].leader_id
        path = zd.broker_path(victim)
        before = client.exists(path).czxid
        client.delete(path)
        wait_until(lambda: (s := client.exists(path)) is not None and s.czxid != before, 20, "the broker registered again", retry_on=PROBE_ERRORS)  # fmt: skip
        acked = len(history.acked)
        wait_until(
            lambda: len(history.acked) > acked + 200, 30, "acks go on", retry_on=PROBE_ERRORS
        )

        def all_in_sync() -> bool:
            parts = agreed(cluster)
            return parts is not None and all(len(p.isr_nodes) == 3 for p in parts.values())

        wait_until(all_in_sync, 60, "the broker back in every ISR", retry_on=PROBE_ERRORS)
        assert "registering again" in cluster.brokers[victim].output(400_000)
    finally:
        client.stop()
        writer.stop.set()
        writer.join(150)
        reader.stop.set()
        reader.join(30)
    anomalies = history.check(final_logs(bootstrap))
    assert history.failed_sends == 0, writer.errors[:5]
    assert len(history.acked) == writer.sent
    assert anomalies == [], anomalies[:20]
