"""Producer-state replay over a partition's segments: the part of recovery that reads batches.

Recovery (AKIP-2, docs/proposals.md) restores producer state from a snapshot and replays the log
after it. While replaying data above the transaction index's checkpoint it also re-adds the aborted
transactions whose markers it meets, so the transaction index is supplemented rather than rebuilt.
The same replay rebuilds the transaction index of one segment when validation finds it corrupt.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from logkeel.records.batch import BatchHeader, InvalidBatchError
from logkeel.records.walk import BatchPosition
from logkeel.storage.engine.producer_entry import ProducerStateEntry
from logkeel.storage.engine.producer_snapshot import read_snapshot
from logkeel.storage.engine.producer_state import ProducerStateManager
from logkeel.storage.engine.segment import LogSegment
from logkeel.storage.engine.txn_index import AbortedTxn
from logkeel.storage.errors import CorruptIndexError, CorruptSnapshotError, io_guard


@dataclass(slots=True)
class ReplayStats:
    batches: int = 0
    aborted_txns: int = 0


class ProducerReplay:
    """Feeds batches, in offset order, to a producer-state manager.

    Aborted transactions whose marker is at or above ``index_from`` are appended to the
    transaction index of the segment holding the marker (``index_txns``); below it the index
    already has them.
    """

    def __init__(self, state: ProducerStateManager, *, index_from: int | None) -> None:
        self.state = state
        self.index_from = index_from
        self.stats = ReplayStats()
        self.collected: list[AbortedTxn] = []

    def feed(self, segment: LogSegment, batch: BatchPosition) -> None:
        h: BatchHeader = batch.header
        self.stats.batches += 1
        if not h.has_producer_id:
            self.state.update_map_end_offset(h.next_offset)
            return
        data = segment.log.read(batch.position, h.size) if h.is_control else None
        completed = self.state.load_batch(h, batch=data)
        if completed is None:
            return
        if (
            completed.is_aborted
            and self.index_from is not None
            and completed.last_offset >= self.index_from
        ):
            lso = self.state.last_stable_offset(completed)
            txn = AbortedTxn(
                completed.producer_id, completed.first_offset, completed.last_offset, lso
            )
            self.collected.append(txn)
            segment.append_aborted_txn(txn)
            self.stats.aborted_txns += 1
        self.state.complete_txn(completed)

    def replay_headers(
        self, segments: Iterable[LogSegment], from_offset: int, to_offset: int
    ) -> None:
        """Replays [from_offset, to_offset) from already-validated data, headers only."""
        segments = list(segments)
        nexts = [s.base_offset for s in segments[1:]] + [None]
        for segment, next_base in zip(segments, nexts, strict=True):
            if segment.base_offset >= to_offset:
                break
            if next_base is not None and next_base <= from_offset:
                continue
            for batch in batches_from(segment, from_offset):
                h = batch.header
                if h.last_offset < from_offset:
                    continue
                if h.base_offset >= to_offset:
                    break
                self.feed(segment, batch)


def index_hint(segment: LogSegment, offset: int) -> int:
    """Where to start reading for ``offset``, from an index that may not be validated yet:
    anything doubtful means the start of the segment."""
    if offset <= segment.base_offset:
        return 0
    try:
        segment.offset_index.sanity_check()
        position = segment.offset_index.lookup(offset).position
    except (CorruptIndexError, ValueError):
        return 0
    return position if 0 <= position <= segment.size else 0


def batches_from(segment: LogSegment, offset: int) -> Iterator[BatchPosition]:
    """The segment's batches from the one holding ``offset`` (or one before it) onwards.

    A damaged index can pass its sanity check and still point inside a batch or past
    ``offset``: such a hint is dropped and the segment read from its start, so that a bad index
    never stops a replay or skips batches of good data."""
    position = index_hint(segment, offset)
    if position:
        batches = segment.log.batches(position)
        try:
            first = next(batches, None)
        except InvalidBatchError:
            first = None
        if first is not None and first.header.base_offset <= offset:
            yield first
            yield from batches
            return
    yield from segment.log.batches(0)


def restore_scratch_state(
    partition_dir: Path, log_dir: Path, at_or_below: int, log_start_offset: int
) -> tuple[ProducerStateManager, int]:
    """A fresh producer-state manager holding the newest readable snapshot at or below
    ``at_or_below``; returns it and the offset its state covers (the log start if none).

    Nothing on disk changes: a corrupt snapshot is skipped, not deleted (the loader owns that).
    """
    state = ProducerStateManager(partition_dir, log_dir=log_dir)
    candidates = sorted(
        (o for o in state.snapshot_offsets if log_start_offset <= o <= at_or_below), reverse=True
    )
    for offset in candidates:
        path = state.snapshot_file(offset)
        assert path is not None
        try:
            with io_guard(log_dir, f"reading producer snapshot {path}"):
                entries = read_snapshot(path)
        except CorruptSnapshotError:
            continue
        for e in entries:
            state.load_producer_entry(ProducerStateEntry.from_snapshot_entry(e))
        state.update_map_end_offset(offset)
        return state, offset
    state.update_map_end_offset(log_start_offset)
    return state, log_start_offset
