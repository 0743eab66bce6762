"""`spark.readStream` / `writeStream` `.format("logkeel")`: micro-batches against a real broker,
and a query restarted from its checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.spark.kafka_util import consume_all, create_topic, produce, unique
from tests.waiting import wait_until


def stream(spark, broker, **options):
    r = spark.readStream.format("logkeel").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_restart_from_checkpoint_neither_skips_nor_repeats(spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap, unique("eo"), 3)
    where = produce(broker.bootstrap, topic, 0, 900, 3)
    checkpoint = tmp_path / "checkpoint"
    out = tmp_path / "out"
    seen: dict[int, list[tuple[int, int]]] = {}  # batch id -> (partition, offset) read, last run

    def sink(df, batch_id):
        # Idempotent per batch id, like any sink that exactly-once needs: a re-run overwrites.
        df = df.persist()  # read the micro-batch from the broker once
        df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))
        seen[batch_id] = sorted(
            (r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()
        )
        df.unpersist()

    def run():
        q = (
            stream(
                spark,
                broker,
                subscribe=topic,
                startingOffsets="earliest",
                maxOffsetsPerTrigger="200",
            )
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None
        return [len(seen[p["batchId"]]) for p in q.recentProgress if p["batchId"] in seen]

    first = run()
    assert sum(first) == 900 and max(first) <= 200 and len(first) >= 5  # admission control
    last_batch = max(seen)
    before_crash = list(seen[last_batch])
    # A crash after Spark logged the last batch's offsets but before it committed the batch.
    commit = checkpoint / "commits" / str(last_batch)
    assert commit.exists()
    commit.unlink()
    (checkpoint / "commits" / f".{last_batch}.crc").unlink(missing_ok=True)

    where.update(produce(broker.bootstrap, topic, 900, 600, 3))
    second = run()
    assert seen[last_batch] == before_crash  # the re-run read exactly the same records
    assert sum(second) == len(before_crash) + 600

    rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    got = sorted((r["partition"], r["offset"]) for r in rows)
    assert got == sorted(where)  # every record exactly once
    assert all(
        bytes(r["value"]) == b"value-%d" % where[(r["partition"], r["offset"])] for r in rows
    )


def test_latest_by_default_and_new_partitions_from_earliest(spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap, unique("latest"), 2)
    produce(broker.bootstrap, topic, 0, 50, 2)  # before the query: not read
    table = unique("mem").replace("-", "_")
    q = (
        stream(spark, broker, subscribe=topic, includeHeaders="true")
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(
            lambda: q.lastProgress is not None, 60.0, "q.lastProgress is not None"
        )  # the start offsets are fixed now
        produce(broker.bootstrap, topic, 50, 40, 2)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_partitions([NewPartitions(topic, 3)]).values():
            f.result(30)
        produce(broker.bootstrap, topic, 90, 30, 3)  # partition 2 is new
        q.processAllAvailable()
        wait_until(
            lambda: spark.table(table).count() >= 70, 60.0, "spark.table(table).count() >= 70"
        )
        rows = spark.table(table).collect()
    finally:
        q.stop()
    values = sorted(int(bytes(r["value"]).split(b"-")[1]) for r in rows)
    assert values == list(range(50, 120))
    new = sorted(r["offset"] for r in rows if r["partition"] == 2)
    assert new == list(range(10))  # a partition added mid-query is read from its start
    assert all(
        (r["headers"] is not None) == (int(bytes(r["value"]).split(b"-")[1]) % 2 == 1) for r in rows
    )


def test_topic_to_topic_through_the_streaming_sink(spark, broker, tmp_path):
    source = create_topic(broker.bootstrap, unique("pipe-in"), 2)
    target = create_topic(broker.bootstrap, unique("pipe-out"), 2)
    produce(broker.bootstrap, source, 0, 500, 2)
    q = (
        stream(spark, broker, subscribe=source, startingOffsets="earliest", includeHeaders="true")
        .selectExpr("key", "upper(cast(value as string)) as value", "headers", "partition")
        .writeStream.format("logkeel")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(180), "the availableNow query did not end within 180 s"
    assert q.exception() is None
    got = consume_all(broker.bootstrap, target, 2)
    assert sorted(m.value() for m in got) == sorted(b"VALUE-%d" % i for i in range(500))
    for m in got:
        i = int(m.value().split(b"-")[1])
        assert m.partition() == i % 2  # the partition column was honoured
        assert (m.headers() is not None) == (i % 2 == 1)


def test_batch_only_options_are_refused_in_streaming(spark, broker, tmp_path):
    df = stream(spark, broker, subscribe="x", endingOffsets="latest")
    with pytest.raises(Exception, match="endingOffsets"):
        q = (
            df.writeStream.format("memory")
            .queryName("never")
            .option("checkpointLocation", str(Path(tmp_path) / "ck"))
            .start()
        )
        q.awaitTermination(60)
        raise AssertionError(q.exception())


def _memory_query(spark, broker, tmp_path, topic, **options):
    table = unique("mem").replace("-", "_")
    q = (
        stream(spark, broker, subscribe=topic, **options)
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    return q, table


def test_min_offsets_per_trigger_waits_for_enough_records(spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap, unique("min"), 2)
    # Progress for triggers that ran no batch, so that the test can count the triggers.
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    q, table = _memory_query(
        spark, broker, tmp_path, topic, minOffsetsPerTrigger="100", maxTriggerDelay="1h"
    )
    try:
        wait_until(lambda: q.lastProgress is not None, 60, "the query's first trigger")
        produce(broker.bootstrap, topic, 0, 60, 2)
        seen = len(q.recentProgress)
        wait_until(lambda: len(q.recentProgress) >= seen + 5, 60, "five more triggers")
        assert spark.table(table).count() == 0  # 60 < 100: every trigger waited
        produce(broker.bootstrap, topic, 60, 50, 2)
        wait_until(lambda: spark.table(table).count() == 110, 60, "the 110 records")
        assert any(p["numInputRows"] == 110 for p in q.recentProgress)  # in one batch
    finally:
        q.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")


def test_max_trigger_delay_runs_a_batch_with_fewer_records(spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap, unique("delay"), 2)
    started = time.monotonic()
    q, table = _memory_query(
        spark, broker, tmp_path, topic, minOffsetsPerTrigger="1000", maxTriggerDelay="2s"
    )
    try:
        wait_until(lambda: q.lastProgress is not None, 60, "the query's first trigger")
        produce(broker.bootstrap, topic, 0, 30, 2)
        wait_until(lambda: spark.table(table).count() == 30, 60, "the 30 records")
        # The first trigger ran at or after the start; the next batch waited 2 s from it.
        assert time.monotonic() - started >= 2.0
    finally:
        q.stop()


def test_min_offsets_per_trigger_does_not_hold_back_available_now(spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap, unique("minnow"), 2)
    produce(broker.bootstrap, topic, 0, 40, 2)
    table = unique("mem").replace("-", "_")
    q = (
        stream(spark, broker, subscribe=topic, startingOffsets="earliest",
               minOffsetsPerTrigger="1000", maxTriggerDelay="1h")
        .writeStream.format("memory").queryName(table)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    q.awaitTermination(120)
    assert q.exception() is None
    assert spark.table(table).count() == 40
