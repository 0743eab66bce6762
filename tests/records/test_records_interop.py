"""Cross-checks with independent codecs: kafka-python's DefaultRecordBatch(Builder) and kio.

Our batches must decode to the same records in their readers, and theirs in ours: the proof that
our bytes are Kafka's bytes.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch

from logkeel.records import (
    CompressionType,
    Record,
    TimestampType,
    build_batch,
    crc_valid,
    decode_records,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

TS = 1_700_000_000_000

records_st = st.lists(
    st.tuples(
        st.integers(TS - 10**8, TS + 10**8),
        st.none() | st.binary(max_size=200),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=30)), max_size=3),
    ),
    min_size=1,
    max_size=30,
)


def _theirs_as_records(batch: bytes) -> tuple[DefaultRecordBatch, list[Record]]:
    theirs = DefaultRecordBatch(bytes(batch))
    assert theirs.validate_crc()
    return theirs, [
        Record(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
        for r in theirs
    ]


@settings(max_examples=120, deadline=None)
@given(
    records=records_st,
    codec=st.sampled_from(list(CompressionType)),
    timestamp_type=st.sampled_from(list(TimestampType)),
    base_offset=st.integers(0, 2**40),
    producer=st.none() | st.tuples(st.integers(0, 2**40), st.integers(0, 30000), st.booleans()),
)
def test_our_batches_decode_in_kafka_python(
    records: list,
    codec: CompressionType,
    timestamp_type: TimestampType,
    base_offset: int,
    producer: tuple[int, int, bool] | None,
) -> None:
    opts: dict = {
        "compression": codec,
        "timestamp_type": timestamp_type,
        "base_offset": base_offset,
    }
    if producer is not None:
        opts.update(
            producer_id=producer[0], producer_epoch=producer[1], base_sequence=17,
            is_transactional=producer[2],
        )  # fmt: skip
    batch = build_batch(records, **opts)
    header, ours = decode_records(batch)
    theirs_batch, theirs = _theirs_as_records(batch)
    assert theirs == ours
    assert theirs_batch.compression_type == codec
    assert theirs_batch.timestamp_type == timestamp_type
    assert theirs_batch.base_offset == base_offset
    assert theirs_batch.last_offset_delta == header.last_offset_delta
    assert theirs_batch.max_timestamp == header.max_timestamp
    assert theirs_batch.is_transactional == header.is_transactional
    assert theirs_batch.producer_id == header.producer_id
    assert theirs_batch.base_sequence == header.base_sequence


def _kafka_python_batch(codec: CompressionType, records: list, **producer: int | bool) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=producer.get("is_transactional", False),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 24,
    )
    for offset, (ts, key, value, headers) in enumerate(records):
        assert builder.append(offset, ts, key, value, headers) is not None
    return bytes(builder.build())


# Values that compress: kafka-python falls back to no compression when a codec does not help.
COMPRESSIBLE = [
    (TS + i, None if i % 5 == 0 else b"key-%d" % (i % 7), b"value %d " % i * (i % 13 + 1), hs)
    for i, hs in enumerate([[], [("trace", b"abc")], [("a", None), ("b", b"")]] * 40)
]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_kafka_python_batches_decode_in_ours(codec: CompressionType) -> None:
    batch = _kafka_python_batch(
        codec,
        COMPRESSIBLE,
        producer_id=99,
        producer_epoch=2,
        base_sequence=1000,
        is_transactional=True,
    )
    assert crc_valid(batch)
    header, ours = decode_records(batch)
    assert header.compression == codec  # the codec really was used
    assert header.is_transactional and header.producer_id == 99 and header.base_sequence == 1000
    expected = [
        Record(i, ts, k, v, tuple(tuple(h) for h in hs))
        for i, (ts, k, v, hs) in enumerate(COMPRESSIBLE)
    ]
    assert ours == expected
    assert _theirs_as_records(batch)[1] == expected


@settings(max_examples=60, deadline=None)
@given(records=records_st, codec=st.sampled_from(list(CompressionType)))
def test_random_kafka_python_batches_decode_in_ours(records: list, codec: CompressionType) -> None:
    batch = _kafka_python_batch(codec, records)
    _, ours = decode_records(batch)
    assert ours == _theirs_as_records(batch)[1]


@settings(max_examples=60, deadline=None)
@given(records=records_st, base_offset=st.integers(0, 2**40))
def test_uncompressed_batches_match_kio(records: list, base_offset: int) -> None:
    batch = build_batch(records, base_offset=base_offset, partition_leader_epoch=5)
    theirs, size = read_batch(batch, 0)  # kio checks the CRC and every length itself
    assert size == len(batch)
    assert theirs.partition_leader_epoch == 5
    _, ours = decode_records(batch)
    assert len(theirs.records) == len(ours)
    for t, o in zip(theirs.records, ours, strict=True):
        assert (t.offset, t.key, t.value) == (o.offset, o.key, o.value)
        assert tuple((h.key, h.value) for h in t.headers) == tuple(
            (k.encode(), v) for k, v in o.headers
        )
        assert int(t.timestamp.timestamp()) == o.timestamp // 1000  # kio keeps whole seconds
