"""Validating one segment against its own data, and repairing it: the policy (KIP-263).

A segment is valid when every batch passes its CRC and structure checks, offsets rise strictly
and stay below the next segment's base offset, and its indexes agree with the batches:

- every offset-index entry names a batch start and that batch's last offset, and the index
  reaches as far as a rebuild's would;
- every time-index entry is the running max timestamp at the batch that set it, and an
  inactive segment's last entry holds the segment's max timestamp (retention reads it);
- every transaction-index entry ends at a control batch of its producer in this segment.

``validate_segment`` checks and repairs one segment: a bad index is rebuilt (one bad index
rebuilds them all), a bad batch ends the segment there (the caller drops what follows).
``active_prefix_scan`` checks the active segment as far as it is written without changing it.
When these run (first access, the rate-limited background thread, eager start-up) is
``validation.py``'s job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from logkeel.storage.engine.segment import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    file_name,
)
from logkeel.storage.engine.segment_check import (
    Throttle,
    offset_index_problem,
    scan_segment,
    time_index_problem,
    txn_index_problem,
)
from logkeel.storage.engine.txn_index import AbortedTxn
from logkeel.storage.errors import CorruptIndexError

__all__ = ["SegmentValidation", "TxnRebuilder", "active_prefix_scan", "validate_segment"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SegmentValidation:
    base_offset: int
    size: int
    bytes_scanned: int
    next_offset: int
    truncated_bytes: int = 0
    stop_reason: str | None = None
    rebuilt: list[str] = field(default_factory=list)  # file names
    problems: list[str] = field(default_factory=list)
    cut_applied: bool = False  # the partition was already truncated at next_offset

    @property
    def truncated(self) -> bool:
        return self.truncated_bytes > 0


TxnRebuilder = Callable[[LogSegment], list[AbortedTxn]]


def validate_segment(
    segment: LogSegment,
    *,
    upper_bound: int | None,
    inactive: bool = True,
    throttle: Throttle | None = None,
    rebuild_txn_index: TxnRebuilder | None = None,
) -> SegmentValidation:
    """Checks one segment fully and repairs it: bad indexes rebuilt, a bad tail cut off.

    The caller must make sure no one else uses the segment meanwhile. A cut leaves the offsets
    from ``next_offset`` on to be dropped from the partition by the caller.
    """
    records = segment.log
    size = records.size
    scan = scan_segment(
        records.fd,
        size,
        segment.base_offset,
        index_interval_bytes=segment.index_interval_bytes,
        upper_bound=upper_bound,
        throttle=throttle,
        where=(segment.log_dir, str(records.path)),
    )
    result = SegmentValidation(segment.base_offset, size, scan.valid_end, scan.next_offset)
    names = {
        "offset": file_name(segment.base_offset, INDEX_SUFFIX),
        "time": file_name(segment.base_offset, TIME_INDEX_SUFFIX),
        "txn": file_name(segment.base_offset, TXN_INDEX_SUFFIX),
    }
    bad: dict[str, str] = {}
    if scan.truncated:
        result.stop_reason = scan.stop_reason
        result.problems.append(
            f"{records.path.name}: valid data ends at position {scan.valid_end} (offset "
            f"{scan.next_offset}) of {size}: {scan.stop_reason}"
        )
    if names["offset"] in segment.missing_files:
        bad["offset"] = "file is missing"
    if names["time"] in segment.missing_files:
        bad["time"] = "file is missing"
    try:
        segment.offset_index.sanity_check()
        problem = offset_index_problem(scan, list(segment.offset_index.iter_entries()))
    except (CorruptIndexError, ValueError) as exc:
        problem = str(exc)
    if problem and "offset" not in bad:
        bad["offset"] = problem
    try:
        segment.time_index.sanity_check()
        problem = time_index_problem(
            scan, list(segment.time_index.iter_entries()), inactive=inactive
        )
    except (CorruptIndexError, ValueError) as exc:
        problem = str(exc)
    if problem and "time" not in bad:
        bad["time"] = problem
    txn = segment.raw_txn_index
    try:
        txn.sanity_check()
        problem = txn_index_problem(scan, txn.all_aborted_txns())
    except (CorruptIndexError, ValueError) as exc:
        problem = str(exc)
    if problem:
        bad["txn"] = problem
    for kind, why in bad.items():
        result.problems.append(f"{names[kind]}: {why}")

    offsets_bad = "offset" in bad or "time" in bad
    if scan.truncated or offsets_bad:
        rebuilt = segment.rebuild_indexes_from(0, upper_bound=upper_bound, keep_batches=False)
        result.truncated_bytes = rebuilt.truncated_bytes
        result.next_offset = rebuilt.next_offset
        if inactive:
            segment.on_becoming_inactive()
        result.rebuilt += [names["offset"], names["time"]]
    # One damaged index means the segment's others may be damaged where no check can see (a
    # plausible last stable offset in the txn index): all are rebuilt, as the loader does.
    if "txn" in bad or offsets_bad:
        txn.reset()
        if rebuild_txn_index is not None:
            for entry in rebuild_txn_index(segment):
                segment.append_aborted_txn(entry)
        result.rebuilt.append(names["txn"])
    elif scan.truncated:
        txn.truncate_to(result.next_offset)
    segment.missing_files = frozenset()
    for problem in result.problems:
        log.warning("%s: %s", segment.dir.name, problem)
    return result


def active_prefix_scan(
    segment: LogSegment, throttle: Throttle | None = None
) -> SegmentValidation | None:
    """Checks the active segment up to its current size without changing anything; returns
    the result if all is well there, None if it needs repair (see validate_segment).

    The index entries are read before the size: an entry is only ever added after the batch
    it names was written, so every entry read must name a batch within the scanned size.
    """
    if segment.missing_files:
        return None
    try:
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        segment.raw_txn_index.sanity_check()
        offsets = list(segment.offset_index.iter_entries())
        times = list(segment.time_index.iter_entries())
        txns = segment.raw_txn_index.all_aborted_txns()
    except (CorruptIndexError, ValueError):
        return None
    records = segment.log
    size = records.size
    scan = scan_segment(
        records.fd,
        size,
        segment.base_offset,
        index_interval_bytes=segment.index_interval_bytes,
        throttle=throttle,
        where=(segment.log_dir, str(records.path)),
    )
    if scan.truncated:
        return None
    if (
        offset_index_problem(scan, offsets, complete=False)
        or time_index_problem(scan, times, inactive=False)
        or txn_index_problem(scan, txns)
    ):
        return None
    return SegmentValidation(segment.base_offset, size, scan.valid_end, scan.next_offset)
