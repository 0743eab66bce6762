"""Attacks on issue 20's promise, from outside, with real processes: no replica that lost
acknowledged data leads while one that holds it may return.

Three real `logkeel serve` brokers per scenario on the session's real ZooKeeper, RF 3,
``min.insync.replicas=2``, an idempotent acks=all confluent-kafka producer whose acknowledgements
go into the history checker; faults are real files changed on disk between SIGKILLs. After each
scenario every broker runs again, a consumer reads the partition from the beginning and the
checker compares, excusing only losses ``logkeel cluster status`` reports (election_losses).
Broker logs must hold no traceback.

Every scenario is a regression test now; those that once found a hole say what it was. A
scenario whose fault cannot be arranged (the timing of a frozen controller) fails as a set-up
failure, never passes silently."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import NewTopic

from logkeel.cli.cluster import cluster_status
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_data import ReplicaLogReport
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.storage.log_dir import BOOT_ID_FILE
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.history import History
from tests.cluster.test_cluster_brokers import (
    FAILOVER_BOUND_S,
    PROBE_ERRORS,
    Cluster,
    three_brokers,
)
from tests.server.test_admin_wire import Wire
from tests.waiting import wait_until

# The attacks place leaders themselves (designated and operator's preferred elections): the
# controller's own first rebalance check, 5 s after it takes office, would move a leadership
# back to its preferred replica mid-arrangement (seen in CI: the broker about to be wiped led).
OVERRIDES = {
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "auto.leader.rebalance.enable": "false",
}
# The periodic replica-log report runs every 5 s: the bound for one to carry a new high mark.
REPORT_BOUND_S = 15.0
# The controller frozen while another broker restarts (seconds on a loaded machine) must keep
# its session: the restarted broker's old registration goes at once anyway (crash detection).
FREEZABLE = {"zookeeper.session.timeout.ms": "30000"}


@contextmanager
def cluster_of(
    zookeeper: ZooKeeperServer, tmp_path: Path, name: str, **overrides: str
) -> Iterator[Cluster]:
    with three_brokers(zookeeper, tmp_path, f"/attack_{name}", {**OVERRIDES, **overrides}) as c:
        yield c


class Run:
    """One topic on one cluster: what the producer was told, and the checks at the end."""

    def __init__(
        self, cluster: Cluster, topic: str, partitions: int = 1, replicas: list[int] | None = None
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.history = History()
        self.seq = 0
        cluster.ensure_all_running()  # every broker registered: an assignment may name any
        if replicas is None:
            admin = cluster.admin()  # kept alive: a collected client cancels its futures
            admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(60)
        else:
            wire = Wire(cluster.brokers[1].port)
            try:
                [created] = wire.create_topics([{"name": topic, "assignments": {0: replicas}}])
            finally:
                wire.close()
            assert created.error_code == 0, created
        wait_until(
            lambda: (
                all(len(p.isr_nodes) == 3 for p in cluster.partitions(topic).values())
                and len(cluster.partitions(topic)) == partitions
            ),
            15.0,
            f"{topic}'s partitions with a full ISR",
            retry_on=PROBE_ERRORS,
        )

    def produce(self, n: int, timeout: float = 60.0) -> int:
        """Sends ``n`` records (round robin over the partitions); returns how many were acked."""
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": ",".join(b.bootstrap for b in self.cluster.live()),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                # Small batches: a segment cut at a batch boundary keeps part of the acked data.
                "batch.num.messages": 20,
                "message.timeout.ms": int(timeout * 1000),
            }
        )
        acked = 0

        def delivered(err: Any, msg: Any, seq: int) -> None:
            nonlocal acked
            if err is None:
                acked += 1
                offset = msg.offset()
                self.history.ack(
                    msg.partition(), msg.value().decode(), seq, offset if offset >= 0 else None
                )
            else:
                self.history.failed_sends += 1

        for _ in range(n):
            seq = self.seq
            self.seq += 1
            producer.produce(
                self.topic,
                value=f"{self.topic}-{seq}".encode(),
                partition=seq % self.partitions,
                on_delivery=lambda err, msg, seq=seq: delivered(err, msg, seq),
            )
            producer.poll(0)
        assert producer.flush(timeout + 10) == 0, "records left unsent"
        return acked

    def acked_count(self, partition: int = 0) -> int:
        return sum(1 for (p, _) in self.history.acked if p == partition)

    def reported_high_watermarks(self) -> dict[int, dict[int, int]]:
        """broker -> partition -> the high watermark of its last replica-log report."""
        out: dict[int, dict[int, int]] = {}
        for b in self.cluster.brokers:
            logs = replica_logs_of(self.cluster, b)
            out[b] = {
                tp.partition: r.high_watermark for tp, r in logs.items() if tp.topic == self.topic
            }
        return out

    def wait_reports_cover_acks(self) -> None:
        """Until every broker's periodic report carries the high watermark of all acked
        records: what the controller judges a returning log by."""

        def covered() -> bool:
            marks = self.reported_high_watermarks()
            return all(
                marks[b].get(p, -1) >= self.acked_count(p)
                for b in marks
                for p in range(self.partitions)
            )

        wait_until(
            covered,
            REPORT_BOUND_S,
            "reports to carry the acknowledged offsets",
            retry_on=PROBE_ERRORS,
        )

    def status(self) -> dict[str, Any]:
        live = self.cluster.live()
        return cluster_status(",".join(b.bootstrap for b in live))

    def partition_status(self, partition: int = 0) -> dict[str, Any]:
        [p] = [
            p
            for p in self.status()["partitions"]
            if p["topic"] == self.topic and p["partition"] == partition
        ]
        return p

    def losses(self) -> dict[int, int]:
        """partition -> the lowest offset an election reported truncating from."""
        out: dict[int, int] = {}
        for x in self.status()["election_losses"] or []:
            if x["topic"] == self.topic:
                out[x["partition"]] = min(
                    out.get(x["partition"], x["from_offset"]), x["from_offset"]
                )
        return out

    def final_log(self, timeout: float = 30.0) -> dict[int, list[tuple[int, str]]]:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": ",".join(b.bootstrap for b in self.cluster.live()),
                "group.id": "attack-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
            }
        )
        try:

            def high(p: int) -> int | None:
                try:
                    return consumer.get_watermark_offsets(
                        confluent_kafka.TopicPartition(self.topic, p), timeout=5
                    )[1]
                except confluent_kafka.KafkaException:  # a leader moving: the client learns it
                    return None

            ends = {
                p: wait_until(
                    lambda p=p: (h := high(p)) is not None and (h,),
                    15.0,
                    f"p{p}'s end",
                    retry_on=PROBE_ERRORS,
                )[0]
                for p in range(self.partitions)
            }
            consumer.assign(
                [confluent_kafka.TopicPartition(self.topic, p, 0) for p in range(self.partitions)]
            )
            out: dict[int, list[tuple[int, str]]] = {p: [] for p in ends}
            done = {p for p, end in ends.items() if end == 0}
            deadline = time.monotonic() + timeout
            while len(done) < len(ends):
                assert time.monotonic() < deadline, f"reading {self.topic} back timed out"
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                out[msg.partition()].append((msg.offset(), msg.value().decode()))
                if msg.offset() + 1 >= ends[msg.partition()]:
                    done.add(msg.partition())
            return out
        finally:
            consumer.close()

    def restore_and_check(self) -> list[str]:
        """Every broker running, every partition led; the checker's anomalies."""
        self.cluster.ensure_all_running()
        wait_until(
            lambda: all(p.leader_id >= 0 for p in self.cluster.partitions(self.topic).values()),
            FAILOVER_BOUND_S + REPORT_BOUND_S,
            f"every partition of {self.topic} to be led",
            retry_on=PROBE_ERRORS,
        )
        return self.history.check(self.final_log(), self.losses())

    def tracebacks(self) -> list[str]:
        return [
            f"broker {i}"
            for i, b in self.cluster.brokers.items()
            if "Traceback" in b.log_path.read_text(errors="replace")
        ]


