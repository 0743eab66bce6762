"""Unclean start (AKIP-2, docs/proposals.md): only data after the recovery point is read,
CRC-checked batch by batch. Index, time index and transaction index entries below it are kept and
supplemented. Producer state comes from the newest snapshot at or below the recovery point and is
replayed from there, re-adding the aborted transactions above the recovery point."""

from __future__ import annotations

import logging

from logkeel.records.walk import BatchPosition
from logkeel.storage.engine.leader_epoch import EpochEntry, LeaderEpochFileCache
from logkeel.storage.engine.producer_snapshot import ProducerSnapshotEntry
from logkeel.storage.engine.producer_state import ProducerStateManager
from logkeel.storage.engine.replay import ProducerReplay
from logkeel.storage.engine.segment import (
    LogSegment,
)
from logkeel.storage.errors import (
    CorruptIndexError,
)
from logkeel.storage.recovery.load_report import LoadReport, RecoveryProgress
from logkeel.storage.recovery.repair import (
    cut_after,
    repair_txn_index,
    replay_headers,
)
from logkeel.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)


def recover(
    tp: TopicPartition,
    segments: list[LogSegment],
    first: int,
    recovery_point: int,
    log_start: int,
    state: ProducerStateManager,
    report: LoadReport,
    touched: set[int],
    progress: RecoveryProgress | None,
    epochs: LeaderEpochFileCache | None = None,
) -> tuple[int, list[ProducerSnapshotEntry] | None]:
    """Unclean start: rescans from the recovery point, supplementing indexes, producer state and
    the leader epochs (an epoch above the checkpoint's latest starts at its first batch found:
    a checkpoint written unsynced may have lost it, as Kafka's segment recovery assigns them).

    Producer snapshots above the recovery point may describe data the crash lost: they are
    deleted (as Kafka does), the newest one left is loaded and the log replayed from it.
    Returns the log end and the rows of the snapshot loaded (None: there was none).
    """
    loaded = state.truncate_and_reload(log_start, max(recovery_point, log_start))
    report.snapshot_offset = state.map_end_offset
    rows = snapshot_rows(state) if loaded is not None and loaded.offset is not None else None
    recovery_from = max(recovery_point, segments[first].base_offset)
    replay = ProducerReplay(state, index_from=recovery_from)
    snapshot_at = max(state.map_end_offset, log_start)
    if snapshot_at < recovery_from:
        replay_headers(
            ProducerReplay(state, index_from=None),
            segments,
            snapshot_at,
            recovery_from,
            report,
            touched,
        )
    state.update_map_end_offset(max(state.map_end_offset, recovery_from))

    latest = epochs.latest_epoch if epochs is not None else None
    floor = -1 if latest is None else latest
    if latest is None and recovery_from > log_start:
        # No checkpoint to complete: the first batch rescanned is not where its epoch began.
        epochs = None
    found: list[tuple[int, int]] = []  # (epoch, first offset) above the checkpoint's latest
    log_end = segments[first].base_offset
    for i in range(first, len(segments)):
        segment = segments[i]
        touched.add(segment.base_offset)
        position, start_offset = 0, None
        if i == first and recovery_from > segment.base_offset:
            position, start_offset = _trusted_prefix(segment, recovery_from)
        if i == first and recovery_from > segment.base_offset:
            repair_txn_index(segment, segments, report, below=recovery_from)
        # Entries below the recovery point stay; the replay re-adds the ones above it.
        _truncate_txn_index(
            segment,
            start_offset
            if start_offset is not None
            else (recovery_from if i == first else segment.base_offset),
        )
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None

        def on_batch(batch: BatchPosition, segment: LogSegment = segment) -> None:
            if batch.header.last_offset >= recovery_from:
                replay.feed(segment, batch)
                epoch = batch.header.partition_leader_epoch
                if epochs is not None and epoch > (found[-1][0] if found else floor):
                    found.append((epoch, batch.header.base_offset))

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
            cut_after(tp, segments, i, log_end, result.truncated_bytes, report)
            break
    report.replayed_batches += replay.stats.batches
    if epochs is not None and (kept := [EpochEntry(e, o) for e, o in found if o < log_end]):
        epochs.assign_all(kept)
    if log_end < recovery_from:
        # The rescan cut below the recovery point (damage to data it had vouched for): the
        # state replayed up to the recovery point holds producers' batches that are gone.
        # Reloaded from a snapshot at or below the new end; the loader replays the rest.
        state.truncate_and_reload(log_start, log_end)
        report.snapshot_offset = state.map_end_offset
        return log_end, None
    state.update_map_end_offset(log_end)
    return log_end, rows


def snapshot_rows(state: ProducerStateManager) -> list[ProducerSnapshotEntry]:
    """What a producer snapshot of ``state`` would hold, whatever its offset."""
    return [e.to_snapshot_entry() for _, e in sorted(state.active_producers.items())]


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
