"""One partition's log: the segments, its offsets, producer state and leader epochs.

All methods are synchronous and guarded by one lock; the server calls them from threads.
"""

from __future__ import annotations

import bisect
import logging
import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from logkeel.records.batch import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
    InvalidBatchError,
    header_from_fields,
    set_base_offset,
    set_partition_leader_epoch,
)
from logkeel.records.record import Record, decode_records
from logkeel.records.walk import BatchPosition
from logkeel.storage.checkpoints import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCheckpointFile
from logkeel.storage.engine.leader_epoch import LeaderEpochFileCache
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.log_results import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    FetchDataInfo,
    TimestampAndOffset,
)
from logkeel.storage.engine.produce_batches import parse_batches, stamp_log_append_time
from logkeel.storage.engine.producer_state import ProducerStateManager
from logkeel.storage.engine.replay import ProducerReplay
from logkeel.storage.engine.segment import DELETED_SUFFIX, LogSegment
from logkeel.storage.engine.segment_list import base_offsets
from logkeel.storage.engine.txn_index import AbortedTxn
from logkeel.storage.errors import (
    CorruptRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    StorageError,
)
from logkeel.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

# baseOffset, batchLength, partitionLeaderEpoch: the bytes offset assignment rewrites
_PREFIX = struct.Struct(">qii")
_PREFIX_SIZE = _PREFIX.size
# AppendInfo(...) without the NamedTuple's Python-level __new__: one per append.
_new_append_info = tuple.__new__