def partition_dir(cluster: Cluster, broker: int, topic: str, partition: int = 0) -> Path:
    return cluster.brokers[broker].log_dirs[0] / f"{topic}-{partition}"


def segment(cluster: Cluster, broker: int, topic: str, partition: int = 0) -> Path:
    [log] = sorted(partition_dir(cluster, broker, topic, partition).glob("*.log"))
    return log


def truncate_to_records(log: Path, keep: int) -> None:
    """Cuts a segment file after its batches holding offsets below ``keep`` (whole batches: a
    batch's base offset is its first 8 bytes, its length the next 4)."""
    data = log.read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        base = int.from_bytes(data[pos : pos + 8], "big")
        length = int.from_bytes(data[pos + 8 : pos + 12], "big")
        if base >= keep:
            break
        pos += 12 + length
    if pos >= len(data):
        raise RuntimeError(f"{log}: no batch starts at or above offset {keep}")
    with open(log, "r+b") as f:
        f.truncate(pos)


def kill_all(run: Run) -> int:
    """SIGKILLs every broker at once; the partition's leader epoch then (the state ZooKeeper
    keeps naming until a controller decides again)."""
    epoch = int(run.partition_status()["leader_epoch"])
    for b in run.cluster.brokers.values():
        b.kill()
    return epoch


