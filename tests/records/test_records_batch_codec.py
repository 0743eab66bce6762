"""Building and decoding whole v2 batches: property round trips, CRC coverage, validation."""

from __future__ import annotations

import struct

import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.records import (
    HEADER_SIZE,
    BatchBuilder,
    CompressionType,
    InvalidBatchError,
    Record,
    TimestampType,
    build_batch,
    compute_crc,
    crc_valid,
    decode_records,
    iter_batches,
    iter_headers,
    iter_records,
    records_section,
    set_base_offset,
    set_partition_leader_epoch,
)
from logkeel.records.varint import encode_varint, encode_varlong

TS = 1_700_000_000_000

keys_or_values = st.none() | st.binary(max_size=300)
headers_st = st.lists(
    st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40)), max_size=4
).map(tuple)
records_st = st.lists(
    st.tuples(
        st.integers(TS - 10**9, TS + 10**9),  # deltas either side of the first record
        keys_or_values,
        keys_or_values,
        headers_st,
    ),
    max_size=40,
)
batch_opts_st = st.fixed_dictionaries(
    {
        "base_offset": st.integers(0, 2**62),
        "compression": st.sampled_from(list(CompressionType)),
        "timestamp_type": st.sampled_from(list(TimestampType)),
        "partition_leader_epoch": st.integers(-1, 2**31 - 1),
    },
    optional={
        "producer": st.tuples(
            st.integers(0, 2**63 - 1), st.integers(0, 32767), st.integers(0, 2**31 - 1)
        ),
        "is_transactional": st.booleans(),
        "log_append_time": st.integers(0, 2**50),
    },
)


def _builder_opts(opts: dict) -> dict:
    opts = dict(opts)
    producer = opts.pop("producer", None)
    if producer is not None:
        opts["producer_id"], opts["producer_epoch"], opts["base_sequence"] = producer
    elif opts.get("is_transactional"):
        opts["is_transactional"] = False
    return opts


def _expected(records: list, opts: dict, header_max: int) -> list[Record]:
    log_append = opts.get("timestamp_type") == TimestampType.LOG_APPEND_TIME
    return [
        Record(opts.get("base_offset", 0) + i, header_max if log_append else ts, k, v, tuple(h))
        for i, (ts, k, v, h) in enumerate(records)
    ]


@settings(max_examples=200, deadline=None)
@given(records=records_st, opts=batch_opts_st)
def test_round_trip(records: list, opts: dict) -> None:
    opts = _builder_opts(opts)
    batch = build_batch(records, **opts)
    assert crc_valid(batch)
    header, decoded = decode_records(batch)

    assert header.size == len(batch)
    assert header.compression == opts["compression"]
    assert header.timestamp_type == opts["timestamp_type"]
    assert header.is_transactional == opts.get("is_transactional", False)
    assert not header.is_control
    assert header.base_offset == opts["base_offset"]
    assert header.partition_leader_epoch == opts["partition_leader_epoch"]
    assert header.records_count == len(records)
    assert header.last_offset_delta == max(len(records) - 1, 0)
    assert header.producer_id == opts.get("producer_id", -1)
    assert header.producer_epoch == opts.get("producer_epoch", -1)
    assert header.base_sequence == opts.get("base_sequence", -1)
    if records:
        assert header.base_timestamp == records[0][0]
        if opts["timestamp_type"] == TimestampType.LOG_APPEND_TIME and "log_append_time" in opts:
            assert header.max_timestamp == opts["log_append_time"]
        else:
            assert header.max_timestamp == max(r[0] for r in records)
    else:
        assert header.base_timestamp == -1
    assert decoded == _expected(records, opts, header.max_timestamp)


@settings(max_examples=40, deadline=None)
@given(records=records_st, opts=batch_opts_st, prefix=st.binary(max_size=20))
def test_decode_from_any_buffer_type_and_position(records: list, opts: dict, prefix: bytes) -> None:
    batch = build_batch(records, **_builder_opts(opts))
    expected = decode_records(batch)
    trailer = b"\x00" * 7  # bytes after the batch must not be read
    for buf in (
        prefix + batch + trailer,
        bytearray(prefix + batch + trailer),
        memoryview(prefix + batch + trailer),
    ):
        assert decode_records(buf, len(prefix)) == expected


