"""A failed disk costs only its replicas, in a cluster (KIP-18/KIP-112), with a real failing
disk: broker 1 keeps one of its two log dirs on a FUSE mount that starts answering EIO. The
dir goes offline on broker 1 alone, the controller moves the leadership of its partitions to
an in-sync replica within seconds, acks=all sends keep succeeding, and once the disk heals
the dir comes back without a restart and its replicas rejoin the ISR (beyond Kafka)."""

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
from tests.cluster.test_cluster_brokers import Cluster, three_brokers, wait_until
from tests.server.admin_clients import offline_log_dirs

TOPIC = "disk"
PARTITIONS = 4


def on_failing_disk(fs: FaultyFs) -> list[int]:
    return sorted(int(p.name.rsplit("-", 1)[1]) for p in (fs.mountpoint / "logs").glob(f"{TOPIC}-*"))


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
        admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
        admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
        )[TOPIC].result(20)
        wait_until(lambda: all(len(p.isr_nodes) == 3 for p in cluster.partitions(TOPIC).values()),
                   "every replica in sync", 30)  # fmt: skip
        failing = on_failing_disk(faulty_fs)
        assert failing, "no partition of broker 1 landed on the FUSE dir"
        p = failing[0]
        elected = subprocess.run(
            [sys.executable, "-m", "logkeel", "elect", "--topic", TOPIC, "--partition", str(p),
             "--replica", "1", "--bootstrap-server", cluster.brokers[2].bootstrap],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert elected.returncode == 0 or "already leads" in elected.stdout, elected.stdout
        wait_until(lambda: cluster.partitions(TOPIC)[p].leader_id == 1, "broker 1 leads", 10)
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

        wait_until(moved, "leadership off the failed disk", 15)
        moved_after = time.monotonic() - failed_at
        assert moved_after < 5.0, f"leadership moved {moved_after:.1f}s after the disk failed"
        assert sender.flush(40) == 0
        assert offline_log_dirs(cluster.brokers[1].bootstrap) == [str(faulty_fs.mountpoint / "logs")]
        # Every partition stays writable with acks=all (min.insync.replicas=2 of 3).
        for q in range(PARTITIONS):
            assert send(cluster, q, [f"b{q}-{i}" for i in range(20)]) == []

        faulty_fs.heal()
        wait_until(lambda: offline_log_dirs(cluster.brokers[1].bootstrap) == [],
                   "the healed dir back online", 20)  # fmt: skip
        wait_until(lambda: all(len(x.isr_nodes) == 3 for x in cluster.partitions(TOPIC).values()),
                   "broker 1 back in every ISR", 30)  # fmt: skip
        values = read(cluster, p)
        assert [v for v in values if v.startswith("a")] == [f"a{i}" for i in range(50)]
        assert values.count("trigger") == 1
        assert [v for v in values if v.startswith("b")] == [f"b{p}-{i}" for i in range(20)]
