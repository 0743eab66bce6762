"""The time index against Kafka's format and rules, a linear-scan model, crashes and corruption."""

from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.records.batch import NO_TIMESTAMP
from logkeel.storage.engine.index_file import DEFAULT_MAX_INDEX_SIZE
from logkeel.storage.engine.time_index import TimeIndex, TimestampOffset
from logkeel.storage.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    InvalidTimestampError,
    KafkaStorageError,
)

from .logutil import open_fds

ENTRY = struct.Struct(">qi")  # Kafka's TimeIndex: putLong(timestamp), putInt(relative offset)
MAPPED_FDS = 1 if sys.version_info < (3, 13) else 0


def time_index_path(root: Path, base_offset: int) -> Path:
    partition_dir = root / "logs" / "topic-0"
    partition_dir.mkdir(parents=True, exist_ok=True)
    return partition_dir / f"{base_offset:020d}.timeindex"


def model_lookup(entries: list[tuple[int, int]], base: int, target: int) -> TimestampOffset:
    found = TimestampOffset(NO_TIMESTAMP, base)
    for timestamp, offset in entries:
        if timestamp <= target:
            found = TimestampOffset(timestamp, offset)
    return found


def model_appends(calls: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """What maybe_append keeps: an entry whenever the timestamp grows."""
    kept: list[tuple[int, int]] = []
    last = NO_TIMESTAMP
    for timestamp, offset in calls:
        if timestamp > last:
            kept.append((timestamp, offset))
            last = timestamp
    return kept


# ---- format -------------------------------------------------------------------------------


def test_bytes_are_kafkas_layout(tmp_path: Path) -> None:
    path = time_index_path(tmp_path, 1000)
    index = TimeIndex(path, 1000)
    index.maybe_append(1_700_000_000_123, 1007)
    index.maybe_append(2**63 - 1, 1000 + 2**31 - 1)
    index.close()
    # 12 bytes an entry: big-endian int64 timestamp then int32 relative offset; trimmed.
    assert path.read_bytes() == bytes.fromhex(
        "0000018bcfe5687b 00000007  7fffffffffffffff 7fffffff"
    )
    assert list(ENTRY.iter_unpack(path.read_bytes())) == [
        (1_700_000_000_123, 7),
        (2**63 - 1, 2**31 - 1),
    ]


def test_preallocation_rounds_down_to_whole_entries(tmp_path: Path) -> None:
    path = time_index_path(tmp_path, 0)
    index = TimeIndex(path, 0)
    index.maybe_append(5, 1)
    assert path.stat().st_size == DEFAULT_MAX_INDEX_SIZE - DEFAULT_MAX_INDEX_SIZE % 12
    index.close()
    assert path.stat().st_size == 12


# ---- model --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    base=st.integers(0, 2**40),
    steps=st.lists(st.tuples(st.integers(0, 50), st.integers(1, 100)), max_size=60),
    start_ts=st.integers(-1, 10**12),
    targets=st.lists(st.integers(-5, 4000), max_size=20),
    cut=st.integers(-5, 7000),
    crash=st.booleans(),
)
def test_matches_linear_scan_model(
    base: int,
    steps: list[tuple[int, int]],
    start_ts: int,
    targets: list[int],
    cut: int,
    crash: bool,
) -> None:
    # What a segment feeds in: its max timestamp so far (never falls) at growing offsets.
    calls: list[tuple[int, int]] = []
    timestamp, offset = start_ts, base
    for ts_step, offset_step in steps:
        timestamp += ts_step
        offset += offset_step
        calls.append((timestamp, offset))
    entries = model_appends(calls)
    with tempfile.TemporaryDirectory() as tmp:
        path = time_index_path(Path(tmp), base)
        index = TimeIndex(path, base, max_index_size=12 * 64)
        for ts, off in calls:
            index.maybe_append(ts, off)
        assert list(index.iter_entries()) == entries
        for target in [start_ts + t for t in targets] + [ts for ts, _ in entries]:
            assert index.lookup(target) == model_lookup(entries, base, target)

        if crash:
            index.close_handler()
            assert path.stat().st_size == 12 * 64
        else:
            index.close()
            assert path.stat().st_size == 12 * len(entries)
        reopened = TimeIndex(path, base, max_index_size=12 * 64)
        assert list(reopened.iter_entries()) == entries
        reopened.sanity_check()

        kept = [e for e in entries if e[1] < base + cut]
        reopened.truncate_to(base + cut)
        assert list(reopened.iter_entries()) == kept
        for target in [start_ts + t for t in targets]:
            assert reopened.lookup(target) == model_lookup(kept, base, target)
        reopened.close_handler()
        assert list(TimeIndex(path, base, max_index_size=12 * 64).iter_entries()) == kept


