"""A failed disk costs only its replicas, in a cluster (KIP-18/KIP-112), with a real failing
disk: broker 1 keeps one of its two log dirs on a FUSE mount that starts answering EIO. The
dir goes offline on broker 1 alone, the controller moves the leadership of its partitions to
an in-sync replica within seconds, acks=all sends keep succeeding, and once the disk heals
the dir comes back without a restart and its replicas rejoin the ISR (beyond Kafka). The
controller records the dir failing and coming back, and the slow leader's step-down, in the
history `logkeel console` shows."""

from __future__ import annotations

import errno
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.testing.faulty_fs import FaultyFs
from tests.cluster.test_cluster_brokers import PROBE_ERRORS, Cluster, three_brokers
from tests.console.history_watch import wait_for_history
from tests.server.admin_clients import offline_log_dirs
from tests.waiting import wait_until

TOPIC = "disk"
PARTITIONS = 4


def on_failing_disk(fs: FaultyFs) -> list[int]:
    return sorted(
        int(p.name.rsplit("-", 1)[1]) for p in (fs.mountpoint / "logs").glob(f"{TOPIC}-*")
    )


def broker_1_leads_from_the_fuse_dir(cluster: Cluster, fs: FaultyFs) -> int:
    """Creates the topic (RF 3, min.insync.replicas 2) and makes broker 1 the leader (with
    `logkeel elect --replica`) of a partition whose broker-1 replica is on the FUSE dir."""
    admin = AdminClient({"bootstrap.servers": cluster.brokers[2].bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
        TOPIC
    ].result(20)
    wait_until(lambda: all(len(p.isr_nodes) == 3 for p in cluster.partitions(TOPIC).values()), 30, "every replica in sync", retry_on=PROBE_ERRORS)  # fmt: skip
    # The ISR says who should hold a replica, not that its dir exists yet.
    wait_until(lambda: len(list((fs.mountpoint / "logs").glob(f"{TOPIC}-*")))
               + len(list((fs.mountpoint.parent / "b1-healthy").glob(f"{TOPIC}-*"))) == PARTITIONS, 20, "broker 1's partition dirs", retry_on=PROBE_ERRORS)  # fmt: skip
    failing = on_failing_disk(fs)
    assert failing, "no partition of broker 1 landed on the FUSE dir"
    p = failing[0]
    elected = subprocess.run(
        [sys.executable, "-m", "logkeel", "elect", "--topic", TOPIC, "--partition", str(p),
         "--replica", "1", "--bootstrap-server", cluster.brokers[2].bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert elected.returncode == 0 or "already leads" in elected.stdout, elected.stdout
    wait_until(
        lambda: cluster.partitions(TOPIC)[p].leader_id == 1,
        10,
        "broker 1 leads",
        retry_on=PROBE_ERRORS,
    )
    return p


def send(cluster: Cluster, partition: int, values: list[str]) -> list[str]:
    """acks=all with the client's retries; returns the errors of the sends that failed."""
    p = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
                  "acks": "all", "enable.idempotence": True, "message.timeout.ms": 30000})  # fmt: skip
    failed: list[str] = []
    for v in values:
        p.produce(TOPIC, v.encode(), partition=partition,
                  on_delivery=lambda err, _m: failed.append(str(err)) if err else None)  # fmt: skip
    assert p.flush(40) == 0
    return failed


def read(cluster: Cluster, partition: int) -> list[str]:
    c = Consumer({"bootstrap.servers": ",".join(b.bootstrap for b in cluster.live()),
                  "group.id": f"r-{time.monotonic_ns()}", "enable.auto.commit": False})  # fmt: skip
    c.assign([TopicPartition(TOPIC, partition, 0)])
    out: list[str] = []
    idle = time.monotonic() + 8
    try:
        while time.monotonic() < idle:
            m = c.poll(0.5)
            if m is not None and not m.error():
                out.append(m.value().decode())
                idle = time.monotonic() + 2
    finally:
        c.close()
    return out


def test_a_failed_disk_moves_leadership_within_seconds_and_comes_back_healed(
    zookeeper: ZooKeeperServer, tmp_path: Path, faulty_fs: FaultyFs
) -> None:
    dirs = {1: [faulty_fs.mountpoint / "logs", tmp_path / "b1-healthy"]}
    overrides = {"log.dir.recovery.check.interval.ms": "500"}
    with three_brokers(zookeeper, tmp_path, f"/disk_{tmp_path.name}", overrides, dirs) as cluster:
        p = broker_1_leads_from_the_fuse_dir(cluster, faulty_fs)
        assert send(cluster, p, [f"a{i}" for i in range(50)]) == []

        faulty_fs.fail(errno.EIO, ops={"write", "fsync"})
        failed_at = time.monotonic()
        sender = Producer({"bootstrap.servers": cluster.brokers[2].bootstrap, "acks": "all",
                           "enable.idempotence": True})  # fmt: skip
        sender.produce(TOPIC, b"trigger", partition=p)  # the write that meets the bad disk
        sender.poll(0)

        def moved() -> bool:
            part = cluster.partitions(TOPIC, via=2)[p]
            return part.leader_id not in (1, -1) and 1 in part.offline_replicas

        wait_until(moved, 15, "leadership off the failed disk", retry_on=PROBE_ERRORS)
        moved_after = time.monotonic() - failed_at
        assert moved_after < 5.0, f"leadership moved {moved_after:.1f}s after the disk failed"
        assert sender.flush(40) == 0
        assert offline_log_dirs(cluster.brokers[1].bootstrap) == [
            str(faulty_fs.mountpoint / "logs")
        ]
        # Every partition stays writable with acks=all (min.insync.replicas=2 of 3).
        for q in range(PARTITIONS):
            assert send(cluster, q, [f"b{q}-{i}" for i in range(20)]) == []

        faulty_fs.heal()
        wait_until(lambda: offline_log_dirs(cluster.brokers[1].bootstrap) == [], 20, "the healed dir back online", retry_on=PROBE_ERRORS)  # fmt: skip
        wait_until(lambda: all(len(x.isr_nodes) == 3 for x in cluster.partitions(TOPIC).values()), 30, "broker 1 back in every ISR", retry_on=PROBE_ERRORS)  # fmt: skip
        values = read(cluster, p)
        assert [v for v in values if v.startswith("a")] == [f"a{i}" for i in range(50)]
        assert values.count("trigger") == 1
        assert [v for v in values if v.startswith("b")] == [f"b{p}-{i}" for i in range(20)]

        fuse_dir = str(faulty_fs.mountpoint / "logs")

        def dir_events(rows: list[dict[str, object]]) -> list[object]:
            return [r["kind"] for r in rows if r["subject"] == fuse_dir and r["broker"] == 1]

        rows = wait_for_history((b.bootstrap for b in cluster.live()),
                                lambda rows: len(dir_events(rows)) >= 2, 30,
                                "the console's history to show the dir failing and back")  # fmt: skip
        assert dir_events(rows) == ["log dir back online", "log dir failed"]  # newest first
        [failed] = [r for r in rows if r["kind"] == "log dir failed"]
        assert str(failed["reason"]).startswith(f"IO error in log dir {fuse_dir}")
        assert any(r["subject"] == f"{TOPIC}-{p}" and r["kind"] == "clean election"
                   and r["broker"] == 1 for r in rows)  # fmt: skip


def test_a_leader_too_slow_for_its_followers_hands_leadership_over(
    zookeeper: ZooKeeperServer, tmp_path: Path, faulty_fs: FaultyFs
) -> None:
    """Beyond KIP-501: broker 1's disk starts answering reads half a second late. Serving its
    followers' fetches takes longer than follower.fetch.process.time.max.ms for longer than
    replica.lag.time.max.ms, so it asks the controller to hand leadership to an in-sync
    follower; the partition never goes offline and no acks=all send fails."""
    dirs = {1: [faulty_fs.mountpoint / "logs", tmp_path / "b1-healthy"]}
    overrides = {
        "replica.lag.time.max.ms": "6000",
        "follower.fetch.process.time.max.ms": "200",
        "auto.leader.rebalance.enable": "false",
    }
    with three_brokers(zookeeper, tmp_path, f"/slow_{tmp_path.name}", overrides, dirs) as cluster:
        p = broker_1_leads_from_the_fuse_dir(cluster, faulty_fs)

        acked, failed = [0], [0]
        stop = False
        producer = Producer({"bootstrap.servers": cluster.brokers[2].bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5})  # fmt: skip

        def done(err: object, _m: object) -> None:
            (failed if err else acked)[0] += 1

        def keep_sending(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while not stop and time.monotonic() < deadline:
                producer.produce(TOPIC, b"x" * 1000, partition=p, on_delivery=done)
                producer.poll(0)
                time.sleep(0.005)

        keep_sending(2)
        faulty_fs.delay(0.5, ops={"read"})
        slowed_at = time.monotonic()
        smallest_isr = 3
        while cluster.partitions(TOPIC, via=2)[p].leader_id == 1:
            assert time.monotonic() - slowed_at < 40, "the slow leader kept its leadership"
            part = cluster.partitions(TOPIC, via=2)[p]
            smallest_isr = min(smallest_isr, len(part.isr_nodes))
            keep_sending(0.5)
        part = cluster.partitions(TOPIC, via=2)[p]
        assert part.leader_id in (2, 3) and len(part.isr_nodes) >= 2
        assert smallest_isr >= 2  # min.insync.replicas held all along
        faulty_fs.heal()
        keep_sending(2)
        assert producer.flush(60) == 0
        assert failed[0] == 0 and acked[0] > 0
        assert "asking the controller to move leadership" in cluster.brokers[1].output()

        def step_downs(rows: list[dict[str, object]]) -> list[dict[str, object]]:
            # Broker 1 may lead other partitions from the slow dir: they step down too.
            return [r for r in rows if r["kind"] == "slow leader stepped down"
                    and r["subject"] == f"{TOPIC}-{p}"]  # fmt: skip

        rows = wait_for_history((b.bootstrap for b in cluster.live()), step_downs, 30,
                                "the console's history to show the step-down")  # fmt: skip
        [down] = step_downs(rows)
        assert down["broker"] == 1
        assert str(down["change"]).startswith(f"leader 1 -> {part.leader_id},")
        assert "slower than" in str(down["reason"])
