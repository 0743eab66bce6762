"""One CRC-checking pass over a segment file, and what it says of the segment's indexes.

``scan_segment`` reads the segment once, in large chunks, with the shared batch walker and the
same ``OffsetRule`` as index rebuild; the ``*_index_problem`` functions then judge each index
against the scan, the offset and time index entries with the one index verifier
(``index_check``, which ``log dump --verify`` uses too). Validation (repair) and ``log check``
(report) both use them.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path

from logkeel.records.batch import (
    NO_TIMESTAMP,
)
from logkeel.records.walk import BadBatch, BadKind, BatchWindow, walk_batches
from logkeel.storage.engine.index_check import (
    BatchSpan,
    OffsetIndexVerifier,
    TimeIndexVerifier,
)
from logkeel.storage.engine.offset_index import OffsetPosition
from logkeel.storage.engine.segment import (
    OffsetRule,
)
from logkeel.storage.engine.time_index import TimestampOffset
from logkeel.storage.engine.txn_index import AbortedTxn
from logkeel.storage.errors import (
    io_guard,
)

Throttle = Callable[[int], None]


# -- scanning -------------------------------------------------------------------------------


@dataclass(slots=True)
class SegmentScan:
    """What one CRC-checking pass over a segment file learnt."""

    size: int
    valid_end: int = 0
    next_offset: int = 0
    batches: int = 0
    stop_reason: str | None = None  # why the valid data ends before the file does
    stop_offset: int | None = None  # base offset of the first invalid batch, if readable
    positions: array[int] = field(default_factory=lambda: array("q"))
    base_offsets: array[int] = field(default_factory=lambda: array("q"))
    last_offsets: array[int] = field(default_factory=lambda: array("q"))
    max_timestamps: array[int] = field(default_factory=lambda: array("q"))
    controls: dict[int, int] = field(default_factory=dict)  # base offset -> producer id
    # marker offset -> the producer's first transactional batch before it in this segment:
    # the transaction's start when it began here (one begun earlier shows a later batch)
    txn_starts: dict[int, int] = field(default_factory=dict)
    base_offset: int = 0
    canonical_offsets: list[tuple[int, int]] = field(default_factory=list)
    max_timestamp: int = NO_TIMESTAMP

    @property
    def truncated(self) -> bool:
        return self.valid_end < self.size

    def batch_spans(self) -> Iterator[BatchSpan]:
        if not self.positions:
            return
        ends = chain(islice(self.positions, 1, None), (self.valid_end,))
        for pos, end, base, last, max_ts in zip(
            self.positions,
            ends,
            self.base_offsets,
            self.last_offsets,
            self.max_timestamps,
            strict=True,
        ):
            yield BatchSpan(pos, end - pos, base, last, max_ts)


def scan_segment(
    fd: int,
    size: int,
    base_offset: int,
    *,
    index_interval_bytes: int,
    upper_bound: int | None = None,
    min_offset: int | None = None,
    throttle: Throttle | None = None,
    where: tuple[Path, str] | None = None,
) -> SegmentScan:
    """Reads the segment once, in large chunks, checking every batch (see module doc).

    The walk's checks (``OffsetRule`` included) are ``LogSegment.rebuild_indexes_from``'s, so
    a scan and a rebuild agree on where the valid data ends. ``where`` is (log dir, file) for
    IO errors.
    """
    log_dir, path = where if where else (Path("."), "segment")
    scan = SegmentScan(size, base_offset=base_offset)
    open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
    offsets = OffsetRule(
        base_offset,
        max(base_offset, min_offset if min_offset is not None else base_offset) - 1,
        upper_bound,
    )
    counter = 0
    running = NO_TIMESTAMP
    append_pos, append_base = scan.positions.append, scan.base_offsets.append
    append_last, append_max = scan.last_offsets.append, scan.max_timestamps.append

    def pread(at: int, n: int) -> bytes:
        with io_guard(log_dir, f"read {path}"):
            data = os.pread(fd, n, at)
        if throttle is not None:
            throttle(len(data))
        return data

    for item in walk_batches(BatchWindow(pread=pread, size=size), check=offsets):
        if isinstance(item, BadBatch):
            scan.stop_reason = _stop_reason(item)
            if item.kind in (BadKind.CRC, BadKind.REJECTED):
                scan.stop_offset = item.header.base_offset  # type: ignore[union-attr]
            break
        pos, header = item
        last = header.last_offset
        if header.max_timestamp > running:
            running = header.max_timestamp
        if counter > index_interval_bytes:
            scan.canonical_offsets.append((last, pos))
            counter = 0
        counter += header.size
        append_pos(pos)
        append_base(header.base_offset)
        append_last(last)
        append_max(header.max_timestamp)
        if header.is_control:
            scan.controls[header.base_offset] = header.producer_id
            start = open_txns.pop(header.producer_id, None)
            if start is not None:
                scan.txn_starts[header.base_offset] = start
        elif header.is_transactional and header.producer_id not in open_txns:
            open_txns[header.producer_id] = header.base_offset
        scan.batches += 1
        scan.valid_end = pos + header.size
    scan.next_offset = offsets.last_offset + 1 if scan.batches else base_offset
    scan.max_timestamp = running
    return scan


def _stop_reason(bad: BadBatch) -> str:
    if bad.kind is BadKind.PARTIAL:
        if bad.header is None:
            return f"{bad.size} trailing bytes hold no complete batch header"
        return "batch runs past the end of the file"
    if bad.kind is BadKind.INVALID:
        return f"invalid batch header: {bad.reason}"
    if bad.kind is BadKind.CRC:
        return "CRC-32C mismatch"
    return bad.reason


# -- judging indexes ------------------------------------------------------------------------


def offset_index_problem(
    scan: SegmentScan, entries: list[OffsetPosition], *, complete: bool = True
) -> str | None:
    """The first thing wrong with an offset index; ``complete`` also asks that it reach as far
    as a rebuild's would."""
    for found in OffsetIndexVerifier(scan.batch_spans()).problems(entries):
        return f"entry {found.entry}: {found.message}"
    if complete and scan.canonical_offsets:
        want = scan.canonical_offsets[-1][0]
        have = entries[-1].offset if entries else None
        if have is None or have < want:
            return f"index stops at offset {have}; the log is indexed up to {want}"
    return None


