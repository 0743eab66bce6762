"""What loading did: per partition (``LoadReport``), for a whole start-up (``StartupReport``),
and the progress log of a long recovery."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from logkeel.storage.engine.validation import LAZY
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


@dataclass(slots=True)
class StartupReport:
    partitions: int = 0
    segments: int = 0
    segments_opened: int = 0
    segments_recovered: int = 0
    segments_validated: int = 0
    bytes_scanned: int = 0
    replayed_batches: int = 0
    truncations: list[Truncation] = field(default_factory=list)
    offline: list[tuple[TopicPartition, str]] = field(default_factory=list)
    offline_dirs: list[tuple[str, str]] = field(default_factory=list)
    clean: bool = True
    elapsed_ms: float = 0.0
    validation: str = LAZY
    removed_files: list[str] = field(default_factory=list)
    rebuilt_indexes: list[str] = field(default_factory=list)
    missing_segments: list[tuple[TopicPartition, int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    progress: list[str] = field(default_factory=list)

    def add(self, r: LoadReport, opened: int | None = None) -> None:
        self.partitions += 1
        self.segments += r.segments
        self.segments_opened += r.segments_opened if opened is None else opened
        self.segments_recovered += r.segments_recovered
        self.segments_validated += r.segments_validated
        self.bytes_scanned += r.bytes_scanned
        self.replayed_batches += r.replayed_batches
        self.truncations.extend(r.truncations)
        self.removed_files.extend(f"{r.tp.dir_name}/{n}" for n in r.removed_files)
        self.rebuilt_indexes.extend(f"{r.tp.dir_name}/{n}" for n in r.rebuilt_indexes)
        self.missing_segments.extend((r.tp, b) for b in r.missing_segments)
        self.problems.extend(f"{r.tp}: {p}" for p in r.problems)

    def log_summary(self, logger: logging.Logger, dirs: int) -> None:
        """What a start-up loaded, in one line, and each truncation it made."""
        logger.info(
            "loaded %d partitions (%d segments, %d opened, %d recovered, %d bytes scanned) from "
            "%d log dir(s) in %.0f ms%s",
            self.partitions,
            self.segments,
            self.segments_opened,
            self.segments_recovered,
            self.bytes_scanned,
            dirs,
            self.elapsed_ms,
            "" if self.clean else " after an unclean shutdown",
        )
        for t in self.truncations:
            logger.warning(
                "start-up truncated %s-%d at offset %d (%d bytes)",
                t.topic,
                t.partition,
                t.offset,
                t.bytes,
            )

    def to_json(self) -> dict[str, object]:
        """The `logkeel log load --json` object."""
        return {
            "partitions": self.partitions,
            "segments": self.segments,
            "segments_opened": self.segments_opened,
            "segments_recovered": self.segments_recovered,
            "segments_validated": self.segments_validated,
            "bytes_scanned": self.bytes_scanned,
            "replayed_batches": self.replayed_batches,
            "truncations": [
                {"topic": t.topic, "partition": t.partition, "offset": t.offset, "bytes": t.bytes}
                for t in self.truncations
            ],
            "offline": [
                {"topic": tp.topic, "partition": tp.partition, "reason": why}
                for tp, why in self.offline
            ],
            "offline_dirs": [{"dir": d, "reason": why} for d, why in self.offline_dirs],
            "missing_segments": [
                {"topic": tp.topic, "partition": tp.partition, "base_offset": b}
                for tp, b in self.missing_segments
            ],
            "removed_files": self.removed_files,
            "rebuilt_indexes": self.rebuilt_indexes,
            "problems": self.problems,
            "validation": self.validation,
            "clean": self.clean,
            "elapsed_ms": round(self.elapsed_ms, 3),
        }
