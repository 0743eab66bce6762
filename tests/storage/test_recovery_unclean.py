"""Unclean start-up (AKIP-2, docs/proposals.md): only data after the recovery point is read;
indexes and producer state are kept and supplemented; a bad tail is truncated and reported."""

from __future__ import annotations

import logging

from logkeel.storage.background_tasks import BackgroundIntervals
from logkeel.storage.engine.segment import file_name
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition
from tests.waiting import wait_until

from .logutil import all_records
from .startuputil import (
    CFG,
    TP,
    append_workload,
    copy,
    crash,
    fingerprint,
    load,
    rebuild_from_scratch,
    scribble,
    segment_files,
    write_dir,
)


def crashed_dir(path, flushed_rounds=30, unflushed_rounds=6):
    """A partition flushed and checkpointed after ``flushed_rounds``, then more appended, then
    killed. Returns (recovery point, log end, bytes after the recovery point)."""
    m = write_dir(path, rounds=flushed_rounds, shutdown=False)
    plog = m.get_log(TP)
    plog.flush()
    m.checkpoint_all()
    recovery_point = plog.recovery_point
    size_at_flush = plog.size_in_bytes
    append_workload(plog, unflushed_rounds, start=flushed_rounds)
    plog.high_watermark = plog.log_end_offset
    end, size = plog.log_end_offset, plog.size_in_bytes
    crash(m)
    return recovery_point, end, size - size_at_flush


def test_only_data_after_the_recovery_point_is_read(tmp_path):
    path = tmp_path / "d"
    rp, end, unflushed = crashed_dir(path)
    reference = rebuild_from_scratch(copy(path, tmp_path / "ref"))
    m = load(path)
    report = m.startup_report
    assert not report.clean
    assert 0 < report.bytes_scanned <= unflushed + 200  # plus at most the batch holding rp
    total = sum(f.stat().st_size for f in segment_files(path, ".log"))
    assert report.bytes_scanned < total / 3
    assert report.segments_recovered <= 3 and report.segments_opened < report.segments
    assert not report.truncations
    plog = m.get_log(TP)
    assert plog.log_end_offset == end == plog.recovery_point
    assert fingerprint(plog) == fingerprint(reference.get_log(TP))
    m.shutdown()
    reference.shutdown()


def test_index_entries_below_the_recovery_point_are_kept(tmp_path):
    path = tmp_path / "d"
    rp, end, _ = crashed_dir(path, flushed_rounds=30, unflushed_rounds=8)
    reference = rebuild_from_scratch(copy(path, tmp_path / "ref"))
    m0 = load(copy(path, tmp_path / "probe"))
    seg = max(
        (s for s in m0.get_log(TP).segments if s.base_offset <= rp), key=lambda s: s.base_offset
    )
    base = seg.base_offset
    m0.shutdown()
    index = path / TP.dir_name / file_name(base, ".index")
    before = [e for e in _entries(index) if e[0] + base < rp]
    assert before, "the test needs entries below the recovery point"
    inode = index.stat().st_ino
    m = load(path)
    after = _entries(index)
    assert index.stat().st_ino == inode  # the same file, supplemented, not recreated
    assert after[: len(before)] == before
    ref_seg = next(s for s in reference.get_log(TP).segments if s.base_offset == base)
    assert [tuple(e) for e in ref_seg.offset_index.iter_entries()] == [
        (o + base, p) for o, p in after
    ]
    m.shutdown()
    reference.shutdown()


