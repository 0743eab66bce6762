"""The column decoders (`logkeel.records.columns`): the compiled one and the pure-Python one give
the same buffers, and those hold exactly what `decode_records` decodes, for every codec and
for damaged batches alike."""

from __future__ import annotations

import struct
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.records.test_records_batch_codec import _builder_opts, batch_opts_st

from logkeel.records import (
    HEADER_SIZE,
    BatchBuilder,
    CompressionType,
    ControlRecordType,
    InvalidBatchError,
    TimestampType,
    build_control_batch,
    decode_records,
)
from logkeel.records.batch import BatchHeader, compute_crc
from logkeel.records.columns import (
    BinaryColumn,
    RecordColumns,
    column_builder,
    native_available,
    scan_records,
)
from logkeel.records.record import records_section

INT64_MAX = (1 << 63) - 1

keys_or_values = st.none() | st.binary(max_size=200) | st.binary(min_size=8190, max_size=8300)
headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=30)), max_size=3
).map(tuple)
records_st = st.lists(
    st.tuples(
        st.integers(0, 3),  # offset gap before the record (compacted batches have gaps)
        st.integers(-(2**60), 2**60),  # timestamps of any size: multi-byte varlong deltas
        keys_or_values,
        keys_or_values,
        headers_st,
    ),
    max_size=25,
)


def build(records: list, opts: dict) -> bytes:
    opts = _builder_opts(opts)
    builder = BatchBuilder(**opts)
    offset = opts["base_offset"]
    for gap, ts, key, value, headers in records:
        offset += gap
        builder.append_with_offset(offset, ts, key, value, headers)
        offset += 1
    return builder.build()


def bit(validity: bytes, i: int) -> bool:
    return bool(validity[i >> 3] >> (i & 7) & 1)


def binary_values(col: BinaryColumn, n: int) -> list[bytes | None]:
    offsets = array("i")
    offsets.frombytes(col.offsets)
    assert len(offsets) == n + 1 and offsets[0] == 0 and len(col.data) == offsets[-1]
    assert col.nulls == sum(not bit(col.validity, i) for i in range(n))
    return [
        col.data[offsets[i] : offsets[i + 1]] if bit(col.validity, i) else None for i in range(n)
    ]


def rows(cols: RecordColumns) -> list[tuple]:
    """(batch index, offset, timestamp, key, value, headers) per record, read back from the
    buffers."""
    n = cols.rows
    index, offsets, timestamps = array("i"), array("q"), array("q")
    index.frombytes(cols.batch_index)
    offsets.frombytes(cols.offsets)
    timestamps.frombytes(cols.timestamps)
    headers: list = [None] * n
    if cols.headers is not None:
        h = cols.headers
        lists = array("i")
        lists.frombytes(h.list_offsets)
        count = lists[-1]
        keys = [k.decode() for k in binary_values(h.keys, count)]  # type: ignore[union-attr]
        values = binary_values(h.values, count)
        headers = [
            tuple(zip(keys[lists[i] : lists[i + 1]], values[lists[i] : lists[i + 1]], strict=True))
            if bit(h.list_validity, i)
            else ()
            for i in range(n)
        ]
    return list(
        zip(
            index,
            offsets,
            timestamps,
            binary_values(cols.keys, n),
            binary_values(cols.values, n),
            headers,
            strict=True,
        )
    )


def expected_rows(batches: list[bytes], with_headers: bool) -> list[tuple]:
    out = []
    for i, batch in enumerate(batches):
        _, records = decode_records(batch, verify_crc=False)
        out += [
            (i, r.offset, r.timestamp, r.key, r.value, r.headers if with_headers else None)
            for r in records
        ]
    return out


def decode_both(batches: list[bytes], with_headers: bool) -> list[tuple[RecordColumns, list]]:
    """Each decoder's columns for ``batches`` and, per batch, its header or its error."""
    results = []
    for decoder in ("native", "python"):
        builder = column_builder(with_headers, decoder)
        outcomes: list = []
        for batch in batches:
            try:
                outcomes.append(builder.add(batch))
            except InvalidBatchError as exc:
                outcomes.append(("error", str(exc)))
        results.append((builder.take(), outcomes))
    return results


def test_the_compiled_decoder_is_built() -> None:
    # scripts/setup installs a compiler and Python's headers; without them the reader still
    # works, on the pure-Python decoder, but this suite must compare the two.
    assert native_available(), "logkeel.records._columns is not built: run scripts/setup"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.tuples(records_st, batch_opts_st), min_size=1, max_size=4),
    with_headers=st.booleans(),
)
def test_both_decoders_give_what_decode_records_decodes(batches: list, with_headers: bool) -> None:
    built = [build(records, opts) for records, opts in batches]
    (native, native_out), (python, python_out) = decode_both(built, with_headers)
    assert native == python
    assert native_out == python_out == [decode_records(b)[0] for b in built]
    got = rows(native)
    expected = expected_rows(built, with_headers)
    assert [r[:5] for r in got] == [r[:5] for r in expected]
    if with_headers:
        assert [r[5] for r in got] == [r[5] for r in expected]


