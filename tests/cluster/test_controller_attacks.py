"""Attacks from outside on two changes of the controller, on three real broker processes, a real
ZooKeeper and real Kafka clients:

1. Controlled shutdown moves every leadership of a leaving broker first, in chunks
   (`Controller._move_leaving`): while an idempotent acks=all producer writes (RF 3,
   min.insync.replicas 2), brokers leave in orders the shutdown path was not written around --
   two at once, the controller itself right after another broker, the controller SIGKILLed or
   the leaving broker SIGKILLed mid-shutdown, ZooKeeper restarted, a topic the leaving broker
   leads created (1,000 partitions) or deleted meanwhile. Every acknowledged record must be
   read back once, the shutdowns must end promptly, and no leadership may go to a broker that
   was leaving.
2. An in-sync follower's older empty report is not a wiped-disk suspicion
   (`ReplicaLog.in_sync_when_reported`): the follower's last report shows an empty log, the
   leader's shows the records, the follower's partition dir is deleted under it, and the
   leader is SIGKILLed. Every acknowledged record must still be read back.
"""

from __future__ import annotations

import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTp
from confluent_kafka.admin import NewTopic

from logkeel.cli.cluster import cluster_status
from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_history import LEADER_ELECTIONS, decode_history
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.history import History
from tests.brokerproc import BrokerProcess
from tests.cluster.test_cluster_brokers import (
    FAILOVER_BOUND_S,
    PROBE_ERRORS,
    Cluster,
    three_brokers,
)
from tests.waiting import wait_until

TOPIC = "attacked"
# Partitions of the topic written throughout: a pass changing more than 20 logs its moves at
# DEBUG only, and the checks read the moves from the controller's log.
SMALL = 12
# A controlled shutdown of a broker leading a few dozen partitions is one pass; with the
# controller's failover (crash detection: under a second) it must still end well within this.
SHUTDOWN_BOUND_S = 25.0


@pytest.fixture
def trio(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    with three_brokers(zookeeper, tmp_path, f"/attacks_{tmp_path.name}") as c:
        yield c


@contextmanager
def zk_of(cluster: Cluster) -> Iterator[ZkMetadataClient]:
    zk = ZkMetadataClient(cluster.connect).start()
    try:
        yield zk
    finally:
        zk.close()


def controller_of(cluster: Cluster) -> int:
    def current() -> int | None:
        with zk_of(cluster) as zk:
            return zk.controller()

    return int(wait_until(current, 30, "a controller in office"))


def create_topic(
    cluster: Cluster, partitions: int, assignment: list[list[int]] | None = None
) -> None:
    def registered() -> bool:
        with zk_of(cluster) as zk:
            return len(zk.brokers()) == 3

    # Started together, a broker may listen before it has registered.
    wait_until(registered, 30, "all three brokers registered")
    admin = cluster.admin()
    config = {"min.insync.replicas": "2"}
    if assignment is None:
        topic = NewTopic(TOPIC, partitions, 3, config=config)
    else:
        topic = NewTopic(TOPIC, partitions, replica_assignment=assignment, config=config)
    admin.create_topics([topic])[TOPIC].result(60)
    wait_until(
        lambda: (
            len(parts := cluster.partitions(TOPIC)) == partitions
            and all(len(p.isr_nodes) == 3 for p in parts.values())
        ),
        60,
        f"{TOPIC}'s {partitions} partitions with all three in sync",
        retry_on=PROBE_ERRORS,
    )


class Writer(threading.Thread):
    """An idempotent acks=all producer writing values 0, 1, 2... round-robin over the
    partitions, a few hundred a second; every ack goes into the history."""

    def __init__(self, cluster: Cluster, partitions: int, history: History) -> None:
        super().__init__(daemon=True)
        self.partitions = partitions
        self.history = history
        self.stop = threading.Event()
        self.sent = 0
        self.errors: list[str] = []
        bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "delivery.timeout.ms": 120000, "request.timeout.ms": 10000,
        })  # fmt: skip

    def run(self) -> None:
        while not self.stop.is_set():
            seq = self.sent
            self.producer.produce(
                TOPIC, str(seq).encode(), partition=seq % self.partitions,
                on_delivery=lambda err, msg, seq=seq: self._done(err, msg, seq),
            )  # fmt: skip
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.003)
        self.producer.flush(120)

    def _done(self, err: KafkaError | None, msg: Any, seq: int) -> None:
        if err is not None:
            self.history.failed_sends += 1
            self.errors.append(str(err))
        else:
            self.history.ack(msg.partition(), msg.value().decode(), seq, msg.offset())

    def finish(self) -> None:
        self.stop.set()
        self.join(150)
        assert not self.is_alive(), "the producer did not flush within 150 s"


