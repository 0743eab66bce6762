"""Issue 9's acceptance run: an idempotent acks=all producer writes to a 3-broker cluster
(RF 3, min.insync.replicas 2) while the leader of its partitions is SIGKILLed again and again;
a consumer reads along. The Jepsen-style checker (logkeel.testing.history) then compares every
acknowledgement and every read with the final logs: nothing acked lost, nothing duplicated,
order kept, nothing read that the final log does not hold. Bounded: three kill rounds."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from logkeel.cli.cluster import cluster_status
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.testing.history import History
from logkeel.testing.network import Endpoint, NetworkCut
from tests.brokerproc import BrokerProcess
from tests.cluster.test_cluster_brokers import (
    FAILOVER_BOUND_S,
    PROBE_ERRORS,
    Cluster,
    three_brokers,
)
from tests.waiting import wait_until

TOPIC = "history"
PARTITIONS = 2
ROUNDS = 3


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    with three_brokers(zookeeper, tmp_path, "/cluster_history") as c:
        yield c


class Writer(threading.Thread):
    """Sends values 0, 1, 2... round-robin over the partitions; records acks in the history."""

    def __init__(self, bootstrap: str, history: History) -> None:
        super().__init__(daemon=True)
        self.history = history
        self.stop = threading.Event()
        self.sent = 0
        self.errors: list[str] = []
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "delivery.timeout.ms": 120000, "message.timeout.ms": 120000,
            # A frozen leader never answers: the client gives its requests up after this and
            # retries them at the new leader (idempotence keeps them in order, once).
            "request.timeout.ms": 10000, "socket.timeout.ms": 10000,
        })  # fmt: skip

    def run(self) -> None:
        while not self.stop.is_set():
            seq = self.sent
            self.producer.produce(
                TOPIC, str(seq).encode(), partition=seq % PARTITIONS,
                on_delivery=lambda err, msg, seq=seq: self._done(err, msg, seq),
            )  # fmt: skip
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(120)

    def _done(self, err: KafkaError | None, msg: Any, seq: int) -> None:
        if err is not None:
            self.history.failed_sends += 1
            self.errors.append(str(err))
        else:
            self.history.ack(msg.partition(), msg.value().decode(), seq, msg.offset())


class Reader(threading.Thread):
    def __init__(self, bootstrap: str, history: History) -> None:
        super().__init__(daemon=True)
        self.history = history
        self.stop = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "history-reader",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.history.read(msg.partition(), msg.offset(), msg.value().decode())
        self.consumer.close()


_STALE_LEADER = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
}


def high_watermark(consumer: Consumer, partition: int) -> int:
    """The partition's high watermark, asked again while the client's metadata still names a
    leader that has just lost its leadership (a woken or restarted broker answers
    NOT_LEADER_OR_FOLLOWER; the client does not retry ListOffsets by itself). Bounded."""
    deadline = time.monotonic() + 60
    while True:
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=20)
            return int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _STALE_LEADER or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def final_logs(bootstrap: str) -> dict[int, list[tuple[int, str]]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "history-final", "enable.auto.commit": False}
    )
    logs: dict[int, list[tuple[int, str]]] = {}
    try:
        for p in range(PARTITIONS):
            high = high_watermark(consumer, p)
            consumer.assign([TopicPartition(TOPIC, p, 0)])
            records: list[tuple[int, str]] = []
            deadline = time.monotonic() + 60
            while (not records or records[-1][0] < high - 1) and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    records.append((msg.offset(), msg.value().decode()))
            logs[p] = records
    finally:
        consumer.close()
    return logs


def victim_endpoints(cluster: Cluster, victim: int) -> tuple[Endpoint, list[Endpoint]]:
    """The broker to cut off, and everyone it is cut off from: the other brokers and ZooKeeper."""
    zk_port = int(cluster.connect.split("/", 1)[0].rpartition(":")[2])
    b = cluster.brokers[victim]
    peers = [Endpoint(o.port, o.group) for i, o in cluster.brokers.items() if i != victim]
    return Endpoint(b.port, b.group), [*peers, Endpoint(zk_port)]


def agreed(cluster: Cluster) -> dict[int, Any] | None:
    """The topic's partitions once every broker shows the same leaders and ISRs, else None: a
    broker back from a freeze or a cut answers from its old view for a moment, and a round
    must neither pick its victim nor call the cluster healed from that."""
    views = [cluster.partitions(TOPIC, i) for i in cluster.brokers]
    shape = [{p: (x.leader_id, sorted(x.isr_nodes)) for p, x in v.items()} for v in views]
    return views[0] if all(s == shape[0] for s in shape) else None


def views(cluster: Cluster) -> dict[int, object]:
    """Each broker's leaders and ISRs of the topic (or why it did not answer), for messages."""
    out: dict[int, object] = {}
    for i in cluster.brokers:
        try:
            # Offline replicas too: a broker that counts a replica offline leaves it out of
            # the ISR it shows.
            out[i] = {p: (x.leader_id, list(x.isr_nodes), *([list(x.offline_replicas)] if x.offline_replicas else []))
                      for p, x in cluster.partitions(TOPIC, i).items()}  # fmt: skip
        except (OSError, AssertionError) as e:
            out[i] = repr(e)
    return out


