"""`df.write.format("logkeel")` into a real `logkeel serve`, read back with a plain consumer."""

from __future__ import annotations

import pytest
from kafka.partitioner.default import murmur2
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from tests.spark.kafka_util import consume_all, create_topic, unique

HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("key", StringType()),
        StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
        StructField("headers", HEADERS),
        StructField("ignored", StringType()),
    ]
)


def writer(df, broker, **options):
    w = (
        df.write.format("logkeel")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .mode("append")
    )
    for k, v in options.items():
        w = w.option(k, v)
    return w


def test_every_column_reaches_the_topic(spark, broker):
    topic = create_topic(broker.bootstrap, unique("sink"), 3)
    rows = [
        (
            topic,
            f"k{i}" if i % 4 else None,
            b"v%d" % i if i % 7 else None,
            i % 3,
            [("h", b"%d" % i), ("empty", None)] if i % 2 else None,
            "x",
        )
        for i in range(300)
    ]
    writer(spark.createDataFrame(rows, SCHEMA).repartition(4), broker).save()
    got = consume_all(broker.bootstrap, topic, 3)
    assert len(got) == 300
    by_value = {}
    for m in got:
        by_value.setdefault(m.value(), []).append(m)
    for _, key, value, partition, headers, _ in rows:
        if value is None:
            continue
        [m] = by_value[value]
        assert m.partition() == partition
        assert m.key() == (key.encode() if key is not None else None)
        assert (m.headers() or None) == headers
    assert len(by_value[None]) == len([r for r in rows if r[2] is None])  # tombstones


def test_topic_option_overrides_the_topic_column(spark, broker):
    topic = create_topic(broker.bootstrap, unique("sink-opt"), 1)
    df = spark.createDataFrame([("elsewhere", "a"), (None, "b")], "topic string, value string")
    writer(df, broker, topic=topic).save()
    assert sorted(m.value() for m in consume_all(broker.bootstrap, topic, 1)) == [b"a", b"b"]


def test_keys_are_partitioned_like_the_java_client(spark, broker):
    topic = create_topic(broker.bootstrap, unique("sink-keys"), 5)
    df = spark.createDataFrame(
        [(f"key-{i}", f"v{i}") for i in range(200)], "key string, value string"
    )
    writer(df, broker, topic=topic).save()
    got = consume_all(broker.bootstrap, topic, 5)
    assert len(got) == 200
    for m in got:
        assert m.partition() == (murmur2(m.key()) & 0x7FFFFFFF) % 5


def test_sink_writes_through_an_idempotent_producer(spark, broker):
    topic = create_topic(broker.bootstrap, unique("sink-idem"), 2)
    df = spark.range(1000).selectExpr("cast(id as string) as value")
    writer(df, broker, topic=topic).save()
    assert len(consume_all(broker.bootstrap, topic, 2)) == 1000
    batches = (
        spark.read.format("logkeel-segments")
        .option("subscribe", topic)
        .load(str(broker.log_dirs[0]))
        .select("producerId", "baseSequence")
        .collect()
    )
    assert batches and all(r["producerId"] >= 0 and r["baseSequence"] >= 0 for r in batches)


@pytest.mark.parametrize(
    ("ddl", "rows", "options", "message"),
    [
        ("key string", [("a",)], {"topic": "t"}, "'value' not found"),
        ("value int", [(1,)], {"topic": "t"}, "string or binary"),
        ("value string", [("a",)], {}, "topic option required"),
        ("topic string, value string", [(None, "a")], {}, "null topic"),
        ("value string, partition string", [("a", "0")], {"topic": "t"}, "partition attribute"),
        ("value string", [("a",)], {"topic": "t", "kafka.value.serializer": "x"}, "not supported"),
    ],
)
def test_bad_input_is_refused(spark, broker, ddl, rows, options, message):
    df = spark.createDataFrame(rows, ddl)
    with pytest.raises(Exception, match=message):
        writer(df, broker, **options).save()


def test_overwrite_mode_is_refused(spark, broker):
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="Overwrite"):
        writer(df, broker, topic="t").mode("overwrite").save()
