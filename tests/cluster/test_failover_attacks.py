"""Attacks on failover from outside (issue 19, items 1 and 4): an idempotent acks=all producer
writes to a 3-broker cluster (RF 3, min.insync.replicas 2, Kafka's 18 s session) and a consumer
reads along while brokers are killed at awkward moments, taken for crashed while alive, frozen
as controller, or killed in the middle of a controlled shutdown. The history checker
(`logkeel.testing.history`) then compares every acknowledgement and read with the final logs:
nothing acked lost, duplicated or reordered, nothing read that the final log lacks. Every wait
is bounded; a failover that needed the session's expiry would miss the bounds below."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic

from logkeel.cluster.crash_detection import probe_order
from logkeel.cluster.zk_data import EndPoint as ListenerEndPoint
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.ports import free_port
from logkeel.storage.tools.dump import dump_file
from logkeel.testing import network
from logkeel.testing.history import History
from logkeel.testing.network import Endpoint, NetworkCut
from tests.brokerproc import BrokerProcess
from tests.cluster.test_cluster_brokers import PROBE_ERRORS, Cluster, three_brokers
from tests.cluster.test_cluster_history import (
    PARTITIONS,
    TOPIC,
    Reader,
    Writer,
    agreed,
    elect_replica,
    final_logs,
    views,
)
from tests.server.test_admin_wire import Wire
from tests.waiting import wait_until

SESSION_MS = 18_000  # Kafka's default: a crash must not wait for it
# A crash is seen in well under a second; the bound leaves room for a loaded machine, and
# stays far below the session.
FAST_FAILOVER_S = 8.0


@pytest.fixture
def cluster(
    zookeeper: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    chroot = "/" + re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)
    with three_brokers(
        zookeeper, tmp_path, chroot, {"zookeeper.session.timeout.ms": str(SESSION_MS)}
    ) as c:
        yield c


class Traffic:
    """The topic, its writer and its reader; ``finish`` stops them and checks the history."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        admin = cluster.admin()
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
            TOPIC
        ].result(60)
        wait_until(lambda: all_in_sync(cluster), 30, "the topic in sync", retry_on=PROBE_ERRORS)
        self.bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())
        self.history = History()
        self.writer = Writer(self.bootstrap, self.history)
        self.reader = Reader(self.bootstrap, self.history)
        self.writer.start()
        self.reader.start()
        self.acks_after(200, "first acks")

    def acks_after(self, more: int, what: str, timeout: float = 60) -> float:
        """Waits for ``more`` acks beyond those so far; returns how long it took."""
        started, before = time.monotonic(), len(self.history.acked)
        wait_until(lambda: len(self.history.acked) > before + more, timeout, what)
        return time.monotonic() - started

    def finish(self) -> None:
        self.writer.stop.set()
        self.writer.join(150)
        self.reader.stop.set()
        self.reader.join(30)
        anomalies = self.history.check(final_logs(self.bootstrap))
        print(f"{self.writer.sent} sent, {len(self.history.acked)} acked, "
              f"{sum(len(r) for r in self.history.reads.values())} read")  # fmt: skip
        assert not self.writer.is_alive()
        assert self.history.failed_sends == 0, self.writer.errors[:5]
        assert len(self.history.acked) == self.writer.sent
        assert anomalies == [], anomalies[:20]


def timed(step: Callable[..., None], *args: Any) -> None:
    """Runs one step of a test and prints how long it took (the module must stay fast)."""
    started = time.monotonic()
    step(*args)
    print(f"{step.__name__}: {time.monotonic() - started:.1f}s")


def all_in_sync(cluster: Cluster) -> bool:
    parts = agreed(cluster)
    return (
        parts is not None
        and len(parts) == PARTITIONS
        and all(p.leader_id > 0 and len(p.isr_nodes) == 3 for p in parts.values())
    )


def wait_all_in_sync(cluster: Cluster, what: str, timeout: float = 60) -> None:
    try:
        wait_until(lambda: all_in_sync(cluster), timeout, what, retry_on=PROBE_ERRORS)
    except AssertionError as e:
        raise AssertionError(f"{e}; as each broker sees it: {views(cluster)}") from None


def controller(cluster: Cluster, via: int) -> int:
    return int(cluster.metadata(via).controller_id)


