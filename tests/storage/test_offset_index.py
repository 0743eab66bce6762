"""The offset index against Kafka's format, a linear-scan model, crashes and corruption."""

from __future__ import annotations

import bisect
import itertools
import struct
import sys
import tempfile
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.storage.engine.index_file import DEFAULT_MAX_INDEX_SIZE
from logkeel.storage.engine.offset_index import OffsetIndex, OffsetPosition
from logkeel.storage.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidIndexEntryError,
    InvalidOffsetError,
    KafkaStorageError,
    StorageError,
)

from .logutil import open_fds

ENTRY = struct.Struct(">ii")  # Kafka's OffsetIndex: putInt(relative offset), putInt(position)
# Before 3.13 an mmap holds a dup of its file's descriptor.
MAPPED_FDS = 1 if sys.version_info < (3, 13) else 0


def index_path(root: Path, base_offset: int) -> Path:
    partition_dir = root / "logs" / "topic-0"
    partition_dir.mkdir(parents=True, exist_ok=True)
    return partition_dir / f"{base_offset:020d}.index"


def model_lookup(entries: list[tuple[int, int]], base: int, target: int) -> OffsetPosition:
    """Greatest entry with offset <= target, by linear scan."""
    found = OffsetPosition(base, 0)
    for offset, position in entries:
        if offset <= target:
            found = OffsetPosition(offset, position)
    return found


def raw_entries(path: Path) -> list[tuple[int, int]]:
    return list(ENTRY.iter_unpack(path.read_bytes()))


def fill(index: OffsetIndex, entries: list[tuple[int, int]]) -> None:
    for offset, position in entries:
        index.append(offset, position)


def sample_entries(base: int, n: int) -> list[tuple[int, int]]:
    return [(base + 3 * i + 2, 4100 * (i + 1)) for i in range(n)]


# ---- format -------------------------------------------------------------------------------


def test_bytes_are_kafkas_layout(tmp_path: Path) -> None:
    path = index_path(tmp_path, 1000)
    index = OffsetIndex(path, 1000)
    index.append(1005, 4242)
    index.append(1000 + 2**31 - 1, 2**31 - 1)  # the largest relative offset and position
    index.close()
    data = path.read_bytes()
    # 8 bytes an entry, big-endian int32 relative offset then int32 position, trimmed on close.
    assert data == bytes.fromhex("00000005 00001092 7fffffff 7fffffff")
    assert raw_entries(path) == [(5, 4242), (2**31 - 1, 2**31 - 1)]


