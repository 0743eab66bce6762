"""What an idle follower's fetch costs its leader per partition (issue 19, idle CPU): every
fetch of a caught-up follower reads each partition of its session twice (before and after its
long poll), and at 2,000 partitions RF 3 each broker serves two followers ~667 partitions each,
twice a second. Measured in-process on real logs, no brokers: ``partition_reads.read`` of a
follower at the log end of an empty leader partition (ISR of three, KIP-501's pending reads on,
as by default); a follower's ``Partition.fetch_position``, which its fetcher asks of every
partition of every round.

    .venv/bin/python bench/idle_fetch_read.py --partitions 2000

The last line printed is one JSON object: microseconds of CPU (process time) per partition,
the best of the rounds (the least disturbed by other processes on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from logkeel.cluster.metadata import PartitionState
from logkeel.server.replica import partition_reads
from logkeel.server.replica.isr_rules import IsrConfig
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.results import FetchPartitionRequest
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

LEADER, FOLLOWER = 1, 2


def partitions(logs: LogManager, topic: str, n: int, leader: int) -> list[Partition]:
    out = []
    for i in range(n):
        tp = TopicPartition(topic, i)
        p = Partition(
            tp, "id", LEADER, IsrConfig(follower_fetch_pending_reads_insync_enable=True),
            lambda _proposal: None,
        )  # fmt: skip
        p.shutting_down = frozenset
        p.log = logs.get_or_create_log(tp)
        p.apply_state(PartitionState(topic, i, [1, 2, 3], leader, 0, [1, 2, 3], 0))
        p.become_leader_or_follower()
        out.append(p)
    return out


def per_partition_us(fn: Callable[[], object], n: int, repeats: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(repeats):
            fn()
        best = min(best, time.process_time() - started)
    return round(best / repeats / n * 1e6, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=10, help="passes per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    n = args.partitions
    with tempfile.TemporaryDirectory() as d:
        logs = LogManager([Path(d)])
        logs.startup(start_background=False)
        try:
            led = partitions(logs, "led", n, LEADER)
            # Followed from broker 3: a follower's empty log has no leader epoch yet.
            followed = partitions(logs, "followed", n, 3)
            requests = [
                FetchPartitionRequest(p.tp, 0, 1 << 20, 0, last_fetched_epoch=-1) for p in led
            ]

            def leader_reads() -> None:
                for p, r in zip(led, requests, strict=True):
                    partition_reads.read(p, r, FOLLOWER, 1 << 20, 0, True)

            def positions() -> None:
                for p in followed:
                    p.fetch_position()

            result = {
                "partitions": n,
                "leader_read_us": per_partition_us(leader_reads, n, args.repeats, args.rounds),
                "follower_position_us": per_partition_us(positions, n, args.repeats, args.rounds),
            }
        finally:
            logs.shutdown()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
