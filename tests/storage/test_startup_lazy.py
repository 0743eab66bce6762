"""Clean start-up (KIP-263): only active segments are opened; the rest are validated on first
access, in the background, or all at start-up with log.startup.validation=eager."""

from __future__ import annotations

import json
import os

import pytest

from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_dir import STARTUP_MANIFEST
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition
from tests.waiting import wait_until

from .logutil import all_records
from .startuputil import (
    CFG,
    TP,
    append_workload,
    copy,
    fingerprint,
    load,
    rebuild_from_scratch,
    settle,
    write_dir,
)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("written") / "logs"
    m = LogManager([path], default_config=CFG)
    m.startup(start_background=False)
    for p in range(3):
        plog = m.get_or_create_log(TopicPartition("t", p))
        append_workload(plog, 40)
        plog.high_watermark = plog.log_end_offset
    m.shutdown()
    return path


def test_clean_start_opens_no_segment(written, tmp_path):
    # The start-up manifest vouches for the active segments too (tests/storage/
    # test_startup_manifest.py): nothing is opened until first access.
    m = load(copy(written, tmp_path / "d"))
    report = m.startup_report
    assert report.clean and report.partitions == 3
    assert report.segments > 3 * 3
    assert report.segments_opened == 0
    assert report.segments_recovered == 0 and report.bytes_scanned == 0
    for plog in m.logs.values():
        assert not any(s.opened for s in plog.segments)
        assert all(s.needs_validation for s in plog.segments)
    m.shutdown()


def test_first_read_of_an_inactive_segment_checks_only_what_it_reads(written, tmp_path):
    """The read's batches are checked; the whole segment is left to the validator
    (tests/storage/test_first_read.py: what happens when the check finds something)."""
    m = load(copy(written, tmp_path / "d"))
    plog = m.get_log(TP)
    first, second = plog.segments[0], plog.segments[1]
    data = plog.read(first.base_offset, 100).read_bytes()
    assert data
    assert first.needs_validation and first.opened
    assert second.needs_validation and not second.opened
    assert m.validator.segments_validated == 0
    settle(m)
    assert not first.needs_validation and m.validator.segments_validated > 0
    m.shutdown()


def test_timestamp_lookup_checks_only_the_time_index(written, tmp_path):
    m = load(copy(written, tmp_path / "d"))
    plog = m.get_log(TP)
    first = plog.segments[0]
    assert first.max_timestamp > 0
    # the cheap check of KIP-263: the time index, not a full validation of the segment
    assert first.needs_validation and first.time_index.is_loaded and not first.log.is_open
    m.shutdown()


def test_background_validator_validates_everything_and_can_be_off(written, tmp_path):
    path = copy(written, tmp_path / "d")
    m = LogManager([path], default_config=CFG, validation_rate_bytes_per_sec=10 * 1024 * 1024)
    m.startup()
    wait_until(lambda: m.validator.pending_segments == 0, 10.0, "m.validator.pending_segments == 0")
    # every segment, the active ones too (their data was trusted at start-up, not read)
    assert m.validator.segments_validated == m.startup_report.segments
    assert not m.validator.problems
    m.shutdown()

    off = LogManager([path], default_config=CFG, validation_rate_bytes_per_sec=0)
    off.startup()
    assert off.validator._thread is None
    assert off.validator.pending_segments == off.startup_report.segments
    off.shutdown()


def test_background_validator_honours_its_rate(written, tmp_path):
    path = copy(written, tmp_path / "d")
    total = sum(f.stat().st_size for f in path.rglob("*.log"))
    rate = total  # one second's worth in all (the first second is free: the bucket starts full)
    m = LogManager([path], default_config=CFG, validation_rate_bytes_per_sec=max(1, total // 4))
    import time

    started = time.monotonic()
    m.startup()
    wait_until(lambda: m.validator.pending_segments == 0, 20, "m.validator.pending_segments == 0")
    elapsed = time.monotonic() - started
    assert elapsed >= 1.5, (elapsed, rate)
    m.shutdown()


def test_eager_validates_every_segment_at_start(written, tmp_path):
    m = load(copy(written, tmp_path / "d"), validation="eager")
    report = m.startup_report
    assert report.segments_validated == report.segments
    assert report.segments_opened == report.segments
    assert report.bytes_scanned > 0 and not report.problems
    assert all(not s.needs_validation for plog in m.logs.values() for s in plog.segments)
    m.shutdown()


def test_lazy_eager_and_rebuild_end_in_the_same_state(written, tmp_path):
    lazy = load(copy(written, tmp_path / "lazy"))
    settle(lazy)
    eager = load(copy(written, tmp_path / "eager"), validation="eager")
    rebuilt = rebuild_from_scratch(copy(written, tmp_path / "rebuilt"))
    for p in range(3):
        tp = TopicPartition("t", p)
        a, b, c = (fingerprint(m.get_log(tp)) for m in (lazy, eager, rebuilt))
        assert a == b == c
        assert a["aborted"] and a["producers"][1][2] == a["end"] - 4  # the data is really there
    for m in (lazy, eager, rebuilt):
        m.shutdown()


def test_manifest_replaces_the_listing_until_a_dir_changes(written, tmp_path):
    path = copy(written, tmp_path / "d")
    m = load(path)
    m.shutdown()
    manifest = json.loads((path / STARTUP_MANIFEST).read_text())["partitions"]
    assert set(manifest) == {"t-0", "t-1", "t-2"}
    bases = manifest["t-0"]["bases"]
    assert bases == sorted(int(f.name[:20]) for f in (path / "t-0").glob("*.log"))
    # an index deleted after shutdown changes the dir: the manifest entry is not used for it
    victim = path / "t-0" / f"{bases[0]:020d}.index"
    os.unlink(victim)
    m2 = load(path)
    assert not (path / STARTUP_MANIFEST).exists()  # consumed: only valid right after shutdown
    first = m2.get_log(TP).segments[0]
    assert first.missing_files == {victim.name}
    assert all_records(m2.get_log(TP))[0].offset == 0
    assert victim.exists() and not first.needs_validation
    assert victim.stat().st_size > 0  # rebuilt on first access
    m2.shutdown()


def test_appends_after_restart_index_like_a_rebuild(tmp_path):
    """Index entries placed after a restart are where a full rebuild would place them."""
    path = tmp_path / "d"
    write_dir(path, rounds=7)
    m = load(path)
    append_workload(m.get_log(TP), 20, start=7)
    m.shutdown()
    ref = rebuild_from_scratch(copy(path, tmp_path / "ref"))
    again = load(path)
    assert [list(s.offset_index.iter_entries()) for s in again.get_log(TP).segments] == [
        list(s.offset_index.iter_entries()) for s in ref.get_log(TP).segments
    ]
    again.shutdown()
    ref.shutdown()


def test_new_partition_then_restart_without_segments_opened(tmp_path):
    m = LogManager([tmp_path], default_config=LogConfig())
    m.startup(start_background=False)
    m.get_or_create_log(TP)
    m.shutdown()
    m2 = load(tmp_path, cfg=LogConfig())
    assert m2.get_log(TP).log_end_offset == 0 and m2.startup_report.segments_opened == 0
    m2.shutdown()
