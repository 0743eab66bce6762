"""`logkeel audit` over thousands of partitions: where its time goes, against a plain walk.

A synthetic cluster: 3 brokers' log dirs, each with a replica of every partition (one replica
written by logkeel's storage engine, copied under every partition dir name; see
tests/spark/logdirs.py). For each size, in the same run and on the same files:

- ``walk``: a plain directory walk reading every segment file once (``os.read`` in 8 MiB
  chunks), no checking: the floor for anything that reads the data.
- ``plan``: the driver's part of the audit: listing partition dirs and segments, grouping
  replicas by partition, one read of each log dir's checkpoint.
- ``audit``: the whole audit on Spark (``--master``, default ``local[2]``), planning included,
  session start-up not (a warm-up audit runs first), with its progress callbacks counted.
- ``previous`` (with ``--baseline-src DIR``, e.g. the tree before the change): the audit of the
  ``src`` in DIR on the same dirs, in a subprocess on the same master, session start-up not
  counted.

Medians over --repeats (``previous``: --baseline-repeats). Prints a line per measurement and,
last, one JSON object.

    .venv/bin/python bench/audit_scale.py
    .venv/bin/python bench/audit_scale.py --partitions 2000 5000 --repeats 3
    mkdir /tmp/base && git archive 8385673 src | tar -x -C /tmp/base && \\
      .venv/bin/python bench/audit_scale.py --baseline-src /tmp/base/src
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.spark.logdirs import write_brokers  # noqa: E402

from logkeel.spark.audit import audit, plan  # noqa: E402
from logkeel.spark.session import spark_session  # noqa: E402

BROKERS = 3
CHUNK = 8 * 1024 * 1024

# Run by the subprocess for ``previous``: the other tree's audit, timed after a warm-up.
PREVIOUS = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from logkeel.spark.audit import audit
from logkeel.spark.session import spark_session
spark = spark_session(sys.argv[2], "audit-previous", {"spark.ui.enabled": "false",
                      "spark.log.level": "ERROR"})
dirs = sys.argv[4:]
audit(spark, [dirs[0] + "/t-0"])  # warm-up: Python workers started
times = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    reports = audit(spark, dirs)
    times.append(time.perf_counter() - t)
print(json.dumps({"seconds": times, "partitions": len(reports)}))
"""


def log(msg: str) -> None:
    print(msg, flush=True)


def walk(dirs: list[Path]) -> int:
    """Reads every segment file under ``dirs`` once; returns the bytes read."""
    total = 0
    for d in dirs:
        for part, _, files in os.walk(d):
            for name in files:
                if not name.endswith(".log"):
                    continue
                fd = os.open(os.path.join(part, name), os.O_RDONLY)
                try:
                    while chunk := os.read(fd, CHUNK):
                        total += len(chunk)
                finally:
                    os.close(fd)
    return total


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def previous(src: str, master: str, dirs: list[Path], repeats: int) -> float:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-c", PREVIOUS, src, master, str(repeats), *map(str, dirs)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return statistics.median(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, nargs="+", default=[2000, 5000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--baseline-src", help="a src tree whose audit is measured as 'previous'")
    ap.add_argument("--baseline-repeats", type=int, default=1)
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_session(
        args.master, "audit-scale", {"spark.ui.enabled": "false", "spark.log.level": "ERROR"}
    )
    results = []
    root = Path(tempfile.mkdtemp(prefix="audit-scale-"))
    try:
        for n in args.partitions:
            base = root / str(n)
            dirs = write_brokers(base, BROKERS, n)
            audit(spark, dirs)  # warm-up: Python workers started, files in the page cache
            walk_s, nbytes = timed(lambda d=dirs: walk(d), args.repeats)
            plan_s, work = timed(lambda d=dirs: plan(d), args.repeats)
            calls: list[tuple[int, int]] = []

            def run(d: list[Path] = dirs, seen: list[tuple[int, int]] = calls) -> Any:
                seen.clear()
                return audit(spark, d, lambda done, total: seen.append((done, total)))

            audit_s, reports = timed(run, args.repeats)
            assert len(reports) == len(work) == n
            row: dict[str, Any] = {
                "partitions": n,
                "replicas": BROKERS * n,
                "segment_bytes": nbytes,
                "walk_s": round(walk_s, 3),
                "plan_s": round(plan_s, 3),
                "audit_s": round(audit_s, 3),
                "audit_partitions_per_s": round(n / audit_s),
                "walk_partitions_per_s": round(n / walk_s),
                "audit_vs_walk": round(audit_s / walk_s, 1),
                "progress_reports": len(calls),
                "progress_last": calls[-1] if calls else None,
            }
            log(f"{n} partitions: audit {audit_s:.2f} s, walk {walk_s:.2f} s, plan {plan_s:.2f} s")
            if args.baseline_src:
                prev_s = previous(args.baseline_src, args.master, dirs, args.baseline_repeats)
                row["previous_s"] = round(prev_s, 3)
                row["previous_partitions_per_s"] = round(n / prev_s, 1)
                row["speedup_vs_previous"] = round(prev_s / audit_s, 1)
                log(f"{n} partitions: previous {prev_s:.2f} s")
            results.append(row)
            shutil.rmtree(base)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"master": args.master, "repeats": args.repeats, "results": results}))


if __name__ == "__main__":
    main()