def final_logs(cluster: Cluster, partitions: int) -> dict[int, list[tuple[int, str]]]:
    """Every partition read from its start to its high watermark, (offset, value) each."""
    bootstrap = ",".join(b.bootstrap for b in cluster.live())
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "attack-final", "enable.auto.commit": False}
    )
    try:
        highs = {
            p: wait_until(
                lambda p=p: 1 + consumer.get_watermark_offsets(KafkaTp(TOPIC, p), timeout=10)[1],
                60,
                f"the high watermark of partition {p}",
                retry_on=(KafkaException,),
            )
            - 1
            for p in range(partitions)
        }
        consumer.assign([KafkaTp(TOPIC, p, 0) for p in range(partitions) if highs[p] > 0])
        logs: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}

        def read_all() -> bool:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None:
                    logs[msg.partition()].append((msg.offset(), msg.value().decode()))
            return all(
                highs[p] == 0 or (logs[p] and logs[p][-1][0] >= highs[p] - 1)
                for p in range(partitions)
            )

        wait_until(read_all, 90, "every partition read to its high watermark", interval=0)
    finally:
        consumer.close()
    return logs


_MOVE = re.compile(
    r"^(\S+ \S+) \w+ logkeel\.cluster\.controller: (\S+)-(\d+): leader (-?\d+) -> (-?\d+), "
    r"ISR \[([\d, ]*)\] -> \[([\d, ]*)\] \((.*)\)$"
)


@dataclass(frozen=True)
class Move:
    """A leadership change the controller wrote, as its log says (every one of a pass, at
    DEBUG beyond 20: the brokers log at DEBUG here)."""

    time_ms: int
    topic: str
    partition: int
    before: int
    after: int
    isr_before: tuple[int, ...]
    reason: str


def moves(cluster: Cluster, topic: str | None = None) -> list[Move]:
    """Every leadership change of ``topic`` (None: of every topic) the logs show, oldest first."""
    out = []
    for broker in cluster.brokers.values():
        for line in broker.output(limit=50_000_000).splitlines():
            m = _MOVE.match(line)
            if m is None or (topic is not None and m[2] != topic) or m[4] == m[5]:
                continue
            stamp = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            isr = tuple(int(x) for x in m[6].split(",") if x.strip())
            out.append(Move(int(stamp * 1000), m[2], int(m[3]), int(m[4]), int(m[5]), isr, m[8]))
    return sorted(out, key=lambda x: x.time_ms)


class ShutdownRequests:
    """Watches /admin/controlled_shutdown for the whole attack: when each broker's request
    first appeared (ms, wall clock of this machine, as the controller's history records). The
    znode lives only while the broker shuts down, so polling for it can miss it."""

    def __init__(self, cluster: Cluster) -> None:
        self.seen: dict[int, int] = {}
        self._zk = ZkMetadataClient(cluster.connect).start()
        self._zk.zk.ensure_path(zd.CONTROLLED_SHUTDOWN)
        self._zk.zk.ChildrenWatch(zd.CONTROLLED_SHUTDOWN, self._on_children)

    def _on_children(self, children: list[str]) -> None:
        now = int(time.time() * 1000)
        for child in children:
            self.seen.setdefault(int(child), now)

    def close(self) -> None:
        self._zk.close()


