"""The broker's CPU time per MB produced, this tree against another tree's code: a measure of
the produce path's cost that a loaded machine disturbs far less than wall-clock throughput.

    .venv/bin/python bench/produce_cpu.py --base-src OLD/src [--messages 200000] [--repeats 5]

Each repeat starts one `logkeel serve` per tree (the base one with PYTHONPATH=OLD/src), in
alternating order, produces --messages 1 KiB messages with confluent-kafka (bench/throughput.py's
producer settings: 1 MiB batches, acks=1) to a fresh one-partition topic, and reads the
broker's user+system CPU seconds (/proc/<pid>/stat) around the produce. Figures are medians;
`ratio` is this tree / base (below 1: cheaper). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import confluent_kafka

sys.path.insert(0, str(Path(__file__).resolve().parent))
from logkeel.testing.broker_process import LogkeelBroker
from throughput import MESSAGE_BYTES, PRODUCER_SETTINGS


class TreeBroker(LogkeelBroker):
    def __init__(self, workdir: Path, src: Path | None) -> None:
        super().__init__(workdir)
        self.src = src

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.src is not None:
            env["PYTHONPATH"] = str(self.src)
        return env


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(src: Path | None, messages: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work, TreeBroker(Path(work), src).start(90) as broker:
        assert broker.pid is not None
        conf = {"bootstrap.servers": broker.bootstrap, **PRODUCER_SETTINGS}
        producer = confluent_kafka.Producer(conf)
        producer.produce("warm-up", b"x")
        assert producer.flush(60) == 0
        value = os.urandom(MESSAGE_BYTES)
        before, start = cpu_seconds(broker.pid), time.monotonic()
        for _ in range(messages):
            producer.produce("bench", value, partition=0)
            producer.poll(0)
        assert producer.flush(120) == 0
        cpu, wall = cpu_seconds(broker.pid) - before, time.monotonic() - start
        mb = messages * MESSAGE_BYTES / 1e6
        return {"cpu_ms_per_mb": 1000 * cpu / mb, "wall_mb_s": mb / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-src", type=Path, required=True)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    trees: dict[str, Path | None] = {"this": None, "base": args.base_src}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for i in range(args.repeats):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))
        for name in order:
            samples[name].append(one_run(trees[name], args.messages))
            print(name, samples[name][-1], flush=True)
    result: dict[str, Any] = {"settings": {"messages": args.messages, "repeats": args.repeats}}
    for metric in ("cpu_ms_per_mb", "wall_mb_s"):
        entry: dict[str, Any] = {
            name: round(statistics.median(s[metric] for s in runs), 2)
            for name, runs in samples.items()
        }
        ratios = [
            a[metric] / b[metric] for a, b in zip(samples["this"], samples["base"], strict=True)
        ]
        entry["ratio"] = round(statistics.median(ratios), 3)
        result[metric] = entry
    print(json.dumps(result))


if __name__ == "__main__":
    main()
