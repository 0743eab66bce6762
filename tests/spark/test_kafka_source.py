"""`spark.read.format("logkeel")` against a real `logkeel serve`, checked against what a plain
confluent-kafka producer was told it wrote."""

from __future__ import annotations

import datetime as dt
import json
import warnings

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tests.spark.kafka_util import BASE_TS, create_topic, message, produce, unique

N = 600
PARTITIONS = 3


@pytest.fixture(scope="module")
def topic(broker):
    """A topic with N records, record i in partition i % 3; and where each one landed."""
    name = create_topic(broker.bootstrap, unique("src"), PARTITIONS)
    where = produce(broker.bootstrap, name, 0, N, PARTITIONS)
    return name, where


def reader(spark, broker, **options):
    r = spark.read.format("logkeel").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def ids(rows) -> list[int]:
    return sorted(int(bytes(r["value"]).split(b"-")[1]) for r in rows)


def test_every_column_matches_what_was_produced(spark, broker, topic):
    name, where = topic
    rows = reader(spark, broker, subscribe=name, includeHeaders="true").collect()
    assert len(rows) == N
    assert {(r["partition"], r["offset"]) for r in rows} == set(where)
    for r in rows:
        m = message(where[(r["partition"], r["offset"])])
        assert r["topic"] == name
        assert r["key"] == m["key"] and bytes(r["value"]) == m["value"]
        assert r["timestamp"] == dt.datetime.fromtimestamp(m["timestamp"] / 1000)
        assert r["timestampType"] == 0  # CreateTime
        expected = [(k, v) for k, v in m["headers"]] if m["headers"] else None
        got = (
            [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]]
            if r["headers"]
            else None
        )
        assert got == expected


def test_schema_is_the_kafka_connectors(spark, broker, topic):
    name, _ = topic
    df = reader(spark, broker, subscribe=name)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
    ]
    with_headers = reader(spark, broker, subscribe=name, includeHeaders="true")
    assert (
        with_headers.schema["headers"].dataType.simpleString()
        == "array<struct<key:string,value:binary>>"
    )


def test_subscribe_pattern_and_assign(spark, broker, topic):
    name, _ = topic
    other = create_topic(broker.bootstrap, name + "-other", 1)
    produce(broker.bootstrap, other, 0, 10, 1)
    both = reader(spark, broker, subscribe=f"{name}, {other}")
    assert both.count() == N + 10
    pattern = reader(spark, broker, subscribePattern=name.replace("-", ".") + ".*")
    assert pattern.count() == N + 10
    exact = reader(spark, broker, subscribePattern=name)  # matched against the whole name
    assert exact.count() == N
    assigned = reader(spark, broker, assign=json.dumps({name: [0, 2], other: [0]}))
    assert {
        (r["topic"], r["partition"])
        for r in assigned.select("topic", "partition").distinct().collect()
    } == {
        (name, 0),
        (name, 2),
        (other, 0),
    }
    assert assigned.count() == 2 * N // PARTITIONS + 10


def test_starting_and_ending_offsets(spark, broker, topic):
    name, where = topic
    per = N // PARTITIONS
    df = reader(
        spark,
        broker,
        subscribe=name,
        startingOffsets=json.dumps({name: {"0": 50, "1": -2}}),  # partition 2 left out: earliest
        endingOffsets=json.dumps({name: {"0": 60, "1": -1, "2": 7}}),
    )
    got = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(50, 60)] + [(1, o) for o in range(per)] + [
        (2, o) for o in range(7)
    ]
    explicit = reader(
        spark, broker, subscribe=name, startingOffsets="earliest", endingOffsets="latest"
    )
    assert explicit.count() == N


def test_timestamps_select_offsets(spark, broker, topic):
    name, where = topic
    # Record i has timestamp BASE_TS + i; partition 0 holds i = 0, 3, 6, ...
    df = reader(
        spark,
        broker,
        subscribe=name,
        startingTimestamp=str(BASE_TS + 300),
        endingTimestamp=str(BASE_TS + 330),
    )
    assert ids(df.collect()) == list(range(300, 330))
    past_the_end = json.dumps({name: {"0": BASE_TS + 597, "1": BASE_TS, "2": BASE_TS + 10**9}})
    # Spark's default startingOffsetsByTimestampStrategy, error: partition 2 has no record that
    # late, and the query says so instead of starting somewhere.
    with pytest.raises(Exception, match=rf"No offset matched .* {name}-2 and timestamp"):
        reader(spark, broker, subscribe=name, startingOffsetsByTimestamp=past_the_end).collect()
    by_partition = reader(
        spark,
        broker,
        subscribe=name,
        startingOffsetsByTimestamp=past_the_end,
        startingOffsetsByTimestampStrategy="latest",
    )
    got = ids(by_partition.collect())
    assert got == sorted([597, *range(1, N, 3)])  # partition 2: none at or after: latest
    with pytest.raises(Exception, match="must be one of error, latest"):
        reader(spark, broker, subscribe=name, startingOffsetsByTimestampStrategy="earliest").count()


