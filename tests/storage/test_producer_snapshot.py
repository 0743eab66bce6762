"""The ``.snapshot`` file: Kafka's ProducerSnapshot v1 layout, CRC-32C, names, corruption."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.storage.engine.producer_snapshot import (
    ProducerSnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    list_snapshot_files,
    parse_snapshot_offset,
    read_snapshot,
    snapshot_file_name,
    snapshot_path,
    write_snapshot,
)
from logkeel.storage.errors import CorruptSnapshotError


def crc32c_bitwise(data: bytes) -> int:
    """Reference CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), independent of the library."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_reference_crc_is_castagnoli() -> None:
    assert crc32c_bitwise(b"123456789") == 0xE3069283  # the standard CRC-32C check value


def int64s() -> st.SearchStrategy[int]:
    return st.integers(-(1 << 63), (1 << 63) - 1)


def int32s() -> st.SearchStrategy[int]:
    return st.integers(-(1 << 31), (1 << 31) - 1)


entries_strategy = st.lists(
    st.builds(
        ProducerSnapshotEntry,
        producer_id=int64s(),
        epoch=st.integers(-(1 << 15), (1 << 15) - 1),
        last_sequence=int32s(),
        last_offset=int64s(),
        offset_delta=int32s(),
        timestamp=int64s(),
        coordinator_epoch=int32s(),
        current_txn_first_offset=int64s(),
    ),
    max_size=20,
)


# -- layout ----------------------------------------------------------------------------------


def test_byte_layout_matches_kafka_schema() -> None:
    entry = ProducerSnapshotEntry(
        producer_id=0x0102030405060708,
        epoch=3,
        last_sequence=9,
        last_offset=42,
        offset_delta=4,
        timestamp=1_700_000_000_000,
        coordinator_epoch=7,
        current_txn_first_offset=-1,
    )
    # Hand-assembled from the schema: int16 version, uint32 crc, int32 array length, then per
    # entry int64 producerId, int16 epoch, int32 lastSequence, int64 lastOffset,
    # int32 offsetDelta, int64 timestamp, int32 coordinatorEpoch, int64 currentTxnFirstOffset.
    after_crc = bytes.fromhex(
        "00000001"  # one entry
        "0102030405060708"  # producerId
        "0003"  # epoch
        "00000009"  # lastSequence
        "000000000000002a"  # lastOffset 42
        "00000004"  # offsetDelta
        "0000018bcfe56800"  # timestamp 1700000000000
        "00000007"  # coordinatorEpoch
        "ffffffffffffffff"  # currentTxnFirstOffset -1
    )
    crc = crc32c_bitwise(after_crc)
    expected = bytes.fromhex("0001") + crc.to_bytes(4, "big") + after_crc
    assert len(expected) == 2 + 4 + 4 + 46
    assert encode_snapshot([entry]) == expected
    assert decode_snapshot(expected) == [entry]


def test_empty_snapshot_is_ten_bytes() -> None:
    data = encode_snapshot([])
    assert data[:2] == b"\x00\x01"
    assert data[6:] == b"\x00\x00\x00\x00"
    assert int.from_bytes(data[2:6], "big") == crc32c_bitwise(b"\x00\x00\x00\x00")
    assert decode_snapshot(data) == []


@given(entries_strategy)
def test_crc_covers_everything_after_it(entries: list[ProducerSnapshotEntry]) -> None:
    data = encode_snapshot(entries)
    assert int.from_bytes(data[2:6], "big") == crc32c_bitwise(data[6:])
    assert len(data) == 10 + 46 * len(entries)


# -- round trips -----------------------------------------------------------------------------


@given(entries_strategy)
def test_encode_decode_round_trip(entries: list[ProducerSnapshotEntry]) -> None:
    assert decode_snapshot(encode_snapshot(entries)) == entries


def test_file_round_trip_leaves_no_temp_file(tmp_path: Path) -> None:
    entries = [
        ProducerSnapshotEntry(1000 + i, i, i * 5, 100 + i, 2, 1_000 + i, -1, -1 if i % 2 else 90)
        for i in range(10)
    ]
    path = snapshot_path(tmp_path, 123)
    write_snapshot(path, entries)
    assert path.name == "00000000000000000123.snapshot"
    assert read_snapshot(path) == entries
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    # A rewrite replaces the content rather than appending to it.
    write_snapshot(path, entries[:2])
    assert read_snapshot(path) == entries[:2]