def leaders(cluster: Cluster) -> dict[int, int]:
    return {p: int(x.leader_id) for p, x in cluster.partitions(TOPIC).items()}


def sigterm(broker: BrokerProcess) -> float:
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGTERM)
    return time.monotonic()


def broker_id(broker: BrokerProcess) -> int:
    return int(broker.extra_args[broker.extra_args.index("--node-id") + 1])


def exited_within(broker: BrokerProcess, started: float, bound: float) -> float:
    """Waits for a SIGTERMed broker to exit (bounded); returns how long its shutdown took."""
    proc = broker.proc
    assert proc is not None
    wait_until(lambda: proc.poll() is not None, bound, f"{broker.bootstrap} to exit on SIGTERM")
    took = time.monotonic() - started
    assert proc.returncode == 0, broker.output_tail(20)
    broker.proc = None
    return took


@dataclass
class ShutdownRun:
    """What one attack on controlled shutdowns saw: which brokers left (with when their
    shutdown was asked, ZooKeeper's clock), how long each shutdown took."""

    requests: ShutdownRequests
    took: dict[int, float] = field(default_factory=dict)
    gone: dict[int, int] = field(default_factory=dict)  # when each left (ms, wall clock)
    # Brokers whose shutdown gave up waiting for their leaderships to move.
    gave_up: list[int] = field(default_factory=list)
    # Partitions created with a leaving broker as first leader after its request.
    late_first_leaders: list[int] = field(default_factory=list)

    def exited(self, broker: BrokerProcess, started: float, *, moved: bool = True) -> None:
        """The broker ends its controlled shutdown in time, having seen its leaderships moved
        (with ``moved``: not by giving up after its wait, ``zookeeper.session.timeout.ms``)."""
        self.took[broker_id(broker)] = exited_within(broker, started, SHUTDOWN_BOUND_S)
        self.gone[broker_id(broker)] = int(time.time() * 1000)
        if not moved:
            return
        last_run = broker.output(limit=50_000_000).rsplit("received SIGTERM", 1)[-1]
        assert "controlled shutdown: leaderships moved to other brokers" in last_run, [
            line for line in last_run.splitlines() if "controlled shutdown" in line
        ][-5:]

    def killed(self, broker: BrokerProcess) -> None:
        broker.kill()
        self.gone[broker_id(broker)] = int(time.time() * 1000)


def wait_requested(cluster: Cluster, broker: int, run: ShutdownRun) -> None:
    wait_until(
        lambda: broker in run.requests.seen, 15, f"broker {broker}'s controlled shutdown request"
    )


def attack_shutdowns(
    cluster: Cluster, partitions: int, fault: Callable[[Cluster, ShutdownRun], None]
) -> ShutdownRun:
    """Runs ``fault`` while the producer writes, then checks: every live broker leads every
    partition that has a live in-sync replica, nothing acked was lost or duplicated (after the
    brokers that left are back), no election reported a loss, and no leadership went to a
    broker after its controlled shutdown was asked."""
    create_topic(cluster, partitions)
    history = History()
    writer = Writer(cluster, partitions, history)
    writer.start()
    try:
        return attacked(cluster, partitions, fault, history, writer)
    finally:
        writer.stop.set()  # a failed check must not leave it sending for the next tests


