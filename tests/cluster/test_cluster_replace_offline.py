"""`logkeel reassign --replace-offline` after a real disk failure: broker 1 keeps one of its two
log dirs on a FUSE mount that starts answering EIO; the replicas it held there go offline, and
one command re-creates them on broker 3, which catches up and joins the ISR, with every
acknowledged record kept."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.testing.faulty_fs import FaultyFs
from tests.cluster.test_cluster_brokers import three_brokers
from tests.cluster.test_cluster_disk_faults import read
from tests.cluster.test_cluster_reassignment import create, placed
from tests.waiting import wait_until

TOPIC = "disk"  # what test_cluster_disk_faults' read() reads
PARTITIONS = 4


def test_replicas_lost_with_a_log_dir_are_recreated_on_another_broker(
    zookeeper: ZooKeeperServer, tmp_path: Path, faulty_fs: FaultyFs
) -> None:
    dirs = {1: [faulty_fs.mountpoint / "logs", tmp_path / "b1-healthy"]}
    with three_brokers(zookeeper, tmp_path, f"/replace_{tmp_path.name}", None, dirs) as cluster:
        cluster.ensure_all_running()  # every broker registered, as each sees it
        create(cluster, TOPIC, [[2, 1]] * PARTITIONS, **{"min.insync.replicas": "1"})
        wait_until(lambda: all(len(p.isr_nodes) == 2 for p in cluster.partitions(TOPIC).values()),
                   30, "every replica in sync")  # fmt: skip
        # Every replica of broker 1 created first: which are on the FUSE dir read while some
        # logs were still being made missed one, then expected on broker 1 after the move.
        wait_until(lambda: len(logs_in(dirs[1])) == PARTITIONS, 20, "broker 1's logs created")
        on_fuse = logs_in(dirs[1][:1])
        assert on_fuse, "no replica of broker 1 on the FUSE dir"
        producer = Producer({"bootstrap.servers": cluster.brokers[2].bootstrap, "acks": "all",
                             "enable.idempotence": True})  # fmt: skip
        for p in range(PARTITIONS):
            for i in range(20):
                producer.produce(TOPIC, f"{p}-{i}".encode(), partition=p)
        assert producer.flush(40) == 0
        faulty_fs.fail(errno.EIO, ops={"write", "fsync", "read"})
        for p in on_fuse:  # broker 1's next write there meets the bad disk
            producer.produce(TOPIC, f"{p}-late".encode(), partition=p)
        assert producer.flush(40) == 0
        wait_until(lambda: all(1 in cluster.partitions(TOPIC, via=2)[p].offline_replicas
                               for p in on_fuse), 30, "broker 1's replicas offline")  # fmt: skip

        done = subprocess.run(
            [sys.executable, "-m", "logkeel", "reassign", "--replace-offline", "--wait",
             "--throttle", "50000000", "--bootstrap-server", cluster.brokers[2].bootstrap],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Successfully started partition reassignment(s)" in done.stdout
        assert "Throttles removed." in done.stdout
        for p in range(PARTITIONS):
            replicas = [2, 3] if p in on_fuse else [2, 1]
            # 60 s: a replica that fell out of the ISR in the fault's turmoil rejoins slowly on
            # a loaded CI machine (30 s once needed the rerun).
            wait_until(lambda p=p, r=replicas: placed(cluster, TOPIC, p, r), 60,
                       f"{TOPIC}-{p} on {replicas}", retry_on=(OSError,))  # fmt: skip
        for p in on_fuse:
            values = read(cluster, p)
            assert values == [f"{p}-{i}" for i in range(20)] + [f"{p}-late"]


def logs_in(dirs: list[Path]) -> list[int]:
    """The partitions of TOPIC with a log in any of ``dirs``."""
    return sorted({int(p.name.rsplit("-", 1)[1]) for d in dirs for p in d.glob(f"{TOPIC}-*")})
