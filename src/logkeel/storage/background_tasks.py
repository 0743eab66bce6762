"""The periodic storage work of a broker, on the log manager's scheduler thread: flushes,
checkpoints, retention, the log cleaner, producer-id expiry and probing offline dirs.

A storage error in one log's pass goes to the one failure handler; the pass goes on with the
next log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from logkeel.storage.engine.cleaner import LogCleaner
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.scheduler import Scheduler
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["BackgroundIntervals", "BackgroundTasks"]


@dataclass(frozen=True, slots=True)
class BackgroundIntervals:
    flush_check_ms: int = 1_000  # log.flush.scheduler.interval.ms (bounded for responsiveness)
    # log.flush.offset.checkpoint.interval.ms; log start offsets and high watermarks are
    # checkpointed in the same pass, so no separate start-offset timer.
    recovery_checkpoint_ms: int = 60_000
    retention_check_ms: int = 300_000  # log.retention.check.interval.ms
    # log.recovery.checkpoint.interval.ms (AKIP-2): every partition is flushed and the
    # recovery points checkpointed this often, so a kill -9 leaves little to replay.
    recovery_flush_ms: int = 30_000
    # log.cleaner.backoff.ms: how often the log cleaner looks for compacted logs to clean
    cleaner_backoff_ms: int = 15_000
    producer_expiration_check_ms: int = 600_000  # producer.id.expiration.check.interval.ms
    # log.dir.recovery.check.interval.ms (logkeel's own): how often offline dirs are probed
    # and brought back when healthy; 0: off.
    dir_recovery_check_ms: int = 10_000


class BackgroundTasks:
    """Passes over the logs being served (``logs``, read afresh on every pass); each may also
    be run directly (tests, shutdown paths)."""

    def __init__(
        self,
        logs: dict[TopicPartition, PartitionLog],
        intervals: BackgroundIntervals,
        *,
        scheduler: Scheduler,
        on_failure: Callable[[KafkaStorageError], None],
        checkpoint_all: Callable[[], None],
        probe_offline_dirs: Callable[[], None],
    ) -> None:
        self._logs = logs
        self._intervals = intervals
        self._scheduler = scheduler
        self._on_failure = on_failure
        self._checkpoint_all = checkpoint_all
        self._probe_offline_dirs = probe_offline_dirs
        self.cleaner = LogCleaner()

    def start(self) -> None:
        """Schedules every pass at its interval and starts the scheduler."""
        iv = self._intervals
        periodic: tuple[tuple[Callable[[], object], int], ...] = (
            (self.flush_dirty_logs, iv.flush_check_ms),
            (self._checkpoint_all, iv.recovery_checkpoint_ms),
            (self.run_retention, iv.retention_check_ms),
            (self.flush_for_recovery, iv.recovery_flush_ms),
            (self.clean_logs, iv.cleaner_backoff_ms),
            (self.remove_expired_producers, iv.producer_expiration_check_ms),
        )
        for fn, every_ms in periodic:
            self._scheduler.schedule(self._guarded(fn), every_ms / 1000, every_ms / 1000)
        if iv.dir_recovery_check_ms > 0:
            self._scheduler.schedule(
                self._probe_offline_dirs,
                iv.dir_recovery_check_ms / 1000,
                iv.dir_recovery_check_ms / 1000,
            )
        self._scheduler.start()

    def _guarded(self, fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except KafkaStorageError as exc:
                self._on_failure(exc)

        run.__name__ = fn.__name__
        return run

    def _each_log(self, fn: Callable[[PartitionLog], object]) -> None:
        for plog in list(self._logs.values()):
            try:
                fn(plog)
            except KafkaStorageError as exc:
                self._on_failure(exc)

    def flush_dirty_logs(self) -> None:
        now = int(time.time() * 1000)

        def tick(plog: PartitionLog) -> None:
            plog.maybe_flush(now)
            plog.maybe_take_snapshot(now)

        self._each_log(tick)

    def flush_for_recovery(self) -> None:
        """Flushes every log to its end and checkpoints the recovery points (AKIP-2): after a
        kill -9 only what was appended since is replayed."""

        def flush(plog: PartitionLog) -> None:
            plog.flush()
            # A producer snapshot at the recovery point: recovery replays only what follows.
            plog.snapshot_producer_state()

        self._each_log(flush)
        self._checkpoint_all()

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forgets producer ids idle longer than producer.id.expiration.ms (Kafka's
        periodic check), so producer state and snapshots do not grow forever."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        removed = 0

        def expire(plog: PartitionLog) -> None:
            nonlocal removed
            with plog.lock:
                removed += len(plog.producer_state.remove_expired_producers(now))

        self._each_log(expire)
        return removed

    def run_retention(self) -> int:
        deleted = 0

        def retain(plog: PartitionLog) -> None:
            nonlocal deleted
            if not plog.config.delete:
                return  # cleanup.policy=compact alone: the cleaner, not retention, bounds it
            deleted += plog.delete_old_segments()

        self._each_log(retain)
        return deleted

    def clean_logs(self, *, now_ms: int | None = None, force: bool = False) -> int:
        """One log-cleaner pass over every log whose cleanup.policy holds ``compact``;
        returns the number of segments rewritten. ``force`` ignores
        min.cleanable.dirty.ratio."""
        cleaned = 0

        def clean(plog: PartitionLog) -> None:
            nonlocal cleaned
            if plog.config.compact:
                result = self.cleaner.clean(plog, now_ms=now_ms, force=force)
                if result is not None:
                    cleaned += result.segments

        self._each_log(clean)
        return cleaned