def test_control_and_log_append_time_batches() -> None:
    batches = [
        build_control_batch(
            kind, producer_id=9, producer_epoch=2, coordinator_epoch=4, timestamp=123, base_offset=5
        )
        for kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT)
    ]
    append_time = BatchBuilder(
        timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=777, base_offset=8
    )
    append_time.append(1, b"k", b"v")
    append_time.append(2, None, None)
    batches.append(append_time.build())
    (native, _), (python, _) = decode_both(batches, True)
    assert native == python
    assert [r[2] for r in rows(native)][-2:] == [777, 777]
    assert [r[1:5] for r in rows(native)] == [r[1:5] for r in expected_rows(batches, True)]


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_st,
    compression=st.sampled_from([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP]),
    damage=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    with_headers=st.booleans(),
)
def test_damaged_batches_are_refused_alike_and_leave_nothing_behind(
    records: list, compression: CompressionType, damage: list, with_headers: bool
) -> None:
    """Bytes overwritten anywhere from the attributes on (the CRC recomputed, as a buggy writer
    would leave it): both decoders refuse with decode_records' words, or both decode the same;
    the good batches around a refused one decode whole."""
    opts = {
        "base_offset": 100,
        "compression": compression,
        "timestamp_type": TimestampType.CREATE_TIME,
        "partition_leader_epoch": 0,
    }
    good = build([(0, 1, b"a", b"b", (("h", b"x"),))], opts | {"compression": CompressionType.NONE})
    batch = bytearray(build(records, opts))
    for at, value in damage:
        batch[21 + at % (len(batch) - 21)] = value
    damaged = _with_crc(batch)
    (native, native_out), (python, python_out) = decode_both([good, damaged, good], with_headers)
    assert native_out == python_out
    assert native == python
    try:
        decode_records(damaged, verify_crc=False)
    except InvalidBatchError as exc:
        assert native_out[1] == ("error", str(exc))
        assert native.rows == 2


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(0, 5),
    last_delta=st.integers(0, 6),
    body=st.binary(max_size=80),
    with_headers=st.booleans(),
)
def test_random_record_bytes(count: int, last_delta: int, body: bytes, with_headers: bool) -> None:
    builder = BatchBuilder(base_offset=3)
    builder.append(5, b"k", b"v", (("key", b"value"),))
    batch = bytearray(builder.build()[:HEADER_SIZE] + body)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">i", batch, 23, last_delta)
    struct.pack_into(">i", batch, 57, count)
    damaged = _with_crc(batch)
    (native, native_out), (python, python_out) = decode_both([damaged], with_headers)
    assert native_out == python_out
    assert native == python


@pytest.mark.parametrize("decoder", ["native", "python"])
def test_offsets_beyond_int64_are_refused(decoder: str) -> None:
    builder = BatchBuilder(base_offset=INT64_MAX - 1)
    for _ in range(3):
        builder.append(1, b"k", b"v")
    b = column_builder(False, decoder)
    with pytest.raises(InvalidBatchError, match="beyond int64"):
        b.add(builder.build())
    assert b.rows == 0


def test_unknown_decoder_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, native or python"):
        column_builder(False, "rust")


def test_without_the_extension_the_python_decoder_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # As after an install without a C compiler: the module is then absent.
    import logkeel.records.columns as columns

    monkeypatch.setattr(columns, "_native", None)
    assert not columns.native_available()
    assert isinstance(column_builder(True), columns.PyColumnBuilder)
    assert isinstance(column_builder(True, "auto"), columns.PyColumnBuilder)
    with pytest.raises(RuntimeError, match="not built"):
        column_builder(True, "native")


# -- scan_records: the same checks, nothing kept (a produced batch's validation) -------------


def scan_both(batch: bytes) -> list[object]:
    """scan_records' outcome on ``batch`` with the compiled decoder, then the Python one."""
    import logkeel.records.columns as columns

    header, data = BatchHeader.parse(batch), records_section(batch, BatchHeader.parse(batch))
    outcomes: list[object] = []
    native = columns._native
    try:
        for module in (native, None):
            columns._native = module  # type: ignore[attr-defined]
            try:
                outcomes.append(scan_records(header, data, 0, len(data)))
            except InvalidBatchError as exc:
                outcomes.append(("error", str(exc)))
    finally:
        columns._native = native  # type: ignore[attr-defined]
    return outcomes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, opts=batch_opts_st)
def test_scan_records_agrees_with_the_decoded_records(records: list, opts: dict) -> None:
    batch = build(records, opts)
    native, python = scan_both(batch)
    assert native == python
    decoded = decode_records(batch)[1]
    stamps = [r.timestamp for r in decoded]
    nulls = [i for i, r in enumerate(decoded) if r.key is None]
    if decoded:
        assert (native.min_timestamp, native.max_timestamp) == (min(stamps), max(stamps))
    assert (native.null_keys, native.first_null_key) == (len(nulls), nulls[0] if nulls else -1)


@settings(max_examples=300, deadline=None)
@given(count=st.integers(0, 5), last_delta=st.integers(0, 6), body=st.binary(max_size=80))
def test_scan_records_refuses_random_record_bytes_like_the_reference(
    count: int, last_delta: int, body: bytes
) -> None:
    builder = BatchBuilder(base_offset=3)
    builder.append(5, b"k", b"v", (("key", b"value"),))
    batch = bytearray(builder.build()[:HEADER_SIZE] + body)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">i", batch, 23, last_delta)
    struct.pack_into(">i", batch, 57, count)
    native, python = scan_both(_with_crc(batch))
    assert native == python
