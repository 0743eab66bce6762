"""Opens a partition directory into a PartitionLog: the start-up and recovery path.

- Clean start (KIP-263): only the active segment is opened and checked. The other segments
  get a validator that runs on their first access or in the background (lazy), or are all
  validated before the partition serves (``validation="eager"``).
- Unclean start (AKIP-2): only data after the recovery point is read, CRC-checked batch by
  batch. Index, time index and transaction index entries below it are kept and supplemented.
  Producer state comes from the newest snapshot at or below the recovery point and is
  replayed from there, re-adding the aborted transactions above the recovery point (the
  transaction index's checkpoint: it is fsynced with the segment, so whatever it held below the
  recovery point is on disk).
- Damage: leftovers of interrupted operations are finished or removed, a bad index is rebuilt,
  a bad batch ends the log there (what follows is cut and reported), a missing segment file is
  reported and its orphaned indexes removed. Whatever cannot be loaded raises, and the log
  manager takes that partition (only) offline.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from logkeel.records.batch import InvalidBatchError
from logkeel.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    EpochEntry,
    LeaderEpochCheckpointFile,
)
from logkeel.storage.engine.leader_epoch import LeaderEpochFileCache
from logkeel.storage.engine.log import PartitionLog, leader_epoch_cache
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.partition_dir import (
    list_partition,
    listing_from_cache,
)
from logkeel.storage.engine.producer_state import ProducerStateManager
from logkeel.storage.engine.replay import ProducerReplay, index_hint, restore_scratch_state
from logkeel.storage.engine.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    file_name,
)
from logkeel.storage.engine.txn_index import AbortedTxn
from logkeel.storage.engine.validation import (
    PartitionValidation,
    SegmentValidator,
    validate_segment,
)
from logkeel.storage.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    io_guard,
)
from logkeel.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

LAZY = "lazy"
EAGER = "eager"
VALIDATION_MODES = (LAZY, EAGER)


@dataclass(frozen=True, slots=True)
class Truncation:
    topic: str
    partition: int
    offset: int
    bytes: int


@dataclass(slots=True)
class LoadReport:
    """What loading one partition did; summed by the log manager for the whole broker."""

    tp: TopicPartition
    segments: int = 0
    segments_opened: int = 0
    segments_recovered: int = 0
    segments_validated: int = 0
    bytes_scanned: int = 0
    replayed_batches: int = 0
    snapshot_offset: int | None = None
    truncations: list[Truncation] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    rebuilt_indexes: list[str] = field(default_factory=list)
    missing_segments: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class RecoveryProgress:
    """Counts what unclean recovery has left to do, and logs it now and then (thread-safe)."""

    def __init__(
        self, name: str, partitions: int, segments: int, nbytes: int, every_s: float = 1.0
    ):
        self.name = name
        self.partitions = partitions
        self.segments = segments
        self.bytes = nbytes
        self.partitions_done = 0
        self.segments_done = 0
        self.bytes_done = 0
        self._every = every_s
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self.lines: list[str] = []

    def segment_done(self, nbytes: int) -> None:
        with self._lock:
            self.segments_done += 1
            self.bytes_done += nbytes
            self._maybe_log()

    def partition_done(self) -> None:
        with self._lock:
            self.partitions_done += 1
            self._maybe_log(force=self.partitions_done >= self.partitions)

    def _maybe_log(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self._every:
            return
        self._last = now
        pct = 100.0 * self.bytes_done / self.bytes if self.bytes else 100.0
        line = (
            f"{self.name}: recovery {pct:.0f}% done: {self.partitions - self.partitions_done} of "
            f"{self.partitions} partitions, {max(0, self.segments - self.segments_done)} of "
            f"{self.segments} segments and {max(0, self.bytes - self.bytes_done)} of "
            f"{self.bytes} bytes remaining"
        )
        self.lines.append(line)
        log.info("%s", line)


# -- listing ----------------------------------------------------------------------------------


# -- loading ----------------------------------------------------------------------------------


def load_partition(
    directory: Path,
    config: LogConfig,
    *,
    log_dir: Path,
    recovery_point: int | None,
    log_start_offset: int | None,
    clean: bool,
    schedule_delete=None,
    validation: str = LAZY,
    validator: SegmentValidator | None = None,
    progress: RecoveryProgress | None = None,
    cached: object | None = None,
    trusted: bool = False,
) -> tuple[PartitionLog, LoadReport]:
    """Loads one partition dir (see the module doc). ``cached`` is its entry in the start-up
    manifest written at the last clean shutdown: when the dir is unchanged since, it replaces
    the directory listing and the leader-epoch checkpoint read. ``trusted``: the dir was just
    created by this process, so nothing in it needs validating."""
    if validation not in VALIDATION_MODES:
        raise ValueError(
            f"log.startup.validation must be one of {VALIDATION_MODES}, not {validation!r}"
        )
    tp = TopicPartition.parse_dir_name(directory.name)
    report = LoadReport(tp)
    listing = listing_from_cache(directory, cached) if cached is not None and clean else None
    if listing is None:
        cached = None
        with io_guard(log_dir, f"listing {directory}"):
            listing = list_partition(directory)
        report.removed_files += listing.removed_files
        report.rebuilt_indexes += listing.swapped_in
        report.missing_segments += listing.missing_segments
        if listing.missing_segments:
            report.problems.append(
                "segment log file(s) missing, their data is lost: "
                + ", ".join(file_name(b, LOG_SUFFIX) for b in listing.missing_segments)
            )
    start = max(log_start_offset or 0, 0)
    interval, max_index = config.index_interval_bytes, config.segment_index_bytes
    segments = [
        LogSegment(
            directory, b, log_dir=log_dir, index_interval_bytes=interval, max_index_size=max_index
        )
        for b in listing.bases
    ]
    if not segments:
        segments = [PartitionLog.new_segment(directory, start, config, log_dir)]
    for segment in segments:
        base = segment.base_offset
        if base in listing.missing_index or base in listing.missing_time_index:
            missing = set()
            if base in listing.missing_index:
                missing.add(file_name(base, INDEX_SUFFIX))
            if base in listing.missing_time_index:
                missing.add(file_name(base, TIME_INDEX_SUFFIX))
            segment.missing_files = frozenset(missing)
    report.segments = len(segments)
    state = ProducerStateManager(
        directory,
        snapshot_names=listing.snapshots,
        max_producer_id_expiration_ms=config.producer_id_expiration_ms,
        log_dir=log_dir,
    )
    epochs, epochs_lost = _leader_epochs(directory, log_dir, report, cached)
    touched: set[int] = set()
    bounds = {s.base_offset: n.base_offset for s, n in zip(segments, segments[1:], strict=False)}
    bounds[segments[-1].base_offset] = None

    # Which segments must be rescanned: the active one's tail after a clean shutdown, every
    # segment from the one holding the recovery point after a crash.
    rp = recovery_point or 0
    first_unsafe = (
        len(segments) - 1
        if clean
        else max((i for i, s in enumerate(segments) if s.base_offset <= rp), default=0)
    )
    # Every segment is validated in full once (CRC of every batch, indexes against them):
    # eagerly here, or lazily on first access / in the background. That includes the active
    # segment (clean start) and the data below the recovery point (unclean start), which the
    # checks above trust without reading.
    ctx: PartitionValidation | None = None
    cut: int | None = None
    if validation == EAGER:
        count = len(segments) if clean else first_unsafe
        cut = _validate_eagerly(tp, segments, count, bounds, report, touched)
    elif not trusted:
        ctx = PartitionValidation(
            tp, directory, log_dir, validator, dict(bounds), txn_rebuilder=rebuild_txn_index_for
        )
        ctx.install(segments[:first_unsafe])

    if cut is not None:
        log_end = cut
        state.truncate_and_reload(start, log_end)
        report.snapshot_offset = state.map_end_offset
    elif clean:
        log_end = _open_active_segment(
            segments[-1],
            report,
            touched,
            segments[-1].base_offset in listing.has_txn_index,
            segments,
        )
        state.truncate_and_reload(start, log_end)
        report.snapshot_offset = state.map_end_offset
    else:
        log_end = _recover(tp, segments, first_unsafe, rp, start, state, report, touched, progress)
        if first_unsafe < len(segments) and rp > segments[first_unsafe].base_offset:
            if ctx is not None:
                ctx.install([segments[first_unsafe]])
            else:
                cut = _validate_eagerly(
                    tp, segments, first_unsafe + 1, bounds, report, touched, first=first_unsafe
                )
                if cut is not None:
                    log_end = cut
                    state.truncate_and_reload(start, log_end)
    if clean and ctx is not None and cut is None:
        ctx.install([segments[-1]])
    start = min(max(start, segments[0].base_offset), log_end)

    if state.map_end_offset < log_end:
        # No snapshot reaches the log end: replay the log after the newest one.
        replay = ProducerReplay(state, index_from=None)
        from_offset = max(state.map_end_offset, start)
        _replay_headers(replay, segments, from_offset, log_end, report, touched)
        state.update_map_end_offset(log_end)
    state.remove_stray_snapshots([s.base_offset for s in segments] + [log_end])
    if not clean:
        # Recovery ends with a snapshot at the log end, so a crash right after start-up
        # replays nothing again.
        state.take_snapshot(log_end)

    if epochs_lost:
        _rebuild_leader_epochs(epochs, segments, touched, log_end)
    epochs.truncate_from_end(log_end)
    epochs.truncate_from_start(start)

    touched.update(s.base_offset for s in segments if s.opened)
    for segment in segments[:-1]:
        if segment.opened:
            segment.on_becoming_inactive()
            if not clean:
                segment.flush()
            # Inactive segments read during the load (replay, eager validation) need not keep
            # a descriptor and two maps each: at thousands of partitions that exhausts fds.
            segment.close()
    active = segments[-1]
    # The indexes grow to their preallocated size on the first append, not at start-up.
    active.make_active(lazily=True)
    active.resume_indexing()
    if not clean:
        # What recovery wrote (index entries, truncations) is made durable before the
        # recovery point claims it.
        active.flush()

    plog = PartitionLog(
        directory,
        tp,
        config,
        log_dir=log_dir,
        segments=segments,
        log_start_offset=start,
        log_end_offset=log_end,
        recovery_point=log_end,
        producer_state=state,
        leader_epochs=epochs,
        schedule_delete=schedule_delete,
    )
    report.segments_opened = len(touched)
    if ctx is not None:
        ctx.plog = plog
        if validator is not None:
            validator.register(ctx)
    return plog, report


def _leader_epochs(
    directory: Path, log_dir: Path, report: LoadReport, cached: object | None = None
) -> tuple[LeaderEpochFileCache, bool]:
    if isinstance(cached, dict) and isinstance(cached.get("epochs"), list):
        checkpoint = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT_FILE, log_dir)
        try:
            entries = [EpochEntry(int(e), int(o)) for e, o in cached["epochs"]]
            return LeaderEpochFileCache(checkpoint, entries=entries), False
        except (TypeError, ValueError):
            pass
    try:
        return leader_epoch_cache(directory, log_dir), False
    except (CorruptCheckpointError, ValueError) as exc:
        report.problems.append(f"{LEADER_EPOCH_CHECKPOINT_FILE}: {exc}; rebuilt from the log")
        log.warning("%s: %s; rebuilding it from the log", directory.name, exc)
        checkpoint = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT_FILE, log_dir)
        return LeaderEpochFileCache(checkpoint, entries=[]), True


def _rebuild_leader_epochs(
    epochs: LeaderEpochFileCache, segments: list[LogSegment], touched: set[int], log_end: int
) -> None:
    """Every batch carries its leader epoch: the first offset of each epoch is in the headers."""
    found = []
    latest = None
    previous = -1
    for segment in segments:
        touched.add(segment.base_offset)
        try:
            for batch in segment.log.batches():
                h = batch.header
                if h.base_offset <= previous or h.base_offset >= log_end:
                    break  # past what recovery kept (or not validated yet): not evidence
                previous = h.last_offset
                epoch = h.partition_leader_epoch
                if epoch >= 0 and (latest is None or epoch > latest):
                    found.append((epoch, h.base_offset))
                    latest = epoch
        except InvalidBatchError:
            break
    epochs.assign_all(EpochEntry(e, o) for e, o in found)
    if not found:
        epochs.clear()


def _replay_headers(
    replay: ProducerReplay,
    segments: list[LogSegment],
    from_offset: int,
    to_offset: int,
    report: LoadReport,
    touched: set[int],
) -> None:
    ends = [s.base_offset for s in segments[1:]] + [to_offset]
    for s, end in zip(segments, ends, strict=True):
        if s.base_offset < to_offset and end > from_offset:
            touched.add(s.base_offset)
    before = replay.stats.batches
    try:
        replay.replay_headers(segments, from_offset, to_offset)
    except (InvalidBatchError, CorruptRecordError) as exc:
        # Only in data not validated yet; its validation will cut the log there.
        report.problems.append(f"producer state replay stopped early: {exc}")
    report.replayed_batches += replay.stats.batches - before


def _validate_eagerly(
    tp: TopicPartition,
    segments: list[LogSegment],
    count: int,
    bounds: dict[int, int | None],
    report: LoadReport,
    touched: set[int],
    first: int = 0,
) -> int | None:
    """Validates segments ``first`` to ``count - 1`` now; returns the cut offset if one was bad."""
    for i in range(first, count):
        segment = segments[i]
        touched.add(segment.base_offset)
        result = validate_segment(
            segment,
            upper_bound=bounds[segment.base_offset],
            inactive=i < len(segments) - 1,
            rebuild_txn_index=_eager_txn_rebuilder(segments),
        )
        report.segments_validated += 1
        report.bytes_scanned += result.bytes_scanned
        report.rebuilt_indexes += result.rebuilt
        report.problems += result.problems
        if result.truncated:
            _cut_after(tp, segments, i, result.next_offset, result.truncated_bytes, report)
            return result.next_offset
        # Validated inactive segments need not stay mapped (10,000 segments, 20,000 maps).
        if i < len(segments) - 1:
            segment.close()
    return None


def _eager_txn_rebuilder(segments: list[LogSegment]):
    def rebuild(segment: LogSegment) -> list[AbortedTxn]:
        return _rebuild_txn_index(segment, segments)

    return rebuild


def rebuild_txn_index_for(ctx: PartitionValidation, segment: LogSegment) -> list[AbortedTxn]:
    segments = ctx.plog.segments if ctx.plog is not None else ctx.segments
    return _rebuild_txn_index(segment, segments)


def _rebuild_txn_index(segment: LogSegment, segments: list[LogSegment]) -> list[AbortedTxn]:
    """The aborted transactions whose markers are in ``segment``, by replaying producer state
    from the newest snapshot at or below its base offset (nothing on disk changes)."""
    state, offset = restore_scratch_state(
        segment.dir, segment.log_dir, segment.base_offset, segments[0].base_offset
    )
    replay = ProducerReplay(state, index_from=None)
    collected: list[AbortedTxn] = []
    for seg in segments:
        if seg.base_offset > segment.base_offset:
            break
        position = index_hint(seg, offset)
        try:
            for batch in seg.log.batches(position):
                h = batch.header
                if h.last_offset < offset:
                    continue
                if seg is not segment or not (h.is_control and h.has_producer_id):
                    replay.feed(seg, batch)
                    continue
                completed = state.load_batch(h, batch=seg.log.read(batch.position, h.size))
                if completed is not None:
                    if completed.is_aborted:
                        lso = state.last_stable_offset(completed)
                        collected.append(
                            AbortedTxn(
                                completed.producer_id,
                                completed.first_offset,
                                completed.last_offset,
                                lso,
                            )
                        )
                    state.complete_txn(completed)
        except InvalidBatchError:
            break
    return collected


def _cut_after(
    tp: TopicPartition,
    segments: list[LogSegment],
    i: int,
    offset: int,
    truncated: int,
    report: LoadReport,
) -> None:
    """Drops every segment after ``segments[i]`` (which was already cut) and reports the loss."""
    # Like PartitionLog.truncate_to: a segment left empty by the cut goes too (not the first).
    keep = i + 1 if i == 0 or segments[i].base_offset < offset else i
    later = segments[keep:]
    dropped = sum(s.size for s in later)
    for s in later:
        s.delete()
    del segments[keep:]
    report.truncations.append(Truncation(tp.topic, tp.partition, offset, truncated + dropped))
    log.warning(
        "%s: truncated %d corrupt or partial bytes at offset %d (%d more bytes in %d later segments)",
        tp,
        truncated,
        offset,
        dropped,
        len(later),
    )


class _BadTail(Exception):
    pass


def _repair_txn_index(
    segment: LogSegment,
    segments: list[LogSegment],
    report: LoadReport,
    below: int | None = None,
    *,
    force: bool = False,
) -> None:
    """Rebuilds a transaction index that fails its sanity check, or any with ``force`` (entries
    up to ``below`` only: recovery re-adds the rest as it replays)."""
    try:
        segment.raw_txn_index.sanity_check()
        if not force:
            return
    except CorruptIndexError as exc:
        report.problems.append(f"{segment.raw_txn_index.path.name}: {exc}")
    report.rebuilt_indexes.append(segment.raw_txn_index.path.name)
    segment.raw_txn_index.reset()
    for txn in _rebuild_txn_index(segment, segments):
        if below is None or txn.last_offset < below:
            segment.append_aborted_txn(txn)


def _open_active_segment(
    segment: LogSegment,
    report: LoadReport,
    touched: set[int],
    has_txn_index: bool = True,
    segments: list[LogSegment] | None = None,
) -> int:
    """Clean start: the active segment's indexes and tail are checked; a bad part is redone."""
    touched.add(segment.base_offset)
    start, start_offset = 0, None
    try:
        if segment.missing_files:
            raise CorruptIndexError(f"missing {', '.join(sorted(segment.missing_files))}")
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        if has_txn_index:
            segment.raw_txn_index.sanity_check()
        entries = segment.offset_index.entries
        last = segment.offset_index.last_entry
        start = last.position if entries else 0
        next_offset = segment.base_offset
        end = start
        previous = segment.base_offset - 1
        for batch in segment.log.batches(start):
            h = batch.header
            if batch.position == start:
                if entries and h.last_offset != last.offset:
                    raise CorruptIndexError(
                        f"{segment.offset_index.path.name}: last entry {last} names a batch ending at "
                        f"{h.last_offset}"
                    )
                start_offset = h.base_offset
            if h.base_offset <= previous:
                raise _BadTail(f"batch at {batch.position} goes back to offset {h.base_offset}")
            previous = h.last_offset
            next_offset = h.next_offset
            end = batch.end
        if entries and start_offset is None:
            raise CorruptIndexError(
                f"{segment.offset_index.path.name}: last entry {last} is past the data"
            )
        if end != segment.size:
            raise _BadTail(f"{segment.size - end} bytes after the last complete batch")
        if segment.time_index.last_entry.offset >= max(next_offset, segment.base_offset + 1):
            raise CorruptIndexError(f"{segment.time_index.path.name}: entries past the log end")
        txn_last = segment.raw_txn_index.last_offset if has_txn_index else None
        if txn_last is not None and txn_last >= next_offset:
            raise CorruptIndexError(f"{segment.raw_txn_index.path.name}: entries past the log end")
        return next_offset
    except (CorruptIndexError, ValueError) as exc:
        # InvalidBatchError (a ValueError) too: a malformed header; the index cannot be trusted
        # to have been checked against it, so the whole segment is redone.
        log.warning("%s: %s; rebuilding its indexes", segment, exc)
        report.problems.append(f"{segment.log.path.name}: {exc}")
        report.rebuilt_indexes.append(segment.log.path.name)
        start, start_offset = 0, None
    except _BadTail as exc:
        log.warning("%s: %s; rescanning its tail", segment, exc)
        report.problems.append(f"{segment.log.path.name}: {exc}")
    result = segment.rebuild_indexes_from(start, start_offset, keep_batches=False)
    report.segments_recovered += 1
    report.bytes_scanned += result.valid_bytes - start
    if result.truncated_bytes:
        tp = report.tp
        report.truncations.append(
            Truncation(tp.topic, tp.partition, result.next_offset, result.truncated_bytes)
        )
    if segments is not None:
        _repair_txn_index(segment, segments, report, force=has_txn_index)
    segment.raw_txn_index.truncate_to(result.next_offset)
    return result.next_offset