def metadata_lines(broker: BrokerProcess, lines: int = 40) -> str:
    """The last lines a broker logged about its ZooKeeper session and its view of the
    partitions, for a failure's message (a broker whose view stays stale)."""
    wanted = re.compile(r"ZooKeeper|session|regist|ISR|leader|WARNING|ERROR")
    picked = [line for line in broker.output(2_000_000).splitlines() if wanted.search(line)]
    return "\n".join(picked[-lines:])


def elect_replica(replica: int, bootstrap: str) -> None:
    """`logkeel elect --replica` for partition 0 through ``bootstrap``, asked again (up to
    three times) while the election finds no eligible leader: a replica whose fresh log
    report came late on a loaded machine is refused, as an operator would see and retry."""
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-m", "logkeel", "elect", "--topic", TOPIC, "--partition", "0",
             "--replica", str(replica), "--bootstrap-server", bootstrap],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        if done.returncode == 0 or "ELIGIBLE_LEADERS_NOT_AVAILABLE" not in done.stdout:
            break
        time.sleep(2)
    assert done.returncode == 0, done.stdout + done.stderr


def lead_again(cluster: Cluster, replica: int) -> None:
    """`logkeel elect --replica`: an in-sync replica leads partition 0 (a clean designation).
    The election asks every broker for a fresh report of its logs and refuses a replica whose
    report is late (a loaded machine): asked again then, as an operator would."""
    elect_replica(replica, cluster.live()[0].bootstrap)
    wait_until(
        lambda: cluster.partitions(TOPIC)[0].leader_id == replica,
        15.0,
        "the designated leader",
        retry_on=PROBE_ERRORS,
    )