def leader(cluster: Cluster, partition: int, via: int) -> int:
    return int(cluster.partitions(TOPIC, via)[partition].leader_id)


def designate(cluster: Cluster, replica: int, via: int, seen_by: list[int] | None = None) -> None:
    """`logkeel elect --replica`: ``replica`` leads partition 0 (it is in sync), as every
    broker of ``seen_by`` (default: all running) shows it."""
    seen_by = seen_by or [b for b in cluster.brokers if cluster.brokers[b].alive()]
    elect_replica(replica, cluster.brokers[via].bootstrap)
    wait_until(lambda: all(leader(cluster, 0, b) == replica for b in seen_by), 20, "the designated leader", retry_on=PROBE_ERRORS)  # fmt: skip


def new_leader(cluster: Cluster, partition: int, old: int, via: int) -> int | None:
    found = leader(cluster, partition, via)
    return found if found not in (old, -1) else None


def kill_the_controller_then_the_new_leader(cluster: Cluster, traffic: Traffic) -> None:
    """SIGKILL of the controller while it leads partition 0, then of partition 0's new leader
    the moment it leads (before it flushed anything of its epoch: no checkpoint holds it),
    leaving one broker: each leadership moves without waiting for a session; acks wait for a
    second replica (min ISR 2). The broker killed last restarts first and, once back in sync,
    leads by designation: from a log holding every acknowledged record."""
    first = controller(cluster, 1)
    designate(cluster, first, via=first)
    traffic.acks_after(100, "acks at the controller as leader")
    started = time.monotonic()
    cluster.brokers[first].kill()
    survivor = next(b for b in cluster.brokers if b != first)
    second = wait_until(lambda: new_leader(cluster, 0, first, survivor), FAST_FAILOVER_S, "a new leader after the controller's kill", interval=0.01, retry_on=PROBE_ERRORS)  # fmt: skip
    cluster.brokers[second].kill()
    took = time.monotonic() - started
    last = next(b for b in cluster.brokers if b not in (first, second))
    wait_until(lambda: leader(cluster, 0, last) == last and controller(cluster, last) == last, FAST_FAILOVER_S, "the last broker leading and in office", retry_on=PROBE_ERRORS)  # fmt: skip
    print(f"controller {first} killed, {second} led {took:.2f}s later and was killed")
    cluster.brokers[second].start(60)
    traffic.acks_after(100, "acks once a second replica is back", timeout=90)
    wait_until(lambda: all(second in p.isr_nodes for p in cluster.partitions(TOPIC, last).values()), 60, "the broker killed last back in the ISRs", retry_on=PROBE_ERRORS)  # fmt: skip
    designate(cluster, second, via=last)
    traffic.acks_after(100, "acks at the broker killed last, leading again")
    cluster.brokers[first].start(60)
    wait_all_in_sync(cluster, "the controller back in every ISR")


def kill_the_controller_during_a_controlled_shutdown(cluster: Cluster, traffic: Traffic) -> None:
    """SIGTERM of partition 0's leader and, while the controller handles its controlled
    shutdown, SIGKILL of the controller; then SIGKILL of the leaving broker itself, wherever
    its shutdown got to. Both restart."""
    ctl = controller(cluster, 1)
    leaving = next(b for b in cluster.brokers if b != ctl)
    designate(cluster, leaving, via=leaving)
    heard = cluster.brokers[ctl].output(2_000_000).count("controlled shutdown of broker")
    proc = cluster.brokers[leaving].proc
    assert proc is not None
    proc.terminate()
    wait_until(lambda: cluster.brokers[ctl].output(2_000_000).count("controlled shutdown of broker") > heard, 10, "the controller hearing the shutdown")  # fmt: skip
    cluster.brokers[ctl].kill()
    last = next(b for b in cluster.brokers if b not in (ctl, leaving))
    wait_until(lambda: controller(cluster, last) == last, FAST_FAILOVER_S, "a new controller", retry_on=PROBE_ERRORS)  # fmt: skip
    cluster.brokers[leaving].kill()
    wait_until(lambda: leader(cluster, 0, last) == last, FAST_FAILOVER_S, "the last broker leading", retry_on=PROBE_ERRORS)  # fmt: skip
    cluster.brokers[leaving].start(60)
    traffic.acks_after(100, "acks once a second replica is back", timeout=90)
    cluster.brokers[ctl].start(60)
    wait_all_in_sync(cluster, "both back in every ISR")


