"""`logkeel-segments` on a real local Spark over real log dirs."""

from __future__ import annotations

import datetime as dt

import pytest

from logkeel.spark.segments import CorruptSegmentError
from tests.spark.logdirs import (
    RECORDS_PER_BATCH,
    corrupt_batch,
    record,
    remove_segment,
    segment_holding,
    write_partition,
)


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory):
    """Two log dirs: topic `orders` (2 partitions) on one, `orders` 2 and `audit.log` 0 on the
    other; epochs change every 10 batches."""
    root = tmp_path_factory.mktemp("segments")
    a, b = root / "broker-a", root / "broker-b"
    epochs = [i // 10 for i in range(30)]
    written = [
        write_partition(a, "orders", 0, 30, epochs=epochs),
        write_partition(a, "orders", 1, 20, epochs=epochs),
        write_partition(b, "orders", 2, 25, epochs=epochs),
        write_partition(b, "audit.log", 0, 5),
    ]
    return a, b, written


def rows_by_partition(df):
    out = {}
    for r in df.collect():
        out.setdefault((r["topic"], r["partition"]), []).append(r)
    return out


def test_reads_every_record_of_several_log_dirs(spark, two_brokers):
    a, b, written = two_brokers
    df = spark.read.format("logkeel-segments").load([str(a), str(b)])
    got = rows_by_partition(df)
    assert set(got) == {(w.tp.topic, w.tp.partition) for w in written}
    for w in written:
        rows = sorted(got[(w.tp.topic, w.tp.partition)], key=lambda r: r["offset"])
        assert [r["offset"] for r in rows] == list(range(w.end_offset))
        for r in rows:
            ts, key, value, _ = record(r["offset"])
            assert (bytes(r["key"]), bytes(r["value"])) == (key, value)
            assert r["timestamp"] == dt.datetime.fromtimestamp(ts / 1000)  # session time zone
            assert r["timestampType"] == 0
            epoch = (r["offset"] // RECORDS_PER_BATCH) // 10 if w.tp.topic == "orders" else 0
            assert r["leaderEpoch"] == epoch
            assert r["baseOffset"] == r["offset"] - r["offset"] % RECORDS_PER_BATCH
            assert r["lastOffset"] == r["baseOffset"] + RECORDS_PER_BATCH - 1
            assert r["logDir"] == str(w.log_dir)
            assert r["segment"].startswith(str(w.partition_dir) + "/")
            assert (r["crcValid"], r["corrupt"], r["corruptBytes"], r["corruptReason"]) == (
                True,
                False,
                None,
                None,
            )
            assert (r["producerId"], r["isTransactional"], r["isControl"]) == (-1, False, False)
            assert r["compression"] == "none"


def test_schema_has_kafka_columns_first_and_headers_on_request(spark, two_brokers):
    a, _, _ = two_brokers
    plain = spark.read.format("logkeel-segments").load(str(a))
    assert plain.columns[:7] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert "headers" not in plain.columns
    with_headers = (
        spark.read.format("logkeel-segments").option("includeHeaders", "true").load(str(a))
    )
    assert with_headers.columns[7] == "headers"
    row = with_headers.where("topic = 'orders' and partition = 1 and offset = 17").first()
    assert [(h["key"], bytes(h["value"])) for h in row["headers"]] == [("n", b"17")]


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("subscribe", "orders", {("orders", 0), ("orders", 1), ("orders", 2)}),
        ("subscribePattern", "aud.*", {("audit.log", 0)}),
        ("assign", '{"orders":[1,2]}', {("orders", 1), ("orders", 2)}),
    ],
)
def test_topic_selection_options(spark, two_brokers, option, value, expected):
    a, b, _ = two_brokers
    df = spark.read.format("logkeel-segments").option(option, value).load([str(a), str(b)])
    assert {
        (r["topic"], r["partition"]) for r in df.select("topic", "partition").distinct().collect()
    } == expected