def time_index_problem(
    scan: SegmentScan, entries: list[TimestampOffset], *, inactive: bool
) -> str | None:
    """The first thing wrong with a time index; an ``inactive`` segment's last entry must also
    hold the segment's max timestamp (retention reads it)."""
    for found in TimeIndexVerifier(scan.batch_spans()).problems(entries):
        return f"entry {found.entry}: {found.message}"
    if inactive and scan.max_timestamp > NO_TIMESTAMP:
        have = entries[-1].timestamp if entries else None
        if have != scan.max_timestamp:
            return f"last entry holds {have}, not the segment's max timestamp {scan.max_timestamp}"
    return None


def txn_index_problem(scan: SegmentScan, entries: list[AbortedTxn]) -> str | None:
    for n, txn in enumerate(entries):
        if scan.controls.get(txn.last_offset) != txn.producer_id:
            return f"entry {n} {txn} does not end at a marker of producer {txn.producer_id}"
        # The first offset is checkable where it lies in this segment: it must name the
        # producer's first transactional batch before the marker. One before the segment cannot
        # be checked here: the scan then saw only the transaction's later batches, which it
        # cannot tell from a start.
        if txn.first_offset < scan.base_offset:
            continue
        start = scan.txn_starts.get(txn.last_offset)
        if start is None:
            return f"entry {n} {txn} starts in this segment, where no transaction begins"
        if txn.first_offset != start:
            return f"entry {n} {txn} does not start where the transaction does ({start})"
    return None
