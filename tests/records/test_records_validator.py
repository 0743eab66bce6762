"""Kafka's LogValidator checks of a produced batch (`records/validator.py`) and the rewrite of a
batch with another codec (`records/recompress.py`), without sockets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.records.batch import BatchHeader, CompressionType, crc_valid, pack_header
from logkeel.records.builder import build_batch
from logkeel.records.compression import compress
from logkeel.records.recompress import rebuild_batch
from logkeel.records.record import decode_records
from logkeel.records.validator import (
    CORRUPT,
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    TOO_LARGE,
    BatchRefusal,
    CheckedBatch,
    ClientBatchRules,
    check_client_batch,
    records_problem,
)

NOW = 1_700_000_000_000
RULES = ClientBatchRules(timestamp_before_max_ms=None, timestamp_after_max_ms=3_600_000)


def batch(keys: list[bytes | None], codec: CompressionType = CompressionType.NONE, **opts) -> bytes:
    return build_batch(
        [(NOW + i, k, b"v%d" % i, ()) for i, k in enumerate(keys)], compression=codec, **opts
    )


def check(raw: bytes, rules: ClientBatchRules = RULES, **kw) -> CheckedBatch | BatchRefusal:
    return check_client_batch(raw, 0, BatchHeader.parse(raw), rules, NOW, **kw)


def with_header(raw: bytes, **fields: int) -> bytes:
    out = bytearray(raw)
    out[:61] = pack_header(*BatchHeader.parse(raw)._replace(**fields))
    return bytes(out)  # the CRC is not checked here: the walker did that before


@pytest.mark.parametrize("codec", list(CompressionType))
def test_a_good_batch_passes_with_its_records_section(codec: CompressionType) -> None:
    raw = batch([b"a", None, b"c"], codec)
    checked = check(raw)
    assert isinstance(checked, CheckedBatch)
    assert checked.max_timestamp == NOW + 2
    header = BatchHeader.parse(raw)
    rebuilt = rebuild_batch(header, checked.section, CompressionType.NONE)
    assert [r.value for r in decode_records(bytes(rebuilt))[1]] == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"base_offset": 3}, "baseOffset"),
        ({"records_count": 0, "last_offset_delta": 0}, "recordsCount"),
        ({"last_offset_delta": 5}, "lastOffsetDelta"),
        ({"attributes": 0x20}, "control"),
        ({"producer_id": 4, "producer_epoch": 0, "base_sequence": -1}, "sequence"),
        ({"producer_id": 4, "producer_epoch": -1, "base_sequence": 0}, "epoch"),
        ({"attributes": 0x10}, "transactional"),
    ],
)
def test_batch_level_rules(fields: dict[str, int], words: str) -> None:
    refusal = check(with_header(batch([b"a", b"b"]), **fields))
    assert isinstance(refusal, BatchRefusal)
    assert (refusal.kind, refusal.record_errors) == (INVALID_RECORD, ())
    assert words in refusal.message


def test_null_keys_on_a_compacted_topic_are_named() -> None:
    refusal = check(batch([b"a", None, b"c", None]), ClientBatchRules(compacted=True))
    assert isinstance(refusal, BatchRefusal) and refusal.kind == INVALID_RECORD
    assert [e.batch_index for e in refusal.record_errors] == [1, 3]
    assert isinstance(check(batch([b"a", None])), CheckedBatch)  # not compacted: fine


def test_each_out_of_range_timestamp_is_named() -> None:
    late = NOW + 2 * 3_600_000
    raw = build_batch([(NOW, b"k", b"a", ()), (late, b"k", b"b", ()), (late + 1, b"k", b"c", ())])
    refusal = check(raw)
    assert isinstance(refusal, BatchRefusal) and refusal.kind == INVALID_TIMESTAMP
    assert [e.batch_index for e in refusal.record_errors] == [1, 2]
    # A LogAppendTime topic ignores the producer's timestamps.
    assert isinstance(check(raw, ClientBatchRules(log_append_time=True)), CheckedBatch)


def test_a_payload_that_does_not_decompress_and_a_bomb() -> None:
    raw = batch([b"a"], CompressionType.GZIP)
    header = BatchHeader.parse(raw)
    garbage = bytearray(raw[:61]) + b"\x1f\x8b" + bytes(30)
    refusal = check_client_batch(
        bytes(garbage), 0, header._replace(batch_length=len(garbage) - 12), RULES, NOW
    )
    assert isinstance(refusal, BatchRefusal) and refusal.kind == CORRUPT
    assert "corrupt gzip payload" in refusal.message
    bomb_section = compress(CompressionType.ZSTD, bytes(4 << 20))
    bomb = bytes(raw[:61]) + bomb_section
    bomb_header = header._replace(attributes=int(CompressionType.ZSTD), batch_length=len(bomb) - 12)
    refusal = check_client_batch(bomb, 0, bomb_header, RULES, NOW, max_decompressed=1 << 20)
    assert isinstance(refusal, BatchRefusal) and refusal.kind == TOO_LARGE


def test_records_problem_names_what_the_decoder_refuses() -> None:
    raw = batch([b"a", b"b"])
    assert records_problem(raw, 0, BatchHeader.parse(raw)) is None
    lying = with_header(raw, records_count=5, last_offset_delta=4)
    assert "claims 5 records" in records_problem(lying, 0, BatchHeader.parse(lying))


@settings(max_examples=60, deadline=None)
@given(
    source=st.sampled_from(list(CompressionType)),
    target=st.sampled_from(list(CompressionType)),
    values=st.lists(st.binary(max_size=300), min_size=1, max_size=30),
    transactional=st.booleans(),
)
def test_recompression_keeps_every_header_field_but_the_codec(
    source: CompressionType, target: CompressionType, values: list[bytes], transactional: bool
) -> None:
    raw = build_batch(
        [(NOW + 7 * i, b"k%d" % i, v, (("h", b"x"),)) for i, v in enumerate(values)],
        compression=source,
        producer_id=42,
        producer_epoch=3,
        base_sequence=1000,
        is_transactional=transactional,
        partition_leader_epoch=9,
    )
    checked = check(raw)
    assert isinstance(checked, CheckedBatch)
    header = BatchHeader.parse(raw)
    rebuilt = bytes(rebuild_batch(header, checked.section, target))
    assert crc_valid(rebuilt)
    new_header, records = decode_records(rebuilt)
    assert new_header.compression == target
    same = ("batch_length", "crc", "attributes")
    assert {f: getattr(new_header, f) for f in header._fields if f not in same} == {
        f: getattr(header, f) for f in header._fields if f not in same
    }
    assert new_header.is_transactional == transactional
    assert records == decode_records(raw)[1]