# -- corruption ------------------------------------------------------------------------------


SAMPLE = encode_snapshot(
    [
        ProducerSnapshotEntry(7, 1, 41, 99, 4, 5555, 2, -1),
        ProducerSnapshotEntry(8, 0, 3, 120, 0, 6666, -1, 118),
    ]
)


@settings(max_examples=300)
@given(st.integers(0, len(SAMPLE) - 1), st.integers(1, 255))
def test_any_single_byte_change_is_detected(position: int, xor: int) -> None:
    data = bytearray(SAMPLE)
    data[position] ^= xor
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data))


@pytest.mark.parametrize("length", range(len(SAMPLE)))
def test_every_truncation_is_detected(length: int) -> None:
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(SAMPLE[:length])


def _with_fresh_crc(body_after_crc: bytes, version: bytes = b"\x00\x01") -> bytes:
    return version + crc32c_bitwise(body_after_crc).to_bytes(4, "big") + body_after_crc


def test_trailing_bytes_are_rejected_even_with_a_matching_crc() -> None:
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        decode_snapshot(SAMPLE + b"\x00")
    with pytest.raises(CorruptSnapshotError, match="entries need"):
        decode_snapshot(_with_fresh_crc(SAMPLE[6:] + b"\x00\x00"))


def test_missing_entries_with_a_matching_crc_are_rejected() -> None:
    with pytest.raises(CorruptSnapshotError, match="entries need"):
        decode_snapshot(_with_fresh_crc(SAMPLE[6:-46]))


def test_unknown_version_is_rejected() -> None:
    for version in (b"\x00\x00", b"\x00\x02", b"\xff\xff"):
        with pytest.raises(CorruptSnapshotError, match="version"):
            decode_snapshot(_with_fresh_crc(SAMPLE[6:], version))


def test_negative_entry_count_is_rejected() -> None:
    with pytest.raises(CorruptSnapshotError, match="negative"):
        decode_snapshot(_with_fresh_crc(b"\xff\xff\xff\xff"))


def test_read_snapshot_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / snapshot_file_name(5)
    path.write_bytes(SAMPLE[:-1])
    with pytest.raises(CorruptSnapshotError, match=str(path)):
        read_snapshot(path)


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_snapshot(tmp_path / snapshot_file_name(1))


# -- names -----------------------------------------------------------------------------------


def test_file_names_are_twenty_digit_offsets() -> None:
    assert snapshot_file_name(0) == "00000000000000000000.snapshot"
    assert snapshot_file_name((1 << 63) - 1) == "09223372036854775807.snapshot"
    assert parse_snapshot_offset("00000000000000001234.snapshot") == 1234
    for bad in (
        "1234.snapshot",
        "0000000000000000123x.snapshot",
        "00000000000000001234.snapshot.deleted",
        "00000000000000001234.log",
        "99999999999999999999.snapshot",  # beyond int64
    ):
        assert parse_snapshot_offset(bad) is None
    with pytest.raises(ValueError):
        snapshot_file_name(-1)


def test_listing_sorts_numerically_and_flags_malformed_names(tmp_path: Path) -> None:
    for offset in (300, 20, 1000, 0):
        write_snapshot(snapshot_path(tmp_path, offset), [])
    (tmp_path / "junk.snapshot").write_bytes(b"")
    (tmp_path / "42.snapshot").write_bytes(b"")
    (tmp_path / "00000000000000000010.snapshot.deleted").write_bytes(b"")
    (tmp_path / "00000000000000000020.log").write_bytes(b"")
    (tmp_path / "00000000000000000050.snapshot").mkdir()  # not a regular file
    listing = list_snapshot_files(tmp_path)
    assert [f.offset for f in listing.files] == [0, 20, 300, 1000]
    assert [f.path for f in listing.files] == [
        snapshot_path(tmp_path, o) for o in (0, 20, 300, 1000)
    ]
    assert sorted(p.name for p in listing.malformed) == ["42.snapshot", "junk.snapshot"]


def test_listing_a_missing_dir_is_empty(tmp_path: Path) -> None:
    listing = list_snapshot_files(tmp_path / "absent")
    assert listing.files == [] and listing.malformed == []