def test_min_partitions_splits_ranges_without_changing_rows(spark, broker, topic):
    name, _ = topic
    df = reader(spark, broker, subscribe=name, minPartitions="10")
    assert df.rdd.getNumPartitions() == 9  # as Spark: 3 equal ranges, round(10 / 3) pieces each
    assert ids(df.collect()) == list(range(N))
    plain = reader(spark, broker, subscribe=name)
    assert plain.rdd.getNumPartitions() == PARTITIONS


def test_records_travel_as_arrow_batches(spark, broker, topic):
    """The reader yields pyarrow RecordBatches: checked on the executor side itself."""
    from logkeel.spark.kafka_source import KafkaBatchReader

    name, _ = topic
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": name}
    df = reader(spark, broker, subscribe=name)
    r = KafkaBatchReader(options, df.schema)
    [part, *_] = r.partitions()
    batches = list(r.read(part))
    import pyarrow as pa

    assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
    assert sum(b.num_rows for b in batches) == part.range.size


def test_fail_on_data_loss(spark, broker):
    name = create_topic(broker.bootstrap, unique("loss"), 1)
    produce(broker.bootstrap, name, 0, 50, 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.delete_records([TopicPartition(name, 0, 20)]).values():
        f.result(30)
    start = json.dumps({name: {"0": 5}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, broker, subscribe=name, startingOffsets=start).collect()
    tolerant = reader(spark, broker, subscribe=name, startingOffsets=start, failOnDataLoss="false")
    assert [r["offset"] for r in tolerant.select("offset").collect()] == list(range(20, 50))


def test_log_append_time_topic(spark, broker):
    name = create_topic(
        broker.bootstrap, unique("lat"), 1, {"message.timestamp.type": "LogAppendTime"}
    )
    produce(broker.bootstrap, name, 0, 5, 1)
    rows = reader(spark, broker, subscribe=name).collect()
    assert [r["timestampType"] for r in rows] == [1] * 5
    assert all(r["timestamp"] > dt.datetime(2020, 1, 1) for r in rows)  # the broker's clock


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "subscribe"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "only one"),
        ({"assign": "[1,2]"}, "assign"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "latest"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "earliest"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "a", "fetchOffset.numRetries": "5"}, "fetchOffset.numRetries.*retries"),
        ({"subscribe": "a", "maxRecordsPerPartition": "10"}, "maxRecordsPerPartition.*not built"),
        ({"subscribe": "a", "kafka.sasl.jaas.config": "Krb5LoginModule required;"}, "login module"),
    ],
)
def test_bad_options_are_refused(spark, broker, options, message):
    with pytest.raises(Exception, match=message):
        reader(spark, broker, **options).collect()


def test_missing_bootstrap_servers(spark):
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        spark.read.format("logkeel").option("subscribe", "a").load().collect()


def test_segment_files_the_broker_wrote_hold_the_same_records(spark, broker, topic):
    """The segment reader over `logkeel serve`'s own log dir agrees with the Kafka source."""
    name, where = topic
    via_kafka = reader(spark, broker, subscribe=name).select("partition", "offset", "key", "value")
    via_files = (
        spark.read.format("logkeel-segments")
        .option("subscribe", name)
        .load(str(broker.log_dirs[0]))
    )
    assert via_files.where("corrupt").count() == 0
    assert sorted(via_files.select("partition", "offset", "key", "value").collect()) == sorted(
        via_kafka.collect()
    )
    # The test producer is idempotent: its batches carry a producer id and sequences.
    meta = via_files.select("producerId", "baseSequence").distinct().collect()
    assert all(r["producerId"] >= 0 and r["baseSequence"] >= 0 for r in meta)


def test_python_udfs_take_sparks_arrow_path(spark, broker, topic):
    """With pandas and pyarrow installed (the `spark` extra), a Python UDF over the source's rows
    is Arrow-optimized instead of falling back to pickled rows with a warning."""
    from pyspark.sql import functions as F
    from pyspark.util import PythonEvalType

    name, _ = topic
    assert spark.conf.get("spark.sql.execution.pythonUDF.arrow.enabled") == "true"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        upper = F.udf(lambda v: bytes(v).decode().upper(), "string")
    assert [str(w.message) for w in caught if "Arrow" in str(w.message)] == []
    assert upper.evalType == PythonEvalType.SQL_ARROW_BATCHED_UDF
    rows = reader(spark, broker, subscribe=name).select(upper("value").alias("v")).collect()
    assert sorted(r["v"] for r in rows) == sorted(f"VALUE-{i}" for i in range(N))