def attacked(
    cluster: Cluster,
    partitions: int,
    fault: Callable[[Cluster, ShutdownRun], None],
    history: History,
    writer: Writer,
) -> ShutdownRun:
    wait_until(lambda: len(history.acked) > 200, 30, "the producer's first acks")
    run = ShutdownRun(ShutdownRequests(cluster))
    try:
        fault(cluster, run)
    finally:
        run.requests.close()
    leaving = run.requests.seen
    live = {i for i, b in cluster.brokers.items() if b.alive()}
    wait_until(
        lambda: set(leaders(cluster).values()) <= live,
        FAILOVER_BOUND_S,
        f"every partition led by a live broker ({live})",
        retry_on=PROBE_ERRORS,
    )
    acked_before = len(history.acked)
    cluster.ensure_all_running()
    wait_until(
        lambda: len(history.acked) > acked_before + 200, 60, "acks again with all three back"
    )
    writer.finish()
    anomalies = history.check(final_logs(cluster, partitions))
    assert anomalies == [], anomalies[:20]
    assert history.failed_sends == 0, writer.errors[:5]
    losses = cluster_status(cluster.live()[0].bootstrap)["election_losses"]
    assert [x for x in losses if x["topic"] == TOPIC] == []
    written = moves(cluster)
    print(f"{len(written)} leadership moves in the controllers' logs")
    check_moves(written, leaving, run)
    return run


def check_moves(written: list[Move], leaving: dict[int, int], run: ShutdownRun) -> None:
    """No leadership went to a broker after its controlled shutdown was asked (a move decided
    in a pass that began before the request was seen may land just after it: 2 s of slack),
    none was moved away from the same leaving broker twice, and none was left behind on a
    broker that shut down cleanly (moved only once it was gone) unless it was the only
    in-sync replica."""
    to_leaving = [
        m for m in written
        if m.after in leaving and leaving[m.after] + 2000 < m.time_ms < run.gone.get(m.after, 0)
    ]  # fmt: skip
    assert to_leaving == [], to_leaving[:5]
    away: dict[tuple[str, int, int], list[Move]] = {}
    for m in written:
        if m.before in leaving and leaving[m.before] <= m.time_ms <= run.gone.get(m.before, 0):
            away.setdefault((m.topic, m.partition, m.before), []).append(m)
    twice = [ms for ms in away.values() if len(ms) > 1]
    assert twice == [], twice[:3]
    left_behind = [
        m for m in written
        if m.before in run.took and run.gone[m.before] + 1000 < m.time_ms
        and m.time_ms < run.gone[m.before] + 1000 * FAILOVER_BOUND_S
        and m.isr_before != (m.before,)
    ]  # fmt: skip
    assert left_behind == [], left_behind[:5]


def others(cluster: Cluster, *but: int) -> list[int]:
    return [i for i in cluster.brokers if i not in but]


# -- 1. controlled shutdowns ----------------------------------------------------------------------


def two_at_once(cluster: Cluster, run: ShutdownRun) -> None:
    ctl = controller_of(cluster)
    a, b = others(cluster, ctl)
    t = {x: sigterm(cluster.brokers[x]) for x in (a, b)}
    for x in (a, b):
        wait_requested(cluster, x, run)
    for x in (a, b):
        run.exited(cluster.brokers[x], t[x])


def controller_right_after_another(cluster: Cluster, run: ShutdownRun) -> None:
    ctl = controller_of(cluster)
    other = others(cluster, ctl)[0]
    t_other = sigterm(cluster.brokers[other])
    wait_requested(cluster, other, run)
    t_ctl = sigterm(cluster.brokers[ctl])
    wait_requested(cluster, ctl, run)
    run.exited(cluster.brokers[other], t_other)
    run.exited(cluster.brokers[ctl], t_ctl)


def controller_killed_mid_shutdown(cluster: Cluster, run: ShutdownRun) -> None:
    ctl = controller_of(cluster)
    leaving = others(cluster, ctl)[0]
    t = sigterm(cluster.brokers[leaving])
    wait_requested(cluster, leaving, run)
    cluster.brokers[ctl].kill()
    run.exited(cluster.brokers[leaving], t)


def leaving_broker_killed_mid_shutdown(cluster: Cluster, run: ShutdownRun) -> None:
    ctl = controller_of(cluster)
    leaving = others(cluster, ctl)[0]
    sigterm(cluster.brokers[leaving])
    wait_requested(cluster, leaving, run)
    run.killed(cluster.brokers[leaving])


