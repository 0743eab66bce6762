"""`logkeel-segments` gives the same rows whichever record decoder runs (compiled or pure
Python), and the rows today's decoder gave: `decode_records` per batch, one Python value per
row and column, through `batch_from_columns`."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkeel.records import (
    BatchBuilder,
    CompressionType,
    ControlRecordType,
    TimestampType,
    build_control_batch,
    decode_records,
)
from logkeel.records.batch import compute_crc
from logkeel.spark import options as opts
from logkeel.spark.schema import arrow_schema, batch_from_columns, segment_schema
from logkeel.spark.segment_scan import (
    CorruptRange,
    find_partitions,
    list_segments,
    scan_segment,
)
from logkeel.spark.segments import PERMISSIVE, SegmentReader, read_segments
from logkeel.spark.segments_arrow import COMPRESSION_NAMES

TS = 1_700_000_000_000

records_st = st.lists(
    st.tuples(
        st.integers(TS - 10**9, TS + 10**9),
        st.none() | st.binary(max_size=120),
        st.none() | st.binary(max_size=120),
        st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=20)), max_size=2),
    ),
    min_size=1,
    max_size=12,
)
batch_st = st.one_of(
    st.tuples(
        st.just("data"),
        records_st,
        st.sampled_from(list(CompressionType)),
        st.sampled_from(list(TimestampType)),
        st.booleans(),  # transactional
    ),
    st.tuples(
        st.just("marker"), st.sampled_from([ControlRecordType.COMMIT, ControlRecordType.ABORT])
    ),
    st.tuples(st.just("undecodable"), records_st),
)


def encode(spec: tuple, base_offset: int) -> bytes:
    kind = spec[0]
    if kind == "marker":
        return build_control_batch(
            spec[1], producer_id=7, producer_epoch=0, coordinator_epoch=1, timestamp=TS,
            base_offset=base_offset,
        )  # fmt: skip
    if kind == "undecodable":
        # CRC-valid, but its first record's length is -1: a writer bug.
        batch = bytearray(
            encode(
                ("data", spec[1], CompressionType.NONE, TimestampType.CREATE_TIME, False),
                base_offset,
            )
        )
        batch[61] = 0x01
        struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
        return bytes(batch)
    _, records, compression, ts_type, transactional = spec
    producer = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0} if transactional else {}
    builder = BatchBuilder(
        base_offset=base_offset,
        compression=compression,
        timestamp_type=ts_type,
        log_append_time=TS + 5 if ts_type == TimestampType.LOG_APPEND_TIME else None,
        is_transactional=transactional,
        partition_leader_epoch=3,
        **producer,
    )
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)
    return builder.build()


def write_log_dir(root: Path, specs: list[tuple], per_segment: int) -> Path:
    part = root / "events-0"
    part.mkdir(parents=True)
    offset, batches = 0, []
    for spec in specs:
        batch = encode(spec, offset)
        batches.append((offset, batch))
        offset += 1 if spec[0] == "marker" else len(spec[1])
    for i in range(0, len(batches), per_segment):
        group = batches[i : i + per_segment]
        (part / f"{group[0][0]:020d}.log").write_bytes(b"".join(b for _, b in group))
    return root


def reference_batches(segments: list, schema: pa.Schema) -> list[pa.RecordBatch]:
    """Rows as the reader made them before the column decoders, one batch per segment batch."""
    out = []
    for segment in segments:
        for item in scan_segment(segment, with_data=True):
            if isinstance(item, CorruptRange):
                continue  # corrupt rows are built as before; compared through read_segments
            try:
                header, records = decode_records(item.data, verify_crc=False)
            except ValueError:
                continue
            n = len(records)
            cols: dict[str, list[Any]] = {
                "key": [r.key for r in records],
                "value": [r.value for r in records],
                "offset": [r.offset for r in records],
                "timestamp": [r.timestamp for r in records],
                "topic": [segment.topic] * n,
                "partition": [segment.partition] * n,
                "timestampType": [int(header.timestamp_type)] * n,
                "logDir": [segment.log_dir] * n,
                "segment": [segment.path] * n,
                "position": [item.position] * n,
                "baseOffset": [header.base_offset] * n,
                "lastOffset": [header.last_offset] * n,
                "leaderEpoch": [header.partition_leader_epoch] * n,
                "producerId": [header.producer_id] * n,
                "producerEpoch": [header.producer_epoch] * n,
                "baseSequence": [header.base_sequence] * n,
                "isTransactional": [header.is_transactional] * n,
                "isControl": [header.is_control] * n,
                "compression": [COMPRESSION_NAMES.get(header.attributes & 0x07)] * n,
                "crcValid": [True] * n,
                "corrupt": [False] * n,
                "corruptBytes": [None] * n,
                "corruptReason": [None] * n,
            }
            if "headers" in schema.names:
                cols["headers"] = [list(r.headers) or None for r in records]
            out.append(batch_from_columns(schema, cols))
    return out


def table(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches(batches, schema=schema).combine_chunks()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    specs=st.lists(batch_st, min_size=1, max_size=8),
    per_segment=st.integers(1, 4),
    include_headers=st.booleans(),
)
def test_rows_are_those_of_the_pure_python_decoder(
    tmp_path_factory, specs, per_segment, include_headers
):
    root = write_log_dir(tmp_path_factory.mktemp("decoders"), specs, per_segment)
    segments = [s for r in find_partitions([root]) for s in list_segments(r)]
    schema = arrow_schema(segment_schema(include_headers))
    native = table(list(read_segments(segments, schema, PERMISSIVE, "native")), schema)
    python = table(list(read_segments(segments, schema, PERMISSIVE, "python")), schema)
    assert native.equals(python)
    valid = native.filter(pa.compute.invert(native["corrupt"]))
    assert valid.equals(table(reference_batches(segments, schema), schema))
    # Each undecodable batch is one corrupt row, in file order, with the reference's words.
    corrupt = native.filter(native["corrupt"]).to_pylist()
    assert len(corrupt) == sum(1 for s in specs if s[0] == "undecodable")
    for row in corrupt:
        assert row["corruptReason"].startswith("records of a CRC-valid batch do not decode: ")
    assert native["offset"].to_pylist() == sorted(native["offset"].to_pylist())


def test_decoder_option_is_checked():
    with pytest.raises(opts.OptionError, match="decoder"):
        SegmentReader({"path": "/nonexistent", "decoder": "rust"}, segment_schema())


@pytest.fixture(scope="module")
def mixed_log_dir(tmp_path_factory) -> Path:
    records = [
        (
            TS + i,
            b"k%d" % i if i % 4 else None,
            b"v" * i if i % 5 else None,
            [("n", b"%d" % i)] if i % 2 else [],
        )
        for i in range(20)
    ]
    specs: list[tuple] = [
        ("data", records, c, TimestampType.CREATE_TIME, False) for c in CompressionType
    ]
    specs += [
        ("data", records, CompressionType.NONE, TimestampType.CREATE_TIME, True),
        ("marker", ControlRecordType.ABORT),
        ("undecodable", records),
        ("data", records, CompressionType.LZ4, TimestampType.LOG_APPEND_TIME, False),
    ]
    return write_log_dir(tmp_path_factory.mktemp("mixed"), specs, 3)


def test_spark_rows_are_the_same_with_either_decoder(spark, mixed_log_dir):
    def collect(decoder: str) -> list:
        df = (
            spark.read.format("logkeel-segments")
            .option("includeHeaders", "true")
            .option("decoder", decoder)
            .load(str(mixed_log_dir))
        )
        return sorted(df.collect(), key=lambda r: (r["segment"], r["position"], r["offset"]))

    native, python = collect("native"), collect("python")
    assert native == python
    assert len(native) == 7 * 20 + 1 + 1  # 7 data batches, the marker, the undecodable one
    assert {r["compression"] for r in native} == {c.name.lower() for c in CompressionType}
    assert sum(r["corrupt"] for r in native) == 1
    assert sum(r["isControl"] for r in native) == 1
