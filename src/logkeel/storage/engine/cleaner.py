"""The log cleaner: compaction of ``cleanup.policy=compact`` logs, as Kafka's LogCleaner.

One pass over a log:

1. The *cleanable* range is the inactive segments wholly below the high watermark whose largest
   timestamp is older than ``min.compaction.lag.ms``. Its *dirty* part starts at the first dirty
   offset (where the previous pass ended; everything after a restart). Nothing happens unless
   dirty bytes / cleanable bytes reaches ``min.cleanable.dirty.ratio``.
2. An offset map (key → latest offset) is built over the dirty part.
3. Each cleanable segment is rewritten keeping, per key, only records at or after the mapped
   offset. Tombstones (null value) go once their segment is older than ``delete.retention.ms``.
   Records keep their offsets (gaps are normal); a partly kept batch is rebuilt with the first
   kept record's offset as its base; a wholly kept batch is copied byte for byte.
4. The new segment keeps the old base offset and replaces it crash-safely:
   ``<base>.log.cleaned`` (+ indexes) is written and fsynced, renamed to ``.swap``; then, under
   the log lock, the old files become ``.deleted`` and the ``.swap`` files take their names, the
   log file last. A crash before ``.log.swap`` exists leaves the old segment (the loader drops
   ``.cleaned`` and index ``.swap`` files); a crash after completes the swap at load (the loader
   renames ``.log.swap`` and rebuilds the indexes).

Kept simple on purpose: batches with a producer id (idempotent or transactional) and control
batches are never rewritten, and only non-transactional records enter the offset map (an
aborted transaction's records must not shadow older committed values). The transaction index is
therefore unchanged and stays in place, shared by the old and the new segment. The offset map is
an unbounded dict (Kafka's is bounded by log.cleaner.dedupe.buffer.size), and the first dirty
offset lives in memory only (Kafka's cleaner-offset-checkpoint), so the first pass after a
restart treats the whole cleanable range as dirty.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from logkeel.records.batch import BatchHeader, TimestampType
from logkeel.records.builder import BatchBuilder
from logkeel.records.record import Record, decode_records
from logkeel.storage.engine.file_records import FileRecords
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.offset_index import OffsetIndex
from logkeel.storage.engine.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    file_name,
)
from logkeel.storage.engine.time_index import TimeIndex
from logkeel.storage.errors import io_guard
from logkeel.storage.fileio import fsync_dir

log = logging.getLogger(__name__)


@dataclass(slots=True)
class CleanResult:
    """What one pass over one log did."""

    first_offset: int  # start of the cleaned range
    end_offset: int  # end of the cleaned range (exclusive): the next first dirty offset
    segments: int = 0  # segments rewritten
    skipped: int = 0  # segments that changed under the cleaner and were left as they were
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0


@dataclass(slots=True)
class _Cleanable:
    segment: LogSegment
    end: int  # the next segment's base offset
    size: int  # log size when the pass looked at it (a change means it was truncated)


class LogCleaner:
    """Compacts logs one pass at a time; remembers each log's first dirty offset."""

    def __init__(self) -> None:
        # Keyed by the log object: a log deleted and re-created starts dirty again.
        self._first_dirty: weakref.WeakKeyDictionary[PartitionLog, int] = (
            weakref.WeakKeyDictionary()
        )

    def first_dirty_offset(self, plog: PartitionLog) -> int:
        return max(self._first_dirty.get(plog, 0), plog.log_start_offset)

    def clean(
        self, plog: PartitionLog, *, now_ms: int | None = None, force: bool = False
    ) -> CleanResult | None:
        """One cleaning pass over ``plog``; None when there was nothing (dirty enough) to do.

        ``force`` ignores min.cleanable.dirty.ratio (not the lag or the high watermark).
        """
        config = plog.config
        if not config.compact:
            return None
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with plog.lock:
            cleanable = self._cleanable(plog, now)
            if not cleanable:
                return None
            first_dirty = self.first_dirty_offset(plog)
            end = cleanable[-1].end
            if first_dirty >= end:
                return None
            total = sum(c.size for c in cleanable)
            dirty = sum(c.size for c in cleanable if c.end > first_dirty)
            if total == 0 or (not force and dirty / total < config.min_cleanable_dirty_ratio):
                return None
        result = CleanResult(cleanable[0].segment.base_offset, end)
        offset_map = self._build_offset_map(
            [c for c in cleanable if c.end > first_dirty], first_dirty, result
        )
        for item in cleanable:
            retain_tombstones = (
                now - item.segment.largest_timestamp_for_retention() <= config.delete_retention_ms
            )
            swapped = self._clean_segment(plog, item, offset_map, retain_tombstones, result)
            if swapped:
                result.segments += 1
            else:
                result.skipped += 1
        with plog.lock:
            self._first_dirty[plog] = max(self._first_dirty.get(plog, 0), end)
        log.info(
            "%s: cleaned [%d, %d): %d segment(s), %d of %d records removed, %d -> %d bytes",
            plog.tp,
            result.first_offset,
            end,
            result.segments,
            result.records_removed,
            result.records_read,
            result.bytes_read,
            result.bytes_written,
        )
        return result

    # -- planning ---------------------------------------------------------------------------
    @staticmethod
    def _cleanable(plog: PartitionLog, now: int) -> list[_Cleanable]:
        """Inactive segments below the high watermark and past min.compaction.lag.ms, in order
        (call under the log lock)."""
        segments = plog.segments
        lag = plog.config.min_compaction_lag_ms
        out: list[_Cleanable] = []
        for segment, nxt in zip(segments, segments[1:], strict=False):
            if nxt.base_offset > plog.high_watermark:
                break
            if lag > 0 and now - segment.largest_timestamp_for_retention() < lag:
                break
            segment.ensure_valid()  # a lazily loaded segment is checked before it is rewritten
            out.append(_Cleanable(segment, nxt.base_offset, segment.size))
        return out

    @staticmethod
    def _build_offset_map(
        dirty: list[_Cleanable], first_dirty: int, result: CleanResult
    ) -> dict[bytes, int]:
        offset_map: dict[bytes, int] = {}
        for item in dirty:
            for header, records in _batches(item.segment, item.size):
                if header.is_transactional or header.is_control or header.last_offset < first_dirty:
                    continue
                for record in records():
                    if record.key is not None and record.offset >= first_dirty:
                        offset_map[record.key] = record.offset
        return offset_map

    # -- rewriting --------------------------------------------------------------------------
    def _clean_segment(
        self,
        plog: PartitionLog,
        item: _Cleanable,
        offset_map: dict[bytes, int],
        retain_tombstones: bool,
        result: CleanResult,
    ) -> bool:
        """Rewrites one segment into ``.cleaned`` files, then swaps it in; False if the segment
        changed meanwhile (truncated, deleted) and was left alone."""
        old = item.segment
        base = old.base_offset
        directory, log_dir = plog.dir, plog.log_dir
        new = _segment_at(plog, base, CLEANED_SUFFIX)
        try:
            with io_guard(log_dir, f"cleaning {old}"):
                mtime_ns = old.log.path.stat().st_mtime_ns
            new.make_active()
            for data, kept in self._filter(old, item.size, offset_map, retain_tombstones, result):
                new.append([data], len(data), [(0, kept)])
                result.bytes_written += len(data)
            result.bytes_read += item.size
            new.on_becoming_inactive()
            new.flush()
            new.close()
            with io_guard(log_dir, f"cleaning {old}"):
                # As Kafka: the cleaned segment keeps the old one's modification time, which
                # time retention and the tombstone horizon read when there are no timestamps.
                os.utime(new.log.path, ns=(mtime_ns, mtime_ns))
            # Indexes first, the log last: a `.log.swap` promises a complete segment.
            _rename(new, CLEANED_SUFFIX, SWAP_SUFFIX)
            with io_guard(log_dir, f"cleaning {old}"):
                fsync_dir(directory)
        except BaseException:
            _discard(new)
            raise
        with plog.lock:
            current = plog.segments
            i = next((k for k, s in enumerate(current) if s is old), None)
            if (
                i is None
                or i == len(current) - 1
                or current[i + 1].base_offset != item.end
                or old.size != item.size
            ):
                _discard(new)
                return False
            _rename(old, "", DELETED_SUFFIX)
            _rename(new, SWAP_SUFFIX, "")
            with io_guard(log_dir, f"swapping in the cleaned {old}"):
                fsync_dir(directory)
            replacement = PartitionLog.new_segment(
                directory, base, plog.config, log_dir, create=False
            )
            plog.replace_segment(old, replacement)
        self._retire_later(plog, old)
        return True

    @staticmethod
    def _filter(
        segment: LogSegment,
        size: int,
        offset_map: dict[bytes, int],
        retain_tombstones: bool,
        result: CleanResult,
    ) -> Iterator[tuple[bytes, BatchHeader]]:
        """(bytes to write, their header) for each batch that keeps records."""
        for header, records in _batches(segment, size):
            data = records.raw
            result.records_read += header.records_count
            if header.has_producer_id or header.is_control:
                yield data, header
                continue
            decoded = records()
            kept = [r for r in decoded if _keep(r, offset_map, retain_tombstones)]
            result.records_removed += len(decoded) - len(kept)
            if not kept:
                continue
            if len(kept) == len(decoded):
                yield data, header
                continue
            rebuilt = _rebuild(header, kept)
            yield rebuilt, BatchHeader.parse(rebuilt)

    @staticmethod
    def _retire_later(plog: PartitionLog, old: LogSegment) -> None:
        """Deletes the old segment's `.deleted` files once in-flight reads are done. Its
        transaction index is the new segment's too (never rewritten), so it is only closed."""

        def retire() -> None:
            old.validator = None
            old.log.delete()
            old.offset_index.delete()
            old.time_index.delete()
            old.raw_txn_index.close()

        plog.after_file_delete_delay(retire)


