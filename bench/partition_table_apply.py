"""What a metadata publish costs the partition table (issue 19): a 2,000-partition topic, RF 3,
republished after each batch of leadership moves (what a controlled shutdown does). Measured
in-process on real logs, no brokers:

- changed: each publish moves ``--moved`` leaderships; only those partitions are applied;
- baseline_all_changed: each publish moves every partition's leadership, so all of them are
  applied and woken, what every publish cost before unchanged partitions were skipped.

    .venv/bin/python bench/partition_table_apply.py --partitions 2000 --moved 13

The last line printed is one JSON object (milliseconds per publish, medians of the rounds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from logkeel.cluster.metadata import PartitionState, TopicState
from logkeel.server.replica.partition_table import PartitionTable
from logkeel.storage.log_manager import LogManager
from logkeel.testing.partition_tables import partition_table_over


def publishes(
    table: PartitionTable, parts: dict[int, PartitionState], moved: int, rounds: int
) -> list[float]:
    out = []
    for k in range(rounds):
        for p in [(k * moved + i) % len(parts) for i in range(moved)]:
            old = parts[p]
            parts[p] = replace(
                old, leader=2 if old.leader != 2 else 3, leader_epoch=old.leader_epoch + 1
            )
        state = TopicState("t", "id", dict(parts))
        started = time.perf_counter()
        table.apply_topic("t", state)
        out.append((time.perf_counter() - started) * 1000)
    return out


def table_in(tmp: str) -> tuple[LogManager, PartitionTable]:
    """A started log manager over ``tmp`` and broker 1's partition table over it."""
    logs = LogManager([Path(tmp)])
    logs.startup(start_background=False)
    return logs, partition_table_over(logs, Path(tmp))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--moved", type=int, default=13)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs, table = table_in(tmp)
        n = args.partitions
        parts = {
            p: PartitionState("t", p, [1, 2, 3], [1, 2, 3][p % 3], 0, [1, 2, 3], 0)
            for p in range(n)
        }
        table.apply_topic("t", TopicState("t", "id", dict(parts)))
        try:
            changed = publishes(table, parts, args.moved, args.rounds)
            everything = publishes(table, parts, n, max(3, args.rounds // 10))
        finally:
            logs.shutdown()
    print(json.dumps({
        "partitions": n, "moved_per_publish": args.moved,
        "changed_ms": round(statistics.median(changed), 2),
        "baseline_all_changed_ms": round(statistics.median(everything), 2),
        "ratio": round(statistics.median(everything) / statistics.median(changed), 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