class PartitionLog:
    """The log of one partition replica, in ``<log dir>/<topic>-<partition>``."""

    def __init__(
        self,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        *,
        log_dir: Path,
        segments: list[LogSegment],
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
        producer_state: ProducerStateManager,
        leader_epochs: LeaderEpochFileCache,
        schedule_delete: Callable[[Callable[[], None], float], None] | None = None,
    ) -> None:
        self.dir = directory
        self.tp = tp
        self.config = config
        self.log_dir = log_dir
        self._segments = segments
        self._bases = base_offsets(segments)  # a LazySegments (segment_list) stays lazy
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.high_watermark = min(log_end_offset, max(log_start_offset, 0))
        # Loaded after the machine went down uncleanly (`LogDir.page_cache_lost`): records
        # acknowledged but not flushed then may be missing, beyond anything its length shows.
        # Cleared once it holds what its leader had acknowledged, or leads.
        self.unflushed_lost = False
        self.producer_state = producer_state
        self.leader_epochs = leader_epochs
        self._schedule_delete = schedule_delete
        self.lock = threading.RLock()
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms()
        self._last_snapshot_ms = _now_ms()
        self._truncations = 0  # bumped by truncations; a snapshot written meanwhile is stale
        # Told (on the thread that did it, this log's lock held) when the log end, log start or
        # latest leader epoch moved other than by an append: the fetcher following this replica
        # keeps its fetch position between rounds and re-reads it only when told.
        self.position_listener: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"PartitionLog({self.tp}, [{self.log_start_offset}, {self.log_end_offset}))"

    # -- structure ---------------------------------------------------------------------------
    @staticmethod
    def new_segment(
        directory: Path, base_offset: int, config: LogConfig, log_dir: Path, *, create: bool = True
    ) -> LogSegment:
        """A segment object; ``create`` makes its (empty) `.log` file, as a roll does."""
        segment = LogSegment(
            directory,
            base_offset,
            log_dir=log_dir,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes,
        )
        if create:
            segment.log.create()
        return segment

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def partition(self) -> int:
        return self.tp.partition

    def _segment_for(self, offset: int) -> int:
        """Index of the segment that holds ``offset`` (the last whose base is ≤ offset)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    # -- appends -----------------------------------------------------------------------------
    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        *,
        origin_is_client: bool = True,
        batches: list[BatchPosition] | None = None,
    ) -> AppendInfo:
        """Validates, deduplicates and appends a producer's batches, assigning their offsets.
        ``batches``: ``parse_batches`` of ``records``, when the caller has it already."""
        if batches is None:
            batches = parse_batches(records, self.config.max_message_bytes)
        with self.lock:
            view = memoryview(records)
            # (one batch per request is the usual case: no generator for it)
            if (
                batches[0][1].producer_id >= 0
                if len(batches) == 1
                else any(h.producer_id >= 0 for _, h in batches)
            ):
                duplicate = self.producer_state.prepare_appends(
                    ((h, view[p : p + h.size] if h.is_control else None) for p, h in batches),
                    origin_is_client,
                )
                if duplicate is not None:
                    return AppendInfo(
                        duplicate.first_offset,
                        duplicate.last_offset,
                        duplicate.max_timestamp,
                        -1,
                        self.log_start_offset,
                        0,
                        0,
                        duplicate=True,
                    )
            append_time = _now_ms() if self.config.log_append_time else -1
            next_offset = self.log_end_offset
            assigned: list[tuple[int, BatchHeader]] = []
            buffers: list[bytes | bytearray | memoryview] = []
            for pos, header in batches:
                if append_time >= 0:
                    # The timestamp is under the CRC: this batch is copied and re-checksummed.
                    batch = bytearray(view[pos : pos + header.size])
                    stamp_log_append_time(batch, header, append_time)
                    set_base_offset(batch, next_offset)
                    set_partition_leader_epoch(batch, leader_epoch)
                    buffers.append(batch)
                else:
                    # Only baseOffset and partitionLeaderEpoch change, outside the CRC: write
                    # a new 16-byte prefix and the rest of the batch straight from the request.
                    buffers.append(_PREFIX.pack(next_offset, header.batch_length, leader_epoch))
                    buffers.append(
                        view[pos + _PREFIX_SIZE : pos + header.batch_length + LOG_OVERHEAD]
                    )
                # The header as written: its new base offset and epoch, the rest as received.
                header = header_from_fields((next_offset, header[1], leader_epoch) + header[3:])
                assigned.append((pos, header))
                next_offset += header.last_offset_delta + 1
            return self._append(buffers, view, assigned, leader_epoch, append_time)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Appends replicated batches with the offsets and epochs the leader gave them."""
        batches = parse_batches(records, max(self.config.max_message_bytes, len(records)))
        with self.lock:
            expected = self.log_end_offset
            for _, header in batches:
                if header.base_offset < expected:
                    raise CorruptRecordError(
                        f"{self.tp}: replicated batch at offset {header.base_offset} is below the "
                        f"log end {expected}"
                    )
                expected = header.next_offset
            epoch = batches[-1][1].partition_leader_epoch
            return self._append([records], memoryview(records), batches, epoch, -1)

    def _append(
        self,
        buffers: list[bytes | bytearray | memoryview],
        view: memoryview,
        batches: Sequence[tuple[int, BatchHeader]],
        leader_epoch: int,
        append_time: int,
    ) -> AppendInfo:
        """Writes ``buffers`` (whose concatenation is the batches) and updates the log's state.

        ``view`` holds the batches' record bytes as received (control markers are read there).
        """
        first_header = batches[0][1]
        first = first_header.base_offset
        last = batches[-1][1].last_offset
        if len(batches) == 1:  # the usual produce request: one batch per partition
            max_ts, records = first_header.max_timestamp, first_header.records_count
        else:
            max_ts = max(h.max_timestamp for _, h in batches)
            records = sum(h.records_count for _, h in batches)
        size = len(view)
        config = self.config
        segment = self._segments[-1]
        if segment.should_roll(size, last, max_ts, config.segment_bytes, config.segment_ms):
            segment = self.roll(first)
        latest_epoch = self.leader_epochs.latest_epoch
        if len(batches) == 1:  # no loop for the usual single batch
            epoch = first_header.partition_leader_epoch
            if epoch >= 0 and epoch != latest_epoch:
                self.leader_epochs.assign(epoch, first)
        else:
            for _, header in batches:
                epoch = header.partition_leader_epoch
                if epoch >= 0 and epoch != latest_epoch:
                    self.leader_epochs.assign(epoch, header.base_offset)
                    latest_epoch = self.leader_epochs.latest_epoch
        segment.append(buffers, size, batches)
        state = self.producer_state
        for pos, header in batches:
            if header.producer_id < 0:
                state.update_map_end_offset(header.base_offset + header.last_offset_delta + 1)
                continue
            completed = state.update(
                header,
                header.base_offset,
                header.last_offset,
                batch=view[pos : pos + header.size] if header.is_control else None,
            )
            if completed is not None:
                lso = self.producer_state.last_stable_offset(completed)
                if completed.is_aborted:
                    segment.append_aborted_txn(
                        AbortedTxn(
                            completed.producer_id,
                            completed.first_offset,
                            completed.last_offset,
                            lso,
                        )
                    )
                self.producer_state.complete_txn(completed)
        self.log_end_offset = last + 1
        self._unflushed_messages += records
        if self._unflushed_messages >= config.flush_messages:
            self.flush()
        return _new_append_info(
            AppendInfo,
            (first, last, max_ts, append_time, self.log_start_offset, records, size, False),
        )

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Starts a new active segment at ``base_offset`` (default: the log end offset).

        A follower may roll above the log end: replicated batches can skip offsets.
        """
        with self.lock:
            base = (
                self.log_end_offset
                if base_offset is None
                else max(base_offset, self.log_end_offset)
            )
            old = self.active_segment
            if old.size == 0 and old.base_offset == base:
                return old
            old.on_becoming_inactive()
            # Kafka snapshots producer state at every roll so recovery can start there.
            self.producer_state.take_snapshot(self.log_end_offset)
            segment = self.new_segment(self.dir, base, self.config, self.log_dir)
            segment.make_active()
            if old.size == 0:
                self._remove_segments([old], rename=False)
            self._segments.append(segment)
            self._bases.append(segment.base_offset)
            log.debug("%s: rolled new segment at offset %d", self.tp, segment.base_offset)
            return segment

    # -- reads -------------------------------------------------------------------------------
    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
        include_aborted: bool = False,
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``fetch_offset``, below ``max_offset`` if given.

        ``max_offset`` is the high watermark (or last stable offset) for consumers; followers
        read up to the log end.
        """
        with self.lock:
            end = self.log_end_offset
            if fetch_offset < self.log_start_offset or fetch_offset > end:
                raise OffsetOutOfRangeError(
                    f"{self.tp}: offset {fetch_offset} is outside [{self.log_start_offset}, {end}]"
                )
            limit = end if max_offset is None else min(max_offset, end)
            if fetch_offset >= limit:
                return FetchDataInfo(fetch_offset, None)
            i = self._segment_for(fetch_offset)
            segments = self._segments[i:]
            ends = [s.base_offset for s in segments[1:]] + [end]
            truncations = self._truncations
        for segment, segment_end in zip(segments, ends, strict=True):
            if truncations != self._truncations:
                break  # see below: the next fetch sees the cut
            try:
                info = segment.read(
                    fetch_offset,
                    max_bytes,
                    max_offset=limit if limit < segment_end else None,
                    min_one_message=min_one_message,
                )
            except KafkaStorageError:
                raise
            except StorageError:
                if truncations == self._truncations:
                    raise
                # Validating this segment on its first read found damage and cut the log at or
                # below it (lazy start-up), deleting what followed, possibly this segment.
                break
            if info is not None and info.region.size > 0:
                aborted: tuple[AbortedTxn, ...] = ()
                if include_aborted:
                    aborted = tuple(self.collect_aborted_txns(fetch_offset, limit))
                return FetchDataInfo(fetch_offset, info.region, aborted)
        return FetchDataInfo(fetch_offset, None)

    def collect_aborted_txns(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        with self.lock:
            segments = self._segments[self._segment_for(start_offset) :]
        found: list[AbortedTxn] = []
        for segment in segments:
            if segment.base_offset >= upper_bound:
                break
            result = segment.txn_index.collect_aborted_txns(start_offset, upper_bound)
            found.extend(result.aborted_txns)
            if result.is_complete:
                break
        return found

    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset()
        lso = (
            self.high_watermark
            if first_unstable is None
            else min(first_unstable, self.high_watermark)
        )
        return lso

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: earliest (-2), latest (-1), max timestamp (-3) or a real timestamp."""
        with self.lock:
            if timestamp == EARLIEST_TIMESTAMP:
                epoch = self.leader_epochs.epoch_for_offset(self.log_start_offset)
                return TimestampAndOffset(NO_TIMESTAMP, self.log_start_offset, _epoch(epoch))
            if timestamp == LATEST_TIMESTAMP:
                epoch = self.leader_epochs.latest_epoch
                return TimestampAndOffset(NO_TIMESTAMP, self.log_end_offset, _epoch(epoch))
            segments = list(self._segments)
        if timestamp == MAX_TIMESTAMP:
            best = max(segments, key=lambda s: s.max_timestamp)
            if best.max_timestamp == NO_TIMESTAMP:
                return None
            found = best.find_position(best.offset_of_max_timestamp)
            if found is None:
                return None
            records = _records_of(best, found)
            rec = next(r for r in records if r.timestamp == best.max_timestamp)
            epoch = self.leader_epochs.epoch_for_offset(rec.offset)
            return TimestampAndOffset(rec.timestamp, rec.offset, _epoch(epoch))
        for segment in segments:
            if segment.max_timestamp < timestamp:
                continue
            hit = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if hit is None:
                continue
            found = segment.find_position(hit[0])
            if found is None:
                continue
            for rec in _records_of(segment, found):
                if rec.timestamp >= timestamp and rec.offset >= self.log_start_offset:
                    epoch = self.leader_epochs.epoch_for_offset(rec.offset)
                    return TimestampAndOffset(rec.timestamp, rec.offset, _epoch(epoch))
        return None

    # -- truncation, retention and log start ---------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Removes every record at or above ``offset`` (a follower diverged); bytes removed."""
        with self.lock:
            if offset >= self.log_end_offset:
                # Nothing to remove, but an epoch may start at the log end without a record
                # (this replica became leader and appended nothing before losing the office);
                # kept, it makes every fetch diverge again and the follower never catches up.
                self.leader_epochs.truncate_from_end(self.log_end_offset)
                self._position_moved()
                return 0
            if offset < self.log_start_offset:
                offset = self.log_start_offset
            removed = 0
            doomed = [
                s for s in self._segments if s.base_offset >= offset and s is not self._segments[0]
            ]
            for segment in doomed:
                removed += segment.size
            self._remove_segments(doomed, rename=True)
            self._truncations += 1
            removed += self.active_segment.truncate_to(offset)
            if not self._segments:
                raise AssertionError("a log always keeps one segment")
            self.log_end_offset = offset
            self.high_watermark = min(self.high_watermark, offset)
            self.recovery_point = min(self.recovery_point, offset)
            self.leader_epochs.truncate_from_end(offset)
            self._reload_producer_state()
            self._position_moved()
            log.info("%s: truncated to offset %d (%d bytes removed)", self.tp, offset, removed)
            return removed

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empties the log and restarts it at ``offset`` (a follower far behind the leader)."""
        with self.lock:
            self._truncations += 1
            self._remove_segments(list(self._segments), rename=True)
            segment = self.new_segment(self.dir, offset, self.config, self.log_dir)
            segment.make_active()
            self._segments.append(segment)
            self._bases.append(offset)
            self.log_start_offset = self.log_end_offset = self.recovery_point = offset
            self.high_watermark = offset
            self.leader_epochs.clear()
            self.producer_state.truncate_fully_and_start_at(offset)
            self._position_moved()

    def _position_moved(self) -> None:
        listener = self.position_listener
        if listener is not None:
            listener()

    def _reload_producer_state(self) -> None:
        """Rebuilds producer state after truncation: newest snapshot, then replay (the
        loader's replay: one mechanism for both)."""
        state = self.producer_state
        state.truncate_and_reload(self.log_start_offset, self.log_end_offset)
        if state.map_end_offset < self.log_end_offset:
            ProducerReplay(state, index_from=None).replay_headers(
                self._segments,
                max(state.map_end_offset, self.log_start_offset),
                self.log_end_offset,
            )
        state.update_map_end_offset(self.log_end_offset)

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """DeleteRecords: moves the log start forward (never past the high watermark)."""
        with self.lock:
            if new_start <= self.log_start_offset:
                return False
            if new_start > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"{self.tp}: cannot delete records up to {new_start}, beyond the high "
                    f"watermark {self.high_watermark}"
                )
            self.log_start_offset = new_start
            self.leader_epochs.truncate_from_start(new_start)
            self.producer_state.on_log_start_offset_incremented(new_start)
            self._delete_segments_below_start()
            self._position_moved()
            return True

    def _delete_segments_below_start(self) -> int:
        doomed = []
        for segment, nxt in zip(self._segments, self._segments[1:], strict=False):
            if nxt.base_offset <= self.log_start_offset:
                doomed.append(segment)
        self._remove_segments(doomed, rename=True)
        return len(doomed)

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention by time and size, and segments wholly below the log start offset."""
        now_ms = _now_ms() if now_ms is None else now_ms
        deleted = 0
        with self.lock:
            deleted += self._delete_segments_below_start()
            if self.config.retention_ms >= 0:
                deleted += self._delete_while(
                    lambda s: (
                        now_ms - s.largest_timestamp_for_retention() > self.config.retention_ms
                    )
                )
            if self.config.retention_bytes >= 0:
                excess = self.size_in_bytes - self.config.retention_bytes

                def over_size(s: LogSegment) -> bool:
                    nonlocal excess
                    if excess - s.size >= 0:
                        excess -= s.size
                        return True
                    return False

                deleted += self._delete_while(over_size)
        return deleted

    def _delete_while(self, predicate: Callable[[LogSegment], bool]) -> int:
        """Deletes the oldest segments while ``predicate`` holds, never past the high watermark.

        An expired active segment is rolled first, as Kafka does, so the log keeps a segment.
        """
        doomed: list[LogSegment] = []
        for segment in self._segments:
            is_active = segment is self.active_segment
            upper = (
                self.log_end_offset
                if is_active
                else self._segments[self._segments.index(segment) + 1].base_offset
            )
            if upper > self.high_watermark or not predicate(segment):
                break
            if is_active:
                if segment.size == 0:
                    break
                self.roll()
            doomed.append(segment)
        if doomed:
            self._remove_segments(doomed, rename=True)
            new_start = self._segments[0].base_offset
            if new_start > self.log_start_offset:
                self.log_start_offset = new_start
                self.leader_epochs.truncate_from_start(new_start)
                self.producer_state.on_log_start_offset_incremented(new_start)
                self.producer_state.delete_snapshots_below(new_start)
                self._position_moved()
            log.info(
                "%s: deleted %d segment(s) by retention; log start now %d",
                self.tp,
                len(doomed),
                self.log_start_offset,
            )
        return len(doomed)

    def _remove_segments(self, doomed: list[LogSegment], *, rename: bool) -> None:
        if not doomed:
            return
        ids = {id(s) for s in doomed}
        self._segments = [s for s in self._segments if id(s) not in ids]
        self._bases = [s.base_offset for s in self._segments]
        for segment in doomed:
            if rename:
                segment.change_suffix("", DELETED_SUFFIX)
                self._delete_later(segment)
            else:
                segment.close()
                segment.delete()

    def _delete_later(self, segment: LogSegment) -> None:
        def delete() -> None:
            segment.close()
            segment.delete()

        self.after_file_delete_delay(delete)

    def after_file_delete_delay(self, fn: Callable[[], None]) -> None:
        """Runs ``fn`` after file.delete.delay.ms: readers may still hold file regions of
        segments that left the log, so their files go later."""
        if self._schedule_delete is None or self.config.file_delete_delay_ms <= 0:
            fn()
        else:
            self._schedule_delete(fn, self.config.file_delete_delay_ms / 1000)

    def replace_segment(self, old: LogSegment, new: LogSegment) -> None:
        """Puts ``new`` (same base offset) where ``old`` is: the log cleaner's swap. The caller
        holds the lock and has checked that ``old`` is still inactive and unchanged."""
        if new.base_offset != old.base_offset:
            raise ValueError(f"{new} cannot replace {old}: base offsets differ")
        i = next(k for k, s in enumerate(self._segments) if s is old)
        self._segments[i] = new

    # -- durability --------------------------------------------------------------------------
    def flush(self, up_to: int | None = None) -> None:
        """fsyncs segments holding data below ``up_to`` (default: all) and moves the recovery point."""
        with self.lock:
            target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
            if target <= self.recovery_point:
                return
            start = self._segment_for(self.recovery_point)
            segments = self._segments[start:]
        # An epoch assigned without a sync is made durable before the recovery point claims
        # its batches (an unclean start reads the epochs of the batches above it only), and
        # after the target is read: an epoch assigned later starts at or above it.
        self.leader_epochs.sync()
        for segment in segments:
            if segment.base_offset >= target:
                break
            segment.flush()
        with self.lock:
            self.recovery_point = max(self.recovery_point, target)
            self._unflushed_messages = 0
            self._last_flush_ms = _now_ms()

    def maybe_flush(self, now_ms: int) -> bool:
        if (
            now_ms - self._last_flush_ms >= self.config.flush_ms
            and self.recovery_point < self.log_end_offset
        ):
            self.flush()
            return True
        return False

    def maybe_take_snapshot(self, now_ms: int) -> bool:
        """producer.state.snapshot.interval.ms: bounds producer-state replay after a crash."""
        interval = self.config.producer_snapshot_interval_ms
        if interval <= 0 or now_ms - self._last_snapshot_ms < interval:
            return False  # 0: snapshots only at roll and shutdown
        self._last_snapshot_ms = now_ms
        return self.snapshot_producer_state()

    def snapshot_producer_state(self) -> bool:
        """Snapshots producer state at its end, once the data it describes is flushed (a
        snapshot is only useful for recovery up to there); False if nothing changed.

        Neither the fsync of the data nor the snapshot's own holds the lock: an fsync of a busy
        partition can take seconds while writeback is throttled, and appends (with the produce
        request carrying them) waited for it.
        """
        with self.lock:
            pending = self.producer_state.prepare_snapshot()
            truncations = self._truncations
        if pending is None:
            return False
        self.flush(pending.offset)
        pending.write()
        with self.lock:
            if truncations != self._truncations or pending.offset < self.log_start_offset:
                pending.discard()  # it may describe batches removed meanwhile
                return False
            self.producer_state.add_snapshot(pending)
            return True

    def close(self) -> None:
        """Flushes, snapshots producer state at the log end and closes every file."""
        with self.lock:
            self.flush()
            # A clean start trusts the checkpoint: an epoch with nothing to flush is synced too.
            self.leader_epochs.sync()
            self.producer_state.take_snapshot(self.log_end_offset)
            for segment in self._segments:
                segment.close()

    def close_without_flush(self) -> None:
        """Closes file handles only, writing nothing: the dir failed (or the log is being
        deleted). Blocking (close of a failing disk's files): run it on an IO thread."""
        with self.lock:
            for segment in self._segments:
                try:
                    segment.close_handles()
                except KafkaStorageError:
                    # The dir is already failed; a close that errors releases nothing more.
                    log.debug("closing %s after dir failure", segment, exc_info=True)

    def delete(self) -> None:
        with self.lock:
            for segment in self._segments:
                segment.close()
                segment.delete()
            self._segments = []
            self._bases = []


def _records_of(segment: LogSegment, found: BatchPosition) -> list[Record]:
    """The records of a batch a timestamp lookup landed on. One that does not decode (written
    unchecked by an older version) fails this lookup alone, with the offsets it holds."""
    header = found.header
    try:
        return decode_records(segment.log.read(found.position, header.size))[1]
    except InvalidBatchError as exc:
        raise CorruptRecordError(
            f"the batch at offsets {header.base_offset}..{header.last_offset} does not decode: {exc}"
        ) from None


def _epoch(epoch: int | None) -> int:
    return -1 if epoch is None else epoch


def _now_ms() -> int:
    return int(time.time() * 1000)


def leader_epoch_cache(directory: Path, log_dir: Path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(
        LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT_FILE, log_dir)
    )
