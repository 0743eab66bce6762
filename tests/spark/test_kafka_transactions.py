"""The `logkeel` format and Kafka transactions, with a real local Spark and a real broker: the
source under ``kafka.isolation.level=read_committed`` (batch and streaming) and the sink writing
one transaction per task (``transactionalIdPrefix``)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP
from pyspark.sql import functions as F

from tests.spark.kafka_util import create_topic, unique
from tests.waiting import wait_until

TIMEOUT = 60.0
# Python workers send results in 64 KiB writes: long values get the first rows past the gate
# row's UDF and into the sink while it waits.
PAD = "x" * 2000


def txn_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 1})
    p.init_transactions(TIMEOUT)
    return p


def send(p: Producer, topic: str, *values: str) -> None:
    for v in values:
        p.produce(topic, v.encode(), partition=0)
    assert p.flush(TIMEOUT) == 0


def values_read(
    bootstrap: str, topic: str, isolation: str, wait_for: int = 0, partitions: int = 1
) -> list[bytes]:
    """What a plain consumer at ``isolation`` reads of ``topic`` up to its end (waiting up to
    TIMEOUT for at least ``wait_for`` records)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("check"),
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    c.assign([KafkaTP(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + TIMEOUT
    try:
        while (len(eof) < partitions or len(out) < wait_for) and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error():
                    eof.add(m.partition())
                    continue
                eof.discard(m.partition())
                out.append(m.value())
    finally:
        c.close()
    return out


# -- source ---------------------------------------------------------------------------------


@pytest.fixture
def mixed_topic(broker):
    """One partition: p0..p2 plain, an aborted transaction (ab1, ab2), q0 q1 plain, then a
    transaction left open ("open") and a plain record after it ("after"). Yields the topic and
    the open transaction's producer."""
    topic = create_topic(broker.bootstrap, unique("rc"), 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    txn = txn_producer(broker.bootstrap, unique("rc-txn"))
    send(plain, topic, "p0", "p1", "p2")
    txn.begin_transaction()
    send(txn, topic, "ab1", "ab2")
    txn.abort_transaction(TIMEOUT)
    send(plain, topic, "q0", "q1")
    txn.begin_transaction()
    send(txn, topic, "open")
    send(plain, topic, "after")
    yield topic, txn
    txn.abort_transaction(TIMEOUT)


def batch_read(spark, broker, topic: str, **options: str) -> list[tuple[int, bytes]]:
    r = (
        spark.read.format("logkeel")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
    )
    for k, v in options.items():
        r = r.option(k, v)
    return sorted((row["offset"], bytes(row["value"])) for row in r.load().collect())


def test_batch_read_committed_skips_aborted_and_stops_at_the_open_transaction(
    spark, broker, mixed_topic
):
    topic, _ = mixed_topic
    everything = batch_read(spark, broker, topic)
    # Spark's default, read_uncommitted: every data record (the abort marker at 5 is not one).
    assert [v for _, v in everything] == [
        b"p0", b"p1", b"p2", b"ab1", b"ab2", b"q0", b"q1", b"open", b"after"
    ]  # fmt: skip
    assert 5 not in {o for o, _ in everything}
    committed = [(0, b"p0"), (1, b"p1"), (2, b"p2"), (6, b"q0"), (7, b"q1")]
    assert batch_read(spark, broker, topic, **{"kafka.isolation.level": "read_committed"}) == (
        committed
    )
    # Ranges cut inside the aborted records and the marker read the same.
    assert (
        batch_read(
            spark, broker, topic, minPartitions="6", **{"kafka.isolation.level": "read_committed"}
        )
        == committed
    )
    with pytest.raises(Exception, match="isolation.level"):
        batch_read(spark, broker, topic, **{"kafka.isolation.level": "read_most"})


def stream_from(spark, broker, topic: str, per_trigger: int, **options: str):
    r = (
        spark.readStream.format("logkeel")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_streaming_read_committed_waits_for_the_open_transaction(
    spark, broker, mixed_topic, tmp_path
):
    topic, txn = mixed_topic
    batches: list[list[tuple[int, bytes]]] = []

    def collect(df, _batch_id):
        batches.append(sorted((r["offset"], bytes(r["value"])) for r in df.collect()))

    def run() -> list[tuple[int, bytes]]:
        before = len(batches)
        q = (
            stream_from(spark, broker, topic, 3, **{"kafka.isolation.level": "read_committed"})
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None
        return [row for b in batches[before:] for row in b]

    assert run() == [(0, b"p0"), (1, b"p1"), (2, b"p2"), (6, b"q0"), (7, b"q1")]
    txn.commit_transaction(TIMEOUT)
    txn.begin_transaction()  # for the fixture's abort
    # Restarted from its checkpoint: the rest, now committed (the commit marker takes 10).
    assert run() == [(8, b"open"), (9, b"after")]


# -- sink -----------------------------------------------------------------------------------


def gated_write(spark, broker, topic: str, gate: Path, prefix: str, rows: int, stop_at: int):
    """``df.write`` of ``rows`` values (one Spark task) that, at row ``stop_at``, waits until
    ``gate`` holds "go" (then finishes) or "fail" (then the task fails)."""
    gate_path = str(gate)

    def value(i: int) -> str:
        if i == stop_at:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                order = Path(gate_path).read_text() if os.path.exists(gate_path) else ""
                if order == "fail":
                    raise RuntimeError("the test failed this task")
                if order == "go":
                    break
                time.sleep(0.05)
        return f"{prefix}-{i}-{PAD}"

    df = spark.range(0, rows, 1, 1).select(F.udf(value, "string")("id").alias("value"))
    return (
        df.write.format("logkeel")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("transactionalIdPrefix", unique("sink"))
        .option("kafka.linger.ms", "1")
        .mode("append")
    )


def test_transactional_sink_is_visible_only_after_the_task_commits(spark, broker, tmp_path):
    topic = create_topic(broker.bootstrap, unique("txsink"), 2)

    def ours(run: str, isolation: str) -> list[bytes]:
        values = values_read(broker.bootstrap, topic, isolation, 0, 2)
        return [v for v in values if v.startswith(run.encode())]

    def observe(run: str, gate: Path, order: str, seen: dict[str, int]) -> None:
        """While the task waits at its gate row: its records are in the log, in its open
        transaction (read_uncommitted sees them, read_committed does not)."""
        try:
            wait_until(
                lambda: bool(ours(run, "read_uncommitted")), TIMEOUT, f"records of the {run} task"
            )
            seen["uncommitted"] = len(ours(run, "read_uncommitted"))
            seen["committed"] = len(ours(run, "read_committed"))
        finally:
            gate.write_text(order)

    # Small Arrow batches, so the first rows reach the producer while the gate holds the rest.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        for run, order in (("ok", "go"), ("bad", "fail")):
            gate = tmp_path / f"gate-{run}"
            seen: dict[str, int] = {}
            # Spark jobs run from the main thread (the data source is registered for it).
            observer = threading.Thread(target=observe, args=(run, gate, order, seen))
            observer.start()
            writer = gated_write(spark, broker, topic, gate, run, rows=300, stop_at=250)
            try:
                if order == "fail":
                    with pytest.raises(Exception, match="the test failed this task"):
                        writer.save()
                else:
                    writer.save()
            finally:
                observer.join(TIMEOUT * 2)
            assert seen["uncommitted"] > 0 and seen["committed"] == 0, seen
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    # The failed task's input ended as if complete (Spark does that when the input fails
    # upstream) and it kept its transaction open; the job's abort aborted it: read_committed
    # readers go on past it at once, without waiting for the transaction timeout.
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for partition in (0, 1):
        plain.produce(topic, b"tail", partition=partition)
    assert plain.flush(TIMEOUT) == 0
    committed = values_read(broker.bootstrap, topic, "read_committed", 302, 2)
    # The committed task's records, each once; none of the failed task's.
    assert sorted(committed) == sorted(
        [f"ok-{i}-{PAD}".encode() for i in range(300)] + [b"tail"] * 2
    )
    assert ours("bad", "read_uncommitted")


def pipeline_topics(broker, name: str) -> tuple[str, str, Producer]:
    """An input topic holding m0..m199 (two partitions), an empty output topic, a producer."""
    source = create_topic(broker.bootstrap, unique(f"{name}-in"), 2)
    target = create_topic(broker.bootstrap, unique(f"{name}-out"), 2)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(200):
        plain.produce(source, b"m%d" % i, partition=i % 2)
    assert plain.flush(TIMEOUT) == 0
    return source, target, plain


def test_streaming_transactional_sink_commits_each_micro_batch(spark, broker, tmp_path):
    source, target, _ = pipeline_topics(broker, "txs")
    q = (
        stream_from(spark, broker, source, 50)
        .selectExpr("upper(cast(value as string)) as value")
        .writeStream.format("logkeel")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", target)
        .option("transactionalIdPrefix", unique("stream"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None
    assert len(q.recentProgress) >= 4  # several micro-batches, one transaction per task each
    got = values_read(broker.bootstrap, target, "read_committed", 200, 2)
    assert sorted(got) == sorted(b"M%d" % i for i in range(200))


def test_transactional_id_option_is_refused(spark, broker):
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="transactionalIdPrefix"):
        (
            df.write.format("logkeel")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", "never")
            .option("kafka.transactional.id", "one-for-all")
            .mode("append")
            .save()
        )


def test_streaming_micro_batch_that_failed_is_written_once_after_restart(spark, broker, tmp_path):
    """A task of a micro-batch fails (the other one has written its rows): the query stops, the
    micro-batch's transactions are aborted (read_committed readers go on past them at once);
    the query restarted from its checkpoint writes that micro-batch again, and the output holds
    every input row exactly once."""
    source, target, plain = pipeline_topics(broker, "txf")
    flag = tmp_path / "fail"
    flag_path = str(flag)
    prefix = unique("restart")

    bootstrap = broker.bootstrap

    def transform(value: bytes) -> str:
        if value == b"m151" and os.path.exists(flag_path):
            # Fail once the other task of this micro-batch (m150 is in it too) has written.
            deadline = time.monotonic() + TIMEOUT
            while b"M150" not in values_read(bootstrap, target, "read_uncommitted", 0, 2):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            raise RuntimeError("the test failed this task")
        return value.decode().upper()

    def run() -> BaseException | None:
        q = (
            stream_from(spark, broker, source, 50)
            .select(F.udf(transform, "string")("value").alias("value"))
            .writeStream.format("logkeel")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", target)
            .option("transactionalIdPrefix", prefix)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(Exception):
            q.awaitTermination(180)
        assert not q.isActive
        return q.exception()

    flag.write_text("fail")
    assert run() is not None
    for partition in (0, 1):
        plain.produce(target, b"tail", partition=partition)
    assert plain.flush(TIMEOUT) == 0
    first = values_read(broker.bootstrap, target, "read_committed", 2, 2)
    assert first.count(b"tail") == 2  # nothing of the failed micro-batch holds readers back
    assert b"M151" not in first and len(set(first)) == len(first) - 1
    # The failed micro-batch's other task did write: its rows are there, aborted.
    assert b"M150" in values_read(broker.bootstrap, target, "read_uncommitted", 2, 2)
    assert b"M150" not in first
    flag.unlink()
    assert run() is None
    got = values_read(broker.bootstrap, target, "read_committed", 202, 2)
    assert sorted(v for v in got if v != b"tail") == sorted(b"M%d" % i for i in range(200))
