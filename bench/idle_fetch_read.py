"""What an idle follower's fetch costs its leader per partition (issue 19, idle CPU): at 2,000
partitions RF 3 each broker serves two followers ~667 partitions each, twice a second.
Measured in-process on real logs, no brokers: ``partition_reads.read`` of a follower at the log
end of an empty leader partition (ISR of three, KIP-501's pending reads on, as by default);
what a Fetch of that follower's incremental session does instead once a read found nothing
(``SessionReads.unread``: checks that nothing changed); a follower's
``Partition.fetch_position``, which its fetcher asks of every partition of every round.

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
from logkeel.server.replica import partition_reads, session_reads
from logkeel.server.replica.isr_rules import IsrConfig
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.results import FetchPartitionRequest
from logkeel.server.replica.session_reads import SessionReads
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

            # An incremental session over the same partitions, each read once at the log end
            # (nothing to return): its next Fetches only check that nothing changed.
            reads = SessionReads(FOLLOWER)
            by_tp = {p.tp: p for p in led}
            for p, r in zip(led, requests, strict=True):
                before = session_reads.stamp(p, r, FOLLOWER, 0)
                result, _ = partition_reads.read(p, r, FOLLOWER, 1 << 20, 0, True)
                reads.read((r.tp.topic, r.tp.partition), r, before, result)
            assert len(reads) == n, "every partition left unread"

            def session_checks() -> None:
                assert len(reads.unread(by_tp.get, 0)) == n

            result = {
                "partitions": n,
                "leader_read_us": per_partition_us(leader_reads, n, args.repeats, args.rounds),
                "leader_unread_us": per_partition_us(session_checks, n, args.repeats, args.rounds),
                "follower_position_us": per_partition_us(positions, n, args.repeats, args.rounds),
            }
        finally:
            logs.shutdown()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
