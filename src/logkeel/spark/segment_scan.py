"""Read-only scanning of segment files that goes *past* corruption instead of stopping at it.

The broker's own scan (`FileRecords.scan_valid`) ends at the first bad batch, because recovery
must truncate there. Offline readers and audits want more: every intact batch of a damaged file,
and the exact byte and offset ranges that are damaged. After a bad batch this scanner resyncs on
the next position that holds a complete batch whose structure and CRC-32C are valid and whose
offsets do not go backwards.

Files are opened read-only (`FileRecords(read_only=True)`) and read with `pread`, never mapped:
a broker may truncate a segment while we read it, and a truncated mapping kills the process
with SIGBUS where a short read is just a short read.
Nothing here imports Spark, so the scanner can run (and be tested and measured) on its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from logkeel.records.batch import MAGIC_V2, BatchHeader
from logkeel.records.walk import BadBatch, BadKind, BatchWindow, OnBadBatch, walk_batches
from logkeel.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)
from logkeel.storage.engine.file_records import FileRecords
from logkeel.storage.engine.leader_epoch import EpochEntry, LeaderEpochFileCache
from logkeel.storage.engine.segment import log_file_base
from logkeel.storage.errors import StorageError, io_guard
from logkeel.storage.log_dir import is_partition_dir_name, list_partition_dirs
from logkeel.storage.topic_partition import TopicPartition

CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One `.log` file of one replica, and where the next segment of that replica begins.

    ``next_base_offset`` lets a scan of this file alone notice offsets that are in no file at all
    (a missing segment) without reading its neighbour.
    """

    log_dir: str
    topic: str
    partition: int
    path: str
    base_offset: int
    next_base_offset: int | None
    size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ValidBatch(NamedTuple):
    position: int
    header: BatchHeader
    data: bytes | memoryview | None  # the whole batch, when the scan was asked for data


class CorruptRange(NamedTuple):
    """Bytes of a segment that hold no valid batch, or offsets that are in no segment.

    ``first_offset``..``last_offset`` (inclusive) are the offsets that may be lost: from the one
    after the last valid batch to the one before the next valid batch; ``last_offset`` is None
    when nothing valid follows. A missing segment is a range of ``size`` 0 at the end of the
    segment before it. ``header`` is what the bad bytes claim to be, when they parse as a header;
    ``crc_valid`` is False when a well-framed batch failed its CRC, None when it could not be
    checked.
    """

    position: int
    size: int
    first_offset: int
    last_offset: int | None
    reason: str
    header: BatchHeader | None
    crc_valid: bool | None

    @property
    def loses_offsets(self) -> bool:
        return self.last_offset is None or self.last_offset >= self.first_offset


ScanItem = ValidBatch | CorruptRange


class PartitionReplica(NamedTuple):
    """A partition directory found under one log dir."""

    log_dir: str
    topic_partition: TopicPartition
    path: str


# -- finding files ------------------------------------------------------------------------------


def find_partitions(roots: Iterable[str | os.PathLike[str]]) -> list[PartitionReplica]:
    """Partition directories under each root, which is a log dir or a partition dir itself.

    Dirs being deleted or replaced (``-delete``, ``-future``, ``-stray``) are skipped: they are
    not the replica's data.
    """
    found: list[PartitionReplica] = []
    for root in roots:
        path = Path(root).absolute()
        if is_partition_dir_name(path.name) and path.is_dir():
            found.append(
                PartitionReplica(
                    str(path.parent), TopicPartition.parse_dir_name(path.name), str(path)
                )
            )
            continue
        for child in list_partition_dirs(path):
            found.append(
                PartitionReplica(str(path), TopicPartition.parse_dir_name(child.name), str(child))
            )
    return found


