"""What loading a partition did, for the log manager's start-up report and progress log."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from logkeel.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)


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