def elect(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logkeel", "elect", *args, "--bootstrap-server",
         ",".join(b.bootstrap for b in cluster.live()), "--timeout", "20"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def wait_controller_saw_restart(run: Run, broker: int) -> dict[str, Any]:
    """Until the restarted broker has reported and the controller decided on the partition."""
    return wait_until(
        lambda: (p := run.partition_status()) and (p["offline"] or p["leader"] >= 0) and p,
        FAILOVER_BOUND_S + REPORT_BOUND_S,
        "a decision on the partition",
        retry_on=PROBE_ERRORS,
    )


def leader_of(run: Run, partition: int = 0) -> int:
    return int(run.cluster.partitions(run.topic)[partition].leader_id)


def wait_decided_alone(run: Run, killed_in_epoch: int) -> dict[str, Any]:
    """With one broker back: until the controller either elected (a leader epoch after the
    one the brokers were killed in: the state naming the old leader, back but not elected
    again, is not a decision) or recorded why it waits."""
    live = {i for i, b in run.cluster.brokers.items() if b.alive()}

    def decided(p: dict[str, Any]) -> bool:
        elected = p["leader"] in live and int(p["leader_epoch"]) > killed_in_epoch
        return elected or bool(p.get("offline_reason"))

    return wait_until(
        lambda: (p := run.partition_status()) and decided(p) and p,
        FAILOVER_BOUND_S + REPORT_BOUND_S,
        "the controller to elect or record an offline reason",
        retry_on=PROBE_ERRORS,
    )


def test_truncated_log_of_an_isr_member_back_first_does_not_lead(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """All three die at once; broker 2's segment is cut (not deleted) to half the acked records,
    its index files left as they were; it comes back alone, then the others."""
    with cluster_of(zookeeper, tmp_path, "truncated") as cluster:
        run = Run(cluster, "tr")
        assert run.produce(400) == 400
        run.wait_reports_cover_acks()
        killed_in_epoch = kill_all(run)
        truncate_to_records(segment(cluster, 2, "tr"), 200)
        cluster.brokers[2].start()
        alone = wait_decided_alone(run, killed_in_epoch)
        assert alone["leader"] < 0, alone
        assert "below the acknowledged" in alone["offline_reason"], alone
        assert run.restore_and_check() == []
        assert run.tracebacks() == []


@pytest.mark.parametrize("fault", ["truncate", "new_disk"])
def test_leader_back_damaged_before_its_session_expires_then_preferred_election(
    zookeeper: ZooKeeperServer, tmp_path: Path, fault: str
) -> None:
    """The leader (also the preferred replica) is SIGKILLed and restarted at once, inside its
    ZooKeeper session timeout, its log cut / its partition dir deleted / its whole log dir
    (meta.properties too) replaced by an empty one; the followers never stopped. Then
    `logkeel elect --preferred` pulls leadership towards it."""
    with cluster_of(zookeeper, tmp_path, f"fast_{fault}") as cluster:
        run = Run(cluster, "fr")
        assert run.produce(400) == 400
        run.wait_reports_cover_acks()
        leader = leader_of(run)
        assert cluster.partitions("fr")[0].replica_nodes[0] == leader
        cluster.brokers[leader].kill()
        if fault == "truncate":
            truncate_to_records(segment(cluster, leader, "fr"), 200)
        elif fault == "wipe_dir":
            shutil.rmtree(partition_dir(cluster, leader, "fr"))
        else:
            shutil.rmtree(cluster.brokers[leader].log_dirs[0])
        cluster.brokers[leader].start()
        wait_until(
            lambda: leader_of(run) not in (-1, leader) or None,
            FAILOVER_BOUND_S + REPORT_BOUND_S,
            "a follower to lead",
            retry_on=PROBE_ERRORS,
        )
        assert run.produce(100) == 100
        elect(cluster, "--preferred")
        assert run.restore_and_check() == []
        assert run.tracebacks() == []


def test_old_snapshot_of_the_leader_restored_after_power_loss(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """The leader's partition dir is copied after 200 acked records (a backup); 300 more are
    acked; all three lose power; the copy is put back in place of the leader's dir and the
    leader comes back first, alone."""
    with cluster_of(zookeeper, tmp_path, "snapshot") as cluster:
        run = Run(cluster, "sn")
        assert run.produce(200) == 200
        leader = leader_of(run)
        backup = tmp_path / "backup"
        shutil.copytree(partition_dir(cluster, leader, "sn"), backup)
        assert run.produce(300) == 300
        run.wait_reports_cover_acks()
        killed_in_epoch = kill_all(run)
        shutil.rmtree(partition_dir(cluster, leader, "sn"))
        shutil.copytree(backup, partition_dir(cluster, leader, "sn"))
        cluster.brokers[leader].start()
        alone = wait_decided_alone(run, killed_in_epoch)
        assert alone["leader"] < 0, alone
        assert alone["offline_reason"], alone
        assert run.restore_and_check() == []
        assert run.tracebacks() == []


def test_two_of_three_wiped_come_back_first(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """All three die; two lose their partition dir (one of them the leader) and return first;
    the partition must wait for the third, which holds everything."""
    with cluster_of(zookeeper, tmp_path, "two_wiped") as cluster:
        run = Run(cluster, "tw")
        assert run.produce(300) == 300
        run.wait_reports_cover_acks()
        leader = leader_of(run)
        good = next(b for b in cluster.brokers if b != leader)
        wiped = [b for b in cluster.brokers if b != good]
        killed_in_epoch = kill_all(run)
        for b in wiped:
            shutil.rmtree(partition_dir(cluster, b, "tw"))
        for b in wiped:
            cluster.brokers[b].start()
        alone = wait_decided_alone(run, killed_in_epoch)
        assert alone["leader"] < 0, alone
        assert alone["offline_reason"], alone
        assert run.restore_and_check() == []
        assert leader_of(run) == good
        assert run.tracebacks() == []


@contextmanager
def fetches_dropped(cluster: Cluster, follower: int, leader: int) -> Iterator[None]:
    """Drops what ``follower`` sends to ``leader``'s port (its fetches), nothing else: it
    stays registered in ZooKeeper and answers the controller."""
    group = cluster.brokers[follower].group
    assert group is not None, "the iptables owner match needs root (as the cluster tests run)"
    rule = ["OUTPUT", "-p", "tcp", "--dport", str(cluster.brokers[leader].port),
            "-m", "owner", "--gid-owner", str(group), "-j", "DROP"]  # fmt: skip
    subprocess.run(["iptables", "-I", *rule], check=True)
    try:
        yield
    finally:
        subprocess.run(["iptables", "-D", *rule], check=True)


def registration_zxid(cluster: Cluster, broker: int) -> int | None:
    """The zxid that created the broker's registration (its broker epoch), None: absent."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.connect, timeout=10.0)
    zk.start(timeout=10.0)
    try:
        stat = zk.exists(f"/brokers/ids/{broker}")
        return None if stat is None else int(stat.czxid)
    finally:
        zk.stop()
        zk.close()


def replica_logs_of(cluster: Cluster, broker: int) -> dict[TopicPartition, ReplicaLogReport]:
    """The broker's last replica-log report, all its parts (empty: none), read as the
    controller reads it."""
    client = ZkMetadataClient(cluster.connect, session_timeout_ms=10_000)
    client.start()
    try:
        found = client.replica_logs_of(broker)
        return {} if found is None else found[1]
    finally:
        client.close()


def reported_epoch(cluster: Cluster, broker: int) -> int | None:
    """The broker epoch of the broker's last replica-log report (None: none)."""
    return max((r.broker_epoch for r in replica_logs_of(cluster, broker).values()), default=None)


class SetUpFailed(RuntimeError):
    """The fault could not be arranged: the test fails as a set-up failure, never passes."""


def controller_of(cluster: Any) -> int:
    """The controller's id once one is in office (a new cluster's Metadata answers -1 first)."""
    return wait_until(
        lambda: (c := cluster.metadata().controller_id) in cluster.brokers and c,
        30, "a controller in office", retry_on=PROBE_ERRORS,
    )  # fmt: skip


@contextmanager
def arranging() -> Iterator[None]:
    """A failed wait or check before the attack itself is a set-up that did not happen (the
    fault could not be arranged), told apart from the attack's own failure."""
    try:
        yield
    except AssertionError as exc:
        raise SetUpFailed(str(exc)) from exc


def _restart_wiped_unseen(run: Run, damaged: int, controller: int) -> bool:
    """``controller`` frozen (SIGSTOP) while ``damaged`` is SIGKILLed, its partition dir
    deleted and restarted at once, until ``damaged`` has registered again (the leader's crash
    detector deletes the dead registration within a second); True when the controller never
    saw it gone: it took it out of the ISR only as a restart it did not see (a broker's log
    says why: the frozen controller's, or its successor's if its session ended)."""
    cluster = run.cluster
    old_zxid = registration_zxid(cluster, damaged)
    cluster.brokers[controller].freeze()
    try:
        cluster.brokers[damaged].kill()
        shutil.rmtree(partition_dir(cluster, damaged, run.topic))
        cluster.brokers[damaged].start()
        wait_until(
            lambda: registration_zxid(cluster, damaged) not in (None, old_zxid),
            10,
            "the damaged broker to register again",
            retry_on=PROBE_ERRORS,
        )
    finally:
        cluster.brokers[controller].thaw()
    new_zxid = registration_zxid(cluster, damaged)
    wait_until(
        lambda: reported_epoch(cluster, damaged) == new_zxid or None,
        REPORT_BOUND_S,
        "the restarted broker's first report",
        retry_on=PROBE_ERRORS,
    )
    leader = leader_of(run)
    wait_until(
        lambda: damaged not in cluster.partitions(run.topic, leader)[0].isr_nodes,
        FAILOVER_BOUND_S,
        "the damaged broker to leave the ISR",
        retry_on=PROBE_ERRORS,
    )
    bounced = f"[{damaged}] left the ISR: restarted since the ISR was written"
    return any(bounced in b.log_path.read_text(errors="replace") for b in cluster.brokers.values())


@contextmanager
def wiped_but_in_isr(run: Run, damaged: int, controller: int, leader: int) -> Iterator[None]:
    """``damaged`` back with a wiped partition dir after a restart the controller did not see
    as an absence (it once kept such a broker in the ISR), its fetches to ``leader`` dropped
    so that it cannot catch up. The controller does not always miss the absence: then
    ``damaged`` catches up and it is tried again."""
    for _ in range(3):
        with fetches_dropped(run.cluster, damaged, leader):
            if _restart_wiped_unseen(run, damaged, controller):
                yield
                return
        wait_until(
            lambda: damaged in run.cluster.partitions(run.topic, leader)[0].isr_nodes or None,
            FAILOVER_BOUND_S + REPORT_BOUND_S,
            "the damaged broker to catch up and rejoin the ISR",
            retry_on=PROBE_ERRORS,
        )
    raise SetUpFailed(f"the controller saw broker {damaged}'s absence three times")


def test_controlled_shutdown_never_elects_a_wiped_follower_restarted_unseen(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """Assignment [L, D, C] with C the controller. D is SIGKILLed, its partition dir deleted,
    restarted at once; its fetches to L are dropped (it cannot catch up). The controller is
    frozen (SIGSTOP, well inside its own session timeout) from just before D's old session
    expires until D has registered again, so it never sees D gone (the same happens without
    the freeze when D was the controller and its expiry races the failover). Then L shuts down
    cleanly (SIGTERM). D once stayed in the ISR and led with an empty log; now its registration,
    newer than the ISR's last write, takes it out, and C leads."""
    with cluster_of(zookeeper, tmp_path, "cs_wiped", **FREEZABLE) as cluster:
        with arranging():
            controller = controller_of(cluster)
            leader, damaged = (b for b in cluster.brokers if b != controller)
            run = Run(cluster, "cs", replicas=[leader, damaged, controller])
            assert run.produce(400) == 400
            run.wait_reports_cover_acks()
            with wiped_but_in_isr(run, damaged, controller, leader):
                cluster.brokers[leader].stop()
                new = wait_until(
                    lambda: (x := leader_of(run)) not in (-1, leader) and x or None,
                    FAILOVER_BOUND_S + REPORT_BOUND_S,
                    "another leader",
                    retry_on=PROBE_ERRORS,
                )
            anomalies = run.restore_and_check()
            assert run.tracebacks() == []
        assert anomalies == [], f"{damaged} (wiped) became leader: {new}"


def test_preferred_election_never_elects_a_wiped_preferred_replica_restarted_unseen(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """Assignment [D, L, C], C the controller; `logkeel elect --replica L` moves leadership
    off D; D is wiped and restarted unseen (as in the controlled-shutdown attack); then
    `logkeel elect --preferred` asks for D: the operator's election must refuse it."""
    with cluster_of(zookeeper, tmp_path, "pref_wiped", **FREEZABLE) as cluster:
        with arranging():
            controller = controller_of(cluster)
            damaged, leader = (b for b in cluster.brokers if b != controller)
            run = Run(cluster, "pw", replicas=[damaged, leader, controller])
            moved = elect(cluster, "--topic", "pw", "--partition", "0", "--replica", str(leader))
            assert moved.returncode == 0, moved.stdout + moved.stderr
            wait_until(
                lambda: leader_of(run) == leader,
                15.0,
                "the designated leader",
                retry_on=PROBE_ERRORS,
            )
            assert run.produce(400) == 400
            run.wait_reports_cover_acks()
            with wiped_but_in_isr(run, damaged, controller, leader):
                preferred = elect(cluster, "--preferred", "--topic", "pw", "--partition", "0")
            anomalies = run.restore_and_check()
            assert run.tracebacks() == []
        assert anomalies == [], preferred.stdout


def test_cut_below_the_acks_since_the_last_report_after_power_loss(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """300 records acked and reported; 300 more acked and all three brokers SIGKILLed at once
    before a report carries them; the leader's machine loses power: its segment is cut
    between the highest reported high watermark and the acked 600 (what was not flushed), and
    it boots again (another boot id than the one its log dir recorded). It comes back alone,
    then the others. No report shows the cut; the crash of its machine does: it may not lead
    while the others may return. (Once a known limit: it led, and the others truncated.)"""
    with cluster_of(zookeeper, tmp_path, "since_report") as cluster:
        with arranging():
            run = Run(cluster, "sr")
            assert run.produce(300) == 300
            run.wait_reports_cover_acks()
            leader = leader_of(run)
            assert run.produce(300) == 300
            killed_in_epoch = kill_all(run)
            reported = max(m.get(0, -1) for m in run.reported_high_watermarks().values())
            if reported > 560:
                raise SetUpFailed(f"a report already carried the acked records up to {reported}")
            # Above every reported high watermark, below what was acked (600).
            truncate_to_records(segment(cluster, leader, "sr"), (reported + 600) // 2)
            boot_id = cluster.brokers[leader].log_dirs[0] / BOOT_ID_FILE
            boot_id.write_text("00000000-0000-0000-0000-000000000000\n")  # a boot since
            cluster.brokers[leader].start()
            alone = wait_decided_alone(run, killed_in_epoch)
            assert alone["leader"] < 0, alone
            assert "went down uncleanly" in alone["offline_reason"], alone
            anomalies = run.restore_and_check()
            assert run.tracebacks() == []
        assert anomalies == []
