"""Batch load: Parquet files into a topic, with one Spark job.

With a broker running (`scripts/serve`), one command:

    .venv/bin/python examples/batch_load.py --input /tmp/events-parquet --topic events-copy

reads every row of the Parquet dataset and produces it to `events-copy` (created with
`--partitions` partitions if it does not exist). The value is the row as JSON, the key the
`--key-column` (records with the same key land in the same partition, as with the Java client).
Each Spark task writes through its own idempotent producer and waits for every acknowledgement.

Without `--input`, it loads a generated demo dataset of `--demo-rows` rows instead.
"""

from __future__ import annotations

import argparse

from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F

from logkeel.spark.session import spark_session


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="kafka.bootstrap.servers")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--input", help="Parquet file or directory (default: a demo dataset)")
    parser.add_argument("--key-column", help="column to use as the record key")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of a new topic")
    parser.add_argument("--demo-rows", type=int, default=10_000)
    parser.add_argument("--master", help="Spark master (default local[*])")
    args = parser.parse_args()

    spark = spark_session(args.master, "logkeel batch load")
    spark.sparkContext.setLogLevel("WARN")
    if args.input:
        rows = spark.read.parquet(args.input)
    else:
        rows = spark.range(args.demo_rows).select(
            F.col("id"),
            F.concat(F.lit("customer-"), (F.col("id") % 100).cast("string")).alias("customer"),
            (F.rand(seed=7) * 100).alias("amount"),
        )
        args.key_column = args.key_column or "customer"

    key = F.col(args.key_column).cast("string") if args.key_column else F.lit(None).cast("string")
    records = rows.select(key.alias("key"), F.to_json(F.struct(*rows.columns)).alias("value"))
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    (
        records.write.format("logkeel")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.topic)
        .mode("append")
        .save()
    )
    print(f"loaded {args.input or 'the demo dataset'} into topic {args.topic}")
    spark.stop()


if __name__ == "__main__":
    main()