def list_segments(replica: PartitionReplica) -> list[SegmentFile]:
    """The replica's `.log` files in offset order."""
    tp = replica.topic_partition
    entries: list[tuple[int, str, int]] = []
    with io_guard(replica.log_dir, f"listing {replica.path}"):
        for e in os.scandir(replica.path):
            base = log_file_base(e.name)
            if base is None or not e.is_file():
                continue
            entries.append((base, e.path, e.stat().st_size))
    entries.sort()
    return [
        SegmentFile(
            replica.log_dir,
            tp.topic,
            tp.partition,
            path,
            base,
            entries[i + 1][0] if i + 1 < len(entries) else None,
            size,
        )
        for i, (base, path, size) in enumerate(entries)
    ]


# -- checkpoints --------------------------------------------------------------------------------


def checkpointed_log_starts(log_dir: str) -> dict[TopicPartition, int]:
    """The log start offsets of ``log-start-offset-checkpoint``; empty when absent or unreadable.

    Read once per log dir: the file names every partition of the dir, so reading it per
    partition made an audit quadratic in the number of partitions.
    """
    path = Path(log_dir) / LOG_START_OFFSET_CHECKPOINT_FILE
    try:
        return OffsetCheckpointFile(path, log_dir).read()
    except (StorageError, FileNotFoundError):
        return {}


def checkpointed_epochs(partition_dir: str) -> list[EpochEntry]:
    """``leader-epoch-checkpoint`` entries; empty when absent or unreadable."""
    path = Path(partition_dir) / LEADER_EPOCH_CHECKPOINT_FILE
    try:
        return LeaderEpochCheckpointFile(path, Path(partition_dir).parent).read()
    except (StorageError, FileNotFoundError):
        return []


def last_leader_epoch(
    entries: list[EpochEntry], log_end_offset: int, last_batch_epoch: int | None
) -> int:
    """The leader epoch at the end of the log the replica really holds.

    The checkpoint may name epochs that start beyond the data left (a truncated replica), and
    may lag behind the batches (written after the append), so both are consulted; -1 if neither
    knows.
    """
    cache = LeaderEpochFileCache(None, entries)
    cache.truncate_from_end(log_end_offset)
    epochs = [e for e in (cache.latest_epoch, last_batch_epoch) if e is not None and e >= 0]
    return max(epochs, default=-1)


# -- scanning -----------------------------------------------------------------------------------


class _ExpectedOffsets:
    """The walk check of a segment read on its own: offsets never go back, and a base offset
    that jumps ahead is believed only when what follows agrees.

    baseOffset lies outside the CRC: a scribbled one shows only against its neighbours. A real
    skip (compaction) is followed by offsets beyond the batch; when what follows starts below
    this batch's base offset (yet not below the expected offset), the base offset is what was
    overwritten.
    """

    __slots__ = ("expected", "next_segment_base")

    def __init__(self, segment: SegmentFile) -> None:
        self.expected = segment.base_offset  # the next offset this segment should hold
        self.next_segment_base = segment.next_base_offset

    def __call__(self, win: BatchWindow, pos: int, header: BatchHeader) -> str | None:
        if header.base_offset < self.expected:
            return f"batch base offset {header.base_offset} is below the expected offset {self.expected}"
        if header.base_offset > self.expected:
            following = _base_offset_at(win, pos + header.size)
            if following is None and pos + header.size >= win.size:
                following = self.next_segment_base
            if following is not None and self.expected <= following < header.base_offset:
                return (
                    f"batch base offset {header.base_offset} jumps ahead of {self.expected}, but "
                    "the offsets after it go back: its base offset was overwritten"
                )
        self.expected = header.next_offset
        return None


def _base_offset_at(win: BatchWindow, pos: int) -> int | None:
    header = win.header_at(pos)
    return header.base_offset if header is not None and header.magic == MAGIC_V2 else None


def scan_segment(segment: SegmentFile, *, with_data: bool = False) -> Iterator[ScanItem]:
    """Every valid batch of ``segment`` and every corrupt range between them, in file order.

    A final zero-size range reports offsets that the next segment skips (a missing segment
    file), unless a corrupt tail already covers them.
    """
    records = FileRecords(Path(segment.path), Path(segment.log_dir), read_only=True)
    try:
        records.create()  # opens it: the size is fixed from here on, even if a broker appends
        yield from _scan(records.window(chunk=CHUNK), segment, with_data)
    finally:
        records.close()


