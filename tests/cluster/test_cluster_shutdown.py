"""Stopping a whole cluster at once (issue 28): three real brokers on the session's ZooKeeper,
every partition RF 3 with a full ISR, then SIGTERM to all three together. With KIP-841 a
broker in a controlled shutdown is never proposed back into an ISR, so each partition's ISR
changes at most once per broker on the way down, the stop ends in bounded time, and no
broker logs a traceback (an ISR write submitted after the writer stopped used to).

The partition count is kept small for CI on 2 cores (``LOGKEEL_SHUTDOWN_PARTITIONS`` raises
it; the 2,000-partition run is in BENCHMARKS.md)."""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from logkeel.cluster.zk_server import ZooKeeperServer
from tests.cluster.test_cluster_brokers import three_brokers, wait_until

PARTITIONS = int(os.environ.get("LOGKEEL_SHUTDOWN_PARTITIONS", "300"))
# Controlled shutdown waits at most the session timeout (6 s here) for leaderships to move;
# the rest is the brokers' own stop.
STOP_BOUND_S = 30.0
ISR_WRITE = re.compile(r"(\S+-\d+): ISR -> \[")


def test_sigterm_to_every_broker_at_once(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    with three_brokers(zookeeper, tmp_path, "/cluster_shutdown") as cluster:
        cluster.create_topic("many", PARTITIONS, 3)

        def full() -> bool:
            parts = cluster.partitions("many")
            return len(parts) == PARTITIONS and all(
                len(p.isr_nodes) == 3 and p.leader_id > 0 for p in parts.values()
            )

        wait_until(full, "every ISR full", timeout=120)
        logs = {i: b.log_path for i, b in cluster.brokers.items()}
        before = {i: path.stat().st_size for i, path in logs.items()}
        started = time.monotonic()
        with ThreadPoolExecutor(3) as pool:
            codes = list(pool.map(lambda b: b.stop(STOP_BOUND_S + 30), cluster.brokers.values()))
        elapsed = time.monotonic() - started
        print(f"{PARTITIONS} partitions: all three brokers stopped in {elapsed:.1f}s")
        assert codes == [0, 0, 0]
        for i, path in logs.items():
            with open(path, "rb") as f:
                f.seek(before[i])
                tail = f.read().decode(errors="replace")
            assert "Traceback" not in tail, f"broker {i} logged a traceback:\n{tail[-5000:]}"
            assert "cannot schedule new futures" not in tail
            per_partition = Counter(ISR_WRITE.findall(tail))
            churn = {tp: n for tp, n in per_partition.items() if n > 1}
            assert not churn, f"broker {i} changed these ISRs more than once: {churn}"
            assert tail.count("refused") < PARTITIONS, f"broker {i} churned refused ISR writes"
        assert elapsed < STOP_BOUND_S, f"stopping took {elapsed:.1f}s"
