"""Clean start from the start-up manifest: after a clean shutdown nothing of a partition is
opened, mapped or read (its active segment's indexes and an empty producer snapshot
included); the files the manifest vouches for are checked by size and time, so a change
made after the shutdown (even within the manifest's clock tick) is found at start-up."""

from __future__ import annotations

import json
import os

from logkeel.records.builder import build_batch
from logkeel.storage.engine.file_records import FileRecords
from logkeel.storage.log_dir import STARTUP_MANIFEST
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

from . import startuputil as su

PLAIN = TopicPartition("plain", 0)


def write_plain(m: LogManager, n: int) -> None:
    """Batches without producer ids: the producer snapshot at the log end is empty."""
    plog = m.get_or_create_log(PLAIN)
    for i in range(n):
        plog.append_as_leader(build_batch([(su.BASE_TS + i, b"k", b"v%d" % i * 20, ())]), 0)
    plog.high_watermark = plog.log_end_offset


def test_clean_start_reads_nothing_and_loads_what_a_rebuild_does(tmp_path):
    m = su.write_dir(tmp_path / "d", shutdown=False)
    write_plain(m, 120)
    m.shutdown()
    reference = su.rebuild_from_scratch(su.copy(tmp_path / "d", tmp_path / "ref"))
    expected = {tp: su.fingerprint(reference.get_log(tp)) for tp in (su.TP, PLAIN)}
    reference.shutdown()

    m = su.load(tmp_path / "d")
    report = m.startup_report
    assert report.clean and report.partitions == 2 and report.segments > 2
    assert report.segments_opened == 0
    assert not any(s.opened for plog in m.logs.values() for s in plog.segments)
    assert m.get_log(PLAIN).producer_state.map_end_offset == m.get_log(PLAIN).log_end_offset
    su.settle(m)
    assert {tp: su.fingerprint(m.get_log(tp)) for tp in (su.TP, PLAIN)} == expected
    # Appends after such a start index exactly as in the reference.
    write_plain(m, 30)
    m.shutdown()
    m, reference = (
        su.load(tmp_path / "d"),
        su.rebuild_from_scratch(su.copy(tmp_path / "d", tmp_path / "r2")),
    )
    su.settle(m)
    assert su.fingerprint(m.get_log(PLAIN)) == su.fingerprint(reference.get_log(PLAIN))
    m.shutdown()
    reference.shutdown()


def test_a_change_within_the_manifests_clock_tick_is_found_at_start(tmp_path):
    path = tmp_path / "d"
    su.write_dir(path)
    active = su.segment_files(path, ".log")[-1]
    last = list(FileRecords(active, path, read_only=True).batches())[-1].position
    # The last batch's length now reaches past the file (same size). The file keeps the time
    # the manifest recorded for it, and the manifest has that time too: the shutdown, the
    # manifest and this write all in one tick of the coarse clock file times come from.
    su.scribble(active, last + 8, b"\x00\x10\x00\x00")
    manifest = path / STARTUP_MANIFEST
    recorded = json.loads(manifest.read_text())["partitions"][su.TP.dir_name]["files"][".log"][1]
    os.utime(active, ns=(recorded, recorded))
    os.utime(manifest, ns=(recorded, recorded))
    m = su.load(path, cfg=su.CFG)
    report = m.startup_report
    assert report.segments_opened >= 1  # the active segment was checked
    assert report.truncations and report.truncations[0].partition == su.TP.partition
    m.shutdown()


def test_a_file_changed_after_shutdown_is_checked_at_start(tmp_path):
    path = tmp_path / "d"
    su.write_dir(path)
    active = su.segment_files(path, ".log")[-1]
    with open(active, "ab") as f:
        f.write(b"\x01" * 37)  # a torn write after the shutdown
    m = su.load(path)
    report = m.startup_report
    assert report.segments_opened >= 1  # the active segment was checked
    assert [t.bytes for t in report.truncations] == [37]
    m.shutdown()
