"""Control records: transaction markers, encoded as Kafka's EndTransactionMarker."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logkeel.records import (
    ControlRecordType,
    EndTransactionMarker,
    InvalidBatchError,
    build_control_batch,
    decode_control_key,
    decode_end_txn_marker,
    decode_records,
    encode_control_key,
    encode_end_txn_marker,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import ControlRecord, DefaultRecordBatch

TS = 1_700_000_000_000


def test_wire_bytes() -> None:
    key, value = encode_end_txn_marker(EndTransactionMarker(ControlRecordType.COMMIT, 7))
    assert key == b"\x00\x00\x00\x01"
    assert value == b"\x00\x00\x00\x00\x00\x07"
    key, _ = encode_end_txn_marker(EndTransactionMarker(ControlRecordType.ABORT, 7))
    assert key == b"\x00\x00\x00\x00"


@given(
    control_type=st.sampled_from([ControlRecordType.ABORT, ControlRecordType.COMMIT]),
    coordinator_epoch=st.integers(-(2**31), 2**31 - 1),
)
def test_marker_round_trip(control_type: ControlRecordType, coordinator_epoch: int) -> None:
    marker = EndTransactionMarker(control_type, coordinator_epoch)
    assert decode_end_txn_marker(*encode_end_txn_marker(marker)) == marker
    assert marker.committed == (control_type == ControlRecordType.COMMIT)


@pytest.mark.parametrize("control_type", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_control_batch_round_trip(control_type: ControlRecordType) -> None:
    batch = build_control_batch(
        control_type,
        producer_id=4242,
        producer_epoch=3,
        coordinator_epoch=11,
        timestamp=TS,
        base_offset=500,
        partition_leader_epoch=9,
    )
    header, records = decode_records(batch)
    assert header.is_control and header.is_transactional
    assert header.producer_id == 4242 and header.producer_epoch == 3
    assert header.base_sequence == -1
    assert header.partition_leader_epoch == 9
    assert header.records_count == 1 and header.base_offset == 500
    (record,) = records
    assert record.offset == 500 and record.timestamp == TS and record.headers == ()
    assert decode_end_txn_marker(record.key, record.value) == EndTransactionMarker(control_type, 11)

    # kafka-python, an independent reader, sees the same marker.
    theirs = DefaultRecordBatch(bytes(batch))
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    (their_record,) = list(theirs)
    assert isinstance(their_record, ControlRecord)
    assert their_record.type == control_type
    assert their_record.commit == (control_type == ControlRecordType.COMMIT)


def test_unknown_and_kraft_types() -> None:
    assert decode_control_key(b"\x00\x00\x00\x02") == ControlRecordType.LEADER_CHANGE
    assert decode_control_key(b"\x00\x00\x00\x63") == ControlRecordType.UNKNOWN
    # Newer key versions are read by their known prefix, as Kafka does.
    assert decode_control_key(b"\x00\x01\x00\x01extra") == ControlRecordType.COMMIT
    assert encode_control_key(ControlRecordType.SNAPSHOT_HEADER) == b"\x00\x00\x00\x03"
    with pytest.raises(ValueError):
        encode_control_key(ControlRecordType.UNKNOWN)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"\x00\x00\x00\x00\x00\x01", "at least 4"),
        (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01", "at least 4"),
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01", "key version"),
        (b"\x00\x00\x00\x01", None, "at least 6"),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00", "at least 6"),
        (b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x01", "marker version"),
        (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01", "not a txn marker"),
    ],
)
def test_invalid_markers(key: bytes | None, value: bytes | None, message: str) -> None:
    with pytest.raises(InvalidBatchError, match=message):
        decode_end_txn_marker(key, value)


def test_only_commit_and_abort_make_marker_batches() -> None:
    with pytest.raises(ValueError):
        build_control_batch(
            ControlRecordType.LEADER_CHANGE,
            producer_id=1,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp=TS,
        )
