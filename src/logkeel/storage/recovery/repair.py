"""Repairs shared by clean loading and unclean recovery: producer-state replay from the log,
eager validation, transaction-index rebuilds and cutting a partition after a bad batch."""

from __future__ import annotations

import logging
from collections.abc import Callable

from logkeel.records.batch import InvalidBatchError
from logkeel.storage.engine.replay import ProducerReplay, batches_from, restore_scratch_state
from logkeel.storage.engine.segment import (
    LogSegment,
)
from logkeel.storage.engine.segment_repair import validate_segment
from logkeel.storage.engine.txn_index import AbortedTxn
from logkeel.storage.engine.validation import PartitionValidation
from logkeel.storage.errors import (
    CorruptIndexError,
    CorruptRecordError,
)
from logkeel.storage.recovery.load_report import LoadReport, Truncation
from logkeel.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)


def replay_headers(
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


def validate_eagerly(
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
            rebuild_txn_index=eager_txn_rebuilder(segments),
        )
        report.segments_validated += 1
        report.bytes_scanned += result.bytes_scanned
        report.rebuilt_indexes += result.rebuilt
        report.problems += result.problems
        if result.truncated:
            cut_after(tp, segments, i, result.next_offset, result.truncated_bytes, report)
            return result.next_offset
        # Validated inactive segments need not stay mapped (10,000 segments, 20,000 maps).
        if i < len(segments) - 1:
            segment.close()
    return None


def eager_txn_rebuilder(segments: list[LogSegment]) -> Callable[[LogSegment], list[AbortedTxn]]:
    def rebuild(segment: LogSegment) -> list[AbortedTxn]:
        return rebuild_txn_index(segment, segments)

    return rebuild


def rebuild_txn_index_for(ctx: PartitionValidation, segment: LogSegment) -> list[AbortedTxn]:
    segments = ctx.plog.segments if ctx.plog is not None else ctx.segments
    return rebuild_txn_index(segment, segments)


def rebuild_txn_index(segment: LogSegment, segments: list[LogSegment]) -> list[AbortedTxn]:
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
        try:
            for batch in batches_from(seg, offset):
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
        except (InvalidBatchError, CorruptRecordError):
            break  # data not validated yet: its validation cuts the log there
    return collected


def cut_after(
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


def repair_txn_index(
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
    for txn in rebuild_txn_index(segment, segments):
        if below is None or txn.last_offset < below:
            segment.append_aborted_txn(txn)
