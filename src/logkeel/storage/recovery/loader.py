"""Opens a partition directory into a PartitionLog: the start-up and recovery path.

- Clean start (KIP-263, docs/proposals.md): only the active segment is opened and checked. The other
  segments get a validator that runs on their first access or in the background (lazy), or are all
  validated before the partition serves (``validation="eager"``).
- Unclean start (AKIP-2, docs/proposals.md): only data after the recovery point is read, CRC-checked
  batch by batch. Index, time index and transaction index entries below it are kept and
  supplemented. Producer state comes from the newest snapshot at or below the recovery point and is
  replayed from there, re-adding the aborted transactions above the recovery point (the transaction
  index's checkpoint: it is fsynced with the segment, so whatever it held below the recovery point
  is on disk).
- Damage: leftovers of interrupted operations are finished or removed, a bad index is rebuilt,
  a bad batch ends the log there (what follows is cut and reported), a missing segment file is
  reported and its orphaned indexes removed. Whatever cannot be loaded raises, and the log
  manager takes that partition (only) offline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

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
    PartitionListing,
    list_partition,
    listing_from_cache,
)
from logkeel.storage.engine.producer_snapshot import ProducerSnapshotEntry
from logkeel.storage.engine.producer_state import ProducerStateManager
from logkeel.storage.engine.replay import ProducerReplay
from logkeel.storage.engine.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    file_name,
)
from logkeel.storage.engine.segment_list import LazySegments, made_segments
from logkeel.storage.engine.validation import (
    EAGER,
    LAZY,
    VALIDATION_MODES,
    PartitionValidation,
    SegmentValidator,
)
from logkeel.storage.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    io_guard,
)
from logkeel.storage.recovery.durability import PendingSync, fsync_file
from logkeel.storage.recovery.load_report import LoadReport, RecoveryProgress, Truncation
from logkeel.storage.recovery.repair import (
    rebuild_txn_index_for,
    repair_txn_index,
    replay_headers,
    validate_eagerly,
)
from logkeel.storage.recovery.unclean import recover, snapshot_rows
from logkeel.storage.recovery.vouch import vouched
from logkeel.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)


# -- loading ----------------------------------------------------------------------------------


def load_partition(
    directory: Path,
    config: LogConfig,
    *,
    log_dir: Path,
    recovery_point: int | None,
    log_start_offset: int | None,
    clean: bool,
    schedule_delete: Callable[[Callable[[], None], float], None] | None = None,
    validation: str = LAZY,
    validator: SegmentValidator | None = None,
    progress: RecoveryProgress | None = None,
    cached: object | None = None,
    trusted: bool = False,
    syncs: list[PendingSync] | None = None,
    manifest_mtime_ns: int | None = None,
    names: list[str] | None = None,
) -> tuple[PartitionLog, LoadReport]:
    """Loads one partition dir (see the module doc). ``cached`` is its entry in the start-up
        manifest written at the last clean shutdown: when the dir is unchanged since, it replaces
        the directory listing and the leader-epoch checkpoint read, and when the active segment's
    files and the producer snapshot are unchanged too (``vouch``, against the manifest's time
    ``manifest_mtime_ns``), nothing of the partition is opened or read. ``trusted``: the dir was just
        created by this process, so nothing in it needs validating. ``syncs``: after an unclean
        shutdown, what recovery wrote is made durable by the callable appended there (the caller
        runs it before checkpointing, see ``durability``) instead of here. ``names``: the dir's file
    names when the caller has just listed it (an unclean start lists each dir to plan)."""
    if validation not in VALIDATION_MODES:
        raise ValueError(
            f"log.startup.validation must be one of {VALIDATION_MODES}, not {validation!r}"
        )
    tp = TopicPartition.parse_dir_name(directory.name)
    report = LoadReport(tp)
    if not clean or not _older_than_manifest(cached, manifest_mtime_ns):
        cached = None
    listing = listing_from_cache(directory, cached) if cached is not None else None
    if listing is None:
        cached = None
        with io_guard(log_dir, f"listing {directory}"):
            listing = list_partition(directory, names)
        report.removed_files += listing.removed_files
        report.rebuilt_indexes += listing.swapped_in
        report.missing_segments += listing.missing_segments
        if listing.missing_segments:
            report.problems.append(
                "segment log file(s) missing, their data is lost: "
                + ", ".join(file_name(b, LOG_SUFFIX) for b in listing.missing_segments)
            )
    start = max(log_start_offset or 0, 0)
    bases = listing.bases or [start]
    # After a clean shutdown: what the start-up manifest vouches for (see ``vouch``).
    facts = (
        vouched(
            directory,
            cached,
            bases[-1],
            manifest_mtime_ns,
            has_txn_index=bases[-1] in listing.has_txn_index,
        )
        if clean and cached is not None and listing.bases
        else None
    )
    # Nothing reads a segment before serving when the manifest vouches for the log end and an
    # empty producer state: then segment objects are made on first use (``LazySegments``),
    # each with its validator, rather than all of them here.
    lazy = facts is not None and facts.empty_producer_state and validation != EAGER and not trusted
    ctx: PartitionValidation | None = None
    make = _segment_maker(directory, config, log_dir, listing, lambda: ctx if lazy else None)
    # A LazySegments offers every list operation the loader and PartitionLog use.
    segments: list[LogSegment]
    if not listing.bases:
        segments = [PartitionLog.new_segment(directory, start, config, log_dir)]
    elif lazy:
        segments = cast("list[LogSegment]", LazySegments(bases, make))
    else:
        segments = [make(b) for b in bases]
    report.segments = len(segments)
    state = ProducerStateManager(
        directory,
        snapshot_names=listing.snapshots,
        max_producer_id_expiration_ms=config.producer_id_expiration_ms,
        log_dir=log_dir,
    )
    epochs, epochs_lost = _leader_epochs(directory, log_dir, report, cached)
    touched: set[int] = set()
    # Per-segment work is kept to C-level passes over the base offsets: at 100 segments a
    # partition, every Python-level pass over the segments is a measurable share of start-up.
    bounds: dict[int, int | None] = dict(zip(bases, bases[1:], strict=False))
    bounds[bases[-1]] = None

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
    cut: int | None = None
    loaded_rows: list[ProducerSnapshotEntry] | None = None  # unclean: the snapshot loaded
    resume_at: int | None = None  # the active segment's index-interval counter, if vouched
    if validation == EAGER:
        count = len(segments) if clean else first_unsafe
        cut = validate_eagerly(tp, segments, count, bounds, report, touched)
    elif not trusted:
        ctx = PartitionValidation(
            tp, directory, log_dir, validator, bounds, txn_rebuilder=rebuild_txn_index_for
        )
        if not lazy:
            ctx.install(segments[:first_unsafe])

    if cut is not None:
        log_end = cut
        state.truncate_and_reload(start, log_end)
        report.snapshot_offset = state.map_end_offset
    elif clean:
        if facts is not None:
            log_end = facts.log_end_offset
            resume_at = facts.bytes_since_last_index_entry
        else:
            log_end = _open_active_segment(
                segments[-1],
                report,
                touched,
                segments[-1].base_offset in listing.has_txn_index,
                segments,
            )
        if facts is not None and facts.empty_producer_state:
            state.assume_empty_snapshot(start, log_end)
        else:
            state.truncate_and_reload(start, log_end)
        report.snapshot_offset = state.map_end_offset
    else:
        log_end, loaded_rows = recover(
            tp, segments, first_unsafe, rp, start, state, report, touched, progress, epochs
        )
        if first_unsafe < len(segments) and rp > segments[first_unsafe].base_offset:
            if ctx is not None:
                ctx.install([segments[first_unsafe]])
            else:
                cut = validate_eagerly(
                    tp, segments, first_unsafe + 1, bounds, report, touched, first=first_unsafe
                )
                if cut is not None:
                    log_end = cut
                    state.truncate_and_reload(start, log_end)
    if clean and ctx is not None and cut is None and not lazy:
        ctx.install([segments[-1]])
    start = min(max(start, bases[0]), log_end)

    if state.map_end_offset < log_end:
        # No snapshot reaches the log end: replay the log after the newest one.
        replay = ProducerReplay(state, index_from=None)
        from_offset = max(state.map_end_offset, start)
        replay_headers(replay, segments, from_offset, log_end, report, touched)
        state.update_map_end_offset(log_end)
    # Unclean: where the replay changed no producer, the snapshot loaded (at or below the
    # recovery point) still holds the state at the log end; it is kept and no new one is
    # written (a crash right after start-up replays the same few batches from it again).
    current = (
        not clean
        and loaded_rows is not None
        and state.latest_snapshot_offset == report.snapshot_offset
        and snapshot_rows(state) == loaded_rows
    )
    kept = [report.snapshot_offset] if current and report.snapshot_offset is not None else []
    state.remove_stray_snapshots([*bases, log_end, *kept])
    # Recovery ends with a snapshot at the log end, so a crash right after start-up replays
    # nothing again; see _durable below.
    if not clean and syncs is None:
        state.take_snapshot(log_end)

    if epochs_lost:
        _rebuild_leader_epochs(epochs, segments, touched, log_end)
    epochs.truncate_from_end(log_end)
    epochs.truncate_from_start(start)

    opened = [s for s in made_segments(segments) if s.opened]
    touched.update(s.base_offset for s in opened)
    closed: list[LogSegment] = []
    for segment in opened:
        if segment is not segments[-1]:
            segment.on_becoming_inactive()
            if not clean and syncs is None:
                segment.flush()
            # Inactive segments read during the load (replay, eager validation) need not keep
            # a descriptor and two maps each: at thousands of partitions that exhausts fds.
            segment.close()
            closed.append(segment)
    active = segments[-1]
    # The indexes grow to their preallocated size on the first append, not at start-up.
    active.make_active(lazily=True)
    active.resume_indexing(resume_at)
    if not clean:
        # What recovery wrote (index entries, truncations) is made durable before the
        # recovery point claims it.
        if syncs is None:
            active.flush()
        else:
            syncs.append(_durable(state, log_end, active, closed, log_dir, snapshot=not current))

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


def _segment_maker(
    directory: Path,
    config: LogConfig,
    log_dir: Path,
    listing: PartitionListing,
    validator: Callable[[], PartitionValidation | None],
) -> Callable[[int], LogSegment]:
    """Makes the segment object of a base offset: the files the listing did not show noted,
    and (lazy start) its validator installed, so no segment is read unvalidated."""
    interval, max_index = config.index_interval_bytes, config.segment_index_bytes
    now_ms = int(time.time() * 1000)

    def make(base: int) -> LogSegment:
        segment = LogSegment(
            directory,
            base,
            log_dir=log_dir,
            index_interval_bytes=interval,
            max_index_size=max_index,
            created_ms=now_ms,
        )
        if base in listing.missing_index or base in listing.missing_time_index:
            missing = set()
            if base in listing.missing_index:
                missing.add(file_name(base, INDEX_SUFFIX))
            if base in listing.missing_time_index:
                missing.add(file_name(base, TIME_INDEX_SUFFIX))
            segment.missing_files = frozenset(missing)
        ctx = validator()
        if ctx is not None:
            segment.validator = ctx
        return segment

    return make


def _older_than_manifest(cached: object, manifest_mtime_ns: int | None) -> bool:
    """Whether the dir's time in its manifest entry is before the manifest's own: file times
    come from a coarse clock, so a dir changed in the same tick as the manifest was written
    could show the cached time (see ``vouch``); such a dir is listed again."""
    if not isinstance(cached, dict):
        return False
    if manifest_mtime_ns is None:
        return True
    try:
        return int(cached["mtime_ns"]) < manifest_mtime_ns
    except (KeyError, TypeError, ValueError):
        return False


def _durable(
    state: ProducerStateManager,
    log_end: int,
    active: LogSegment,
    closed: list[LogSegment],
    log_dir: Path,
    *,
    snapshot: bool,
) -> PendingSync:
    """What an unclean load leaves to the caller: syncing the inactive segments it rewrote
    (closed since, so synced by path) and the active segment, and (``snapshot``) writing the
    producer snapshot at the log end."""

    def files() -> None:
        for segment in closed:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                fsync_file(segment.dir / file_name(segment.base_offset, suffix), log_dir)
        active.flush()

    def snapshot_at_end() -> None:
        state.take_snapshot(log_end)

    return PendingSync(files, snapshot_at_end if snapshot else None)


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


class _BadTail(Exception):
    pass


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
        repair_txn_index(segment, segments, report, force=has_txn_index)
    segment.raw_txn_index.truncate_to(result.next_offset)
    return result.next_offset
