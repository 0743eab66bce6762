"""The topic source (`format("logkeel")`) on a standalone Spark cluster beside `local[2]`, in one
run on the same topic.

One `logkeel serve` broker holds the topic. The standalone cluster is a master and two workers
of one core each, started from the pyspark wheel's `spark-class` (tests/spark/standalone.py), so
both sides have two task slots; on the cluster the tasks run in executor JVMs of their own and
their Python workers, and rows travel back to no one (a `noop` sink materialises every row
where it is read). Each side is its own driver process (one SparkContext per process), timed
from the action to its end after one warm-up read; start-up is not counted. Medians over
--repeats; one line per measurement and, last, one JSON object.

    .venv/bin/python bench/spark_cluster_read.py                    # 500,000 records of 100 bytes
    .venv/bin/python bench/spark_cluster_read.py --records 300000 --standalone-first
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from logkeel.testing.broker_process import LogkeelBroker  # noqa: E402


def driver(master: str, bootstrap: str, topic: str, repeats: int) -> None:
    """Runs in its own process: one warm-up and ``repeats`` timed reads on ``master``."""
    from logkeel.spark.session import spark_session

    conf = {
        "spark.ui.enabled": "false",
        "spark.log.level": "ERROR",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
    }
    if master.startswith("spark://"):
        conf.update({
            "spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        })  # fmt: skip
    spark = spark_session(master, "logkeel-bench-cluster-read", conf)
    try:
        df = (
            spark.read.format("logkeel")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
        )
        df.write.format("noop").mode("overwrite").save()  # warm-up: executors, Python workers
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            seconds.append(time.perf_counter() - start)
    finally:
        spark.stop()
    print("SECONDS " + json.dumps(seconds), flush=True)


def run_driver(master: str, bootstrap: str, topic: str, repeats: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, __file__, "--driver", master, bootstrap, topic, str(repeats)],
        capture_output=True, text=True, timeout=1800, env=env, cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"driver on {master} failed:\n{(done.stdout + done.stderr)[-4000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("SECONDS "))
    seconds: list[float] = json.loads(line[len("SECONDS ") :])
    return seconds


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--driver":
        driver(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--standalone-first",
        action="store_true",
        help="measure the standalone cluster before local[2] (the load of a shared machine drifts)",
    )
    args = parser.parse_args()

    from tests.spark.standalone import spark_cluster

    from spark_read import produce  # bench/spark_read.py: the same records as that benchmark

    with tempfile.TemporaryDirectory(prefix="logkeel-bench-cluster-read-") as tmp:
        work = Path(tmp)
        broker = LogkeelBroker(work / "broker").start()
        try:
            topic = "bench-cluster-read"
            produce(broker.bootstrap, topic, args.partitions, args.records, args.value_bytes)
            print(f"produced {args.records} records", flush=True)
            results = {}
            with spark_cluster(work / "spark") as cluster:
                sides = [("local[2]", "local[2]"), ("standalone", cluster.url)]
                for name, master in reversed(sides) if args.standalone_first else sides:
                    seconds = run_driver(master, broker.bootstrap, topic, args.repeats)
                    rates = [args.records / s for s in seconds]
                    results[name] = {
                        "seconds": [round(s, 3) for s in seconds],
                        "rows_per_s": [round(r) for r in rates],
                        "median_rows_per_s": round(statistics.median(rates)),
                    }
                    print(f"{name}: {results[name]}", flush=True)
        finally:
            broker.stop()
    summary = {
        "benchmark": "spark_cluster_read",
        "records": args.records,
        "value_bytes": args.value_bytes,
        "partitions": args.partitions,
        "repeats": args.repeats,
        "load_average": os.getloadavg(),
        **results,
        "standalone_over_local": round(
            results["standalone"]["median_rows_per_s"] / results["local[2]"]["median_rows_per_s"], 2
        ),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