class _Records:
    """Lazily decoded records of one batch, with its raw bytes."""

    __slots__ = ("raw", "_decoded")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._decoded: list[Record] | None = None

    def __call__(self) -> list[Record]:
        if self._decoded is None:
            self._decoded = decode_records(self.raw, verify_crc=False)[1]
        return self._decoded


def _batches(segment: LogSegment, size: int) -> Iterator[tuple[BatchHeader, _Records]]:
    for batch in segment.log.batches(0, size):
        yield batch.header, _Records(segment.log.read(batch.position, batch.header.size))


def _keep(record: Record, offset_map: dict[bytes, int], retain_tombstones: bool) -> bool:
    key = record.key
    if key is None:
        return True  # compacted topics refuse null keys at produce time; keep any that exist
    latest = offset_map.get(key)
    if latest is not None and record.offset < latest:
        return False
    return record.value is not None or retain_tombstones


def _rebuild(header: BatchHeader, kept: list[Record]) -> bytes:
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    builder = BatchBuilder(
        base_offset=kept[0].offset,
        compression=header.compression,
        timestamp_type=header.timestamp_type,
        partition_leader_epoch=header.partition_leader_epoch,
        log_append_time=header.max_timestamp if log_append else None,
    )
    for r in kept:
        builder.append_with_offset(r.offset, r.timestamp, r.key, r.value, r.headers)
    return builder.build()