def run_rounds(
    cluster: Cluster,
    faults: Iterable[str],
    while_cut: Callable[[Cluster, int], None] | None = None,
) -> list[float]:
    """Writes and reads while the leader of partition 0 suffers each of ``faults`` in turn
    ("kill": SIGKILL, "stop": SIGTERM, a controlled shutdown; "freeze": SIGSTOP until acks
    resume elsewhere, then SIGCONT; "cut": iptables cut it off from the other brokers and
    ZooKeeper -- its clients still reach it; ``while_cut`` is called at once -- until acks
    resume elsewhere, then the rules go), each time restarted (or thawed, or reconnected) and waited for
    back in every ISR; a broker that was cut off is then made leader of partition 0 again, so
    that the final log is read from the replica that had to truncate. Checks the history;
    returns how long acks took to resume each time."""
    admin = cluster.admin()
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
        TOPIC
    ].result(60)  # a loaded machine: the first request to a new controller
    wait_until(lambda: all(p.leader_id > 0 for p in cluster.partitions(TOPIC).values()), 15.0, "leaders", retry_on=PROBE_ERRORS)  # fmt: skip
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())
    history = History()
    writer, reader = Writer(bootstrap, history), Reader(bootstrap, history)
    writer.start()
    reader.start()
    resumed: list[float] = []
    done: list[str] = []
    try:
        # The rules go (on failure too) before the writer is asked to flush.
        with contextlib.ExitStack() as cleanup:
            cut: NetworkCut | None = None
            wait_until(lambda: len(history.acked) > 200, 30, "first acks", retry_on=PROBE_ERRORS)
            for fault in faults:
                done.append(fault)
                victim = wait_until(
                    lambda: agreed(cluster), 15.0, "brokers agreeing", retry_on=PROBE_ERRORS
                )[0].leader_id
                started = time.monotonic()
                exit_codes: list[int] = []
                stopping = threading.Thread(
                    # Bounded generously: under load a shutdown right after a restart has been
                    # seen to take ~30 s after its leaderships moved (an open finding).
                    target=lambda v=victim, codes=exit_codes: codes.append(
                        cluster.brokers[v].stop(timeout=90)
                    )
                )
                if fault == "kill":
                    cluster.brokers[victim].kill()
                elif fault == "freeze":
                    cluster.brokers[victim].freeze()
                elif fault == "cut":
                    cut = cut or cleanup.enter_context(NetworkCut())  # rules go even on failure
                    cut.isolate(*victim_endpoints(cluster, victim))
                    if while_cut is not None:
                        while_cut(cluster, victim)  # at once: before its fence closes
                else:
                    stopping.start()
                # Another leader first (as a broker that was not hit sees it): acks already on
                # their way when the fault struck must not end the round before it bites.
                peer = next(i for i in cluster.brokers if i != victim)
                wait_until(lambda v=victim, via=peer: cluster.partitions(TOPIC, via)[0].leader_id
                           not in (v, -1), FAILOVER_BOUND_S + 30, "another leader", retry_on=PROBE_ERRORS)  # fmt: skip
                acked_before = len(history.acked)
                wait_until(lambda a=acked_before: len(history.acked) > a + 100, 60, "acks after the fault", retry_on=PROBE_ERRORS)  # fmt: skip
                resumed.append(time.monotonic() - started)
                if fault == "stop":
                    stopping.join(100)
                    assert exit_codes == [0]
                if fault == "freeze":
                    # Back after its session expired: it must not have acked anything as the
                    # leader it no longer is (the checker below says), and it rejoins as a
                    # follower.
                    cluster.brokers[victim].thaw()
                elif fault == "cut":
                    assert cut is not None
                    cut.heal()
                else:
                    cluster.brokers[victim].start(60)

                def all_in_sync() -> bool:
                    parts = agreed(cluster)
                    return parts is not None and all(len(p.isr_nodes) == 3 for p in parts.values())

                try:
                    wait_until(
                        all_in_sync, 60, "the broker back in every ISR", retry_on=PROBE_ERRORS
                    )
                except AssertionError as e:
                    raise AssertionError(f"{e} after {fault} of {victim}; as each broker sees "
                                         f"it: {views(cluster)}; the victim's log:\n"
                                         f"{metadata_lines(cluster.brokers[victim])}") from None  # fmt: skip
                if fault == "cut":
                    lead_again(cluster, victim)
    finally:
        writer.stop.set()
        writer.join(150)
        reader.stop.set()
        reader.join(30)
    anomalies = history.check(final_logs(bootstrap))
    print(f"{', '.join(done)}: {writer.sent} sent, {len(history.acked)} acked, "
          f"{sum(len(r) for r in history.reads.values())} read during the run; acks resumed "
          f"{', '.join(f'{s:.1f}s' for s in resumed)} after each fault")  # fmt: skip
    assert not writer.is_alive()
    assert history.failed_sends == 0, writer.errors[:5]
    assert len(history.acked) == writer.sent
    assert anomalies == [], anomalies[:20]
    return resumed


def test_acked_writes_survive_repeated_leader_sigkill(cluster: Cluster) -> None:
    run_rounds(cluster, ["kill"] * ROUNDS)


def test_controlled_shutdowns_fail_no_send(cluster: Cluster) -> None:
    """SIGTERM moves leadership before the broker exits: no failed send, and acks go on without
    waiting for a session to expire."""
    resumed = run_rounds(cluster, ["stop"] * ROUNDS)
    assert max(resumed) < FAILOVER_BOUND_S


def test_a_frozen_leader_loses_nothing_when_it_wakes(cluster: Cluster) -> None:
    """SIGSTOP of the leader (a hung machine): acks resume once its session expires and another
    replica leads; woken with SIGCONT, the old leader must not acknowledge or serve anything as
    the leader it no longer is, and it rejoins every ISR as a follower."""
    resumed = run_rounds(cluster, ["freeze"] * 2)
    assert max(resumed) < FAILOVER_BOUND_S + 10


@pytest.fixture
def unclean_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    with three_brokers(zookeeper, tmp_path, "/cluster_history_unclean",
                       {"unclean.leader.election.wait.ms": "8000"}) as c:  # fmt: skip
        yield c