def test_truncate_to_with_equal_offsets_drops_all_of_them(tmp_path: Path) -> None:
    index = TimeIndex(time_index_path(tmp_path, 0), 0)
    for ts, off in [(10, 1), (20, 5), (30, 5), (40, 5), (50, 9)]:
        index.maybe_append(ts, off)
    index.truncate_to(5)
    assert list(index.iter_entries()) == [(10, 1)]
    index.close()


def test_lookup_on_large_index(tmp_path: Path) -> None:
    # More entries than the warm section (8192 // 12 = 682), so both search branches run.
    index = TimeIndex(time_index_path(tmp_path, 100), 100)
    entries = [(1000 + 3 * i, 100 + 2 * i) for i in range(3000)]
    for ts, off in entries:
        index.maybe_append(ts, off)
    for target in range(990, 10_020, 11):
        assert index.lookup(target) == model_lookup(entries, 100, target)
    index.close()


# ---- Kafka's append rules -----------------------------------------------------------------


def test_maybe_append_rules(tmp_path: Path) -> None:
    index = TimeIndex(time_index_path(tmp_path, 100), 100)
    index.maybe_append(NO_TIMESTAMP, 101)  # batches without timestamps never get in
    assert index.entries == 0
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, 100)
    assert index.lookup(10**15) == TimestampOffset(NO_TIMESTAMP, 100)
    index.maybe_append(500, 110)
    index.maybe_append(500, 120)  # same max timestamp: nothing new to say
    assert list(index.iter_entries()) == [(500, 110)]
    with pytest.raises(InvalidTimestampError):
        index.maybe_append(499, 130)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(600, 109)
    with pytest.raises(IndexOffsetOverflowError):
        index.maybe_append(700, 100 + 2**31)
    index.maybe_append(600, 110)  # an equal offset with a larger timestamp is allowed
    assert index.last_entry == TimestampOffset(600, 110)
    assert index.lookup(499) == TimestampOffset(NO_TIMESTAMP, 100)
    assert index.lookup(550) == TimestampOffset(500, 110)
    index.close()


def test_last_slot_is_reserved_for_the_roll_entry(tmp_path: Path) -> None:
    path = time_index_path(tmp_path, 0)
    index = TimeIndex(path, 0, max_index_size=36)  # three slots
    index.maybe_append(10, 1)
    assert not index.is_full()
    index.maybe_append(20, 2)
    assert index.is_full()  # one slot early
    with pytest.raises(IndexFullError):
        index.maybe_append(30, 3)
    # On roll/close the segment writes its largest timestamp into the reserved slot...
    index.maybe_append(35, 4, skip_full_check=True)
    # ...and doing it again (close after roll) is a no-op, not an error.
    index.maybe_append(35, 4, skip_full_check=True)
    with pytest.raises(IndexFullError):
        index.maybe_append(40, 5, skip_full_check=True)
    index.close()
    assert list(ENTRY.iter_unpack(path.read_bytes())) == [(10, 1), (20, 2), (35, 4)]


# ---- crash-like reopen --------------------------------------------------------------------


