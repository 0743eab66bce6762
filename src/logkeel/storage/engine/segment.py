"""One log segment: a `.log` file and its `.index`, `.timeindex` and `.txnindex`.

Nothing is opened when a segment object is made: an inactive segment that nobody reads
costs a directory entry and a Python object at start-up (KIP-263).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from logkeel.records.batch import LOG_OVERHEAD, NO_TIMESTAMP, BatchHeader, InvalidBatchError
from logkeel.records.walk import BadBatch, BatchPosition, BatchWindow, walk_batches
from logkeel.storage.engine.file_records import FileRecords, FileRegion
from logkeel.storage.engine.offset_index import OffsetIndex
from logkeel.storage.engine.time_index import TimeIndex
from logkeel.storage.engine.txn_index import AbortedTxn, TransactionIndex
from logkeel.storage.errors import io_guard

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_INT32_MAX = (1 << 31) - 1

# What a validator's ``read`` returns when it cannot serve a read from an unvalidated segment
# by checking just that read: the segment is then validated whole first.
NEEDS_VALIDATION = object()


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def log_file_base(name: str) -> int | None:
    """The base offset when ``name`` is a segment's `.log` file (not `.log.deleted` and the
    like, which are not data), else None."""
    if len(name) != 24 or not name.endswith(LOG_SUFFIX):
        return None
    return parse_base_offset(name)


def segment_bases(names: Iterable[str]) -> list[int]:
    """Base offsets of the segments among a partition dir's file names, ascending (what
    ``log_file_base`` accepts, inlined: after a crash this runs over every file name of every
    partition dir)."""
    return sorted(
        int(n[:20]) for n in names if len(n) == 24 and n.endswith(LOG_SUFFIX) and n[:20].isdigit()
    )


@dataclass(frozen=True, slots=True)
class SegmentReadInfo:
    """Where a read starting at ``start_offset`` begins in the segment file."""

    start_offset: int
    position: int
    region: FileRegion


@dataclass(slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    batches: list[BatchHeader]
    next_offset: int = -1  # the offset after the last valid batch (base offset when none)


class OffsetRule:
    """The offsets a segment's batches must carry, as a walk check (``walk_batches``).

    Strictly rising from ``last_offset`` (a batch that goes back is the 0.11 index-corruption
    incident, docs/proposals.md), within the segment's int32 relative offsets, and below
    ``upper_bound`` (the next segment's base offset). Validation and index rebuild both walk with
    it, so they agree on where a segment's valid data ends.
    """

    __slots__ = ("base_offset", "last_offset", "upper_bound")

    def __init__(self, base_offset: int, last_offset: int, upper_bound: int | None) -> None:
        self.base_offset = base_offset
        self.last_offset = last_offset  # of the last batch accepted
        self.upper_bound = upper_bound

    def __call__(self, _window: BatchWindow, _position: int, header: BatchHeader) -> str | None:
        last = header.last_offset
        if header.base_offset <= self.last_offset:
            return f"batch offsets [{header.base_offset}, {last}] do not follow offset {self.last_offset}"
        if not 0 <= last - self.base_offset <= _INT32_MAX:
            return f"offset {last} does not fit a segment based at {self.base_offset}"
        if self.upper_bound is not None and last >= self.upper_bound:
            return f"offset {last} reaches the next segment's base offset {self.upper_bound}"
        self.last_offset = last
        return None


class LogSegment:
    # Per-segment state starts at these class-level values and becomes an instance attribute
    # on its first assignment: start-up makes one LogSegment per segment on disk (100,000 at a
    # time), and setting every field in __init__ was most of what that cost.
    # The file objects are made on first use.
    _log: FileRecords | None = None
    _offset_index: OffsetIndex | None = None
    _time_index: TimeIndex | None = None
    _txn_index: TransactionIndex | None = None
    _bytes_since_last_index_entry = 0
    # (max timestamp, offset of the batch holding it); None until learnt from the time index
    _max_timestamp: tuple[int, int] | None = None
    _rolling_timestamp: int | None = None
    # The largest timestamp known to be in the time index (skips no-op appends).
    _time_indexed = NO_TIMESTAMP
    _grow_pending = False
    # Set while this segment awaits validation (lazy start-up, KIP-263): called before the
    # first read of its data or indexes. See logkeel.storage.engine.validation.
    validator: Callable[[LogSegment], None] | None = None
    # Files the directory listing did not show at load (e.g. a deleted index).
    missing_files: frozenset[str] = frozenset()

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        log_dir: Path,
        index_interval_bytes: int,
        max_index_size: int,
        created_ms: int | None = None,
    ) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.log_dir = log_dir
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.created_ms = created_ms if created_ms is not None else int(time.time() * 1000)

    # -- files, made on first use ------------------------------------------------------------
    @property
    def log(self) -> FileRecords:
        records = self._log
        if records is None:
            records = self._log = FileRecords(
                self.dir / file_name(self.base_offset, LOG_SUFFIX), self.log_dir
            )
        return records

    @property
    def offset_index(self) -> OffsetIndex:
        index = self._offset_index
        if index is None:
            index = self._offset_index = OffsetIndex(
                self.dir / file_name(self.base_offset, INDEX_SUFFIX),
                self.base_offset,
                self.max_index_size,
                log_dir=self.log_dir,
            )
        return index

    @property
    def time_index(self) -> TimeIndex:
        index = self._time_index
        if index is None:
            index = self._time_index = TimeIndex(
                self.dir / file_name(self.base_offset, TIME_INDEX_SUFFIX),
                self.base_offset,
                self.max_index_size,
                log_dir=self.log_dir,
            )
        return index

    @property
    def raw_txn_index(self) -> TransactionIndex:
        """The transaction index without triggering validation (for loaders and validators)."""
        index = self._txn_index
        if index is None:
            index = self._txn_index = TransactionIndex(
                self.dir / file_name(self.base_offset, TXN_INDEX_SUFFIX),
                self.base_offset,
                log_dir=self.log_dir,
            )
        return index

    @property
    def txn_index(self) -> TransactionIndex:
        """The transaction index, validated first if this segment still awaits validation
        (by the validator's cheaper check of it when it has one)."""
        validator = self.validator
        if validator is not None:
            check = getattr(validator, "check_txn_index", None)
            if check is not None:
                check(self)
            else:
                self.ensure_valid()
        return self.raw_txn_index

    def _files(self) -> tuple[FileRecords, OffsetIndex, TimeIndex, TransactionIndex]:
        return self.log, self.offset_index, self.time_index, self.raw_txn_index

    # -- validation (KIP-263) ----------------------------------------------------------------
    @property
    def needs_validation(self) -> bool:
        return self.validator is not None

    def ensure_valid(self) -> None:
        """Validates this segment now if it has not been yet (first access after start-up)."""
        validator = self.validator
        if validator is not None:
            validator(self)

    def resume_indexing(self, bytes_since_last_entry: int | None = None) -> None:
        """Sets the index-interval counter as if every batch had been appended in this run.

        Appends after a restart then place index entries exactly where a rebuild of the whole
        segment would, so a reloaded log and a rebuilt one have the same indexes. A clean start
        passes the counter the start-up manifest kept, so the index is not opened for it.
        """
        if bytes_since_last_entry is not None:
            self._bytes_since_last_index_entry = bytes_since_last_entry
            return
        last = self.offset_index.last_entry if self.offset_index.entries else None
        size = self.size
        self._bytes_since_last_index_entry = size - last.position if last else size

    @property
    def bytes_since_last_index_entry(self) -> int:
        return self._bytes_since_last_index_entry

    def __repr__(self) -> str:
        return f"LogSegment({self.dir / file_name(self.base_offset, LOG_SUFFIX)})"

    # -- state ------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.log.size

    @property
    def opened(self) -> bool:
        """Whether any of this segment's files were opened or mapped."""
        return (
            (self._log is not None and self._log.is_open)
            or (self._offset_index is not None and self._offset_index.is_loaded)
            or (self._time_index is not None and self._time_index.is_loaded)
        )

    @property
    def max_timestamp(self) -> int:
        return self._max_ts()[0]

    @property
    def offset_of_max_timestamp(self) -> int:
        return self._max_ts()[1]

    def _max_ts(self) -> tuple[int, int]:
        if self._max_timestamp is None:
            if self.validator is not None:
                # Only the time index is needed: a cheap check of it, not a full validation.
                check = getattr(self.validator, "check_time_index", None)
                if check is not None:
                    check(self)
                else:
                    self.ensure_valid()
            entry = self.time_index.last_entry
            self._max_timestamp = (
                (entry.timestamp, entry.offset) if entry else (NO_TIMESTAMP, self.base_offset)
            )
        return self._max_timestamp

    def largest_timestamp_for_retention(self) -> int:
        """Kafka's rule: the max record timestamp, or the file mtime when there is none."""
        ts = self.max_timestamp
        if ts > NO_TIMESTAMP:
            return ts
        with io_guard(self.log_dir, f"stat {self.log.path}"):
            return int(self.log.path.stat().st_mtime * 1000)

    # -- writing ----------------------------------------------------------------------------
    def can_hold(self, last_offset: int) -> bool:
        """Relative offsets are int32 in the indexes; beyond that a new segment is needed."""
        return 0 <= last_offset - self.base_offset <= _INT32_MAX

    def should_roll(
        self,
        incoming_bytes: int,
        last_offset: int,
        max_timestamp: int,
        segment_bytes: int,
        roll_ms: int,
        now_ms: int | None = None,
    ) -> bool:
        """``now_ms``: the wall clock (read here when needed and not given)."""
        if self._grow_pending:
            self.make_active()
        size = (self._log or self.log).size
        if size == 0:
            return not self.can_hold(last_offset)
        # Checked before every append: cheapest tests first, each in line.
        rolling = self._rolling_timestamp
        return (
            size + incoming_bytes > segment_bytes
            or not 0 <= last_offset - self.base_offset <= _INT32_MAX
            or (
                # Kafka measures segment.ms in record time when the segment has a timestamped
                # batch (incoming max timestamp minus the first batch's), so a replica and its
                # leader roll at the same points; otherwise in wall-clock time since the
                # segment was created.
                max_timestamp - rolling
                if rolling is not None and rolling >= 0
                else (now_ms if now_ms is not None else int(time.time() * 1000)) - self.created_ms
            )
            > roll_ms
            or (self._offset_index or self.offset_index).is_full()
            or (self._time_index or self.time_index).is_full()
        )

    def append(
        self,
        buffers: Sequence[bytes | bytearray | memoryview],
        size: int,
        batches: Iterable[tuple[int, BatchHeader]],
    ) -> None:
        """Appends whole batches, the concatenation of ``buffers`` (``size`` bytes in all);
        ``batches`` are (position within that concatenation, header).

        Index entries are keyed by each batch's last offset and point to the batch start.
        """
        if self._grow_pending:
            self.make_active()
        start = (self._log or self.log).append(buffers, size)
        for rel, header in batches:
            if self._rolling_timestamp is None and header.max_timestamp > NO_TIMESTAMP:
                self._rolling_timestamp = header.max_timestamp
            self._note_batch(start + rel, header)

    def _note_batch(self, position: int, header: BatchHeader) -> None:
        max_ts = self._max_timestamp or self._max_ts()
        batch_max = header.max_timestamp
        if batch_max > max_ts[0]:
            max_ts = self._max_timestamp = (
                batch_max,
                header.base_offset + header.last_offset_delta,
            )
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            (self._offset_index or self.offset_index).append(
                header.base_offset + header.last_offset_delta, position
            )
            if max_ts[0] > self._time_indexed:
                self.time_index.maybe_append(*max_ts)
                self._time_indexed = max_ts[0]
            self._bytes_since_last_index_entry = header.batch_length + LOG_OVERHEAD
        else:
            self._bytes_since_last_index_entry += header.batch_length + LOG_OVERHEAD

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        self.raw_txn_index.append(txn)

    def flush(self) -> None:
        for f in (self._log, self._offset_index, self._time_index, self._txn_index):
            if f is not None:
                f.flush()

    def make_active(self, *, lazily: bool = False) -> None:
        """Grows the indexes back to their preallocated size: appends will follow.

        ``lazily``: on the first append instead (a start-up need not touch the index files
        of a partition nobody writes to).
        """
        if lazily:
            self._grow_pending = True
            return
        self._grow_pending = False
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)

    def on_becoming_inactive(self) -> None:
        """On roll: record the final max timestamp and shrink the preallocated indexes."""
        self._grow_pending = False
        if self.time_index.is_loaded or self._max_timestamp is not None:
            ts, ts_offset = self._max_ts()
            self.time_index.maybe_append(ts, ts_offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    # -- reading ----------------------------------------------------------------------------
    def find_position(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset is ≥ ``offset``, scanning from the index hint."""
        return next(self._batches_from(offset, starting_position), None)

    def _batches_from(self, offset: int, starting_position: int = 0) -> Iterator[BatchPosition]:
        """Batches from the one holding ``offset`` on, located through the offset index."""
        self.ensure_valid()
        return self._batches_at(offset, starting_position)

    def _scan_from(self, offset: int) -> BatchPosition | None:
        """``find_position`` without validating first (the caller did, or checks itself)."""
        return next(self._batches_at(offset, 0), None)

    def _batches_at(self, offset: int, starting_position: int) -> Iterator[BatchPosition]:
        hint = self.offset_index.lookup(offset)
        batches = self.log.batches(max(hint.position, starting_position))
        for batch in batches:
            if batch.header.last_offset >= offset:
                yield batch
                yield from batches
                return

    def read(
        self,
        start_offset: int,
        max_size: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = False,
    ) -> SegmentReadInfo | None:
        """Batches from the one holding ``start_offset``, at most ``max_size`` bytes of them.

        Whole batches only, and none starting at or above ``max_offset`` (the high watermark
        for consumers; None when it lies beyond this segment). With ``min_one_message`` the
        first batch is returned whole even if larger than ``max_size``, so a consumer never
        stalls on a big batch. The offset index bounds the header scan at both ends, so a
        read costs two index lookups and at most ~2 index intervals of headers.
        """
        validator = self.validator
        if validator is not None:
            # A segment not yet validated (lazy start-up) checks only what this read serves,
            # if its validator can (see PartitionValidation.read); else it is validated whole.
            read_unvalidated = getattr(validator, "read", None)
            if read_unvalidated is not None:
                info: SegmentReadInfo | None = read_unvalidated(
                    self, start_offset, max_size, max_offset, min_one_message
                )
                if info is not NEEDS_VALIDATION:
                    return info
            self.ensure_valid()
        first = self._scan_from(start_offset)
        return self._select(first, start_offset, max_size, max_offset, min_one_message)

    def read_checked(
        self,
        start_offset: int,
        max_size: int,
        *,
        upper_bound: int | None,
        max_offset: int | None = None,
        min_one_message: bool = False,
    ) -> SegmentReadInfo | None:
        """``read`` of a segment not yet validated, checking just the bytes it serves.

        Every batch from the offset-index entry the read starts from to the end of the range
        must pass the checks a full validation applies (structure, CRC, ``OffsetRule``) and
        tile the range exactly, and that entry must name the batch it points to. The rest of
        the segment is left to its validator. Raises InvalidBatchError for anything else (a
        bad batch or index entry in the range, a range that cannot be found): the caller then
        validates the whole segment, which finds and handles the problem as it always did.
        """
        hint = self.offset_index.lookup(start_offset)
        first = self._scan_from(start_offset)
        if first is None:
            # Past this segment's readable data, or a broken tail the header scan stopped at.
            raise InvalidBatchError(f"{self}: no batch holds offset {start_offset}")
        info = self._select(first, start_offset, max_size, max_offset, min_one_message)
        if info is None or info.region.size == 0:
            return info  # nothing served
        if not 0 <= hint.position <= first.position:
            raise InvalidBatchError(
                f"{self}: index entry {hint} does not lead to offset {start_offset}"
            )
        if info.region.size > max(max_size, first.header.size):
            # An index entry past the range stretched it (lookup_by_position trusts it).
            raise InvalidBatchError(
                f"{self}: a read of {max_size} bytes grew to {info.region.size}"
            )
        end = first.position + info.region.size
        # (base offset, 0) is what the index answers when no entry is at or below the offset.
        indexed = hint.position > 0
        offsets = OffsetRule(self.base_offset, self.base_offset - 1, upper_bound)
        position = hint.position
        for item in walk_batches(self.log.window(end), position, check=offsets):
            if isinstance(item, BadBatch):
                raise InvalidBatchError(f"{self}: {item.reason} at position {item.position}")
            if indexed and position == hint.position and item.header.last_offset != hint.offset:
                raise InvalidBatchError(f"{self}: index entry {hint} names no batch")
            position = item.end
        if position != end:
            raise InvalidBatchError(f"{self}: the batches read end at {position}, not {end}")
        return info

    def _select(
        self,
        first: BatchPosition | None,
        start_offset: int,
        max_size: int,
        max_offset: int | None,
        min_one_message: bool,
    ) -> SegmentReadInfo | None:
        """Where the batches ``read`` returns lie, from ``first`` (the batch holding
        ``start_offset``), through the offset index, unchecked."""
        if first is None or (max_offset is not None and first.header.base_offset >= max_offset):
            return None
        limit = first.position + max_size
        if max_offset is not None:
            stop = self._scan_from(max_offset)
            if stop is not None:
                limit = min(
                    limit, stop.position if stop.header.base_offset >= max_offset else stop.end
                )
        if first.end > limit:
            size = first.header.size if min_one_message else 0
            return SegmentReadInfo(
                start_offset, first.position, self.log.region(first.position, size)
            )
        hint = self.offset_index.lookup_by_position(limit)
        end = first.end
        scan_from = end if hint is None or hint.position <= end else hint.position
        if scan_from > end:
            end = scan_from  # batches before an indexed batch start all end at or before it
        for batch in self.log.batches(scan_from):
            if batch.end > limit:
                break
            end = batch.end
        return SegmentReadInfo(
            start_offset, first.position, self.log.region(first.position, end - first.position)
        )

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record batch with max timestamp ≥ ``timestamp``.

        The caller decodes that batch to find the exact record, as Kafka does.
        """
        self.ensure_valid()
        entry = self.time_index.lookup(timestamp)
        hint = self.offset_index.lookup(max(entry.offset, starting_offset))
        for batch in self.log.batches(hint.position):
            h = batch.header
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                return max(h.base_offset, starting_offset), h.max_timestamp
        return None

    # -- recovery ---------------------------------------------------------------------------
    def rebuild_indexes_from(
        self,
        start_position: int,
        start_offset: int | None = None,
        *,
        upper_bound: int | None = None,
        min_offset: int | None = None,
        on_batch: Callable[[BatchPosition], None] | None = None,
        keep_batches: bool = True,
    ) -> RecoveryResult:
        """Scans from ``start_position`` checking CRCs, (re)indexing and truncating the tail.

        Index entries for batches before ``start_position`` are kept; entries at or after
        the first rescanned offset are dropped and written again from the scan. The interval
        counter and running max timestamp are resumed from the kept part, so the result is
        entry for entry what a full rebuild gives, without rereading what was already checked.

        A batch ends the valid data when it fails its CRC or structure, when its offsets do not rise
        strictly (the 0.11 incident, docs/proposals.md), when it starts below ``min_offset`` (the
        previous segment's end) or reaches ``upper_bound`` (the next segment's base offset).
        ``on_batch`` sees each valid batch (recovery replays producer state through it).
        """
        self.make_active()
        if start_position == 0 or start_offset is None:
            start_position, start_offset = 0, None
            self.offset_index.truncate()
            self.time_index.truncate()
        else:
            self.offset_index.truncate_to(start_offset)
            self.time_index.truncate_to(start_offset)
        self._resume_from(start_position)
        valid_end = start_position
        batches: list[BatchHeader] = []
        last_offset = start_offset - 1 if start_offset is not None else self.base_offset - 1
        if min_offset is not None:
            last_offset = max(last_offset, min_offset - 1)
        offsets = OffsetRule(self.base_offset, last_offset, upper_bound)
        for batch in self.log.scan_valid(start_position, offsets):
            header = batch.header
            if self._rolling_timestamp is None and header.max_timestamp > NO_TIMESTAMP:
                self._rolling_timestamp = header.max_timestamp
            self._note_batch(batch.position, header)
            if on_batch is not None:
                on_batch(batch)
            if keep_batches:
                batches.append(header)
            valid_end = batch.end
        last_offset = offsets.last_offset
        truncated = self.log.truncate_to(valid_end)
        if valid_end > 0:
            # As Kafka's recover(): the max timestamp so far goes in, so retention and
            # timestamp lookups see it whether or not an interval entry did.
            ts, ts_offset = self._max_timestamp or self._max_ts()
            if ts > self._time_indexed:
                self.time_index.maybe_append(ts, ts_offset, skip_full_check=True)
                self._time_indexed = ts
        result = RecoveryResult(valid_end, truncated, batches)
        result.next_offset = last_offset + 1 if valid_end > 0 else self.base_offset
        return result

    def _resume_from(self, position: int) -> None:
        """Interval counter and running max timestamp as they stood before ``position``."""
        self._max_timestamp = None
        self._time_indexed = NO_TIMESTAMP
        if position == 0:
            self._bytes_since_last_index_entry = 0
            return
        last = self.offset_index.last_entry if self.offset_index.entries else None
        scan_from = last.position if last else 0
        self._bytes_since_last_index_entry = position - scan_from
        ts_entry = self.time_index.last_entry
        max_ts = (ts_entry.timestamp, ts_entry.offset)
        self._time_indexed = ts_entry.timestamp
        # The time index is current at every offset-index entry; batches after the last one
        # may have raised the max since. They are few (less than an index interval).
        for batch in self.log.batches(scan_from, position):
            h = batch.header
            if h.max_timestamp > max_ts[0]:
                max_ts = (h.max_timestamp, h.last_offset)
            if self._rolling_timestamp is None and h.max_timestamp > NO_TIMESTAMP:
                self._rolling_timestamp = h.max_timestamp
        self._max_timestamp = max_ts

    def truncate_to(self, offset: int) -> int:
        """Removes every batch with base offset ≥ ``offset``; returns bytes removed."""
        batch = self.find_position(offset)
        if batch is None:
            return 0
        position = batch.position if batch.header.base_offset >= offset else batch.end
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.raw_txn_index.truncate_to(offset)
        removed = self.log.truncate_to(position)
        self._max_timestamp = None
        self._time_indexed = NO_TIMESTAMP
        if self.size == 0:
            self._rolling_timestamp = None
        return removed

    # -- files ------------------------------------------------------------------------------
    def close(self) -> None:
        self._grow_pending = False
        if (
            self._time_index is not None
            and self._time_index.is_loaded
            and self._max_timestamp is not None
        ):
            ts, ts_offset = self._max_timestamp
            self._time_index.maybe_append(ts, ts_offset, skip_full_check=True)
        for f in (self._offset_index, self._time_index, self._txn_index, self._log):
            if f is not None:
                f.close()

    def close_handles(self) -> None:
        """Releases descriptors and mappings, writing nothing: its dir failed (no time-index
        entry, no trimming of the preallocated indexes)."""
        self._grow_pending = False
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close_handler()
        if self._txn_index is not None:
            self._txn_index.close()
        if self._log is not None:
            self._log.close()

    def change_suffix(self, old: str, new: str) -> None:
        """Renames all four files, e.g. to `.deleted` before background removal."""
        for f in self._files():
            path = Path(f.path)
            name = path.name[: -len(old)] if old and path.name.endswith(old) else path.name
            f.rename(path.with_name(name + new))

    def delete(self) -> None:
        self.validator = None
        for f in self._files():
            f.delete()
