"""Spark driver programs for the standalone-cluster tests, each run as its own process (one
Spark application, as a user's job would be): `python standalone_jobs.py PLAN_JSON`, several
jobs in one application (an application costs its executors' start-up, a good part of a
minute on a loaded machine).

A process per application keeps the test session's in-process `local[2]` Spark untouched (one
SparkContext per process) and gives the driver's own output to check. Each job prints one line
`RESULT <json>` with what it saw; the tests judge it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from logkeel.spark.session import spark_session

Args = dict[str, Any]


def session(args: Args) -> SparkSession:
    spark = spark_session(
        args["master"],
        "logkeel-standalone-" + "+".join(name for name, _ in args["jobs"]),
        {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.driver.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": "2",
            # The first job waits until both executors are up, so that both run tasks.
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.log.level": args.get("log_level", "WARN"),
        },
    )
    return spark


def executors(spark: SparkSession) -> int:
    # The driver is in the map too.
    return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1  # type: ignore[union-attr]


def rows(df: DataFrame) -> list[list[Any]]:
    return sorted(
        [r["partition"], r["offset"], bytes(r["value"]).decode()]
        for r in df.select("partition", "offset", "value").collect()
    )


def batch(spark: SparkSession, args: Args) -> Args:
    """The topic source (batch), the transactional sink and the segment reader."""
    df = (
        spark.read.format("logkeel")
        .option("kafka.bootstrap.servers", args["bootstrap"])
        .option("subscribe", args["topic"])
        .option("minPartitions", "4")
        .load()
    )
    read = rows(df)
    df.selectExpr("key", "value").write.format("logkeel").option(
        "kafka.bootstrap.servers", args["bootstrap"]
    ).option("topic", args["out_topic"]).option("transactionalIdPrefix", args["txn_prefix"]).mode(
        "append"
    ).save()
    segments = (
        spark.read.format("logkeel-segments")
        .option("subscribe", args["topic"])
        .load(args["log_dirs"])
        .where("not corrupt")
    )
    by_dir = [
        [r["logDir"], r["n"]]
        for r in segments.groupBy("logDir").count().withColumnRenamed("count", "n").collect()
    ]
    return {"read": read, "segments": rows(segments), "segments_by_dir": by_dir}


def stream(spark: SparkSession, args: Args) -> Args:
    """One run of an availableNow query from its checkpoint: each micro-batch's rows to Parquet
    (overwritten per batch id: a re-run batch replaces its output)."""
    out = Path(args["out"])
    batches: dict[int, int] = {}

    def sink(df: DataFrame, batch_id: int) -> None:
        df = df.persist()
        df.select("partition", "offset", "value").write.mode("overwrite").parquet(
            str(out / f"batch={batch_id}")
        )
        batches[batch_id] = df.count()
        df.unpersist()

    reader = (
        spark.readStream.format("logkeel")
        .option("kafka.bootstrap.servers", args["bootstrap"])
        .option("subscribe", args["topic"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args["max_per_trigger"]))
        .load()
    )
    q = (
        reader.writeStream.foreachBatch(sink)
        .option("checkpointLocation", args["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(240)
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    return {"batches": {str(k): v for k, v in sorted(batches.items())}}


def secure(spark: SparkSession, args: Args) -> Args:
    """SASL_SSL: credentials as options (Spark's `kafka.sasl.jaas.config`), the CA as a file that
    is deleted once the query runs, so that later tasks cannot read it from anywhere."""
    options = {
        "kafka.bootstrap.servers": args["bootstrap"],
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": args["jaas"],
        "kafka.ssl.ca.location": args["ca"],
    }
    # The sink first: a batch write through the secure listener.
    spark.range(args["count"]).selectExpr(
        "cast(id as string) as key", "concat('secure-', cast(id as string)) as value"
    ).repartition(2).write.format("logkeel").options(**options).option("topic", args["topic"]).mode(
        "append"
    ).save()
    seen: list[list[Any]] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        seen.extend(rows(df))
        if batch_id == 0:
            Path(args["ca"]).unlink()
            produce_more()

    def produce_more() -> None:
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": args["bootstrap"],
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": args["user"],
                "sasl.password": os.environ["LOGKEEL_TEST_PASSWORD"],
                "ssl.ca.pem": ca_pem,
            }
        )
        for i in range(args["count"], 2 * args["count"]):
            p.produce(args["topic"], b"secure-%d" % i, str(i).encode())
        assert p.flush(60) == 0

    ca_pem = Path(args["ca"]).read_text()
    q = (
        spark.readStream.format("logkeel")
        .options(**options)
        .option("subscribe", args["topic"])
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", args["checkpoint"])
        .trigger(processingTime="1 second")
        .start()
    )
    deadline = time.monotonic() + 180
    while len(seen) < 2 * args["count"] and q.exception() is None and time.monotonic() < deadline:
        q.awaitTermination(1)
    q.stop()
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    df = spark.read.format("logkeel").options(**options).option("subscribe", args["topic"]).load()
    df.explain(True)  # the plan as a user prints it: must not show the password
    return {"streamed": seen}


JOBS: dict[str, Callable[[SparkSession, Args], Args]] = {
    "batch": batch,
    "stream": stream,
    "secure": secure,
}


def main() -> None:
    """argv[1]: {"master", "log_level", "jobs": [[name, args], ...]}, run in one application."""
    plan = json.loads(sys.argv[1])
    spark = session(plan)
    try:
        results = [JOBS[name](spark, args) for name, args in plan["jobs"]]
        executor_count = executors(spark)
    finally:
        spark.stop()
    print("RESULT " + json.dumps({"jobs": results, "executors": executor_count}), flush=True)


if __name__ == "__main__":
    main()
