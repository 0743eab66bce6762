"""When segments are validated, and at what pace (KIP-263); what a validation checks and
repairs is ``segment_repair.py``'s.

After a clean shutdown the loader validates only the active segment; the others get a
``PartitionValidation`` as their validator, which runs on their first access or in the
``SegmentValidator``'s low-priority, rate-limited background thread, whichever comes first, and
applies the cut a validation found to the partition. ``log.startup.validation=eager`` runs the
same validation on every segment at start-up, so both modes end in the same state.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from logkeel.storage.engine.segment import (
    NEEDS_VALIDATION,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentReadInfo,
    file_name,
)
from logkeel.storage.engine.segment_check import Throttle
from logkeel.storage.engine.segment_repair import (
    SegmentValidation,
    active_prefix_scan,
    validate_segment,
)
from logkeel.storage.engine.txn_index import AbortedTxn
from logkeel.storage.errors import (
    CorruptIndexError,
    KafkaStorageError,
    StorageError,
)
from logkeel.storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from logkeel.storage.engine.log import PartitionLog

log = logging.getLogger(__name__)

# log.startup.validation: segments trusted after a clean shutdown are validated lazily (on
# first access or in the background) or eagerly (all before the partition serves).
LAZY = "lazy"
EAGER = "eager"
VALIDATION_MODES = (LAZY, EAGER)


class _Stopped(Exception):
    """The background validator is shutting down in the middle of a segment."""


class RateLimiter:
    """Bytes per second, smoothed over about a second; 0 means unlimited."""

    def __init__(self, rate: int, stop: threading.Event | None = None) -> None:
        self.rate = rate
        self._stop = stop
        self._next = time.monotonic()

    def __call__(self, nbytes: int) -> None:
        if self._stop is not None and self._stop.is_set():
            raise _Stopped
        if self.rate <= 0:
            return
        now = time.monotonic()
        self._next = max(self._next, now - 1.0) + nbytes / self.rate
        delay = self._next - now
        if delay > 0:
            if self._stop is not None:
                if self._stop.wait(delay):
                    raise _Stopped
            else:
                time.sleep(delay)


@dataclass(slots=True)
class Repair:
    """A cut found after start-up: the partition is truncated at ``offset``."""

    tp: TopicPartition
    offset: int
    bytes: int
    reason: str


class PartitionValidation:
    """The validator of one partition's inactive segments; installed as ``segment.validator``.

    Calling it validates that segment (first access); the background validator calls
    ``validate`` with a throttle. One lock per partition serialises the two.
    """

    def __init__(
        self,
        tp: TopicPartition,
        directory: Path,
        log_dir: Path,
        service: SegmentValidator | None,
        upper_bounds: dict[int, int | None],
        txn_rebuilder: Callable[[PartitionValidation, LogSegment], list[AbortedTxn]] | None = None,
    ) -> None:
        self.tp = tp
        self.dir = directory
        self.log_dir = log_dir
        self.service = service
        self.upper_bounds = upper_bounds
        self.lock = threading.RLock()
        self.plog: PartitionLog | None = None  # the PartitionLog, once built
        self.segments: list[LogSegment] = []
        self._txn_rebuilder = txn_rebuilder
        # Segments first read before their validation: readers may hold their descriptors
        # (file regions on their way to sendfile), so the background must not close them.
        self._read: set[int] = set()
        self._read_lock = threading.Lock()

    def install(self, segments: list[LogSegment]) -> None:
        self.segments = sorted({*self.segments, *segments}, key=lambda s: s.base_offset)
        for s in segments:
            s.validator = self

    def __call__(self, segment: LogSegment) -> None:
        self.validate(segment)

    def check_time_index(self, segment: LogSegment) -> None:
        """Enough for retention and timestamp lookups: the time index is sane and in range."""
        with self.lock:
            if segment.validator is not self:
                return
            name = file_name(segment.base_offset, TIME_INDEX_SUFFIX)
            try:
                if name in segment.missing_files:
                    raise CorruptIndexError(f"{name} is missing")
                segment.time_index.sanity_check()
                last = segment.time_index.last_entry
                upper = self.upper_bounds.get(segment.base_offset)
                if upper is not None and last.offset >= upper:
                    raise CorruptIndexError(f"{name}: last offset {last.offset} is past {upper}")
                return
            except CorruptIndexError:
                pass
        self.validate(segment)

    def check_txn_index(self, segment: LogSegment) -> None:
        """Enough for a read_committed fetch: a transaction index without entries has nothing
        a validation checks (each entry is checked against the marker it names), so only one
        with entries sends its segment through a full validation."""
        if segment.validator is self and not segment.raw_txn_index.is_empty:
            self.validate(segment)

    def read(
        self,
        segment: LogSegment,
        start_offset: int,
        max_size: int,
        max_offset: int | None,
        min_one_message: bool,
    ) -> SegmentReadInfo | None | object:
        """A read of an inactive segment still awaiting validation, checked only as far as it
        reads (``LogSegment.read_checked``), so a first fetch costs what a validated one does
        whatever the segment's size; the rest is left to the background validator.

        Anything wrong in that range returns NEEDS_VALIDATION: the segment is then validated
        whole, and the problem handled, exactly as before (repair, cut, report).
        """
        plog = self.plog
        if segment.validator is not self or plog is None or plog.active_segment is segment:
            return NEEDS_VALIDATION
        if segment.missing_files:
            return NEEDS_VALIDATION  # an index to rebuild before it can be trusted
        with self._read_lock:
            self._read.add(id(segment))
        try:
            return segment.read_checked(
                start_offset,
                max_size,
                upper_bound=self.upper_bounds.get(segment.base_offset),
                max_offset=max_offset,
                min_one_message=min_one_message,
            )
        except KafkaStorageError:
            raise
        except (StorageError, ValueError) as exc:
            log.info("%s: first read of %s needs a full validation: %s", self.tp, segment, exc)
            return NEEDS_VALIDATION

    def pending(self) -> list[LogSegment]:
        segments = self.plog.segments if self.plog is not None else self.segments
        return [s for s in segments if s.validator is self]

    def validate(
        self, segment: LogSegment, throttle: Throttle | None = None
    ) -> SegmentValidation | None:
        plog = self.plog
        if plog is not None and plog.active_segment is segment:
            return self._validate_active(plog, segment, throttle)
        with self.lock:
            if segment.validator is not self:
                return None
            result = self._run(segment, throttle, inactive=True)
            # Index pages read by the check need not stay mapped: the segment is inactive.
            with self._read_lock:
                if result is not None and throttle is not None and id(segment) not in self._read:
                    segment.close()
                self._read.discard(id(segment))
        self._done(segment, result)
        return result

    def _validate_active(
        self, plog: PartitionLog, segment: LogSegment, throttle: Throttle | None
    ) -> SegmentValidation | None:
        """The active segment takes appends meanwhile: its prefix is checked without blocking
        them; only a repair (rare) holds the log's lock, so nothing is appended to a segment
        whose indexes are being rebuilt or whose tail is being cut."""
        with self.lock:
            if segment.validator is not self:
                return None
            scanned = active_prefix_scan(segment, throttle)
            if scanned is not None:
                segment.validator = None
        if scanned is not None:
            self._done(segment, scanned)
            return scanned
        with plog.lock, self.lock:
            if segment.validator is not self:
                return None
            result = self._run(segment, None, inactive=plog.active_segment is not segment)
            if result is not None and result.truncated:
                # At once, under the same lock: an append must not land after the cut.
                repair = apply_cut(
                    self, result.next_offset, result.truncated_bytes, result.stop_reason or ""
                )
                if repair is not None and self.service is not None:
                    self.service.note_repair(repair)
                result.cut_applied = True
        self._done(segment, result)
        return result

    def _run(
        self, segment: LogSegment, throttle: Throttle | None, *, inactive: bool
    ) -> SegmentValidation | None:
        segment.validator = None
        try:
            return validate_segment(
                segment,
                upper_bound=self.upper_bounds.get(segment.base_offset),
                inactive=inactive,
                throttle=throttle,
                rebuild_txn_index=self._rebuild_txn,
            )
        except _Stopped:
            segment.validator = self
            raise
        except KafkaStorageError:
            raise
        except (StorageError, ValueError) as exc:
            log.error("%s: cannot validate %s: %s", self.tp, segment, exc)
            if self.service is not None:
                self.service.failed(self, segment, exc)
            return None

    def _done(self, segment: LogSegment, result: SegmentValidation | None) -> None:
        if result is None:
            return
        if self.service is not None:
            self.service.validated(self, segment, result)
        elif result.truncated and not result.cut_applied:
            apply_cut(self, result.next_offset, result.truncated_bytes, result.stop_reason or "")

    def _rebuild_txn(self, segment: LogSegment) -> list[AbortedTxn]:
        if self._txn_rebuilder is None:
            return []
        return self._txn_rebuilder(self, segment)


def _owns(lock: object) -> bool:
    owned = getattr(lock, "_is_owned", None)
    return bool(owned()) if owned is not None else False


def apply_cut(ctx: PartitionValidation, offset: int, nbytes: int, reason: str) -> Repair | None:
    """Truncates the partition at ``offset`` after validation cut one of its segments there."""
    plog = ctx.plog
    if plog is None:
        return None
    with plog.lock:
        dropped = sum(s.size for s in plog.segments if s.base_offset >= offset)
        if offset < plog.log_end_offset:
            plog.truncate_to(offset)
            # Transactions completed below the (lowered) high watermark stay stable.
            plog.producer_state.on_high_watermark_updated(plog.high_watermark)
    repair = Repair(ctx.tp, offset, nbytes + dropped, reason)
    log.warning(
        "%s: corrupt data found by validation (%s); truncated at offset %d (%d bytes)",
        ctx.tp,
        reason,
        offset,
        repair.bytes,
    )
    return repair


class SegmentValidator:
    """Validates the inactive segments of loaded partitions in the background.

    One low-priority thread, reading at most ``rate_bytes_per_sec`` (0: the thread is not
    started and segments are validated only on first access). A cut is applied to the
    partition through ``apply_cut`` (by default ``PartitionLog.truncate_to``), run by
    ``run_later`` (the log manager's scheduler) so that it never runs inside a reader's stack.
    """

    def __init__(
        self,
        rate_bytes_per_sec: int,
        *,
        run_later: Callable[[Callable[[], None]], None] | None = None,
        on_dir_failure: Callable[[KafkaStorageError], None] | None = None,
    ) -> None:
        self.rate = rate_bytes_per_sec
        self._run_later = run_later
        self._on_dir_failure = on_dir_failure
        self._partitions: list[PartitionValidation] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.segments_validated = 0
        self.bytes_scanned = 0
        self.repairs: list[Repair] = []
        self.problems: list[str] = []
        self.finished = threading.Event()

    def register(self, ctx: PartitionValidation) -> None:
        with self._lock:
            self._partitions.append(ctx)
            self.finished.clear()

    def forget(self, tp: TopicPartition) -> None:
        with self._lock:
            self._partitions = [p for p in self._partitions if p.tp != tp]

    @property
    def pending_segments(self) -> int:
        with self._lock:
            parts = list(self._partitions)
        return sum(len(p.pending()) for p in parts)

    # -- callbacks from PartitionValidation ----------------------------------------------
    def validated(
        self, ctx: PartitionValidation, segment: LogSegment, result: SegmentValidation
    ) -> None:
        with self._lock:
            self.segments_validated += 1
            self.bytes_scanned += result.bytes_scanned
            self.problems.extend(f"{ctx.tp}: {p}" for p in result.problems)
        if result.truncated and not result.cut_applied:
            self._cut(ctx, result.next_offset, result.truncated_bytes, result.stop_reason or "")

    def note_repair(self, repair: Repair) -> None:
        with self._lock:
            self.repairs.append(repair)

    def failed(self, ctx: PartitionValidation, segment: LogSegment, exc: Exception) -> None:
        with self._lock:
            self.problems.append(f"{ctx.tp}: {segment}: {exc}")

    def _cut(self, ctx: PartitionValidation, offset: int, nbytes: int, reason: str) -> None:
        def apply() -> None:
            repair = apply_cut(ctx, offset, nbytes, reason)
            if repair is not None:
                self.note_repair(repair)

        plog = ctx.plog
        # At once, so nothing is appended (and acknowledged) past a cut that would later
        # remove it; deferred only if this thread is inside the log already (e.g. replaying
        # producer state under its lock), where truncating would pull segments from under it.
        if self._run_later is None or plog is None or not _owns(plog.lock):
            apply()
        else:
            self._run_later(self._guard(apply))

    def _guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except KafkaStorageError as exc:
                if self._on_dir_failure is None:
                    raise
                self._on_dir_failure(exc)

        return run

    # -- running ----------------------------------------------------------------------------
    def validate_all(self) -> None:
        """Validates every pending segment now, unthrottled, applying cuts at once."""
        saved, self._run_later = self._run_later, None
        try:
            for ctx, segment in self._work():
                ctx.validate(segment)
        finally:
            self._run_later = saved

    def _work(self) -> Iterator[tuple[PartitionValidation, LogSegment]]:
        with self._lock:
            parts = list(self._partitions)
        for ctx in parts:
            for segment in ctx.pending():
                yield ctx, segment

    def start(self) -> None:
        if self.rate <= 0 or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="segment-validator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=30)

    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            # Background work yields the CPU to request handling (per-thread nice on Linux).
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        throttle = RateLimiter(self.rate, self._stop)
        try:
            for ctx, segment in self._work():
                if self._stop.is_set():
                    return
                try:
                    ctx.validate(segment, throttle)
                except KafkaStorageError as exc:
                    if self._on_dir_failure is not None:
                        self._on_dir_failure(exc)
        except _Stopped:
            return
        except Exception:
            log.exception("background segment validation failed")
        self.finished.set()