def test_an_unclean_election_reports_exactly_the_loss_the_checker_sees(
    unclean_cluster: Cluster,
) -> None:
    """min.insync.replicas 1 and unclean elections on: both followers stop, one after the other,
    while the leader acks on alone; then the leader is lost and the follower with the longer log
    is elected uncleanly (the shorter one truncates nothing: it only lacks records). The acked writes the checker finds lost must be exactly those at or
    past the offset the controller reported for each partition (`logkeel cluster status`, from
    ZooKeeper), and the old leader, back with its disk, truncates at that very offset."""
    cluster = unclean_cluster
    admin = cluster.admin()  # kept alive: a collected client cancels its futures
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={
        "min.insync.replicas": "1", "unclean.leader.election.enable": "true",
    })])[TOPIC].result(60)  # fmt: skip
    wait_until(lambda: all(len(p.isr_nodes) == 3 for p in cluster.partitions(TOPIC).values()), 15.0, "all in sync", retry_on=PROBE_ERRORS)  # fmt: skip
    lead = cluster.partitions(TOPIC)[0].leader_id
    shorter, longer = (b for b in cluster.brokers if b != lead)
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())
    history = History()
    writer, reader = Writer(bootstrap, history), Reader(bootstrap, history)
    writer.start()
    reader.start()
    try:
        wait_until(lambda: len(history.acked) > 200, 30, "first acks", retry_on=PROBE_ERRORS)
        for follower in (shorter, longer):  # each stop leaves the ISR at once; acks go on
            acked = len(history.acked)
            cluster.brokers[follower].stop()
            wait_until(
                lambda a=acked: len(history.acked) > a + 200,
                30,
                "acks after a stop",
                retry_on=PROBE_ERRORS,
            )
    finally:
        writer.stop.set()
        writer.join(150)
    assert history.failed_sends == 0 and len(history.acked) == writer.sent, writer.errors[:5]
    ends: dict[int, int] = {}
    for (partition, _), (_, offset) in history.acked.items():
        if offset is not None:
            ends[partition] = max(ends.get(partition, -1), offset)
    wait_until(
        lambda: all(history.reads.get(p, [(-1, "")])[-1][0] >= end for p, end in ends.items()),
        30,
        "the reader to read up to the end the leader alone acknowledged",
    )
    reader.stop.set()
    reader.join(30)

    cluster.brokers[lead].kill()  # lost for good, as far as the election knows
    # The longer log first: the longest-log choice after a late start is tested elsewhere
    # (test_cluster_elections), and a bounded wait is at the mercy of a loaded machine.
    cluster.brokers[longer].start(60)
    cluster.brokers[shorter].start(60)
    wait_until(lambda: all(p.leader_id == longer for p in cluster.partitions(TOPIC).values()), 40, "the longer log elected uncleanly", retry_on=PROBE_ERRORS)  # fmt: skip

    final = final_logs(bootstrap)
    losses = cluster_status(cluster.brokers[longer].bootstrap)["election_losses"]
    cuts = {x["partition"]: x["from_offset"] for x in losses if x["topic"] == TOPIC}
    assert sorted(cuts) == list(range(PARTITIONS)), losses
    shown = subprocess.run(
        [sys.executable, "-m", "logkeel", "cluster", "status", "--bootstrap-server",
         cluster.brokers[longer].bootstrap], capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    assert "lost records" in shown and all(f"{TOPIC}-{p}" in shown for p in cuts), shown
    assert all(x["leader"] == longer for x in losses), losses
    for p in range(PARTITIONS):
        at = dict(final[p])
        lost = sorted(o for (q, v), (_, o) in history.acked.items()
                      if q == p and o is not None and at.get(o) != v)  # fmt: skip
        print(f"p{p}: acked writes lost at offsets {lost[0]}..{lost[-1]} ({len(lost)}); "
              f"reported from offset {cuts[p]}")  # fmt: skip
        assert lost and lost[0] == cuts[p] and lost == list(range(cuts[p], lost[-1] + 1))
    assert history.check(final, cuts) == []
    assert history.check(final) != []  # without the report, the loss is an anomaly

    cluster.brokers[lead].start(60)

    def truncated_at_or_below_the_report() -> bool:
        # At the reported offset, or below it when the old leader took over while behind: the
        # new leader then holds records of the earlier epoch past the old leader's epoch start,
        # and epoch truncation rightly cuts there (nothing acknowledged is lost by it).
        out = cluster.brokers[lead].output(200_000)
        cut = {int(m[1]): int(m[2]) for m in re.finditer(
            rf"{TOPIC}-(\d+): truncated to offset (\d+) ", out)}  # fmt: skip
        return all(p in cut and cut[p] <= cuts[p] for p in cuts)

    wait_until(truncated_at_or_below_the_report, 60, "the old leader truncating where the report said", retry_on=PROBE_ERRORS)  # fmt: skip
