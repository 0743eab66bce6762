"""Creating a topic's logs on one broker (issue 19): the partition table applies a new topic of
N partitions (RF 3, this broker a replica of each), in-process on real files, no brokers; what
a broker's metadata thread does when a CreateTopics lands, until every log is created and
served. Median of ``--rounds`` rounds, each in a fresh log dir.

    .venv/bin/python bench/log_creation.py --partitions 2000,5000

The last line printed is one JSON object (seconds per topic, and per log in milliseconds).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from logkeel.cluster.metadata import PartitionState, TopicState

sys.path.insert(0, str(Path(__file__).resolve().parent))
from partition_table_apply import table_in


def create_once(n: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        logs, table = table_in(tmp)
        parts = {
            p: PartitionState("t", p, [1, 2, 3], [1, 2, 3][p % 3], 0, [1, 2, 3], 0)
            for p in range(n)
        }
        started = time.perf_counter()
        table.apply_topic("t", TopicState("t", "id", parts))
        took = time.perf_counter() - started
        assert sum(1 for p in table.all() if p.log is not None) == n
        logs.shutdown()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", default="2000,5000", help="comma-separated counts")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    out = {}
    for n in (int(x) for x in args.partitions.split(",")):
        runs = [create_once(n) for _ in range(args.rounds)]
        out[n] = {
            "seconds": round(statistics.median(runs), 2),
            "runs": [round(r, 2) for r in runs],
            "ms_per_log": round(statistics.median(runs) / n * 1000, 2),
        }
        print(n, out[n], flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