def test_records_section_of_uncompressed_batch_is_a_view() -> None:
    batch = build_batch([(TS, b"k", b"v", ())])
    header, _ = decode_records(batch)
    section = records_section(batch, header)
    assert isinstance(section, memoryview)
    assert bytes(section) == batch[HEADER_SIZE:]


# --- every byte is protected: by the CRC, or by the structural checks ---


@settings(max_examples=150, deadline=None)
@given(
    records=records_st.filter(bool),
    opts=batch_opts_st,
    where=st.integers(min_value=0),
    mask=st.integers(1, 255),
)
def test_any_flipped_byte_is_caught(records: list, opts: dict, where: int, mask: int) -> None:
    batch = bytearray(build_batch(records, **_builder_opts(opts)))
    where %= len(batch)
    batch[where] ^= mask
    if where < 8 or 12 <= where < 16:
        # baseOffset and partitionLeaderEpoch are outside the CRC by design: the broker rewrites
        # them in place. The batch stays valid, with other offsets or another epoch.
        assert crc_valid(batch)
        decode_records(batch)
    else:
        with pytest.raises(InvalidBatchError):
            decode_records(batch)


def test_rewriting_base_offset_and_leader_epoch_keeps_the_crc() -> None:
    records = [(TS + i, b"key-%d" % i, b"value" * i, ()) for i in range(10)]
    for codec in CompressionType:
        batch = bytearray(build_batch(records, compression=codec))
        crc_before = batch[17:21]
        set_base_offset(batch, 123_456_789_000)
        set_partition_leader_epoch(batch, 42)
        assert batch[17:21] == crc_before
        assert crc_valid(batch)
        header, decoded = decode_records(batch)
        assert header.base_offset == 123_456_789_000
        assert header.partition_leader_epoch == 42
        assert [r.offset for r in decoded] == list(range(123_456_789_000, 123_456_789_010))
        # In place within a larger buffer, through a memoryview, too.
        buf = bytearray(b"\x00" * 5) + batch
        set_base_offset(memoryview(buf), 7, pos=5)
        assert crc_valid(buf, 5)
        assert decode_records(buf, 5)[1][0].offset == 7


def test_verify_crc_can_be_skipped() -> None:
    batch = bytearray(build_batch([(TS, b"k", b"v", ())]))
    batch[17] ^= 0xFF  # the stored CRC only
    with pytest.raises(InvalidBatchError, match="CRC mismatch"):
        decode_records(batch)
    _, records = decode_records(batch, verify_crc=False)
    assert records == [Record(0, TS, b"k", b"v")]


# --- structural validation, with a correct CRC so only the structure can catch it ---

_HEADER = struct.Struct(">qiibIhiqqqhii")


def _raw_record(
    offset_delta: int,
    ts_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: bytes = b"\x00",
    length_adjust: int = 0,
) -> bytes:
    body = b"\x00" + encode_varlong(ts_delta) + encode_varint(offset_delta)
    for field in (key, value):
        body += b"\x01" if field is None else encode_varint(len(field)) + field
    body += headers
    return encode_varint(len(body) + length_adjust) + body


def _raw_batch(
    section: bytes, count: int, last_offset_delta: int, attributes: int = 0, base: int = 0
) -> bytearray:
    out = bytearray(HEADER_SIZE) + section
    fields = (base, len(out) - 12, -1, 2, 0, attributes, last_offset_delta, TS, TS, -1, -1, -1)
    _HEADER.pack_into(out, 0, *fields, count)
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return out


def test_hand_built_batch_decodes() -> None:
    section = _raw_record(0) + _raw_record(3, ts_delta=-5, key=None, value=b"x" * 200)
    header, records = decode_records(_raw_batch(section, 2, 3, base=100))
    assert records == [Record(100, TS, b"k", b"v"), Record(103, TS - 5, None, b"x" * 200)]
    assert header.last_offset == 103


