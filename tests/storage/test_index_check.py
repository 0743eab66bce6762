"""The one index verifier: validation and `log dump --verify` judge entries by the same rules.

A time-index entry must sit at the last offset of a batch whose max timestamp is the entry's
and the largest of the segment up to it (Kafka's ``shallowOffsetOfMaxTimestampSoFar``).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from logkeel.storage.engine.index_check import TimeIndexVerifier
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.segment_check import SegmentScan, scan_segment, time_index_problem
from logkeel.storage.engine.time_index import TimestampOffset
from logkeel.storage.tools.dump_index import dump_time_index
from tests.storage.logutil import TP, batch, open_manager

# Batches of three records: offsets 0-2, 3-5, 6-8, 9-11 with max timestamps 1002, 5002, 2002,
# 6002 (the third batch's max is below the running max 5002).
FIRST_TIMESTAMPS = (1000, 5000, 2000, 6000)


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    """The `.log` of a one-segment partition written through the log, the broker shut down."""
    m = open_manager(tmp_path / "logs", LogConfig())
    plog = m.get_or_create_log(TP)
    for ts in FIRST_TIMESTAMPS:
        plog.append_as_leader(batch(3, ts=ts), 0)
    m.shutdown()
    (log,) = (tmp_path / "logs" / TP.dir_name).glob("*.log")
    return log


def _scan(log: Path) -> SegmentScan:
    fd = os.open(log, os.O_RDONLY)
    try:
        return scan_segment(fd, os.fstat(fd).st_size, 0, index_interval_bytes=4096)
    finally:
        os.close(fd)


def _write_time_index(log: Path, entries: list[tuple[int, int]]) -> Path:
    path = log.with_suffix(".timeindex")
    path.write_bytes(b"".join(struct.pack(">qi", ts, offset) for ts, offset in entries))
    return path


def _both(log: Path, entries: list[tuple[int, int]]) -> tuple[list[int], str | None, list]:
    """(entries the verifier flags, validation's first problem, dump --verify's mismatches)."""
    scan = _scan(log)
    index = [TimestampOffset(ts, offset) for ts, offset in entries]
    flagged = [p.entry for p in TimeIndexVerifier(scan.batch_spans()).problems(index)]
    first = time_index_problem(scan, index, inactive=False)
    dump = dump_time_index(_write_time_index(log, entries), verify=True)
    list(dump.items())
    assert dump.mismatches is not None
    return flagged, first, dump.mismatches


def test_entries_at_the_batches_holding_the_running_max_pass(segment: Path) -> None:
    flagged, first, mismatches = _both(segment, [(1002, 2), (5002, 5), (6002, 11)])
    assert flagged == [] and first is None and mismatches == []


def test_an_entry_inside_its_batch_is_flagged_by_both(segment: Path) -> None:
    # offset 4 lies in the batch 3..5 whose max timestamp is 5002: the looser rule dump used
    # to apply accepted this entry; Kafka never writes it (it names the batch's last offset)
    flagged, first, mismatches = _both(segment, [(1002, 2), (5002, 4), (6002, 11)])
    assert flagged == [1]
    assert first is not None and first.startswith("entry 1:") and "last offset" in first
    (mismatch,) = mismatches
    assert mismatch["entry"] == 1 and mismatch["log_offset"] == 5
    assert "has last offset 5, not 4" in mismatch["message"]


def test_an_entry_below_the_running_max_is_flagged_by_both(segment: Path) -> None:
    # the batch 6..8 has max timestamp 2002, but 5002 came before it
    flagged, first, mismatches = _both(segment, [(1002, 2), (2002, 8)])
    assert flagged == [1]
    assert first is not None and first.startswith("entry 1:") and "5002" in first
    (mismatch,) = mismatches
    assert mismatch["entry"] == 1 and mismatch["log_timestamp"] == 5002


def test_validation_stops_at_the_first_problem_and_dump_lists_all(segment: Path) -> None:
    flagged, first, mismatches = _both(segment, [(1002, 1), (5002, 4), (6002, 11)])
    assert flagged == [0, 1] and [m["entry"] for m in mismatches] == [0, 1]
    assert first is not None and first.startswith("entry 0:")