def one_leaves_while_another_restarts(cluster: Cluster, run: ShutdownRun) -> None:
    ctl = controller_of(cluster)
    bouncing, leaving = others(cluster, ctl)
    cluster.brokers[bouncing].kill()
    t = sigterm(cluster.brokers[leaving])
    wait_requested(cluster, leaving, run)
    cluster.brokers[bouncing].start(60)
    run.exited(cluster.brokers[leaving], t)


def test_zookeeper_restarted_mid_shutdown_loses_no_acked_record(
    own_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """ZooKeeper is restarted (same data, same port) as soon as a broker's controlled shutdown
    request appears: the moves may be half written, the answer lost. The broker still leaves
    within the bound (it may give up waiting for its view: ZooKeeper was gone), and nothing
    acknowledged is lost."""

    def restart_zookeeper(cluster: Cluster, run: ShutdownRun) -> None:
        ctl = controller_of(cluster)
        leaving = others(cluster, ctl)[0]
        t = sigterm(cluster.brokers[leaving])
        wait_requested(cluster, leaving, run)
        own_zookeeper.stop()
        own_zookeeper.start(60)
        run.exited(cluster.brokers[leaving], t, moved=False)

    with three_brokers(own_zookeeper, tmp_path, "/zk_restart") as cluster:
        run = attack_shutdowns(cluster, SMALL, restart_zookeeper)
    print(f"shutdown across a ZooKeeper restart took {run.took}")


BULK = "bulk"
BULK_PARTITIONS = 1500
# The controller creates first states this many at a time (`controller._CREATE_BATCH`): the
# batch it is writing when a request lands is decided before it could know of it.
CREATE_BATCH = 500


def shutdown_while_a_big_topic_is_created(cluster: Cluster, run: ShutdownRun) -> None:
    """A broker preferred leader of every partition of a 1,500-partition topic (three batches
    of first states) asks to leave while the controller creates the topic."""
    ctl = controller_of(cluster)
    leaving = others(cluster, ctl)[0]
    other = others(cluster, ctl, leaving)[0]
    assignment = [
        [leaving, other, ctl] if i % 2 else [leaving, ctl, other] for i in range(BULK_PARTITIONS)
    ]
    admin = cluster.admin()
    created = admin.create_topics([NewTopic(BULK, BULK_PARTITIONS, replica_assignment=assignment)])[
        BULK
    ]

    # One session polled in a tight loop: the second transaction follows the first closely.
    # Once the first transaction of first states is written: the pass decided every one of
    # them (before the request), and writes the second 500 next.
    leave_once(cluster, run, leaving, zd.partition_state_path(BULK, 0), f"{BULK}'s first states")
    created.result(60)
    late = first_leaders_after_request(cluster, leaving, run.requests.seen[leaving])
    print(f"{len(late)} partitions of {BULK} created after broker {leaving}'s shutdown request "
          f"with it as their first leader (moved away from it by its shutdown)")  # fmt: skip
    run.late_first_leaders = late
    live = {ctl, other}
    wait_until(
        lambda: (
            len(parts := cluster.partitions(BULK)) == BULK_PARTITIONS
            and {int(p.leader_id) for p in parts.values()} <= live
        ),
        FAILOVER_BOUND_S,
        f"every partition of {BULK} led by {live}",
        retry_on=PROBE_ERRORS,
    )


def leave_once(cluster: Cluster, run: ShutdownRun, leaving: int, path: str, what: str) -> None:
    """SIGTERM to ``leaving`` as soon as ``path`` exists (one session polled in a tight loop),
    then until the broker has left."""
    with zk_of(cluster) as zk:
        wait_until(lambda: zk.zk.exists(path) is not None, 30, what, interval=0.002)
    t = sigterm(cluster.brokers[leaving])
    wait_requested(cluster, leaving, run)
    run.exited(cluster.brokers[leaving], t, moved=False)


def first_leaders_after_request(cluster: Cluster, broker: int, request_ms: int) -> list[int]:
    """The partitions of the big topic whose state znode was created after ``broker``'s
    controlled shutdown request was seen here (later than it appeared) and that the controller
    then moved away from it: their first leader was the leaving broker, written when its
    request was in ZooKeeper (`initial_state` skips a broker known to be leaving)."""
    with zk_of(cluster) as zk:
        data, _ = zk.zk.get(LEADER_ELECTIONS)
        moved_away = {
            e["partition"]
            for e in decode_history(data)
            if e.get("topic") == BULK and e.get("from_leader") == broker
        }
        created = {
            p: int(stat.ctime)
            for p in sorted(moved_away)
            if (stat := zk.zk.exists(zd.partition_state_path(BULK, p))) is not None
        }
    return sorted(p for p, ctime in created.items() if ctime > request_ms)


DOOMED = "doomed"
DOOMED_PARTITIONS = 300


def shutdown_while_a_topic_is_deleted(cluster: Cluster, run: ShutdownRun) -> None:
    """A broker leading every partition of a 300-partition topic asks to leave while that
    topic is deleted: the deletion's passes and the shutdown's moves interleave."""
    ctl = controller_of(cluster)
    leaving = others(cluster, ctl)[0]
    other = others(cluster, ctl, leaving)[0]
    assignment = [[leaving, other, ctl]] * DOOMED_PARTITIONS
    admin = cluster.admin()
    admin.create_topics([NewTopic(DOOMED, DOOMED_PARTITIONS, replica_assignment=assignment)])[
        DOOMED
    ].result(60)
    wait_until(
        lambda: len(cluster.partitions(DOOMED)) == DOOMED_PARTITIONS,
        30,
        f"{DOOMED} created",
        retry_on=PROBE_ERRORS,
    )
    deleted = admin.delete_topics([DOOMED])[DOOMED]
    leave_once(cluster, run, leaving, f"{zd.DELETE_TOPICS}/{DOOMED}", f"{DOOMED}'s deletion asked")
    deleted.result(60)

    def gone() -> bool:
        with zk_of(cluster) as zk:
            return zk.zk.exists(f"{zd.TOPICS}/{DOOMED}") is None

    wait_until(gone, 60, f"{DOOMED} deleted")


@pytest.mark.parametrize(
    "fault",
    [
        two_at_once,
        controller_right_after_another,
        controller_killed_mid_shutdown,
        leaving_broker_killed_mid_shutdown,
        one_leaves_while_another_restarts,
    ],
    ids=lambda f: f.__name__,
)
def test_controlled_shutdown_attacks_lose_no_acked_record(
    trio: Cluster, fault: Callable[[Cluster, ShutdownRun], None]
) -> None:
    run = attack_shutdowns(trio, SMALL, fault)
    print(f"{fault.__name__}: shutdowns took {run.took}")
    assert all(took < SHUTDOWN_BOUND_S for took in run.took.values()), run.took


# -- 2. an in-sync follower's older empty report ------------------------------------------------

FLAG_PARTITIONS = 6
FLAG_RECORDS = 200


def report_of(cluster: Cluster, broker: int, partition: int) -> Any:
    """The broker's last report of the partition (None: none), and the partition state's
    current version."""
    with zk_of(cluster) as zk:
        _gen, logs = zk.replica_logs_of(broker) or (0, {})
        state = zk.partition_state(TOPIC, partition)
    version = -1 if state is None else state.zk_version
    return logs.get(TopicPartition(TOPIC, partition)), version


def produce_acked(cluster: Cluster, partition: int, first: int, history: History) -> None:
    bootstrap = ",".join(b.bootstrap for b in cluster.live())
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})

    def done(err: KafkaError | None, msg: Any, seq: int) -> None:
        if err is None:
            history.ack(partition, msg.value().decode(), seq, msg.offset())
        else:
            history.failed_sends += 1

    for i in range(first, first + FLAG_RECORDS):
        p.produce(
            TOPIC, str(i).encode(), partition=partition,
            on_delivery=lambda err, msg, seq=i: done(err, msg, seq),
        )  # fmt: skip
    assert p.flush(30) == 0
    assert history.failed_sends == 0


