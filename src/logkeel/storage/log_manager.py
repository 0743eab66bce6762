"""All partition logs of a broker across its log dirs (JBOD), and their background work.

The manager loads dirs at start-up, places new partitions, runs flushes, checkpoints and
retention on a background thread, writes the clean-shutdown marker on close, and takes a
failed dir offline without touching the others.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from logkeel.storage.engine.cleaner import LogCleaner
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.partition_dir import recovery_plan
from logkeel.storage.engine.validation import LAZY, VALIDATION_MODES, SegmentValidator
from logkeel.storage.errors import KafkaStorageError, io_guard
from logkeel.storage.log_dir import (
    META_PROPERTIES,
    LogDir,
    MetaProperties,
    MetaPropertiesError,
    mark_for_deletion,
    partition_dir_named,
    random_uuid,
)
from logkeel.storage.recovery.durability import (
    RECOVERY_SYNC_METHODS,
    SYNCFS,
    PendingSync,
    sync_all,
)
from logkeel.storage.recovery.load_report import LoadReport, RecoveryProgress, StartupReport
from logkeel.storage.recovery.loader import load_partition
from logkeel.storage.recovery.vouch import manifest_entries
from logkeel.storage.scheduler import Scheduler
from logkeel.storage.topic_partition import TopicPartition

# log.startup.validation.rate.bytes.per.sec
DEFAULT_VALIDATION_RATE = 50 * 1024 * 1024

log = logging.getLogger(__name__)

ConfigFor = Callable[[str], LogConfig]


class LogDirNotRecoverable(Exception):
    """A dir asked to come back is not offline, or is no longer the disk it was."""


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


class LogManager:
    def __init__(
        self,
        log_dirs: Iterable[str | Path],
        *,
        node_id: int = 0,
        cluster_id: str | None = None,
        default_config: LogConfig | None = None,
        config_for: ConfigFor | None = None,
        recovery_threads_per_dir: int = 1,
        intervals: BackgroundIntervals | None = None,
        startup_validation: str = LAZY,
        validation_rate_bytes_per_sec: int = DEFAULT_VALIDATION_RATE,
        recovery_sync_method: str = SYNCFS,
    ) -> None:
        """``startup_validation`` is log.startup.validation (lazy|eager) and
        ``validation_rate_bytes_per_sec`` log.startup.validation.rate.bytes.per.sec (0: no
        background validation; segments are then validated on first access only);
        ``recovery_sync_method`` is log.recovery.sync.method (see recovery/durability.py)."""
        if startup_validation not in VALIDATION_MODES:
            raise ValueError(
                f"log.startup.validation must be one of {VALIDATION_MODES}, not {startup_validation!r}"
            )
        if recovery_sync_method not in RECOVERY_SYNC_METHODS:
            raise ValueError(
                f"log.recovery.sync.method must be one of {RECOVERY_SYNC_METHODS}, "
                f"not {recovery_sync_method!r}"
            )
        self.recovery_sync_method = recovery_sync_method
        self.dirs = [LogDir(p) for p in log_dirs]
        if not self.dirs:
            raise ValueError("at least one log dir is needed (log.dirs)")
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.default_config = default_config or LogConfig()
        self._config_for = config_for
        self.recovery_threads_per_dir = max(1, recovery_threads_per_dir)
        self.intervals = intervals or BackgroundIntervals()
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.offline_partitions: dict[TopicPartition, str] = {}
        self._dir_of: dict[TopicPartition, LogDir] = {}
        self._lock = threading.RLock()
        self.scheduler = Scheduler()
        self.cleaner = LogCleaner()
        self._dir_failure_listeners: list[Callable[[str, str], None]] = []
        self._dir_online_listeners: list[Callable[[str, list[TopicPartition]], None]] = []
        # One bring-back at a time: the probe and an operator's request may race.
        self._online_lock = threading.Lock()
        self._partition_failure_listeners: list[Callable[[TopicPartition, str], None]] = []
        self.startup_report: StartupReport | None = None
        self.startup_validation = startup_validation
        self._report_lock = threading.Lock()
        self.validator = SegmentValidator(
            validation_rate_bytes_per_sec,
            run_later=lambda fn: self.scheduler.schedule(fn),
            on_dir_failure=self.handle_dir_failure,
        )

    # -- configuration --------------------------------------------------------------------------
    def config_for(self, topic: str) -> LogConfig:
        return self._config_for(topic) if self._config_for else self.default_config

    def add_dir_failure_listener(self, fn: Callable[[str, str], None]) -> None:
        self._dir_failure_listeners.append(fn)

    def add_dir_online_listener(self, fn: Callable[[str, list[TopicPartition]], None]) -> None:
        """``fn(log_dir, partitions)`` after an offline dir was loaded again."""
        self._dir_online_listeners.append(fn)

    def add_partition_failure_listener(self, fn: Callable[[TopicPartition, str], None]) -> None:
        """``fn(tp, reason)`` when an error that is not a device fault takes one partition
        offline (its dir stays online)."""
        self._partition_failure_listeners.append(fn)

    @property
    def online_dirs(self) -> list[LogDir]:
        return [d for d in self.dirs if d.online]

    def dir_of(self, tp: TopicPartition) -> LogDir | None:
        return self._dir_of.get(tp)

    # -- start-up -------------------------------------------------------------------------------
    def startup(
        self, *, start_background: bool = True, force_recovery: bool = False
    ) -> StartupReport:
        """Opens every log dir and loads its partitions (see log_loader); one bad partition
        goes offline alone, one failed dir goes offline alone.

        ``force_recovery`` treats every dir as shut down uncleanly (``logkeel log recover``).
        """
        started = time.monotonic()
        report = StartupReport(validation=self.startup_validation)
        self.cluster_id = self.cluster_id or self._find_cluster_id() or random_uuid()
        for d in self.dirs:
            try:
                d.open(self.cluster_id, self.node_id)
            except KafkaStorageError as exc:
                self._mark_dir_offline(d, str(exc))
                report.offline_dirs.append((str(d.path), str(exc)))

        def load_dir(d: LogDir) -> None:
            try:
                self._load_dir(d, report, force_recovery)
            except KafkaStorageError as exc:
                self.handle_dir_failure(exc)
                with self._report_lock:
                    report.offline_dirs.append((str(d.path), str(exc)))

        online = self.online_dirs
        # Loading makes a few objects per segment and no garbage: the cyclic collector's
        # passes over them (a full one every time the tracked objects grow by a quarter) were
        # a fifth of a clean start at 100 segments a partition. Off while loading only.
        collecting = gc.isenabled()
        gc.disable()
        try:
            if len(online) <= 1:
                for d in online:
                    load_dir(d)
            else:
                # Dirs are separate disks (JBOD): they load side by side, each with its threads.
                with ThreadPoolExecutor(len(online), thread_name_prefix="log-dir-load") as pool:
                    list(pool.map(load_dir, online))
        finally:
            if collecting:
                gc.enable()
        report.elapsed_ms = (time.monotonic() - started) * 1000
        self.startup_report = report
        report.log_summary(log, len(self.dirs))
        if start_background:
            self.start_background()
        return report

    def _find_cluster_id(self) -> str | None:
        for d in self.dirs:
            try:
                return MetaProperties.parse((d.path / META_PROPERTIES).read_text()).cluster_id
            except (OSError, MetaPropertiesError, UnicodeDecodeError):
                continue
        return None

    def _load_dir(self, d: LogDir, report: StartupReport, force_recovery: bool = False) -> None:
        partition_dirs = d.partition_dirs()
        # A dir with no partitions has nothing to recover, marker or not (e.g. a new dir).
        clean = (d.was_clean and not force_recovery) or not partition_dirs
        with self._report_lock:
            report.clean = report.clean and clean
        manifest, manifest_mtime_ns = d.read_manifest() if clean else ({}, None)
        d.remove_manifest()
        recovery_points = d.read_checkpoint(d.recovery_points)
        start_offsets = d.read_checkpoint(d.log_start_offsets)
        replication = d.read_checkpoint(d.replication_offsets)
        total = len(partition_dirs)
        progress = None
        # Each dir's names, listed once for the plan and the load.
        listed: dict[Path, list[str]] = {}
        if not clean and total:
            segments = nbytes = 0
            for path in partition_dirs:
                try:
                    tp = TopicPartition.parse_dir_name(path.name)
                    names = listed[path] = os.listdir(path)
                    n, b = recovery_plan(path, recovery_points.get(tp), names)
                except (OSError, ValueError):
                    continue
                segments += n
                nbytes += b
            progress = RecoveryProgress(str(d.path), total, segments, nbytes)
            log.info(
                "%s: unclean shutdown; recovering %d partitions (%d segments, %d bytes after "
                "their recovery points)",
                d.path,
                total,
                segments,
                nbytes,
            )

        syncs: dict[TopicPartition, PendingSync] = {}

        def load(path: Path) -> tuple[Path, PartitionLog | None, LoadReport | None, str | None]:
            tp = TopicPartition.parse_dir_name(path.name)
            deferred: list[PendingSync] | None = None if clean else []
            try:
                plog, r = load_partition(
                    path,
                    self.config_for(tp.topic),
                    log_dir=d.path,
                    recovery_point=recovery_points.get(tp),
                    log_start_offset=start_offsets.get(tp),
                    clean=clean,
                    schedule_delete=self._schedule_delete,
                    validation=self.startup_validation,
                    validator=self.validator,
                    progress=progress,
                    cached=manifest.get(path.name),
                    syncs=deferred,
                    manifest_mtime_ns=manifest_mtime_ns,
                    names=listed.pop(path, None),
                )
            except KafkaStorageError as exc:
                if exc.device_fault:
                    raise
                # Not the disk (e.g. a permission or a vanished file): this partition only.
                log.error("%s: cannot load partition %s: %s", d.path, tp, exc)
                return path, None, None, str(exc)
            except Exception as exc:  # noqa: BLE001 - one partition never stops the broker
                log.exception("%s: cannot load partition %s", d.path, tp)
                return path, None, None, f"{type(exc).__name__}: {exc}"
            finally:
                if progress is not None:
                    progress.partition_done()
            hw = replication.get(tp)
            if hw is not None:
                plog.high_watermark = max(plog.log_start_offset, min(hw, plog.log_end_offset))
                # Transactions completed below it are stable, as before the restart.
                plog.producer_state.on_high_watermark_updated(plog.high_watermark)
            if deferred:
                with self._report_lock:
                    syncs[tp] = deferred[0]
            return path, plog, r, None

        with ThreadPoolExecutor(
            self.recovery_threads_per_dir, thread_name_prefix="log-recovery"
        ) as pool:
            results = list(pool.map(load, partition_dirs))
        # What recovery wrote is durable before anything serves it or a checkpoint claims it.
        sync_errors = sync_all(syncs.items(), d.path, self.recovery_sync_method)
        for path, plog, r, error in results:
            tp = TopicPartition.parse_dir_name(path.name)
            failed = sync_errors.get(tp)
            if failed is not None and plog is not None:
                if isinstance(failed, KafkaStorageError) and failed.device_fault:
                    for _, loaded, _, _ in results:
                        if loaded is not None:
                            loaded.close_without_flush()
                    raise failed
                log.error("%s: cannot make partition %s durable: %s", d.path, tp, failed)
                plog.close_without_flush()
                plog, error = None, f"{type(failed).__name__}: {failed}"
            if plog is None or r is None:
                with self._lock, self._report_lock:
                    self.offline_partitions[tp] = error or "unknown"
                    report.offline.append((tp, error or "unknown"))
            else:
                with self._lock:
                    self.logs[tp] = plog
                    self._dir_of[tp] = d
                with self._report_lock:
                    report.add(r)
        if progress is not None:
            with self._report_lock:
                report.progress.extend(progress.lines)
        d.clear_clean_marker()
        # The loaded state becomes the checkpointed state, so a crash right after start-up
        # recovers from here rather than from before the previous run.
        self._write_checkpoints(d, unchanged_from=(recovery_points, start_offsets, replication))

    def validate_all(self) -> None:
        """Validates every segment still awaiting validation, now (tests, offline tools)."""
        self.validator.validate_all()

    # -- partitions -----------------------------------------------------------------------------
    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get(tp)

    def get_or_create_log(
        self, tp: TopicPartition, config: LogConfig | None = None
    ) -> PartitionLog:
        with self._lock:
            existing = self.logs.get(tp)
            if existing is not None:
                return existing
            if tp in self.offline_partitions:
                raise KafkaStorageError(
                    "", f"partition {tp} is offline: {self.offline_partitions[tp]}"
                )
            d = self._choose_dir()
            path = d.path / tp.dir_name
            with io_guard(d.path, f"creating {path}"):
                # A dir that exists but was not loaded is what an earlier topic of this name
                # left (a deletion that could not finish): never adopted by the new topic.
                leftover = mark_for_deletion(d.path, path) if path.exists() else None
                path.mkdir()
            if leftover is not None:
                log.warning("%s: set aside %s, left by a deleted topic", d.path, leftover.name)
                self.scheduler.schedule(lambda: shutil.rmtree(leftover, ignore_errors=True))
            plog, _ = load_partition(
                path,
                config or self.config_for(tp.topic),
                log_dir=d.path,
                recovery_point=0,
                log_start_offset=0,
                clean=True,
                schedule_delete=self._schedule_delete,
                # Everything in a new log is written by this process: nothing to validate,
                # and a validator would CRC-scan the whole active segment on the first read.
                trusted=True,
            )
            self.logs[tp] = plog
            self._dir_of[tp] = d
            log.info("created log for %s in %s", tp, d.path)
            return plog

    def _choose_dir(self) -> LogDir:
        online = self.online_dirs
        if not online:
            raise KafkaStorageError(
                ",".join(str(d.path) for d in self.dirs), "no log dir is online"
            )
        counts = {id(d): 0 for d in online}
        for d in self._dir_of.values():
            if id(d) in counts:
                counts[id(d)] += 1
        return min(online, key=lambda d: counts[id(d)])

    def delete_log(self, tp: TopicPartition) -> None:
        """Removes a partition: its dir in every online log dir (an offline partition's too)
        is renamed to a ``-delete`` name that fits the filesystem and removed in the
        background; a start-up removes any such dir a crash left."""
        with self._lock:
            plog = self.logs.pop(tp, None)
            d = self._dir_of.pop(tp, None)
            self.offline_partitions.pop(tp, None)
        self.validator.forget(tp)
        if plog is not None:
            plog.close_without_flush()
        for each in self.online_dirs:
            with io_guard(each.path, f"deleting {tp}"):
                target = mark_for_deletion(each.path, each.path / tp.dir_name)
            if target is not None:
                self.scheduler.schedule(lambda t=target: shutil.rmtree(t, ignore_errors=True))
        if d is not None and d.online:
            self._write_checkpoints(d)

    def update_config(self, topic: str, config: LogConfig) -> None:
        for tp, plog in list(self.logs.items()):
            if tp.topic == topic:
                plog.config = config

    # -- background work ------------------------------------------------------------------------
    def start_background(self) -> None:
        iv = self.intervals
        self.scheduler.schedule(
            self._guarded(self.flush_dirty_logs), iv.flush_check_ms / 1000, iv.flush_check_ms / 1000
        )
        self.scheduler.schedule(
            self._guarded(self.checkpoint_all),
            iv.recovery_checkpoint_ms / 1000,
            iv.recovery_checkpoint_ms / 1000,
        )
        self.scheduler.schedule(
            self._guarded(self.run_retention),
            iv.retention_check_ms / 1000,
            iv.retention_check_ms / 1000,
        )
        self.scheduler.schedule(
            self._guarded(self.flush_for_recovery),
            iv.recovery_flush_ms / 1000,
            iv.recovery_flush_ms / 1000,
        )
        self.scheduler.schedule(
            self._guarded(self.clean_logs),
            iv.cleaner_backoff_ms / 1000,
            iv.cleaner_backoff_ms / 1000,
        )
        self.scheduler.schedule(
            self._guarded(self.remove_expired_producers),
            iv.producer_expiration_check_ms / 1000,
            iv.producer_expiration_check_ms / 1000,
        )
        if iv.dir_recovery_check_ms > 0:
            self.scheduler.schedule(
                self.probe_offline_dirs,
                iv.dir_recovery_check_ms / 1000,
                iv.dir_recovery_check_ms / 1000,
            )
        self.scheduler.start()
        self.validator.start()

    def _guarded(self, fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except KafkaStorageError as exc:
                self.handle_dir_failure(exc)

        run.__name__ = fn.__name__
        return run

    def _schedule_delete(self, fn: Callable[[], None], delay_s: float) -> None:
        self.scheduler.schedule(fn, delay_s)

    def _each_log(self, fn: Callable[[PartitionLog], object]) -> None:
        for plog in list(self.logs.values()):
            try:
                fn(plog)
            except KafkaStorageError as exc:
                self.handle_dir_failure(exc)

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
        self.checkpoint_all()

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

    def checkpoint_all(self) -> None:
        for d in self.online_dirs:
            try:
                self._write_checkpoints(d)
            except KafkaStorageError as exc:
                self.handle_dir_failure(exc)

    def _write_checkpoints(
        self, d: LogDir, unchanged_from: tuple[dict[TopicPartition, int], ...] | None = None
    ) -> None:
        """Writes the dir's three checkpoints; with ``unchanged_from`` (what was read at
        start-up) only those that differ: each write is two fsyncs."""
        logs = {tp: plog for tp, plog in list(self.logs.items()) if self._dir_of.get(tp) is d}
        values = (
            (d.recovery_points, {tp: p.recovery_point for tp, p in logs.items()}),
            (d.log_start_offsets, {tp: p.log_start_offset for tp, p in logs.items()}),
            (d.replication_offsets, {tp: p.high_watermark for tp, p in logs.items()}),
        )
        for i, (checkpoint, offsets) in enumerate(values):
            if (
                unchanged_from is not None
                and unchanged_from[i] == offsets
                and checkpoint.path.exists()
            ):
                continue
            checkpoint.write(offsets)

    def _write_manifest(self, d: LogDir) -> None:
        logs = [plog for tp, plog in list(self.logs.items()) if self._dir_of.get(tp) is d]
        d.write_manifest(*manifest_entries(logs))

    # -- failures -------------------------------------------------------------------------------
    def handle_dir_failure(self, exc: KafkaStorageError) -> None:
        """The single place an IO error lands. A device fault (``storage.errors``) takes its
        dir offline while the others keep serving; any other error failed only the operation
        that hit it: the partition whose file it names goes offline with the reason, the dir
        stays online."""
        d = next((d for d in self.dirs if str(d.path) == exc.log_dir), None)
        if d is None:
            log.error("storage error outside any known log dir: %s", exc)
            return
        # A dir that vanished (unmounted, deleted) answers ENOENT: the dir's fault, not ours.
        if not exc.device_fault and d.path.is_dir():
            tp = self._partition_named(d, exc.cause)
            log.error(
                "%s: an operation failed (%s); not a device fault, the dir stays online%s",
                d.path,
                exc,
                f"; partition {tp} goes offline" if tp is not None else "",
            )
            if tp is not None:
                self.take_partition_offline(tp, str(exc))
            return
        if not d.online:
            return
        self._mark_dir_offline(d, str(exc))

    def _partition_named(self, d: LogDir, cause: OSError | None) -> TopicPartition | None:
        """The loaded partition of ``d`` that a file named by ``cause`` belongs to."""
        name = partition_dir_named(d.path, cause)
        if name is None:
            return None
        tp = TopicPartition.parse_dir_name(name)
        plog = self.logs.get(tp)
        if plog is None or self._dir_of.get(tp) is not d or plog.dir.name != name:
            return None
        return tp

    def take_partition_offline(self, tp: TopicPartition, reason: str) -> None:
        """One partition stops serving (its files are closed, nothing is written), the rest
        of its dir keeps serving. Blocking: run it off the event loop."""
        with self._lock:
            plog = self.logs.pop(tp, None)
            self._dir_of.pop(tp, None)
            if plog is None:
                return
            self.offline_partitions[tp] = reason
        self.validator.forget(tp)
        plog.close_without_flush()
        log.error("partition %s is offline: %s", tp, reason)
        for fn in self._partition_failure_listeners:
            try:
                fn(tp, reason)
            except Exception:
                log.exception("partition failure listener failed")

    def _mark_dir_offline(self, d: LogDir, reason: str) -> None:
        d.offline_reason = reason
        log.error("log dir %s is offline: %s", d.path, reason)
        with self._lock:
            doomed = [tp for tp, owner in self._dir_of.items() if owner is d]
            for tp in doomed:
                self.validator.forget(tp)  # nothing more is read from a failed dir
                plog = self.logs.pop(tp)
                self._dir_of.pop(tp)
                self.offline_partitions[tp] = f"log dir {d.path} is offline"
                plog.close_without_flush()
        for fn in self._dir_failure_listeners:
            try:
                fn(str(d.path), reason)
            except Exception:
                log.exception("log dir failure listener failed")

    # -- bringing a dir back -------------------------------------------------------------------
    def probe_offline_dirs(self) -> None:
        """Tries each offline dir once; one that is healthy again comes back (the timer of
        ``log.dir.recovery.check.interval.ms``). Failures keep it offline, quietly."""
        for d in self.dirs:
            if d.online:
                continue
            try:
                self.bring_dir_online(str(d.path))
            except (KafkaStorageError, LogDirNotRecoverable) as exc:
                log.debug("log dir %s is still offline: %s", d.path, exc)

    def bring_dir_online(self, path: str) -> list[TopicPartition]:
        """Loads an offline dir again through unclean recovery (it failed while in use), if it
        answers IO and its meta.properties still carries the directory id it had: the same
        disk, healthy again. Returns the partitions it serves again. Raises
        ``KafkaStorageError`` while the dir still fails, and ``LogDirNotRecoverable`` for a
        dir that is not offline or is another disk (restart the broker to adopt that one).
        Blocking: run it off the event loop."""
        d = next((d for d in self.dirs if str(d.path) == str(Path(path).absolute())), None)
        if d is None:
            raise LogDirNotRecoverable(f"{path} is not a log dir of this broker")
        with self._online_lock:
            if d.online:
                raise LogDirNotRecoverable(f"{d.path} is online")
            expected = d.meta.directory_id if d.meta is not None else None
            d.close()
            try:
                d.open(self.cluster_id or "", self.node_id)
                if expected is not None and d.meta is not None and d.meta.directory_id != expected:
                    raise LogDirNotRecoverable(
                        f"{d.path} now holds directory id {d.meta.directory_id}, not {expected}: "
                        "another disk; restart the broker to use it"
                    )
                d.probe()
                report = StartupReport(validation=self.startup_validation)
                log.info("%s: answers IO again; loading it (unclean recovery)", d.path)
                self._load_dir(d, report, force_recovery=True)
            except BaseException:
                d.close()
                raise
            d.offline_reason = None
            with self._lock:
                loaded = sorted(tp for tp, owner in self._dir_of.items() if owner is d)
                for tp in loaded:
                    self.offline_partitions.pop(tp, None)
                # Partitions that went offline with the dir but had no log in it: free to be
                # created again (as a new replica that catches up).
                gone = f"log dir {d.path} is offline"
                for tp in [tp for tp, why in self.offline_partitions.items() if why == gone]:
                    del self.offline_partitions[tp]
        report.log_summary(log, 1)
        log.info("log dir %s is online again: %d partition(s)", d.path, len(loaded))
        for fn in self._dir_online_listeners:
            try:
                fn(str(d.path), loaded)
            except Exception:
                log.exception("log dir online listener failed")
        return loaded

    # -- shutdown -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Flushes everything, snapshots producer state, checkpoints and marks each dir clean."""
        self.validator.stop()
        self.scheduler.shutdown(run_pending_once=True)
        for d in self.online_dirs:
            failed = False
            for tp, owner in list(self._dir_of.items()):
                if owner is not d:
                    continue
                try:
                    self.logs[tp].close()
                except KafkaStorageError as exc:
                    self.handle_dir_failure(exc)
                    failed = True
                    break
            if failed or not d.online:
                continue
            try:
                self._write_checkpoints(d)
                self._write_manifest(d)
                d.mark_clean()
            except KafkaStorageError as exc:
                self.handle_dir_failure(exc)
        for d in self.dirs:
            d.close()
        log.info("log manager shut down cleanly")
