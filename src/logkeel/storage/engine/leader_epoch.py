"""The leader-epoch cache of a partition: the first offset written in each leader epoch.

Followers use it to truncate after a leader change (OffsetsForLeaderEpoch) instead of the high
watermark, which is what lets logkeel keep every acknowledged record across elections. Every
change is written through to ``leader-epoch-checkpoint`` and synced before the call returns,
except an assignment made with ``sync=False`` (a new leader's epoch): that one is only written,
and synced, by the next ``sync()`` (``PartitionLog.flush`` before the recovery point moves past
the epoch's batches, and closing the log). A broker taking over hundreds of leaderships spent
seconds in two fsyncs each before serving them, and seconds more, on a busy machine, in the
writes alone (a file created and renamed per partition, on the thread applying the metadata).
A crash before that sync loses nothing: an unclean start adds the epochs of the batches above
the recovery point (``recovery.unclean.recover``), an empty checkpoint is rebuilt from the log,
and an epoch with no batch yet ends where the one before it ends (it is dropped at load).

Semantics are Kafka's LeaderEpochFileCache. In particular the entries always have strictly
increasing epochs *and* strictly increasing start offsets: an assignment that breaks either
removes the conflicting entries at the tail ("the last assignment wins").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from logkeel.storage.checkpoints import EpochEntry, LeaderEpochCheckpointFile

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochFileCache",
]

log = logging.getLogger(__name__)

# OffsetsForLeaderEpochResponse's "unknown" values.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Epoch -> start offset, persisted to ``checkpoint`` (None keeps it in memory only)."""

    def __init__(
        self,
        checkpoint: LeaderEpochCheckpointFile | None,
        entries: Iterable[EpochEntry] | None = None,
    ):
        """Loads ``entries`` if given, else whatever ``checkpoint`` holds (without rewriting it)."""
        self._checkpoint = checkpoint
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []  # ascending in both epoch and start offset
        self._unwritten = False  # entries assigned without sync: the checkpoint lags them
        source = entries if entries is not None else (checkpoint.read() if checkpoint else [])
        for entry in source:
            self._assign(EpochEntry(*entry))

    # -- changes ---------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, sync: bool = True) -> bool:
        """Records that ``epoch`` started at ``start_offset``; returns whether anything changed.

        The same epoch again at an equal or later offset is a no-op (the epoch's start is fixed
        once known). An entry that is not beyond the tail in both epoch and offset truncates the
        tail entries it conflicts with, as Kafka does: e.g. after a follower truncation.
        Without ``sync`` the checkpoint is written (and synced) only by ``sync()`` (see the
        module).
        """
        with self._lock:
            changed = self._assign(EpochEntry(epoch, start_offset))
            if changed and sync:
                self._flush()
            elif changed:
                self._unwritten = True
            return changed

    def sync(self) -> None:
        """Writes and syncs the checkpoint if an assignment without sync left it behind."""
        with self._lock:
            if self._unwritten:
                self._flush()

    def assign_all(self, entries: Iterable[EpochEntry]) -> None:
        with self._lock:
            changed = False
            for entry in entries:
                changed |= self._assign(EpochEntry(*entry))
            if changed:
                self._flush()

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Drops entries starting at or after ``end_offset`` (the new log end); returns them.

        A negative offset (UNDEFINED_EPOCH_OFFSET) changes nothing.
        """
        with self._lock:
            removed = _truncated_from_end(self._entries, end_offset)
            if removed:
                del self._entries[len(self._entries) - len(removed) :]
                self._flush()
                log.debug("truncated epochs %s at end offset %d", removed, end_offset)
            return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Fits the entries to a log that now starts at ``start_offset``.

        Entries starting at or below it go, except that the last of them is put back moved to
        ``start_offset``, since the log still holds that epoch's data from there on (so an entry
        starting exactly there is unchanged). Returns the entries as they were before being
        removed or moved.
        """
        with self._lock:
            kept, removed = _truncated_from_start(self._entries, start_offset)
            if removed:
                self._entries = kept
                self._flush()
                log.debug("truncated epochs %s at start offset %d", removed, start_offset)
            return removed

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._flush()

    # -- queries ---------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        # Read on every append and every follower fetch: no lock, one list access (atomic
        # under the GIL; a racing truncation leaves the list either way, never torn). An empty
        # cache (a log never written to) is tested first: raising IndexError made the call twice
        # as slow (bench/idle_fetch_read.py), on each of a follower's empty partitions.
        entries = self._entries
        if not entries:
            return None
        try:
            return entries[-1].epoch
        except IndexError:  # emptied by a truncation since the test
            return None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            return next((e for e in self._entries if e.epoch == epoch), None)

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The largest cached epoch below ``epoch`` (default: below the latest)."""
        with self._lock:
            if epoch is None:
                if not self._entries:
                    return None
                epoch = self._entries[-1].epoch
            lower = [e.epoch for e in self._entries if e.epoch < epoch]
            return lower[-1] if lower else None

    def next_epoch(self, epoch: int) -> int | None:
        with self._lock:
            return next((e.epoch for e in self._entries if e.epoch > epoch), None)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was written in, or None if before every entry."""
        with self._lock:
            found = None
            for entry in self._entries:
                if entry.start_offset > offset:
                    break
                found = entry.epoch
            return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: (largest epoch <= requested, its end offset).

        The end offset of an epoch is the start offset of the next larger cached epoch, or the log
        end offset for the latest epoch. A request below every cached epoch gets the requested
        epoch back with the first entry's start offset (older data is gone, so the follower
        truncates to where this log begins). UNDEFINED values when nothing is known: undefined
        request, empty cache, or an epoch above the latest.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            latest = self._entries[-1]
            if requested_epoch == latest.epoch:
                return requested_epoch, log_end_offset
            if requested_epoch > latest.epoch:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor: EpochEntry | None = None
            for entry in self._entries:
                if entry.epoch > requested_epoch:
                    if floor is None:
                        return requested_epoch, entry.start_offset
                    return floor.epoch, entry.start_offset
                floor = entry
            raise AssertionError("unreachable: the latest epoch is above the requested one")

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """The entries as they would be after truncating to [start_offset, end_offset)."""
        with self._lock:
            entries = list(self._entries)
        if start_offset >= 0:
            entries, _ = _truncated_from_start(entries, start_offset)
        removed = _truncated_from_end(entries, end_offset)
        return entries[: len(entries) - len(removed)]

    # -- internals -------------------------------------------------------------------------

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        if self._entries:
            latest = self._entries[-1]
            if entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
                return False
        removed: list[EpochEntry] = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
        # Replacing one entry that started at the same offset is the normal case of a new leader
        # that has not written yet; anything else means data conflicts and deserves a warning.
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            log.warning("epoch entry %s truncated conflicting entries %s", entry, removed[::-1])
        self._entries.append(entry)
        return True

    def _flush(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(self._entries)
        self._unwritten = False


def _truncated_from_end(entries: list[EpochEntry], end_offset: int) -> list[EpochEntry]:
    """The tail entries that start at or after ``end_offset`` (oldest first)."""
    if end_offset < 0:
        return []
    cut = len(entries)
    while cut > 0 and entries[cut - 1].start_offset >= end_offset:
        cut -= 1
    return entries[cut:]


def _truncated_from_start(
    entries: list[EpochEntry], start_offset: int
) -> tuple[list[EpochEntry], list[EpochEntry]]:
    """(entries after truncation, removed entries) for a new log start ``start_offset``."""
    cut = 0
    while cut < len(entries) and entries[cut].start_offset <= start_offset:
        cut += 1
    if cut == 0 or (cut == 1 and entries[0].start_offset == start_offset):
        return entries, []  # an entry starting exactly at the new log start stays as it is
    removed = entries[:cut]
    return [EpochEntry(removed[-1].epoch, start_offset), *entries[cut:]], removed