def partition_leader(cluster: Cluster, partition: int) -> int:
    part = cluster.partitions(TOPIC).get(partition)
    return -1 if part is None else int(part.leader_id)


def check_partition(cluster: Cluster, partition: int, history: History) -> None:
    """Every record acknowledged to ``partition`` is read back once at its offset."""
    logs = final_logs(cluster, partition + 1)
    assert history.check({partition: logs[partition]}) == []
    losses = cluster_status(cluster.live()[0].bootstrap)["election_losses"]
    assert [x for x in losses if x["topic"] == TOPIC] == []


def report_written_ms(cluster: Cluster, broker: int) -> int:
    """When the broker last wrote its report (ms, ZooKeeper's mtime; it writes one every 5 s
    while a log of it grows)."""
    with zk_of(cluster) as zk:
        stat = zk.zk.exists(zd.replica_logs_path(broker))
    return -1 if stat is None else int(stat.mtime)


def next_report(cluster: Cluster, broker: int) -> int:
    """Waits for the broker's next report; returns when it was written."""
    last = report_written_ms(cluster, broker)
    return wait_until(
        lambda: (t := report_written_ms(cluster, broker)) != last and t,
        12,
        f"broker {broker}'s next report",
        interval=0.01,
    )


class Probe(threading.Thread):
    """Writes a record a few times a second to a partition every broker holds, so that each
    broker's report changes, and is written, every period: its write times give its phase."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        admin = cluster.admin()
        admin.create_topics([NewTopic("probe", 1, 3)])["probe"].result(30)
        self.stop = threading.Event()
        bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def run(self) -> None:
        while not self.stop.is_set():
            self.producer.produce("probe", b"tick")
            self.producer.poll(0.2)
        self.producer.flush(10)


def apart_in_phase(cluster: Cluster, a: int, b: int) -> bool:
    """The two brokers' reports are written at least 0.7 s apart each period: one can be
    made to report records the other's last report does not show."""
    ta, tb = next_report(cluster, a), next_report(cluster, b)
    gap = (tb - ta) % 5000
    return 700 <= gap <= 4300


