"""The damage-tolerant segment scanner on its own (no Spark): real files, real damage."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkeel.records.batch import CRC_START
from logkeel.records.builder import build_batch
from logkeel.spark.segment_scan import (
    CorruptRange,
    SegmentFile,
    ValidBatch,
    find_partitions,
    last_leader_epoch,
    list_segments,
    scan_segment,
    summarize_segment,
)
from logkeel.storage.checkpoints import EpochEntry
from logkeel.storage.topic_partition import TopicPartition
from tests.spark.logdirs import (
    RECORDS_PER_BATCH,
    batch_positions,
    corrupt_batch,
    find_batch,
    record,
    remove_segment,
    scribble,
    segment_holding,
    truncate_at,
    write_partition,
)


def scan_all(log_dir: Path) -> list[tuple[SegmentFile, ValidBatch | CorruptRange]]:
    out = []
    for replica in find_partitions([log_dir]):
        for seg in list_segments(replica):
            out.extend((seg, item) for item in scan_segment(seg))
    return out


def valid_offsets(items) -> list[int]:
    return [
        o
        for _, it in items
        if isinstance(it, ValidBatch)
        for o in range(it.header.base_offset, it.header.next_offset)
    ]


def corrupt(items) -> list[CorruptRange]:
    return [it for _, it in items if isinstance(it, CorruptRange)]


def test_intact_partition_yields_every_batch_in_order(tmp_path):
    w = write_partition(tmp_path, "t", 0, 40)
    assert len(w.segments()) > 3  # several segments, so segment boundaries are crossed
    items = scan_all(tmp_path)
    assert valid_offsets(items) == list(range(w.end_offset))
    assert corrupt(items) == []
    # Each segment's batches tile its file exactly.
    for seg in list_segments(find_partitions([tmp_path])[0]):
        batches = [it for it in scan_segment(seg)]
        assert sum(b.header.size for b in batches) == os.path.getsize(seg.path)


def test_crc_mismatch_in_the_middle_is_one_range_and_the_scan_goes_on(tmp_path):
    w = write_partition(tmp_path, "t", 0, 40)
    segment, position, size = corrupt_batch(w, 30)
    items = scan_all(tmp_path)
    [bad] = corrupt(items)
    assert (bad.position, bad.size) == (position, size)
    assert (bad.first_offset, bad.last_offset) == (30, 32)
    assert bad.crc_valid is False and "CRC mismatch" in bad.reason
    assert bad.header is not None and bad.header.base_offset == 30
    assert valid_offsets(items) == [o for o in range(w.end_offset) if not 30 <= o <= 32]
    assert [s for s, it in items if it is bad][0].path == str(segment)


def test_scribbled_header_resyncs_on_the_next_batch(tmp_path):
    w = write_partition(tmp_path, "t", 0, 40)
    segment, position, size = find_batch(w, 45)
    scribble(segment, position, b"\x00" * 30)  # base offset, length, epoch, magic, crc: gone
    items = scan_all(tmp_path)
    [bad] = corrupt(items)
    assert (bad.position, bad.size, bad.first_offset, bad.last_offset) == (position, size, 45, 47)
    assert "invalid batch header" in bad.reason and bad.crc_valid is None
    assert valid_offsets(items) == [o for o in range(w.end_offset) if not 45 <= o <= 47]


def test_overwritten_base_offset_is_caught_by_its_neighbour(tmp_path):
    w = write_partition(tmp_path, "t", 0, 40)
    segment, position, size = find_batch(w, 60)
    # baseOffset is not covered by the CRC: only the offsets around it can tell.
    scribble(segment, position, (1_000_000).to_bytes(8, "big"))
    items = scan_all(tmp_path)
    [bad] = corrupt(items)
    assert (bad.position, bad.size, bad.first_offset, bad.last_offset) == (position, size, 60, 62)
    assert "overwritten" in bad.reason
    assert valid_offsets(items) == [o for o in range(w.end_offset) if not 60 <= o <= 62]


def test_torn_tail_is_an_open_range(tmp_path):
    w = write_partition(tmp_path, "t", 0, 40)
    segment, position, _ = find_batch(w, 90)
    truncate_at(w, 90, cut_into_batch=25)
    items = scan_all(tmp_path)
    [bad] = corrupt(items)
    assert (bad.position, bad.size, bad.first_offset, bad.last_offset) == (position, 25, 90, None)
    assert valid_offsets(items) == list(range(90))


def test_missing_segment_is_a_zero_size_range_before_the_next_segment(tmp_path):
    w = write_partition(tmp_path, "t", 0, 40)
    gone = segment_holding(w, 60)
    segments = w.segments()
    i = segments.index(gone)
    prev_end = int(gone.stem)
    next_base = int(segments[i + 1].stem)
    remove_segment(gone)
    items = scan_all(tmp_path)
    [gap] = corrupt(items)
    assert (gap.size, gap.first_offset, gap.last_offset) == (0, prev_end, next_base - 1)
    assert gap.position == os.path.getsize(segments[i - 1])
    assert "no segment file" in gap.reason
    assert valid_offsets(items) == [o for o in range(w.end_offset) if not prev_end <= o < next_base]


def test_summary_counts_valid_batches_and_ranges(tmp_path):
    w = write_partition(tmp_path, "t", 0, 12, epochs=[0] * 6 + [4] * 6, segment_bytes=1 << 20)
    corrupt_batch(w, 9)
    [seg] = list_segments(find_partitions([tmp_path])[0])
    s = summarize_segment(seg)
    assert (s.base_offset, s.end_offset, s.first_batch_offset, s.last_batch_epoch) == (0, 36, 0, 4)
    assert s.valid_batches == 11
    assert [(c["first_offset"], c["last_offset"]) for c in s.corrupt] == [(9, 11)]


def test_find_partitions_takes_log_dirs_and_partition_dirs_and_skips_the_rest(tmp_path):
    a = tmp_path / "a"
    write_partition(a, "orders", 0, 1)
    write_partition(a, "orders", 1, 1)
    (a / "orders-2.abc123-delete").mkdir()
    (a / "not-a-partition-x").mkdir()
    b = tmp_path / "b"
    write_partition(b, "my-topic.v2", 7, 1)
    found = find_partitions([a, b / "my-topic.v2-7"])
    assert [(r.topic_partition, Path(r.log_dir).name) for r in found] == [
        (TopicPartition("orders", 0), "a"),
        (TopicPartition("orders", 1), "a"),
        (TopicPartition("my-topic.v2", 7), "b"),
    ]


def test_last_leader_epoch_ignores_epochs_beyond_the_data():
    entries = [EpochEntry(0, 0), EpochEntry(3, 50), EpochEntry(5, 90)]
    assert last_leader_epoch(entries, 120, 5) == 5
    assert last_leader_epoch(entries, 80, 3) == 3  # truncated below epoch 5's start
    assert last_leader_epoch(entries, 80, None) == 3  # no batch: the checkpoint alone
    assert last_leader_epoch([], 10, 2) == 2  # no checkpoint: the batches alone
    assert last_leader_epoch([], 0, None) == -1


# -- property: whatever the damage, the scan tiles the file and keeps every untouched batch ---

BASES = list(range(0, 20 * RECORDS_PER_BATCH, RECORDS_PER_BATCH))
ORIGINAL_BATCHES = [
    build_batch([record(o + j) for j in range(RECORDS_PER_BATCH)], base_offset=o) for o in BASES
]
ORIGINAL = b"".join(ORIGINAL_BATCHES)
POSITIONS = [sum(len(b) for b in ORIGINAL_BATCHES[:i]) for i in range(len(ORIGINAL_BATCHES))]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.integers(0, len(ORIGINAL) - 1),
    data=st.binary(min_size=1, max_size=300),
    cut=st.none() | st.integers(0, len(ORIGINAL)),
)
def test_random_damage(start, data, cut):
    damaged = bytearray(ORIGINAL)
    end = min(len(damaged), start + len(data))
    damaged[start:end] = data[: end - start]
    if cut is not None:
        del damaged[cut:]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t-0" / "00000000000000000000.log"
        path.parent.mkdir()
        path.write_bytes(damaged)
        seg = SegmentFile(d, "t", 0, str(path), 0, None, len(damaged))
        items = list(scan_segment(seg))

    # 1. Batches and corrupt ranges tile the file, in order.
    pos = 0
    for it in items:
        assert it.position == pos
        pos += it.header.size if isinstance(it, ValidBatch) else it.size
    assert pos == len(damaged)

    # 2. Every batch yielded is an original batch in its place, CRC-covered bytes intact.
    original_at = dict(zip(POSITIONS, ORIGINAL_BATCHES, strict=True))
    for it in items:
        if isinstance(it, ValidBatch):
            batch = original_at[it.position]
            assert it.header.size == len(batch)
            assert damaged[it.position + CRC_START : it.position + len(batch)] == batch[CRC_START:]

    # 3. Every batch the damage did not touch is yielded, with its offsets.
    file_end = len(damaged)
    yielded = {it.position: it.header.base_offset for it in items if isinstance(it, ValidBatch)}
    for p, batch, base in zip(POSITIONS, ORIGINAL_BATCHES, BASES, strict=True):
        untouched = p + len(batch) <= min(start, file_end) or (
            p >= end and p + len(batch) <= file_end
        )
        if untouched:
            assert yielded.get(p) == base

    # 4. A range between two batches names exactly the offsets between them.
    for i, it in enumerate(items):
        if isinstance(it, CorruptRange) and 0 < i < len(items) - 1:
            before, after = items[i - 1], items[i + 1]
            if isinstance(before, ValidBatch) and isinstance(after, ValidBatch):
                assert it.first_offset == before.header.next_offset
                assert it.last_offset == after.header.base_offset - 1


def test_batch_positions_helper_agrees_with_the_scan(tmp_path):
    w = write_partition(tmp_path, "t", 0, 10)
    for segment in w.segments():
        seg = next(
            s for s in list_segments(find_partitions([tmp_path])[0]) if s.path == str(segment)
        )
        assert [(b.position, b.header.size, b.header.base_offset) for b in scan_segment(seg)] == (
            batch_positions(segment)
        )
