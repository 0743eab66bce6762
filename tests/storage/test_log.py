"""PartitionLog: appends, reads, rolls at every boundary, retention, truncation, producers."""

from __future__ import annotations

import os
import struct
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from logkeel.records.batch import BatchHeader
from logkeel.records.builder import build_batch
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.log_results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from logkeel.storage.engine.segment import file_name
from logkeel.storage.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)

from .logutil import TP, all_records, batch, now_ms, open_manager


def test_append_assigns_offsets_and_reads_back(tmp_path):
    m = open_manager(tmp_path)
    plog = m.get_or_create_log(TP)
    infos = [plog.append_as_leader(batch(3, key=b"%d" % i), leader_epoch=5) for i in range(4)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert plog.log_end_offset == 12
    records = all_records(plog)
    assert [r.offset for r in records] == list(range(12))
    assert [r.key for r in records] == [b"%d" % (i // 3) for i in range(12)]
    # offsets and leader epoch were rewritten in place; the CRC still holds
    data = plog.read(0, 1 << 20).read_bytes()
    header = BatchHeader.parse(data)
    assert header.partition_leader_epoch == 5
    assert plog.leader_epochs.latest_epoch == 5
    m.shutdown()


def test_segment_files_are_kafka_format(tmp_path):
    """kafka-python's independent decoder reads our segment file batch by batch."""
    m = open_manager(tmp_path)
    plog = m.get_or_create_log(TP)
    for i in range(3):
        plog.append_as_leader(build_batch([(1000 + i, b"key", b"value-%d" % i, (("h", b"x"),))]), 0)
    m.shutdown()
    raw = (tmp_path / "t-0" / file_name(0, ".log")).read_bytes()
    pos, seen = 0, []
    while pos < len(raw):
        (length,) = struct.unpack_from(">i", raw, pos + 8)
        kb = DefaultRecordBatch(raw[pos : pos + 12 + length])
        assert kb.validate_crc()
        seen.extend((r.offset, r.value, r.timestamp, r.headers) for r in kb)
        pos += 12 + length
    assert seen == [(i, b"value-%d" % i, 1000 + i, [("h", b"x")]) for i in range(3)]


def test_rejects_bad_crc_bad_length_and_oversize(tmp_path):
    m = open_manager(tmp_path, LogConfig(max_message_bytes=2000))
    plog = m.get_or_create_log(TP)
    good = bytearray(batch())
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        plog.append_as_leader(bytes(bad_crc), 0)
    bad_len = bytearray(good)
    struct.pack_into(">i", bad_len, 8, 10_000)
    with pytest.raises(CorruptRecordError):
        plog.append_as_leader(bytes(bad_len), 0)
    with pytest.raises(CorruptRecordError, match="trailing"):
        plog.append_as_leader(bytes(good) + b"\x00" * 20, 0)
    with pytest.raises(RecordTooLargeError):
        plog.append_as_leader(batch(value_size=3000), 0)
    assert plog.log_end_offset == 0 and plog.size_in_bytes == 0
    plog.append_as_leader(bytes(good), 0)
    assert plog.log_end_offset == 1
    m.shutdown()


def test_roll_on_segment_bytes(tmp_path):
    m = open_manager(tmp_path, LogConfig(segment_bytes=1000))
    plog = m.get_or_create_log(TP)
    one = batch(value_size=200)
    for _ in range(10):
        plog.append_as_leader(one, 0)
    sizes = [s.size for s in plog.segments]
    assert all(s <= 1000 for s in sizes)
    per_segment = 1000 // len(one)
    assert len(plog.segments) == -(-10 // per_segment)
    assert [s.base_offset for s in plog.segments] == [i * per_segment for i in range(len(sizes))]
    assert [r.offset for r in all_records(plog)] == list(range(10))
    m.shutdown()


def test_roll_on_segment_ms_uses_batch_timestamps(tmp_path):
    m = open_manager(tmp_path, LogConfig(segment_ms=60_000))
    plog = m.get_or_create_log(TP)
    plog.append_as_leader(batch(ts=now_ms() - 120_000), 0)
    plog.append_as_leader(batch(), 0)  # the first batch is two minutes old: roll
    plog.append_as_leader(batch(), 0)
    assert [s.base_offset for s in plog.segments] == [0, 1]
    m.shutdown()


def test_roll_on_full_index(tmp_path):
    # 3 entries of 8 bytes; index every batch
    m = open_manager(tmp_path, LogConfig(segment_index_bytes=24, index_interval_bytes=0))
    plog = m.get_or_create_log(TP)
    for _ in range(10):
        plog.append_as_leader(batch(), 0)
    assert len(plog.segments) > 2
    assert all(s.offset_index.entries <= 3 for s in plog.segments)
    assert [r.offset for r in all_records(plog)] == list(range(10))
    m.shutdown()


def test_roll_when_relative_offset_would_overflow(tmp_path):
    m = open_manager(tmp_path)
    plog = m.get_or_create_log(TP)
    plog.append_as_follower(batch(base_offset=0))
    far = (1 << 31) + 5
    plog.append_as_follower(batch(base_offset=far))
    assert [s.base_offset for s in plog.segments] == [0, far]
    assert plog.log_end_offset == far + 1
    m.shutdown()


def test_inactive_segment_indexes_are_trimmed_on_roll(tmp_path):
    m = open_manager(tmp_path, LogConfig(segment_bytes=600, index_interval_bytes=0))
    plog = m.get_or_create_log(TP)
    for _ in range(6):
        plog.append_as_leader(batch(value_size=150), 0)
    first = plog.segments[0]
    assert os.path.getsize(first.offset_index.path) == 8 * first.offset_index.entries
    # the active index is preallocated
    assert os.path.getsize(plog.active_segment.offset_index.path) == 10 * 1024 * 1024
    m.shutdown()


def test_read_respects_max_bytes_high_watermark_and_min_one_message(tmp_path):
    m = open_manager(tmp_path)
    plog = m.get_or_create_log(TP)
    for _ in range(5):
        plog.append_as_leader(batch(value_size=100), 0)
    size = plog.read(0, 1 << 20).size // 5
    assert plog.read(0, size * 2 + 1).size == size * 2
    assert plog.read(0, 10, min_one_message=True).size == size
    assert plog.read(0, 10, min_one_message=False).size == 0
    assert plog.read(0, 1 << 20, max_offset=3).size == size * 3
    assert plog.read(3, 1 << 20, max_offset=3).region is None
    assert plog.read(5, 100).region is None
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(6, 100)
    m.shutdown()


def test_offset_for_timestamp(tmp_path):
    m = open_manager(tmp_path, LogConfig(segment_bytes=500, index_interval_bytes=0))
    plog = m.get_or_create_log(TP)
    for i in range(20):
        plog.append_as_leader(build_batch([(1000 + 10 * i, None, b"x" * 50, ())]), 0)
    assert plog.fetch_offset_by_timestamp(1055).offset == 6
    assert plog.fetch_offset_by_timestamp(1060).offset == 6
    assert plog.fetch_offset_by_timestamp(0).offset == 0
    assert plog.fetch_offset_by_timestamp(99_999) is None
    assert plog.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert plog.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == 20
    top = plog.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert (top.offset, top.timestamp) == (19, 1190)
    m.shutdown()


def test_truncate_to(tmp_path):
    m = open_manager(tmp_path, LogConfig(segment_bytes=500, index_interval_bytes=0))
    plog = m.get_or_create_log(TP)
    for _ in range(20):
        plog.append_as_leader(batch(value_size=50), 0)
    plog.truncate_to(7)
    assert plog.log_end_offset == 7
    assert [r.offset for r in all_records(plog)] == list(range(7))
    assert all(s.base_offset < 7 for s in plog.segments)
    info = plog.append_as_leader(batch(), 1)
    assert info.first_offset == 7
    m.shutdown()


def test_retention_by_size_and_time_renames_then_deletes(tmp_path):
    cfg = LogConfig(segment_bytes=500, retention_bytes=1000, file_delete_delay_ms=0)
    m = open_manager(tmp_path, cfg)
    plog = m.get_or_create_log(TP)
    for _ in range(20):
        plog.append_as_leader(batch(value_size=100), 0)
    plog.high_watermark = plog.log_end_offset
    before = len(plog.segments)
    deleted = plog.delete_old_segments()
    assert deleted == before - len(plog.segments) > 0
    assert plog.size_in_bytes <= 1000 + 500
    assert plog.log_start_offset == plog.segments[0].base_offset
    assert not list((tmp_path / "t-0").glob("*.deleted"))  # delay 0: removed at once
    # time: everything is old except what the high watermark protects
    plog.config = LogConfig(segment_bytes=500, retention_ms=1000, file_delete_delay_ms=0)
    plog.delete_old_segments(now_ms=now_ms() + 10_000)
    assert plog.log_start_offset == plog.log_end_offset == 20
    assert len(plog.segments) == 1
    m.shutdown()


def test_retention_never_passes_high_watermark(tmp_path):
    m = open_manager(tmp_path, LogConfig(segment_bytes=300, retention_ms=0, file_delete_delay_ms=0))
    plog = m.get_or_create_log(TP)
    for _ in range(10):
        plog.append_as_leader(batch(value_size=100), 0)
    plog.high_watermark = 4
    plog.delete_old_segments(now_ms=now_ms() + 10_000)
    assert plog.log_start_offset <= 4


def test_delete_records_moves_log_start(tmp_path):
    m = open_manager(tmp_path, LogConfig(segment_bytes=300, file_delete_delay_ms=0))
    plog = m.get_or_create_log(TP)
    for _ in range(10):
        plog.append_as_leader(batch(value_size=100), 0)
    plog.high_watermark = 10
    assert plog.maybe_increment_log_start_offset(5)
    assert plog.log_start_offset == 5
    assert all_records(plog)[0].offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(4, 100)
    with pytest.raises(OffsetOutOfRangeError):
        plog.maybe_increment_log_start_offset(11)
    m.shutdown()
    m2 = open_manager(tmp_path)
    assert m2.get_log(TP).log_start_offset == 5
    m2.shutdown()


def test_idempotent_duplicate_returns_original_offsets(tmp_path):
    m = open_manager(tmp_path)
    plog = m.get_or_create_log(TP)
    opts = {"producer_id": 7, "producer_epoch": 0}
    first = plog.append_as_leader(batch(2, base_sequence=0, **opts), 0)
    plog.append_as_leader(batch(1, base_sequence=2, **opts), 0)
    dup = plog.append_as_leader(batch(2, base_sequence=0, **opts), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (
        first.first_offset,
        first.last_offset,
    )
    assert plog.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        plog.append_as_leader(batch(1, base_sequence=9, **opts), 0)
    m.shutdown()
    # producer state survives a restart (snapshot at shutdown)
    m2 = open_manager(tmp_path)
    plog2 = m2.get_log(TP)
    assert plog2.append_as_leader(batch(1, base_sequence=2, **opts), 0).duplicate
    assert plog2.append_as_leader(batch(1, base_sequence=3, **opts), 0).first_offset == 3
    m2.shutdown()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 300)), min_size=1, max_size=40),
    segment_bytes=st.integers(200, 3000),
    interval=st.integers(0, 600),
    clean=st.booleans(),
)
def test_reopen_gives_back_every_record(tmp_path_factory, sizes, segment_bytes, interval, clean):
    path = tmp_path_factory.mktemp("log")
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval)
    m = open_manager(path, cfg)
    plog = m.get_or_create_log(TP)
    expected = []
    for n, size in sizes:
        info = plog.append_as_leader(batch(n, value_size=size), 0)
        expected.extend(range(info.first_offset, info.last_offset + 1))
    if clean:
        m.shutdown()
    else:
        plog.flush(plog.log_end_offset // 2)
        m.checkpoint_all()
        m.scheduler.shutdown()
        for s in plog.segments:
            s.close()
        for d in m.dirs:
            d.close()
    m2 = open_manager(path, cfg)
    plog2 = m2.get_log(TP)
    assert plog2.log_end_offset == len(expected)
    assert [r.offset for r in all_records(plog2)] == expected
    # indexes agree with a linear scan: every entry points at a batch with that last offset
    for seg in plog2.segments:
        starts = {b.position: b.header.last_offset for b in seg.log.batches()}
        for entry in seg.offset_index.iter_entries():
            assert starts[entry.position] == entry.offset
    m2.shutdown()


def test_a_slow_fsync_of_the_snapshot_timer_does_not_block_appends(faulty_fs) -> None:
    """producer.state.snapshot.interval.ms flushes the log before it snapshots; on a disk
    whose fsyncs take seconds (throttled writeback, here a FUSE disk delaying them), appends
    go on meanwhile instead of waiting behind the partition's lock."""
    m = open_manager(faulty_fs.mountpoint / "logs", LogConfig(producer_snapshot_interval_ms=1))
    plog = m.get_or_create_log(TP)
    plog.append_as_leader(batch(2, producer_id=7, producer_epoch=0, base_sequence=0), 0)
    faulty_fs.delay(4.0, ops={"fsync"}, path_glob="*.log")
    # The segment tells when the snapshot thread reaches its fsync (past the lock it prepared under).
    segment = plog.active_segment
    flushing = threading.Event()
    real_flush = segment.flush

    def flush() -> None:
        flushing.set()
        real_flush()

    segment.flush = flush
    snapshot = threading.Thread(target=plog.maybe_take_snapshot, args=(now_ms() + 10,))
    snapshot.start()
    try:
        assert flushing.wait(10), "the snapshot thread never reached the segment's fsync"
        plog.append_as_leader(batch(2, producer_id=7, producer_epoch=0, base_sequence=2), 0)
        assert snapshot.is_alive(), "the append waited for the snapshot's fsync"
    finally:
        snapshot.join(timeout=60)
        faulty_fs.heal()
    assert not snapshot.is_alive()
    # taken at the state it prepared, with the data it describes flushed first
    assert plog.producer_state.latest_snapshot_offset == 2
    assert plog.recovery_point >= 2
    m.shutdown()