def test_a_follower_elected_on_its_older_empty_report_holds_every_acked_record(
    trio: Cluster,
) -> None:
    """The follower (second in the assignment, so the clean election's first choice) last
    reported an empty log against the current state; records are then acknowledged, the
    leader reports them, the follower's partition dir is deleted under it (the broker keeps
    running: it has not noticed) and the leader is SIGKILLed. The follower is elected on its
    older report (before `in_sync_when_reported` it waited, suspected of a wiped disk), and
    every acknowledged record must be read back -- from it, and again from the third replica
    once the follower restarts with nothing on disk."""
    ctl = controller_of(trio)
    lead, follower = others(trio, ctl)
    probe = Probe(trio)
    probe.start()
    try:
        for restarts in range(3):  # brokers started together report nearly together: shift one
            if apart_in_phase(trio, lead, follower):
                print(f"reports apart after {restarts} restarts of broker {lead}")
                break
            trio.brokers[lead].kill()
            trio.brokers[lead].start(60)
        else:
            pytest.fail("the two brokers' reports stayed within 0.7 s of each other")
        create_topic(trio, FLAG_PARTITIONS, [[lead, follower, ctl]] * FLAG_PARTITIONS)

        def empty_reports() -> bool:
            for p in range(FLAG_PARTITIONS):
                report, version = report_of(trio, follower, p)
                if report is None or report.log_end_offset != 0:
                    return False
                if report.partition_epoch != version:
                    return False
            return True

        wait_until(empty_reports, 20, f"follower {follower}'s empty reports against the states")
        history = History()
        target = None
        for p in range(3):
            next_report(trio, follower)  # the records come right after it...
            produce_acked(trio, p, p * FLAG_RECORDS, history)

            # ...and the leader's report shows them before the follower's next one.
            def reported(p: int = p) -> bool:
                theirs = report_of(trio, lead, p)[0]
                return theirs is not None and theirs.log_end_offset > 0

            wait_until(reported, 12, f"broker {lead}'s report of the records")
            mine, version = report_of(trio, follower, p)
            if mine.log_end_offset == 0 and mine.partition_epoch == version:
                target = p
                break
        assert target is not None, "the follower reported the records before the leader did"
        print(f"partition {target}: broker {follower}'s last report is empty, {lead}'s is not")
        part_dir = trio.brokers[follower].log_dirs[0] / f"{TOPIC}-{target}"
        shutil.rmtree(part_dir)
        trio.brokers[lead].kill()
    finally:
        probe.stop.set()
        probe.join(20)
    elected = wait_until(
        lambda: (x := partition_leader(trio, target)) not in (-1, lead) and x,
        FAILOVER_BOUND_S,
        f"a new leader of partition {target}",
        retry_on=PROBE_ERRORS,
    )
    assert elected == follower, f"{elected} elected: the older empty report was not trusted"
    check_partition(trio, target, history)
    # Now the follower's records are gone for real: it restarts with no partition dir.
    trio.brokers[follower].kill()
    trio.brokers[follower].start(60)
    wait_until(
        lambda: partition_leader(trio, target) == ctl,
        FAILOVER_BOUND_S,
        f"the third replica ({ctl}) leading partition {target}",
        retry_on=PROBE_ERRORS,
    )
    check_partition(trio, target, history)
    trio.brokers[lead].start(60)
    wait_until(
        lambda: len(trio.partitions(TOPIC)[target].isr_nodes) == 3,
        60,
        "all three in sync again",
        retry_on=PROBE_ERRORS,
    )
    check_partition(trio, target, history)


