"""The soak behind `scripts/soak` (not part of the suite: its file name is not collected):
random faults -- SIGKILL, controlled shutdown, SIGSTOP/SIGCONT, an iptables cut from the other
brokers and ZooKeeper -- hit the leader of a 3-broker cluster for LOGKEEL_SOAK_SECONDS while an
idempotent acks=all producer writes and a consumer reads; the Jepsen-style checker's verdict on
the whole history is the test's outcome."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

from logkeel.cluster.zk_server import ZooKeeperServer
from tests.cluster.test_cluster_brokers import three_brokers
from tests.cluster.test_cluster_history import run_rounds

FAULTS = ("kill", "stop", "freeze", "cut")


def random_faults(seconds: float, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        yield rng.choice(FAULTS)


def test_soak(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    seconds = float(os.environ.get("LOGKEEL_SOAK_SECONDS", "600"))
    seed = int(os.environ.get("LOGKEEL_SOAK_SEED", str(time.time_ns() % 1_000_000)))
    print(f"soak: {seconds:.0f} s of random faults, seed {seed}")
    with three_brokers(zookeeper, tmp_path, "/soak") as cluster:
        resumed = run_rounds(cluster, random_faults(seconds, seed))
    print(f"soak: verdict clean after {len(resumed)} faults; acks resumed within "
          f"{max(resumed, default=0):.1f} s at worst")  # fmt: skip
