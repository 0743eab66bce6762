"""Streaming ETL: a topic into Parquet, with Spark Structured Streaming.

With a broker running (`scripts/serve`) and some records in a topic, one command:

    .venv/bin/python examples/streaming_etl.py --topic events --output /tmp/events-parquet

reads `events` from the beginning, decodes each value as UTF-8 text and writes Parquet files
partitioned by day, then keeps following the topic (Ctrl-C stops it). `--once` processes what is
there now and exits. The checkpoint (default: `<output>/_checkpoint`) makes a restarted run carry
on where the last one stopped: Spark's file sink plus the checkpointed offsets write every record
exactly once, across restarts.

The job is plain Spark: replace `format("logkeel")` with `format("kafka")` (and add the
spark-sql-kafka jar) and it runs unchanged against Spark's built-in connector.
"""

from __future__ import annotations

import argparse

from pyspark.sql import functions as F

from logkeel.spark.session import spark_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="kafka.bootstrap.servers")
    parser.add_argument("--topic", required=True, help="topic(s) to read, comma-separated")
    parser.add_argument("--output", required=True, help="directory for the Parquet files")
    parser.add_argument("--checkpoint", help="checkpoint directory (default <output>/_checkpoint)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    parser.add_argument("--once", action="store_true", help="process what is there now, then exit")
    parser.add_argument("--master", help="Spark master (default local[*])")
    args = parser.parse_args()

    spark = spark_session(
        args.master, "logkeel streaming ETL", {"spark.sql.shuffle.partitions": "4"}
    )
    spark.sparkContext.setLogLevel("WARN")

    records = (
        spark.readStream.format("logkeel")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .option("includeHeaders", "true")
        .load()
    )
    rows = records.select(
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp"),
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        F.col("headers"),
        F.to_date("timestamp").alias("date"),
    )
    writer = (
        rows.writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint or f"{args.output.rstrip('/')}/_checkpoint")
        .partitionBy("date")
    )
    writer = (
        writer.trigger(availableNow=True)
        if args.once
        else writer.trigger(processingTime="5 seconds")
    )
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    for progress in query.recentProgress:
        print(f"batch {progress['batchId']}: {progress['numInputRows']} records")
    spark.stop()


if __name__ == "__main__":
    main()