def test_kills_in_a_row_and_during_a_controlled_shutdown(cluster: Cluster) -> None:
    """The two kill sequences above, one after the other, under one history: nothing acked is
    lost, duplicated or reordered, and the replicas' logs agree batch for batch."""
    traffic = Traffic(cluster)
    timed(kill_the_controller_then_the_new_leader, cluster, traffic)
    timed(kill_the_controller_during_a_controlled_shutdown, cluster, traffic)
    timed(Traffic.finish, traffic)
    timed(assert_replicas_agree, cluster)


def refuse_the_controller(cluster: Cluster, traffic: Traffic) -> None:
    """The controller, leading partition 0, refuses new connections (a TCP reset, as from a
    closed port) while it runs on with its open connections and its ZooKeeper session: its
    peers take it for crashed. Another broker takes office and leadership at once; the old
    controller, fenced by the controller epoch, registers again and rejoins as a follower."""
    victim = controller(cluster, 1)
    designate(cluster, victim, via=victim)
    peer = next(b for b in cluster.brokers if b != victim)
    with NetworkCut() as cut:
        started = time.monotonic()
        cut.refuse(Endpoint(cluster.brokers[victim].port))
        wait_until(lambda: new_leader(cluster, 0, victim, peer) and controller(cluster, peer) not in (victim, -1), FAST_FAILOVER_S, "leadership and office moved", retry_on=PROBE_ERRORS)  # fmt: skip
        moved = time.monotonic() - started
        traffic.acks_after(100, "acks after the move")
        wait_until(lambda: "registering again" in cluster.brokers[victim].output(400_000), 20, "the victim registering again")  # fmt: skip
    print(f"office and leadership moved {moved:.2f}s after the refusals began")
    wait_all_in_sync(cluster, "the victim back in every ISR")
    offices = {controller(cluster, b) for b in cluster.brokers}
    assert len(offices) == 1 and victim not in offices, offices


def freeze_the_controller(cluster: Cluster, traffic: Traffic) -> None:
    """SIGSTOP of the controller (its port still accepts connections: no crash is seen), until
    its session expires and another broker takes office; partition 0 is then moved by
    designation while it sleeps. SIGCONT: it resumes as a controller that lost its office and
    must change nothing; it rejoins."""
    victim = controller(cluster, 1)
    others = [b for b in cluster.brokers if b != victim]
    cluster.brokers[victim].freeze()
    try:
        wait_until(lambda: controller(cluster, others[0]) in others, SESSION_MS / 1000 + 15, "another controller", retry_on=PROBE_ERRORS)  # fmt: skip
        traffic.acks_after(100, "acks while the controller sleeps")
        target = next(b for b in others if b != leader(cluster, 0, others[0]))
        designate(cluster, target, via=others[0], seen_by=others)
    finally:
        cluster.brokers[victim].thaw()
    wait_all_in_sync(cluster, "the old controller back in every ISR", timeout=90)
    assert all(leader(cluster, 0, b) == target for b in cluster.brokers)
    offices = {controller(cluster, b) for b in cluster.brokers}
    assert len(offices) == 1 and victim not in offices, offices


@pytest.mark.skipif(network.available() is not None, reason=str(network.available()))
def test_a_controller_taken_for_crashed_then_a_frozen_one(cluster: Cluster) -> None:
    """The controller taken for crashed while alive, then (another) controller frozen past its
    session, under one history: one controller in the end each time, nothing acked lost."""
    traffic = Traffic(cluster)
    timed(refuse_the_controller, cluster, traffic)
    timed(freeze_the_controller, cluster, traffic)
    timed(Traffic.finish, traffic)
    timed(assert_replicas_agree, cluster)