def _recover(
    tp: TopicPartition,
    segments: list[LogSegment],
    first: int,
    recovery_point: int,
    log_start: int,
    state: ProducerStateManager,
    report: LoadReport,
    touched: set[int],
    progress: RecoveryProgress | None,
) -> int:
    """Unclean start: rescans from the recovery point, supplementing indexes and producer state.

    Producer snapshots above the recovery point may describe data the crash lost: they are
    deleted (as Kafka does), the newest one left is loaded and the log replayed from it.
    """
    state.truncate_and_reload(log_start, max(recovery_point, log_start))
    report.snapshot_offset = state.map_end_offset
    recovery_from = max(recovery_point, segments[first].base_offset)
    replay = ProducerReplay(state, index_from=recovery_from)
    snapshot_at = max(state.map_end_offset, log_start)
    if snapshot_at < recovery_from:
        _replay_headers(
            ProducerReplay(state, index_from=None),
            segments,
            snapshot_at,
            recovery_from,
            report,
            touched,
        )
    state.update_map_end_offset(max(state.map_end_offset, recovery_from))

    log_end = segments[first].base_offset
    for i in range(first, len(segments)):
        segment = segments[i]
        touched.add(segment.base_offset)
        position, start_offset = 0, None
        if i == first and recovery_from > segment.base_offset:
            position, start_offset = _trusted_prefix(segment, recovery_from)
        if i == first and recovery_from > segment.base_offset:
            _repair_txn_index(segment, segments, report, below=recovery_from)
        # Entries below the recovery point stay; the replay re-adds the ones above it.
        _truncate_txn_index(
            segment,
            start_offset
            if start_offset is not None
            else (recovery_from if i == first else segment.base_offset),
        )
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None

        def on_batch(batch, segment=segment) -> None:
            if batch.header.last_offset >= recovery_from:
                replay.feed(segment, batch)

        result = segment.rebuild_indexes_from(
            position,
            start_offset,
            upper_bound=upper,
            min_offset=log_end if i > first else None,
            on_batch=on_batch,
            keep_batches=False,
        )
        report.segments_recovered += 1
        report.bytes_scanned += result.valid_bytes - position
        if progress is not None:
            progress.segment_done(result.valid_bytes - position + result.truncated_bytes)
        log_end = result.next_offset
        if result.truncated_bytes:
            if i + 1 < len(segments) and progress is not None:
                for later in segments[i + 1 :]:
                    progress.segment_done(later.size)
            _cut_after(tp, segments, i, log_end, result.truncated_bytes, report)
            break
    report.replayed_batches += replay.stats.batches
    state.update_map_end_offset(log_end)
    return log_end


def _truncate_txn_index(segment: LogSegment, offset: int) -> None:
    try:
        segment.raw_txn_index.truncate_to(offset)
    except CorruptIndexError:
        # Unreadable from some entry on: only ever called where everything from ``offset`` on
        # is re-added by the replay, and what is below was repaired before.
        segment.raw_txn_index.reset()


def _trusted_prefix(segment: LogSegment, recovery_point: int) -> tuple[int, int | None]:
    """Where rescanning starts: the batch holding the recovery point, located via the index.

    Everything before it was flushed before the recovery point was checkpointed, so it is
    kept as is. If the index is unusable the whole segment is rescanned.
    """
    try:
        if segment.missing_files:
            return 0, None
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        hint = segment.offset_index.lookup(recovery_point)
        last = None
        for batch in segment.log.batches(hint.position):
            if batch.header.last_offset >= recovery_point:
                if batch.header.base_offset > recovery_point:
                    return 0, None  # the index points past the recovery point: not trusted
                return batch.position, batch.header.base_offset
            last = batch
        if last is not None and last.header.next_offset == recovery_point:
            return last.end, recovery_point  # flushed to the end: nothing after it to rescan
    except (CorruptIndexError, ValueError):
        return 0, None
    return 0, None