def _scan(win: BatchWindow, segment: SegmentFile, with_data: bool) -> Iterator[ScanItem]:
    offsets = _ExpectedOffsets(segment)
    bad: BadBatch | None = None
    # The first offset a bad range may have lost. Not ``offsets.expected``: the walk has
    # already accepted the batch after the range when it reports the range.
    lost_from = segment.base_offset
    for item in walk_batches(win, on_bad=OnBadBatch.RESYNC, check=offsets):
        if isinstance(item, BadBatch):
            bad = item
            continue
        pos, header = item
        if bad is not None:
            yield _corrupt(bad, lost_from, header.base_offset - 1)
            bad = None
        lost_from = header.next_offset
        data: bytes | memoryview | None = None
        if with_data:
            buf, rel = win.get(pos, header.size)
            data = memoryview(buf)[rel : rel + header.size]
            if type(buf) is not bytes:  # a view of immutable bytes is as good as a copy
                data = bytes(data)
        yield ValidBatch(pos, header, data)
    if bad is not None:
        nxt = segment.next_base_offset
        yield _corrupt(bad, lost_from, nxt - 1 if nxt is not None else None)
    elif segment.next_base_offset is not None and segment.next_base_offset > offsets.expected:
        yield CorruptRange(
            win.size,
            0,
            offsets.expected,
            segment.next_base_offset - 1,
            f"offsets {offsets.expected}..{segment.next_base_offset - 1} are in no segment file "
            f"(the next segment starts at {segment.next_base_offset})",
            None,
            None,
        )


def _corrupt(bad: BadBatch, first: int, last: int | None) -> CorruptRange:
    if bad.kind is BadKind.PARTIAL and bad.header is None:
        reason = f"{bad.size} bytes at the end of the file are too few for a batch header"
        crc_valid = None
    elif bad.kind in (BadKind.INVALID, BadKind.PARTIAL):
        reason, crc_valid = f"invalid batch header: {bad.reason}", None
    else:
        reason, crc_valid = bad.reason, bad.kind is not BadKind.CRC
    return CorruptRange(bad.position, bad.size, first, last, reason, bad.header, crc_valid)


# -- summaries for audits -----------------------------------------------------------------------


@dataclass(slots=True)
class SegmentSummary:
    """What an audit needs to know about one segment file, without decoding any record."""

    log_dir: str
    partition_dir: str
    topic: str
    partition: int
    segment: str
    base_offset: int
    end_offset: int  # the offset after the last valid batch (the base offset if none)
    first_batch_offset: int | None
    last_batch_epoch: int | None
    valid_batches: int
    valid_bytes: int
    corrupt: list[dict[str, object]]


def corrupt_range_dict(segment: SegmentFile, item: CorruptRange) -> dict[str, object]:
    return {
        "segment": os.path.basename(segment.path),
        "position": item.position,
        "bytes": item.size,
        "first_offset": item.first_offset,
        "last_offset": item.last_offset,
        "reason": item.reason,
    }


def summarize_segment(segment: SegmentFile) -> SegmentSummary:
    end = segment.base_offset
    first = None
    epoch = None
    batches = 0
    valid_bytes = 0
    corrupt: list[dict[str, object]] = []
    for item in scan_segment(segment):
        if isinstance(item, ValidBatch):
            h = item.header
            if first is None:
                first = h.base_offset
            end = h.next_offset
            epoch = h.partition_leader_epoch
            batches += 1
            valid_bytes += h.size
        else:
            corrupt.append(corrupt_range_dict(segment, item))
    return SegmentSummary(
        segment.log_dir,
        os.path.dirname(segment.path),
        segment.topic,
        segment.partition,
        segment.path,
        segment.base_offset,
        end,
        first,
        epoch,
        batches,
        valid_bytes,
        corrupt,
    )