def batches(broker: BrokerProcess, partition: int) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, leader epoch, CRC) of each batch of a replica's log, read from
    its segment files (`logkeel log dump`'s reader)."""
    found = []
    for segment in sorted((broker.log_dirs[0] / f"{TOPIC}-{partition}").glob("*.log")):
        found += [
            (b["base_offset"], b["last_offset"], b["partition_leader_epoch"], b["crc"])
            for b in dump_file(segment).items()
        ]
    return found


def assert_replicas_agree(cluster: Cluster) -> None:
    """Once the writer stopped and every replica is in sync, the three logs of each partition
    hold the same batches (offsets, epochs, CRCs): no replica diverged from its leader."""
    for p in range(PARTITIONS):
        logs: dict[int, list[tuple[int, int, int, int]]] = {}

        def same(p: int = p, logs: dict[int, list[tuple[int, int, int, int]]] = logs) -> bool:
            logs.update({i: batches(b, p) for i, b in cluster.brokers.items()})
            return len({tuple(x) for x in logs.values()}) == 1

        try:
            wait_until(same, 30, f"partition {p}'s replicas holding the same batches")
        except AssertionError:
            raise AssertionError(f"p{p}: replicas differ: " + "; ".join(
                f"{i}: {len(x)} batches, last {x[-3:]}" for i, x in logs.items()
            )) from None  # fmt: skip


def test_zookeeper_restart_while_the_controller_and_a_follower_die(
    own_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """ZooKeeper stops; while it is away the controller and the follower of partition 0 that
    is neither are SIGKILLed (nobody can record that they are gone, nor shrink an ISR; acks
    stop); ZooKeeper comes back on its port with its data. Their registrations must go without
    waiting out their sessions, a controller takes office, the ISRs shrink and acks resume;
    both return and rejoin; nothing acked is lost."""
    with three_brokers(
        own_zookeeper, tmp_path, "/zk_restart", {"zookeeper.session.timeout.ms": str(SESSION_MS)}
    ) as cluster:
        traffic = Traffic(cluster)
        ctl = controller(cluster, 1)
        lead = leader(cluster, 0, 1)
        if lead == ctl:
            lead = next(b for b in cluster.brokers if b != ctl)
            designate(cluster, lead, via=lead)
        follower = next(b for b in cluster.brokers if b not in (ctl, lead))
        own_zookeeper.stop()
        cluster.brokers[ctl].kill()
        cluster.brokers[follower].kill()
        own_zookeeper.start(60)
        restarted = time.monotonic()
        wait_until(lambda: controller(cluster, lead) == lead, FAST_FAILOVER_S + 5, "the survivor in office", retry_on=PROBE_ERRORS)  # fmt: skip
        print(f"survivor in office {time.monotonic() - restarted:.2f}s after ZooKeeper's restart")
        cluster.brokers[follower].start(60)
        traffic.acks_after(100, "acks once a follower is back", timeout=90)
        cluster.brokers[ctl].start(60)
        wait_all_in_sync(cluster, "both back in every ISR")
        traffic.finish()
        assert_replicas_agree(cluster)


def test_probes_go_to_the_inter_broker_listener_first() -> None:
    internal, client = ListenerEndPoint("INTERNAL", "h", 2), ListenerEndPoint("CLIENT", "h", 1)
    assert probe_order([client, internal], "INTERNAL") == [("h", 2), ("h", 1)]
    assert probe_order([client, internal], None) == [("h", 1), ("h", 2)]


def test_crash_probes_leave_clients_their_connection_rate(zk_connect: str, tmp_path: Path) -> None:
    """Two brokers, each with a CLIENT listener (first) and an INTERNAL inter-broker one, and
    max.connection.creation.rate=2. Each probes the other five times a second: probes that
    went to the CLIENT listener took the rate and filled its queue, and a client's connection
    waited ~25 s (backlog / rate); on the inter-broker listener they are exempt (KIP-612)."""
    brokers = []
    for i in (1, 2):
        client_port, internal_port = free_port(), free_port()
        brokers.append(BrokerProcess(tmp_path / f"b{i}", port=client_port, overrides={
            "zookeeper.connect": zk_connect,
            "listeners": f"CLIENT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{internal_port}",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "max.connection.creation.rate": "2",
        }, extra_args=["--node-id", str(i)]))  # fmt: skip
    try:
        for b in brokers:
            b.start(90)
        target, prober = brokers
        wait_until(lambda: "broker 1 reached" in prober.output(400_000), 30, "broker 2 probing broker 1")  # fmt: skip
        took = []
        for _ in range(5):
            started = time.monotonic()
            wire = Wire(target.port)
            try:
                assert len(wire.metadata(None, version=12).brokers) == 2
            finally:
                wire.close()
            took.append(time.monotonic() - started)
        assert max(took) < 3.0, took
    finally:
        for b in brokers:
            b.kill()