def test_max_partition_bytes_splits_the_work_without_changing_the_rows(spark, two_brokers):
    a, b, _ = two_brokers
    whole = spark.read.format("logkeel-segments").load([str(a), str(b)])
    split = (
        spark.read.format("logkeel-segments")
        .option("maxPartitionBytes", "3000")
        .load([str(a), str(b)])
    )
    assert split.rdd.getNumPartitions() > whole.rdd.getNumPartitions()
    spread = (
        spark.read.format("logkeel-segments").option("minPartitions", "6").load([str(a), str(b)])
    )
    assert spread.rdd.getNumPartitions() >= 6
    cols = ["topic", "partition", "offset", "key", "value"]
    assert sorted(split.select(cols).collect()) == sorted(whole.select(cols).collect())
    assert sorted(spread.select(cols).collect()) == sorted(whole.select(cols).collect())


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """One partition with a CRC-corrupt batch (offsets 30-32) and a missing segment."""
    log_dir = tmp_path_factory.mktemp("damaged")
    w = write_partition(log_dir, "t", 0, 40)
    segment, position, size = corrupt_batch(w, 30)
    gone = segment_holding(w, 75)
    segments = w.segments()
    gone_first, gone_next = int(gone.stem), int(segments[segments.index(gone) + 1].stem)
    remove_segment(gone)
    return log_dir, w, (segment, position, size), (gone_first, gone_next)


def test_permissive_reports_corrupt_ranges_as_rows_and_keeps_going(spark, damaged):
    log_dir, w, (segment, position, size), (gone_first, gone_next) = damaged
    df = spark.read.format("logkeel-segments").load(str(log_dir))
    bad = sorted(df.where("corrupt").collect(), key=lambda r: r["offset"])
    assert [(r["offset"], r["lastOffset"]) for r in bad] == [(30, 32), (gone_first, gone_next - 1)]
    crc = bad[0]
    assert (crc["segment"], crc["position"], crc["corruptBytes"]) == (str(segment), position, size)
    assert crc["crcValid"] is False and "CRC mismatch" in crc["corruptReason"]
    assert crc["key"] is None and crc["value"] is None and crc["timestamp"] is None
    assert crc["baseOffset"] == 30  # what the damaged header claims
    gap = bad[1]
    assert gap["corruptBytes"] == 0 and "no segment file" in gap["corruptReason"]
    good = [r["offset"] for r in df.where("not corrupt").select("offset").collect()]
    lost = set(range(30, 33)) | set(range(gone_first, gone_next))
    assert sorted(good) == [o for o in range(w.end_offset) if o not in lost]


def test_permissive_is_the_default_and_dropmalformed_drops_the_ranges(spark, damaged):
    log_dir, w, _, (gone_first, gone_next) = damaged
    default = spark.read.format("logkeel-segments").load(str(log_dir))
    permissive = (
        spark.read.format("logkeel-segments").option("mode", "permissive").load(str(log_dir))
    )
    assert default.count() == permissive.count()
    dropped = (
        spark.read.format("logkeel-segments").option("mode", "DROPMALFORMED").load(str(log_dir))
    )
    assert dropped.where("corrupt").count() == 0
    assert dropped.count() == w.end_offset - 3 - (gone_next - gone_first)


def test_failfast_fails_the_query_naming_file_and_position(spark, damaged):
    log_dir, _, (segment, position, _), _ = damaged
    df = spark.read.format("logkeel-segments").option("mode", "FAILFAST").load(str(log_dir))
    with pytest.raises(Exception) as info:
        df.count()
    message = str(info.value)
    assert CorruptSegmentError.__name__ in message
    assert f"{segment} at position {position}" in message and "CRC mismatch" in message


def test_unknown_mode_and_missing_paths_are_refused(spark, damaged):
    log_dir = damaged[0]
    with pytest.raises(Exception, match="mode"):
        spark.read.format("logkeel-segments").option("mode", "LENIENT").load(str(log_dir)).count()
    with pytest.raises(Exception, match="load"):
        spark.read.format("logkeel-segments").load().count()