def test_a_shutdown_while_a_big_topic_is_created(trio: Cluster) -> None:
    """SIGTERM once the first 500 first states of a big topic are written. It broke before
    6d3b297 (with 1,000 partitions): every state after the request was created on the leaving
    broker (all decided at the pass's start), then 'controlled shutdown of broker 1: 1004
    leaderships left to move', each moved again; shutdowns of 4.2-17 s against 0.2-0.7 s, and
    in two runs the broker gave up its wait ('leaderships not all moved within 6s'). No
    acknowledged record was lost. The batch being written when the request lands was decided
    before the controller could know of it and may still go to the leaving broker (Kafka's
    controller, too, finishes an event before it takes the next); no later one may."""
    run = attack_shutdowns(trio, SMALL, shutdown_while_a_big_topic_is_created)
    print(f"shutdown while {BULK} was created took {run.took}, gave up: {run.gave_up}")
    assert len(run.late_first_leaders) <= CREATE_BATCH, (
        f"{len(run.late_first_leaders)} partitions created on the leaving broker after its "
        f"request: {run.late_first_leaders[:5]}..."
    )
    assert run.gave_up == []


def test_a_shutdown_while_a_topic_it_leads_is_deleted(trio: Cluster) -> None:
    """The broker leaves within the bound, nothing acknowledged is lost, no leadership goes to
    it. Before c51c7b2 it was slow: 3.4-4.1 s in the module's runs, and run alone it gave up
    waiting ('leaderships not all moved within 6s', 8-12 s) in 3 of 3 runs, its own view
    still showing the deleted topic's partitions led by it (the brokers removed the 300 logs
    9 s after 'controller deleted topic doomed', each removal rewriting the log dir's
    checkpoints), after a controller pass that 'decided 239 partitions of leaving leaders' of
    the deleted topic for 3.1 s. Now the checkpoints are written once per deletion."""
    run = attack_shutdowns(trio, SMALL, shutdown_while_a_topic_is_deleted)
    print(f"shutdown while {DOOMED} was deleted took {run.took}, gave up: {run.gave_up}")