@pytest.mark.parametrize(
    ("section", "count", "last_delta", "message"),
    [
        (_raw_record(0) + _raw_record(1), 3, 2, "claims 3 records|past the end"),
        (_raw_record(0) + _raw_record(1), 1, 1, "bytes left after"),
        (_raw_record(0) + _raw_record(0), 2, 1, "out of order"),
        (_raw_record(1) + _raw_record(0), 2, 1, "out of order"),
        (_raw_record(0) + _raw_record(2), 2, 1, "beyond lastOffsetDelta"),
        (_raw_record(-1), 1, 0, "out of order"),
        (_raw_record(0, length_adjust=1) + b"\x00", 1, 0, "declares"),
        (_raw_record(0, length_adjust=-1), 1, 0, "declares|out of bounds"),
        (_raw_record(0, length_adjust=50), 1, 0, "out of bounds"),
        (encode_varint(-3) + b"\x00" * 10, 1, 0, "out of bounds"),
        (_raw_record(0, headers=encode_varint(-1)), 1, 0, "header count"),
        (_raw_record(0, headers=b"\x02\x04\xff\xfe\x01"), 1, 0, "UTF-8"),
        (_raw_record(0, headers=b"\x02\x10ab\x01"), 1, 0, "header key length"),
        (_raw_record(0, headers=b"\x02\x02a\x10ab"), 1, 0, "header value"),
        (b"\x10\x00\x00\x00\x01\x7eabc\x00", 1, 0, "value of 63 bytes runs past"),
        (b"\x10\x00\x00\x00\x7eabc\x01\x00", 1, 0, "key of 63 bytes runs past"),
        (_raw_record(0)[:-2], 1, 0, "out of bounds|past the end"),
        (b"", 1, 0, "claims 1 records"),
        (b"\x00" * 7 * 4, -5, 0, "negative"),
    ],
)
def test_structural_errors(section: bytes, count: int, last_delta: int, message: str) -> None:
    with pytest.raises(InvalidBatchError, match=message):
        decode_records(_raw_batch(section, count, last_delta))


def test_huge_record_count_is_rejected_before_decoding() -> None:
    with pytest.raises(InvalidBatchError, match="claims"):
        decode_records(_raw_batch(_raw_record(0), 2**31 - 1, 2**31 - 1))


def test_batch_length_past_the_buffer_is_rejected() -> None:
    batch = build_batch([(TS, b"k", b"v", ())])
    with pytest.raises(InvalidBatchError, match="past the end"):
        decode_records(batch[:-1])
    with pytest.raises(InvalidBatchError):
        decode_records(batch[:30])


def test_bad_magic_is_rejected() -> None:
    batch = bytearray(build_batch([(TS, b"k", b"v", ())]))
    batch[16] = 1
    with pytest.raises(InvalidBatchError, match="magic"):
        decode_records(batch)


@pytest.mark.parametrize("codec", [c for c in CompressionType if c != CompressionType.NONE])
def test_corrupt_compressed_section_with_valid_crc(codec: CompressionType) -> None:
    section = b"\x00" * 40
    with pytest.raises(InvalidBatchError, match=codec.name.lower()):
        decode_records(_raw_batch(section, 1, 0, attributes=int(codec)))


@pytest.mark.parametrize("framing", ["raw", "xerial"])
def test_snappy_batches_as_librdkafka_and_java_write_them(framing: str) -> None:
    section = b"".join(_raw_record(i, ts_delta=i, value=b"payload %d " % i * 40) for i in range(50))
    if framing == "raw":  # librdkafka
        compressed = snappy.compress(section)
    else:  # Java's snappy-java stream: magic, version, compat, [int32 length][block]...
        compressed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
        for i in range(0, len(section), 1000):
            block = snappy.compress(section[i : i + 1000])
            compressed += struct.pack(">i", len(block)) + block
    header, records = decode_records(_raw_batch(compressed, 50, 49, attributes=2, base=10))
    assert header.compression == CompressionType.SNAPPY
    assert [(r.offset, r.timestamp, r.value) for r in records] == [
        (10 + i, TS + i, b"payload %d " % i * 40) for i in range(50)
    ]


def test_unknown_codec_in_attributes() -> None:
    with pytest.raises(InvalidBatchError, match="unknown compression"):
        decode_records(_raw_batch(_raw_record(0), 1, 0, attributes=6))


# --- builder behaviour ---


