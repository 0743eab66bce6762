"""Opens a partition directory into a PartitionLog: the start-up and recovery path.

After a clean shutdown only the active segment is opened (KIP-263). After a crash only the
data after the recovery point is read and CRC-checked; index entries below it are kept and
supplemented rather than rebuilt (AKIP-2). A corrupt tail is truncated and reported.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from logkeel.storage.errors import CorruptIndexError, io_guard
from logkeel.storage.fileio import fsync_dir
from logkeel.storage.log import PartitionLog, leader_epoch_cache
from logkeel.storage.log_config import LogConfig
from logkeel.storage.producer_state import ProducerStateManager
from logkeel.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    parse_base_offset,
)
from logkeel.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


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
    segments_recovered: int = 0
    bytes_scanned: int = 0
    truncations: list[Truncation] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    rebuilt_indexes: list[str] = field(default_factory=list)


def load_partition(
    directory: Path,
    config: LogConfig,
    *,
    log_dir: Path,
    recovery_point: int | None,
    log_start_offset: int | None,
    clean: bool,
    schedule_delete=None,
) -> tuple[PartitionLog, LoadReport]:
    tp = TopicPartition.parse_dir_name(directory.name)
    report = LoadReport(tp)
    with io_guard(log_dir, f"listing {directory}"):
        bases = _clean_directory(directory, report)
    start = max(log_start_offset or 0, 0)
    segments = [PartitionLog.new_segment(directory, b, config, log_dir, create=False) for b in bases]
    if not segments:
        segments = [PartitionLog.new_segment(directory, start, config, log_dir)]
    report.segments = len(segments)
    producer_state = ProducerStateManager(
        directory, max_producer_id_expiration_ms=config.producer_id_expiration_ms, log_dir=log_dir
    )
    epochs = leader_epoch_cache(directory, log_dir)

    if clean and recovery_point is not None:
        log_end = _open_active_segment(segments[-1], report)
    else:
        log_end = _recover(tp, segments, recovery_point or 0, report)
    start = min(max(start, segments[0].base_offset), log_end)
    for segment in segments[:-1]:
        if segment.opened:
            segment.on_becoming_inactive()
    segments[-1].make_active()

    plog = PartitionLog(
        directory, tp, config, log_dir=log_dir, segments=segments, log_start_offset=start,
        log_end_offset=log_end, recovery_point=log_end, producer_state=producer_state,
        leader_epochs=epochs, schedule_delete=schedule_delete,
    )
    epochs.truncate_from_end(log_end)
    epochs.truncate_from_start(start)
    _load_producer_state(plog, segments)
    if not clean:
        # What recovery wrote (index entries, truncations) is made durable before the
        # recovery point claims it.
        for segment in segments:
            if segment.opened:
                segment.flush()
    return plog, report


def _clean_directory(directory: Path, report: LoadReport) -> list[int]:
    """Removes leftovers of interrupted operations; returns the segment base offsets."""
    logs: set[int] = set()
    indexes: dict[int, list[Path]] = {}
    swaps: list[Path] = []
    for entry in os.scandir(directory):
        name = entry.name
        path = Path(entry.path)
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
            path.unlink(missing_ok=True)
            report.removed_files.append(name)
            continue
        if name.endswith(SWAP_SUFFIX):
            swaps.append(path)
            continue
        base = parse_base_offset(name)
        if base is None:
            continue
        if name.endswith(LOG_SUFFIX):
            logs.add(base)
        elif name.endswith(_INDEX_SUFFIXES):
            indexes.setdefault(base, []).append(path)
    for swap in swaps:
        # A .swap file is complete (it was renamed from .cleaned once fully written): finish
        # the replacement. Its indexes are rebuilt, because their swap copies may not be.
        real = swap.with_name(swap.name[: -len(SWAP_SUFFIX)])
        base = parse_base_offset(real.name)
        if base is None or not real.name.endswith(LOG_SUFFIX):
            swap.unlink(missing_ok=True)
            report.removed_files.append(swap.name)
            continue
        os.replace(swap, real)
        for idx in indexes.pop(base, []):
            idx.unlink(missing_ok=True)
        logs.add(base)
        report.rebuilt_indexes.append(real.name)
    for base, paths in indexes.items():
        if base not in logs:
            for p in paths:
                p.unlink(missing_ok=True)
                report.removed_files.append(p.name)
    if report.removed_files:
        fsync_dir(directory)
    return sorted(logs)


def _open_active_segment(segment: LogSegment, report: LoadReport) -> int:
    """Clean start: the active segment's indexes are checked; a bad one is rebuilt."""
    try:
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        segment.txn_index.sanity_check()
        return segment.read_next_offset()
    except CorruptIndexError as exc:
        log.warning("%s: %s; rebuilding its indexes", segment, exc)
        report.rebuilt_indexes.append(segment.log.path.name)
        result = segment.rebuild_indexes_from(0)
        report.segments_recovered += 1
        report.bytes_scanned += result.valid_bytes
        if result.truncated_bytes:
            tp = report.tp
            offset = result.batches[-1].next_offset if result.batches else segment.base_offset
            report.truncations.append(Truncation(tp.topic, tp.partition, offset, result.truncated_bytes))
        return result.batches[-1].next_offset if result.batches else segment.base_offset


def _recover(tp: TopicPartition, segments: list[LogSegment], recovery_point: int, report: LoadReport) -> int:
    """Unclean start: rescans everything from the recovery point, truncating a bad tail."""
    first = max(0, max((i for i, s in enumerate(segments) if s.base_offset <= recovery_point), default=0))
    log_end = segments[first].base_offset
    for i in range(first, len(segments)):
        segment = segments[i]
        position, start_offset = 0, None
        if i == first and recovery_point > segment.base_offset:
            position, start_offset = _trusted_prefix(segment, recovery_point)
        result = segment.rebuild_indexes_from(position, start_offset)
        report.segments_recovered += 1
        report.bytes_scanned += result.valid_bytes - position
        if result.batches:
            log_end = result.batches[-1].next_offset
        elif position > 0 and start_offset is not None:
            log_end = start_offset
        else:
            log_end = max(log_end, segment.base_offset)
        if result.truncated_bytes:
            dropped = sum(s.size for s in segments[i + 1 :])
            report.truncations.append(
                Truncation(tp.topic, tp.partition, log_end, result.truncated_bytes + dropped)
            )
            log.warning(
                "%s: truncated %d corrupt or partial bytes at offset %d (%d more bytes in later segments)",
                tp, result.truncated_bytes, log_end, dropped,
            )
            for later in segments[i + 1 :]:
                later.delete()
            del segments[i + 1 :]
            break
    return log_end


def _trusted_prefix(segment: LogSegment, recovery_point: int) -> tuple[int, int | None]:
    """Where rescanning starts: the batch holding the recovery point, located via the index.

    Everything before it was flushed before the recovery point was checkpointed, so it is
    kept as is. If the index is unusable the whole segment is rescanned.
    """
    try:
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        batch = segment.find_position(recovery_point)
    except (CorruptIndexError, ValueError):
        return 0, None
    if batch is None:
        return 0, None
    return batch.position, batch.header.base_offset


def _load_producer_state(plog: PartitionLog, segments: list[LogSegment]) -> None:
    """Restores producer state from the newest snapshot, then replays the log after it."""
    state = plog.producer_state
    state.remove_stray_snapshots([s.base_offset for s in segments] + [plog.log_end_offset])
    state.truncate_and_reload(plog.log_start_offset, plog.log_end_offset)
    if state.map_end_offset < plog.log_end_offset:
        plog.replay_producer_state(max(state.map_end_offset, plog.log_start_offset))