def test_active_file_is_preallocated_and_trimmed_on_close(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    index = OffsetIndex(path, 0, max_index_size=1003)  # rounded down to whole entries
    fill(index, sample_entries(0, 3))
    assert path.stat().st_size == 1000
    assert index.max_entries == 125
    index.trim_to_valid_size()
    assert path.stat().st_size == 24
    assert index.is_full()
    assert index.resize(1003) is True
    assert index.resize(1000) is False
    assert path.stat().st_size == 1000 and not index.is_full()
    index.close()
    assert path.stat().st_size == 24


def test_default_max_index_size_is_kafkas(tmp_path: Path) -> None:
    index = OffsetIndex(index_path(tmp_path, 0), 0)
    assert index.max_index_size == DEFAULT_MAX_INDEX_SIZE == 10 * 1024 * 1024
    assert index.max_entries == DEFAULT_MAX_INDEX_SIZE // 8
    index.close()


# ---- lookups, truncation, reopen against a model ------------------------------------------

entry_lists = st.lists(
    st.tuples(st.integers(1, 1000), st.integers(1, 100_000)), min_size=0, max_size=60
)


@settings(max_examples=150, deadline=None)
@given(
    base=st.integers(0, 2**40),
    deltas=entry_lists,
    targets=st.lists(st.integers(-5, 70_000), max_size=20),
    cut=st.integers(-5, 70_000),
    crash=st.booleans(),
)
def test_matches_linear_scan_model(
    base: int, deltas: list[tuple[int, int]], targets: list[int], cut: int, crash: bool
) -> None:
    entries: list[tuple[int, int]] = []
    offset, position = base, 0
    for offset_step, position_step in deltas:
        offset += offset_step
        position += position_step
        entries.append((offset, position))
    with tempfile.TemporaryDirectory() as tmp:
        path = index_path(Path(tmp), base)
        index = OffsetIndex(path, base, max_index_size=8 * 64)
        fill(index, entries)
        assert index.entries == len(entries)
        assert list(index.iter_entries()) == entries
        for target in [base + t for t in targets] + [o for o, _ in entries]:
            assert index.lookup(target) == model_lookup(entries, base, target)
        assert index.last_entry == (entries[-1] if entries else (base, 0))

        # Reopen: a clean close trims; a crash leaves the preallocated file untrimmed.
        if crash:
            index.close_handler()
            assert path.stat().st_size == 8 * 64
        else:
            index.close()
            assert path.stat().st_size == 8 * len(entries)
        reopened = OffsetIndex(path, base, max_index_size=8 * 64)
        assert list(reopened.iter_entries()) == entries
        reopened.sanity_check()

        kept = [e for e in entries if e[0] < base + cut]
        reopened.truncate_to(base + cut)
        assert list(reopened.iter_entries()) == kept
        for target in [base + t for t in targets]:
            assert reopened.lookup(target) == model_lookup(kept, base, target)
        # A crash right after truncating must not resurrect the dropped entries.
        reopened.close_handler()
        again = OffsetIndex(path, base, max_index_size=8 * 64)
        assert list(again.iter_entries()) == kept
        again.close()


def test_lookup_before_first_entry_and_empty(tmp_path: Path) -> None:
    index = OffsetIndex(index_path(tmp_path, 50), 50)
    assert index.lookup(10**9) == OffsetPosition(50, 0)
    index.append(60, 100)
    assert index.lookup(59) == OffsetPosition(50, 0)
    assert index.lookup(60) == OffsetPosition(60, 100)
    assert index.lookup(10**18) == OffsetPosition(60, 100)
    index.close()


def test_large_index_lookups_cover_warm_and_cold_sections(tmp_path: Path) -> None:
    # More entries than the 1024-entry warm section, so both search branches run.
    base = 7
    entries = [(base + 2 * i + 1, 10 * i + 3) for i in range(5000)]
    index = OffsetIndex(index_path(tmp_path, base), base)
    fill(index, entries)
    offsets = [o for o, _ in entries]
    for target in range(base - 2, base + 10_003, 7):
        slot = bisect.bisect_right(offsets, target) - 1
        expected = OffsetPosition(*entries[slot]) if slot >= 0 else OffsetPosition(base, 0)
        assert index.lookup(target) == expected
    index.close()


class CountingOffsetIndex(OffsetIndex):
    """Counts entry reads, to check a lookup's cost without timing it."""

    reads = 0

    def _entry(self, n: int) -> OffsetPosition:
        self.reads += 1
        return super()._entry(n)


def test_lookup_reads_logarithmically_many_entries_of_a_full_10mib_index(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    count = DEFAULT_MAX_INDEX_SIZE // 8
    # Build the full file directly (entry i is offset i + 1 at position 16 * i): 1.3 million
    # appends would only slow the test down.
    words = array("i", itertools.chain.from_iterable((i + 1, 16 * i) for i in range(count)))
    if sys.byteorder == "little":
        words.byteswap()
    path.write_bytes(words.tobytes())
    index = CountingOffsetIndex(path, 0)
    assert index.entries == count
    for target in (0, 1, 5, count // 3, count - 5000, count - 1, count, count * 2):
        index.reads = 0
        found = index.lookup(target)
        offset = min(target, count)
        assert found == (OffsetPosition(offset, 16 * (offset - 1)) if offset else (0, 0))
        assert index.reads <= 2 * 21 + 4  # log2(1.3M) ~ 20.3
    index.close()


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    index = OffsetIndex(index_path(tmp_path, 0), 0)
    fill(index, [(10, 100), (20, 200), (30, 300)])
    assert index.fetch_upper_bound_offset(0, 150) == OffsetPosition(20, 200)
    assert index.fetch_upper_bound_offset(100, 100) == OffsetPosition(20, 200)
    assert index.fetch_upper_bound_offset(250, 49) == OffsetPosition(30, 300)
    assert index.fetch_upper_bound_offset(250, 51) is None
    index.close()


# ---- appends ------------------------------------------------------------------------------


def test_append_rejects_non_monotonic_entries(tmp_path: Path) -> None:
    index = OffsetIndex(index_path(tmp_path, 100), 100)
    index.append(110, 5000)
    # The 0.11 index-corruption incident (docs/proposals.md): keying by a batch's base offset
    # can repeat the last key.
    with pytest.raises(InvalidOffsetError) as info:
        index.append(110, 9000)
    assert isinstance(info.value, ValueError) and isinstance(info.value, StorageError)
    with pytest.raises(InvalidOffsetError):
        index.append(105, 9000)
    with pytest.raises(InvalidIndexEntryError):
        index.append(111, 5000)  # a later batch cannot start where an earlier one does
    with pytest.raises(InvalidIndexEntryError):
        index.append(111, -1)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(100 + 2**31, 9000)
    with pytest.raises(IndexOffsetOverflowError):
        OffsetIndex(index_path(tmp_path, 200), 200).append(199, 1)
    assert list(index.iter_entries()) == [(110, 5000)]
    assert index.can_append_offset(100 + 2**31 - 1) and not index.can_append_offset(99)
    index.close()


def test_appends_after_truncation_and_resize_check_against_the_entries_now_there(
    tmp_path: Path,
) -> None:
    """The append path remembers the last entry it wrote; truncation, trimming and reloading
    change what the last entry is, and appends must follow that."""
    index = OffsetIndex(index_path(tmp_path, 0), 0, max_index_size=8 * 16)
    for offset, position in ((10, 100), (20, 200), (30, 300)):
        index.append(offset, position)
    index.truncate_to(20)  # keeps (10, 100)
    index.append(15, 150)  # below the dropped (20, 200), above the kept entry
    with pytest.raises(InvalidOffsetError):
        index.append(15, 160)
    index.trim_to_valid_size()  # a new map
    index.resize(8 * 16)
    with pytest.raises(InvalidIndexEntryError):
        index.append(16, 150)
    index.append(16, 160)
    index.close()
    again = OffsetIndex(index_path(tmp_path, 0), 0, max_index_size=8 * 16)
    again.resize(8 * 16)
    with pytest.raises(InvalidOffsetError):
        again.append(16, 170)
    again.append(17, 170)
    assert list(again.iter_entries()) == [(10, 100), (15, 150), (16, 160), (17, 170)]
    again.close()


def test_append_to_full_index(tmp_path: Path) -> None:
    index = OffsetIndex(index_path(tmp_path, 0), 0, max_index_size=16)
    fill(index, [(1, 10), (2, 20)])
    assert index.is_full()
    with pytest.raises(IndexFullError):
        index.append(3, 30)
    index.close()


def test_first_append_reserves_disk_blocks_but_file_stays_sparse(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    index = OffsetIndex(path, 0)
    index.append(1, 1)
    allocated = path.stat().st_blocks * 512
    assert 64 * 1024 <= allocated < DEFAULT_MAX_INDEX_SIZE // 4
    index.close()


# ---- crash-like reopen --------------------------------------------------------------------


def test_untrimmed_file_after_crash_reopens_with_appended_entries(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    entries = sample_entries(0, 700)  # spans pages
    index = OffsetIndex(path, 0)
    fill(index, entries)
    index.flush()
    index.close_handler()  # the process dies: no trim
    assert path.stat().st_size == DEFAULT_MAX_INDEX_SIZE
    reopened = OffsetIndex(path, 0)
    assert reopened.entries == 700
    assert list(reopened.iter_entries()) == entries
    reopened.sanity_check()
    # Recovery supplements the kept index instead of rebuilding it.
    reopened.append(5000, 10**7)
    assert reopened.lookup(6000) == OffsetPosition(5000, 10**7)
    reopened.close()
    assert path.stat().st_size == 701 * 8


def test_first_entry_at_relative_offset_zero_survives_a_crash(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    index = OffsetIndex(path, 0)
    fill(index, [(0, 0), (5, 100)])
    index.close_handler()
    assert list(OffsetIndex(path, 0).iter_entries()) == [(0, 0), (5, 100)]


def test_crash_with_lost_page_keeps_the_ordered_prefix(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    entries = sample_entries(0, 1500)
    index = OffsetIndex(path, 0)
    fill(index, entries)
    index.close_handler()
    # The second page (entries 512..1023) never reached the disk: it reads back as zeros.
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(bytes(4096))
    reopened = OffsetIndex(path, 0)
    assert list(reopened.iter_entries()) == entries[:512]
    reopened.sanity_check()
    # The entries past the hole were scrubbed, so they cannot come back after another crash.
    reopened.close_handler()
    with open(path, "rb") as f:
        f.seek(512 * 8)
        assert f.read(1500 * 8 - 512 * 8) == bytes(1500 * 8 - 512 * 8)
    assert OffsetIndex(path, 0).entries == 512


def test_crash_with_garbage_after_entries(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    entries = sample_entries(0, 10)
    index = OffsetIndex(path, 0, max_index_size=800)
    fill(index, entries)
    index.close_handler()
    with open(path, "r+b") as f:
        f.seek(10 * 8)
        f.write(ENTRY.pack(3, 7))  # stale bytes that do not continue the ordering
    assert list(OffsetIndex(path, 0, max_index_size=800).iter_entries()) == entries


# ---- corruption ---------------------------------------------------------------------------


def test_size_not_a_multiple_of_entry_size(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    path.write_bytes(ENTRY.pack(1, 10) + ENTRY.pack(2, 20) + b"\x01\x02\x03")
    index = OffsetIndex(path, 0)
    with pytest.raises(CorruptIndexError, match="multiple"):
        index.sanity_check()
    assert index.entries == 2  # whole entries are still readable
    # Usable for a rebuild: drop everything, grow back, append, and it checks out.
    index.reset()
    assert index.entries == 0 and path.stat().st_size == DEFAULT_MAX_INDEX_SIZE
    fill(index, [(1, 10), (2, 20)])
    index.sanity_check()
    index.close()
    assert raw_entries(path) == [(1, 10), (2, 20)]


def test_non_monotonic_trimmed_file(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    path.write_bytes(ENTRY.pack(1, 10) + ENTRY.pack(5, 50) + ENTRY.pack(3, 60) + ENTRY.pack(9, 90))
    index = OffsetIndex(path, 0)
    assert index.entries == 4  # a trimmed file is taken whole, as by Kafka, then checked
    with pytest.raises(CorruptIndexError, match="entry 2"):
        index.sanity_check()
    index.truncate()
    assert index.entries == 0
    index.sanity_check()
    index.close()
    assert path.stat().st_size == 0


def test_positions_out_of_order(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    path.write_bytes(ENTRY.pack(1, 100) + ENTRY.pack(2, 50))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0).sanity_check()


def test_last_offset_below_base_offset(tmp_path: Path) -> None:
    path = index_path(tmp_path, 100)
    path.write_bytes(ENTRY.pack(-3, 10))
    index = OffsetIndex(path, 100)
    with pytest.raises(CorruptIndexError, match="less than the base offset"):
        index.sanity_check()
    index.truncate_to(0)
    index.sanity_check()
    index.close()


# ---- laziness, files and descriptors ------------------------------------------------------


def test_constructing_1000_indexes_opens_nothing(tmp_path: Path) -> None:
    existing = [index_path(tmp_path, 1000 * i) for i in range(500)]
    for i, path in enumerate(existing):
        path.write_bytes(ENTRY.pack(1, i + 1))
    missing = [index_path(tmp_path, 10**9 + i) for i in range(500)]
    before = open_fds()
    indexes = [OffsetIndex(p, 1000 * i) for i, p in enumerate(existing)]
    indexes += [OffsetIndex(p, 10**9 + i) for i, p in enumerate(missing)]
    assert open_fds() == before
    assert sum(index.is_loaded for index in indexes) == 0
    assert not any(p.exists() for p in missing)  # not even created
    # Closing, renaming and deleting unloaded indexes still opens nothing.
    for index in indexes[:10]:
        index.close()
    indexes[10].rename(existing[10].with_name(existing[10].name + ".deleted"))
    assert existing[10].with_name(existing[10].name + ".deleted").exists()
    assert sum(index.is_loaded for index in indexes) == 0
    # First use loads exactly the one that is used.
    assert indexes[3].lookup(3002) == OffsetPosition(3001, 4)
    assert [i for i, index in enumerate(indexes) if index.is_loaded] == [3]
    indexes[3].close()
    assert open_fds() == before


def test_no_descriptor_or_mapping_leaks(tmp_path: Path) -> None:
    before = open_fds()
    for i in range(30):
        index = OffsetIndex(index_path(tmp_path, i * 100), i * 100)
        index.append(i * 100 + 1, 1)
        index.lookup(i * 100 + 5)
        if i % 2:
            index.close()
        else:
            index.close_handler()
    assert open_fds() == before
    maps = Path("/proc/self/maps").read_text()
    assert str(tmp_path) not in maps


def test_empty_file(tmp_path: Path) -> None:
    path = index_path(tmp_path, 40)
    path.write_bytes(b"")
    index = OffsetIndex(path, 40)
    assert index.entries == 0 and index.max_entries == 0
    assert index.lookup(45) == OffsetPosition(40, 0)
    assert index.is_full()
    index.sanity_check()
    with pytest.raises(IndexFullError):
        index.append(41, 1)
    index.resize(index.max_index_size)  # what loading an active segment does
    index.append(41, 1)
    index.close()
    assert raw_entries(path) == [(1, 1)]


def test_read_only_index(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    path.write_bytes(ENTRY.pack(4, 40))
    index = OffsetIndex(path, 0, writable=False)
    assert index.lookup(10) == OffsetPosition(4, 40)
    with pytest.raises(ValueError, match="read-only"):
        index.append(5, 50)
    with pytest.raises(ValueError, match="read-only"):
        index.truncate()
    index.close()
    assert raw_entries(path) == [(4, 40)]


def test_io_errors_name_the_log_dir(tmp_path: Path) -> None:
    missing_dir = tmp_path / "logs" / "gone-0" / f"{0:020d}.index"
    with pytest.raises(KafkaStorageError) as info:
        OffsetIndex(missing_dir, 0).lookup(1)
    assert info.value.log_dir == str(tmp_path / "logs")
    with pytest.raises(KafkaStorageError) as info:
        OffsetIndex(missing_dir, 0, log_dir="/data/d1").entries  # noqa: B018
    assert info.value.log_dir == "/data/d1"


def test_rename_keeps_a_loaded_index_working(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    index = OffsetIndex(path, 0)
    fill(index, [(1, 10), (2, 20)])
    deleted = path.with_name(path.name + ".deleted")
    index.rename(deleted)
    assert index.path == deleted and deleted.exists() and not path.exists()
    index.append(3, 30)
    assert index.lookup(3) == OffsetPosition(3, 30)
    index.close()
    assert raw_entries(deleted) == [(1, 10), (2, 20), (3, 30)]
    # A missing file only moves the name (it may never have been created).
    ghost = OffsetIndex(index_path(tmp_path, 99), 99)
    ghost.rename(tmp_path / "elsewhere.index")
    assert ghost.path == tmp_path / "elsewhere.index" and not ghost.is_loaded


def test_delete(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    index = OffsetIndex(path, 0)
    index.append(1, 1)
    before_delete = open_fds()
    assert index.delete() is True
    assert not path.exists()
    assert open_fds() == before_delete - MAPPED_FDS  # the mapping is gone
    with pytest.raises(StorageError, match="deleted"):
        index.lookup(1)
    assert not path.exists()  # a late lookup did not recreate it
    assert OffsetIndex(index_path(tmp_path, 5), 5).delete() is False