def test_untrimmed_file_after_crash(tmp_path: Path) -> None:
    path = time_index_path(tmp_path, 0)
    entries = [(1_700_000_000_000 + i, 10 * i + 3) for i in range(1000)]
    index = TimeIndex(path, 0)
    for ts, off in entries:
        index.maybe_append(ts, off)
    index.close_handler()
    assert path.stat().st_size > 12 * 1000
    reopened = TimeIndex(path, 0)
    assert reopened.entries == 1000
    assert reopened.last_entry == entries[-1]
    reopened.sanity_check()
    with pytest.raises(InvalidTimestampError):
        reopened.maybe_append(1_600_000_000_000, 20_000)  # the reopened index still guards order
    reopened.maybe_append(1_800_000_000_000, 20_000)
    reopened.close()
    assert path.stat().st_size == 12 * 1001


def test_crash_with_lost_page_keeps_the_ordered_prefix(tmp_path: Path) -> None:
    path = time_index_path(tmp_path, 0)
    entries = [(1000 + i, 5 + i) for i in range(1000)]
    index = TimeIndex(path, 0)
    for ts, off in entries:
        index.maybe_append(ts, off)
    index.close_handler()
    with open(path, "r+b") as f:  # page 1 (bytes 4096..8191) lost
        f.seek(4096)
        f.write(bytes(4096))
    reopened = TimeIndex(path, 0)
    assert list(reopened.iter_entries()) == entries[: 4096 // 12]  # whole entries before it
    reopened.sanity_check()
    reopened.close()


# ---- corruption ---------------------------------------------------------------------------


def test_size_not_a_multiple_of_entry_size(tmp_path: Path) -> None:
    path = time_index_path(tmp_path, 0)
    path.write_bytes(ENTRY.pack(10, 1) + b"\0" * 8)
    index = TimeIndex(path, 0)
    with pytest.raises(CorruptIndexError, match="multiple of the entry size 12"):
        index.sanity_check()
    index.reset()
    index.maybe_append(10, 1)
    index.sanity_check()
    index.close()
    assert path.read_bytes() == ENTRY.pack(10, 1)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([(10, 1), (30, 2), (20, 3)], "entry 2"),  # timestamps fall
        ([(10, 1), (10, 2)], "entry 1"),  # timestamps repeat
        ([(10, 5), (20, 4)], "entry 1"),  # offsets fall
        ([(10, -1)], "less than the base offset"),
    ],
)
def test_non_monotonic_files(tmp_path: Path, entries: list[tuple[int, int]], message: str) -> None:
    path = time_index_path(tmp_path, 0)
    path.write_bytes(b"".join(ENTRY.pack(*e) for e in entries))
    index = TimeIndex(path, 0)
    with pytest.raises(CorruptIndexError, match=message):
        index.sanity_check()
    index.truncate()
    index.sanity_check()
    index.close()
    assert path.stat().st_size == 0


# ---- laziness and descriptors -------------------------------------------------------------


def test_constructing_1000_indexes_opens_nothing(tmp_path: Path) -> None:
    paths = [time_index_path(tmp_path, 100 * i) for i in range(1000)]
    for i, path in enumerate(paths[:500]):
        path.write_bytes(ENTRY.pack(1000 + i, 1))
    before = open_fds()
    indexes = [TimeIndex(p, 100 * i) for i, p in enumerate(paths)]
    assert open_fds() == before
    assert not any(index.is_loaded for index in indexes)
    assert not any(p.exists() for p in paths[500:])
    assert indexes[7].lookup(2000) == TimestampOffset(1007, 701)
    assert [i for i, index in enumerate(indexes) if index.is_loaded] == [7]
    assert open_fds() == before + MAPPED_FDS
    indexes[7].close()
    assert open_fds() == before


def test_io_errors_name_the_log_dir(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "nope-0" / f"{0:020d}.timeindex"
    with pytest.raises(KafkaStorageError) as info:
        TimeIndex(path, 0).maybe_append(1, 1)
    assert info.value.log_dir == str(tmp_path / "logs")