def _entries(index):
    import struct

    data = index.read_bytes()
    out = []
    for o, p in struct.iter_unpack(">ii", data[: len(data) // 8 * 8]):
        if (o, p) == (0, 0) and out:
            break
        out.append((o, p))
    return out


def test_producer_state_comes_from_a_snapshot_at_or_below_the_recovery_point(tmp_path):
    path = tmp_path / "d"
    rp, end, _ = crashed_dir(path, flushed_rounds=30, unflushed_rounds=10)
    snapshots = [int(f.name[:20]) for f in segment_files(path, ".snapshot")]
    assert any(s > rp for s in snapshots), "a roll snapshot past the recovery point"
    reference = rebuild_from_scratch(copy(path, tmp_path / "ref"))
    m = load(path)
    report = m.startup_report
    kept = [int(f.name[:20]) for f in segment_files(path, ".snapshot")]
    assert max(kept) == end  # the one written after recovery
    assert report.replayed_batches < 4 * 20  # far fewer than the ~160 batches of the log
    plog = m.get_log(TP)
    ref = reference.get_log(TP)
    assert fingerprint(plog)["producers"] == fingerprint(ref)["producers"]
    # an idempotent retry of the last batch is still recognised
    entry = plog.producer_state.last_entry(1)
    assert entry.last_seq == 2 * 40 - 1
    m.shutdown()
    reference.shutdown()


def test_aborted_transactions_after_the_recovery_point_are_indexed(tmp_path):
    path = tmp_path / "d"
    rp, end, _ = crashed_dir(path, flushed_rounds=30, unflushed_rounds=7)
    for f in segment_files(path, ".txnindex"):
        f.unlink()  # as if the crash lost what the txn index had not fsynced
    m = load(path)
    aborted = m.get_log(TP).collect_aborted_txns(rp, end)
    # a round is 5 offsets (2 idempotent, 1 plain, 1 transactional, the marker); rounds 30,
    # 33 and 36 abort, and their markers are above the recovery point
    assert [t.first_offset for t in aborted if t.last_offset >= rp] == [
        5 * 30 + 3,
        5 * 33 + 3,
        5 * 36 + 3,
    ]
    m.shutdown()


def test_corrupt_tail_is_truncated_and_reported(tmp_path):
    path = tmp_path / "d"
    rp, end, _ = crashed_dir(path)
    last = segment_files(path, ".log")[-1]
    size = last.stat().st_size
    scribble(last, size - 30, b"\xff" * 10)  # inside the last batch: its CRC fails
    m = load(path)
    plog = m.get_log(TP)
    [t] = m.startup_report.truncations
    assert (t.topic, t.partition) == ("t", 0)
    assert t.offset == plog.log_end_offset == end - 1  # only the last (one-record) batch lost
    assert t.bytes > 0 and last.stat().st_size == size - t.bytes
    assert [r.offset for r in all_records(plog)] == list(range(end - 1))
    m.shutdown()


def test_no_recovery_point_means_a_full_scan(tmp_path):
    path = tmp_path / "d"
    crashed_dir(path)
    (path / "recovery-point-offset-checkpoint").unlink()
    m = load(path)
    total = sum(f.stat().st_size for f in segment_files(path, ".log"))
    assert m.startup_report.bytes_scanned == total
    m.shutdown()


def test_partitions_recover_in_parallel_with_progress(tmp_path, caplog):
    m = LogManager([tmp_path], default_config=CFG)
    m.startup(start_background=False)
    for p in range(4):
        append_workload(m.get_or_create_log(TopicPartition("t", p)), 12)
    crash(m)
    (tmp_path / "recovery-point-offset-checkpoint").unlink()
    with caplog.at_level(logging.INFO, logger="logkeel.storage"):
        m2 = LogManager([tmp_path], default_config=CFG, recovery_threads_per_dir=2)
        report = m2.startup(start_background=False)
    assert report.partitions == 4 and report.segments_recovered == report.segments
    assert report.progress and "100% done: 0 of 4 partitions" in report.progress[-1]
    assert "segments and" in report.progress[-1] and "bytes remaining" in report.progress[-1]
    assert any("unclean shutdown; recovering 4 partitions" in r.message for r in caplog.records)
    m2.shutdown()


def test_background_flush_keeps_the_recovery_point_at_the_log_end(tmp_path):
    m = LogManager(
        [tmp_path], default_config=CFG, intervals=BackgroundIntervals(recovery_flush_ms=50)
    )
    m.startup()
    plog = m.get_or_create_log(TP)
    append_workload(plog, 10)
    end = plog.log_end_offset
    wait_until(
        lambda: f"t 0 {end}" in (tmp_path / "recovery-point-offset-checkpoint").read_text(),
        10.0,
        'f"t 0 {end}" in (tmp_path / "recovery-point-offset-checkpoint").read_text()',
    )
    assert plog.recovery_point == end
    crash_state = (tmp_path / "recovery-point-offset-checkpoint").read_text()
    m.scheduler.shutdown()
    m.validator.stop()
    crash(m)
    assert f"t 0 {end}" in crash_state
    m2 = load(tmp_path)
    assert m2.startup_report.bytes_scanned <= 200  # nothing to replay but the last batch
    assert m2.get_log(TP).log_end_offset == end
    m2.shutdown()


def test_damage_below_the_recovery_point_leaves_no_producer_state_past_the_cut(tmp_path):
    """The crash torture's finding: data the recovery point vouched for is damaged and the
    segment's index is gone, so the rescan starts at the segment's base and cuts below the
    recovery point. The producer state, replayed from a snapshot up to the recovery point
    before the rescan found the damage, must not keep the batches past the cut."""
    path = tmp_path / "d"
    rp, end, unflushed = crashed_dir(path, flushed_rounds=40, unflushed_rounds=0)
    assert unflushed == 0 and rp == end
    last = segment_files(path, ".log")[-1]
    size = last.stat().st_size
    assert size > 600
    scribble(last, size // 2, b"\xff" * 10)  # a batch in the middle of the flushed segment
    (path / TP.dir_name / (last.name[:-4] + ".index")).unlink()
    reference = rebuild_from_scratch(copy(path, tmp_path / "ref"))
    m = load(path)
    try:
        plog, rebuilt = m.get_log(TP), reference.get_log(TP)
        assert m.startup_report.truncations and plog.log_end_offset < rp
        for log in (plog, rebuilt):  # as a leader would see them, the high watermark at the end
            log.high_watermark = log.log_end_offset
            log.producer_state.on_high_watermark_updated(log.log_end_offset)
        assert fingerprint(plog, indexes=False) == fingerprint(rebuilt, indexes=False)
    finally:
        m.shutdown()
        reference.shutdown()