def test_empty_batch() -> None:
    batch = BatchBuilder(base_offset=50, compression=CompressionType.ZSTD).build()
    header, records = decode_records(batch)
    assert records == []
    assert header.records_count == 0
    assert header.base_timestamp == header.max_timestamp == -1
    assert header.next_offset == 51


def test_append_with_offset_leaves_gaps_like_a_compacted_batch() -> None:
    builder = BatchBuilder(base_offset=1000)
    builder.append_with_offset(1000, TS, b"a", b"1")
    builder.append_with_offset(1005, TS + 1, b"b", b"2")
    builder.append(TS + 2, b"c", b"3")
    assert builder.next_offset == 1007
    with pytest.raises(ValueError):
        builder.append_with_offset(1006, TS, b"d", None)
    header, records = decode_records(builder.build())
    assert [r.offset for r in records] == [1000, 1005, 1006]
    assert header.last_offset_delta == 6


def test_log_append_time_reports_max_timestamp_for_every_record() -> None:
    batch = build_batch(
        [(TS + 5, b"a", b"1", ()), (TS, b"b", b"2", ())],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=TS + 1000,
    )
    header, records = decode_records(batch)
    assert header.max_timestamp == TS + 1000
    assert [r.timestamp for r in records] == [TS + 1000, TS + 1000]


def test_builder_copies_mutable_buffers_and_rejects_str() -> None:
    value = bytearray(b"before")
    builder = BatchBuilder()
    builder.append(TS, memoryview(b"key"), value, [("h", bytearray(b"hv"))])
    value[:] = b"after!"
    assert decode_records(builder.build())[1] == [Record(0, TS, b"key", b"before", (("h", b"hv"),))]
    with pytest.raises(TypeError):
        BatchBuilder().append(TS, None, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        BatchBuilder().append(TS, "text", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        BatchBuilder().append(TS, None, None, [(b"bytes-key", b"")])  # type: ignore[list-item]


def test_builder_is_single_use_and_needs_producer_for_transactions() -> None:
    builder = BatchBuilder()
    builder.append(TS, None, b"v")
    builder.build()
    with pytest.raises(RuntimeError):
        builder.build()
    with pytest.raises(RuntimeError):
        builder.append(TS, None, b"v")
    with pytest.raises(ValueError):
        BatchBuilder(is_transactional=True)


def test_size_in_bytes_tracks_the_uncompressed_batch() -> None:
    builder = BatchBuilder()
    assert builder.size_in_bytes == HEADER_SIZE
    for i in range(100):
        builder.append(TS + i, b"k%d" % i, b"v" * i, [("h", None)] if i % 3 else ())
    assert builder.record_count == 100
    assert builder.size_in_bytes == len(builder.build())


def test_one_mib_batch_of_one_kib_values() -> None:
    value = bytes(range(256)) * 4
    for codec in CompressionType:
        builder = BatchBuilder(compression=codec)
        for i in range(1024):
            builder.append(TS + i, None, value)
        header, records = decode_records(builder.build())
        assert header.records_count == 1024
        assert all(r.value == value for r in records)
        assert records[-1].offset == 1023 and records[-1].timestamp == TS + 1023


# --- several batches in one buffer ---


def test_iterating_batches_and_records() -> None:
    first = build_batch([(TS, b"a", b"1", ()), (TS, b"b", b"2", ())], base_offset=0)
    second = build_batch([(TS, b"c", b"3", ())], base_offset=2, compression=CompressionType.LZ4)
    third = build_batch([(TS, b"d", b"4", ())], base_offset=3)
    buf = first + second + third[:-3]  # a fetch response may end in a partial batch
    batches = list(iter_batches(buf))
    assert [(pos, h.base_offset, len(rs)) for pos, h, rs in batches] == [
        (0, 0, 2),
        (len(first), 2, 1),
    ]
    assert [r.key for r in iter_records(buf)] == [b"a", b"b", b"c"]
    assert [h.base_offset for _, h in iter_headers(first + second + third, verify_crc=True)] == [
        0,
        2,
        3,
    ]
    broken = bytearray(first + second)
    broken[len(first) + 30] ^= 1
    with pytest.raises(InvalidBatchError, match="CRC"):
        list(iter_records(broken))