def _segment_at(plog: PartitionLog, base: int, suffix: str) -> LogSegment:
    """A segment whose log and indexes are ``<base>.<kind><suffix>`` files (the transaction
    index stays the real one: it is never rewritten)."""
    config = plog.config
    segment = PartitionLog.new_segment(plog.dir, base, config, plog.log_dir, create=False)
    directory = plog.dir

    segment._log = FileRecords(directory / file_name(base, LOG_SUFFIX + suffix), plog.log_dir)
    segment._offset_index = OffsetIndex(
        directory / file_name(base, INDEX_SUFFIX + suffix),
        base,
        config.segment_index_bytes,
        log_dir=plog.log_dir,
    )
    segment._time_index = TimeIndex(
        directory / file_name(base, TIME_INDEX_SUFFIX + suffix),
        base,
        config.segment_index_bytes,
        log_dir=plog.log_dir,
    )
    with io_guard(plog.log_dir, f"creating the cleaned {segment}"):
        for f in (segment.log, segment.offset_index, segment.time_index):
            Path(f.path).unlink(missing_ok=True)  # a leftover of an earlier, interrupted pass
    segment.log.create()
    return segment


def _rename(segment: LogSegment, old: str, new: str) -> None:
    """Renames a segment's log and indexes (not its transaction index), the log last."""
    for f in (segment.offset_index, segment.time_index, segment.log):
        path = Path(f.path)
        name = path.name[: -len(old)] if old else path.name
        f.rename(path.with_name(name + new))


def _discard(segment: LogSegment) -> None:
    """Removes a cleaned segment that will not be swapped in."""
    segment.log.delete()
    segment.offset_index.delete()
    segment.time_index.delete()
