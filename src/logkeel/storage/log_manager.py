"""All partition logs of a broker across its log dirs (JBOD), and their background work.

The manager loads dirs at start-up, places new partitions, runs flushes, checkpoints and
retention on a background thread, writes the clean-shutdown marker on close, and takes a
failed dir offline without touching the others.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from logkeel.storage.errors import KafkaStorageError, StorageError, io_guard
from logkeel.storage.log import PartitionLog
from logkeel.storage.log_config import LogConfig
from logkeel.storage.log_dir import LogDir, random_uuid
from logkeel.storage.log_loader import LoadReport, Truncation, load_partition
from logkeel.storage.scheduler import Scheduler
from logkeel.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

ConfigFor = Callable[[str], LogConfig]


@dataclass(slots=True)
class StartupReport:
    partitions: int = 0
    segments: int = 0
    segments_opened: int = 0
    segments_recovered: int = 0
    bytes_scanned: int = 0
    truncations: list[Truncation] = field(default_factory=list)
    offline: list[tuple[TopicPartition, str]] = field(default_factory=list)
    offline_dirs: list[tuple[str, str]] = field(default_factory=list)
    clean: bool = True
    elapsed_ms: float = 0.0

    def add(self, r: LoadReport, opened: int) -> None:
        self.partitions += 1
        self.segments += r.segments
        self.segments_opened += opened
        self.segments_recovered += r.segments_recovered
        self.bytes_scanned += r.bytes_scanned
        self.truncations.extend(r.truncations)


@dataclass(frozen=True, slots=True)
class BackgroundIntervals:
    flush_check_ms: int = 1_000  # log.flush.scheduler.interval.ms (bounded for responsiveness)
    recovery_checkpoint_ms: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    start_offset_checkpoint_ms: int = 60_000  # log.flush.start.offset.checkpoint.interval.ms
    retention_check_ms: int = 300_000  # log.retention.check.interval.ms


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
    ) -> None:
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
        self._dir_failure_listeners: list[Callable[[str, str], None]] = []
        self.startup_report: StartupReport | None = None

    # -- configuration --------------------------------------------------------------------------
    def config_for(self, topic: str) -> LogConfig:
        return self._config_for(topic) if self._config_for else self.default_config

    def add_dir_failure_listener(self, fn: Callable[[str, str], None]) -> None:
        self._dir_failure_listeners.append(fn)

    @property
    def online_dirs(self) -> list[LogDir]:
        return [d for d in self.dirs if d.online]

    def dir_of(self, tp: TopicPartition) -> LogDir | None:
        return self._dir_of.get(tp)

    # -- start-up -------------------------------------------------------------------------------
    def startup(self, *, start_background: bool = True) -> StartupReport:
        started = time.monotonic()
        report = StartupReport()
        self.cluster_id = self.cluster_id or self._find_cluster_id() or random_uuid()
        for d in self.dirs:
            try:
                d.open(self.cluster_id, self.node_id)
            except KafkaStorageError as exc:
                self._mark_dir_offline(d, str(exc))
                report.offline_dirs.append((str(d.path), str(exc)))
        for d in self.online_dirs:
            try:
                self._load_dir(d, report)
            except KafkaStorageError as exc:
                self.handle_dir_failure(exc)
                report.offline_dirs.append((str(d.path), str(exc)))
        report.elapsed_ms = (time.monotonic() - started) * 1000
        self.startup_report = report
        log.info(
            "loaded %d partitions (%d segments, %d opened, %d recovered, %d bytes scanned) from %d "
            "log dir(s) in %.0f ms%s",
            report.partitions, report.segments, report.segments_opened, report.segments_recovered,
            report.bytes_scanned, len(self.dirs), report.elapsed_ms,
            "" if report.clean else " after an unclean shutdown",
        )
        if start_background:
            self.start_background()
        return report

    def _find_cluster_id(self) -> str | None:
        from logkeel.storage.log_dir import META_PROPERTIES, MetaProperties, MetaPropertiesError

        for d in self.dirs:
            try:
                return MetaProperties.parse((d.path / META_PROPERTIES).read_text()).cluster_id
            except (OSError, MetaPropertiesError):
                continue
        return None

    def _load_dir(self, d: LogDir, report: StartupReport) -> None:
        partition_dirs = d.partition_dirs()
        # A dir with no partitions has nothing to recover, marker or not (e.g. a new dir).
        clean = d.was_clean or not partition_dirs
        report.clean = report.clean and clean
        recovery_points = d.read_checkpoint(d.recovery_points)
        start_offsets = d.read_checkpoint(d.log_start_offsets)
        replication = d.read_checkpoint(d.replication_offsets)
        total = len(partition_dirs)
        if not clean and total:
            log.info("%s: unclean shutdown; recovering %d partitions", d.path, total)

        def load(path: Path) -> tuple[Path, PartitionLog | None, LoadReport | None, str | None]:
            tp = TopicPartition.parse_dir_name(path.name)
            try:
                plog, r = load_partition(
                    path, self.config_for(tp.topic), log_dir=d.path,
                    recovery_point=recovery_points.get(tp), log_start_offset=start_offsets.get(tp),
                    clean=clean, schedule_delete=self._schedule_delete,
                )
            except KafkaStorageError:
                raise
            except (StorageError, ValueError, OSError) as exc:
                # One partition never stops the broker: it goes offline with its reason.
                log.error("%s: cannot load partition %s: %s", d.path, tp, exc)
                return path, None, None, f"{type(exc).__name__}: {exc}"
            hw = replication.get(tp)
            if hw is not None:
                plog.high_watermark = max(plog.log_start_offset, min(hw, plog.log_end_offset))
            return path, plog, r, None

        done = 0
        with ThreadPoolExecutor(self.recovery_threads_per_dir, thread_name_prefix="log-recovery") as pool:
            for path, plog, r, error in pool.map(load, partition_dirs):
                done += 1
                tp = TopicPartition.parse_dir_name(path.name)
                if plog is None:
                    self.offline_partitions[tp] = error or "unknown"
                    report.offline.append((tp, error or "unknown"))
                else:
                    with self._lock:
                        self.logs[tp] = plog
                        self._dir_of[tp] = d
                    report.add(r, sum(1 for s in plog.segments if s.opened))
                if not clean and (done == total or done % max(1, total // 10) == 0):
                    log.info("%s: recovered %d/%d partitions (%.0f%%)", d.path, done, total, 100 * done / total)
        d.clear_clean_marker()
        # The loaded state becomes the checkpointed state, so a crash right after start-up
        # recovers from here rather than from before the previous run.
        self._write_checkpoints(d)

    # -- partitions -----------------------------------------------------------------------------
    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None) -> PartitionLog:
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
                path.mkdir(exist_ok=True)
            plog, _ = load_partition(
                path, config or self.config_for(tp.topic), log_dir=d.path, recovery_point=0,
                log_start_offset=0, clean=True, schedule_delete=self._schedule_delete,
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
        """Removes a partition: renamed to `<tp>.<uuid>-delete`, deleted in the background."""
        with self._lock:
            plog = self.logs.pop(tp, None)
            d = self._dir_of.pop(tp, None)
            self.offline_partitions.pop(tp, None)
        if plog is None or d is None:
            return
        with plog.lock:
            plog.close_without_flush()
            target = d.path / f"{tp.dir_name}.{random_uuid().replace('-', '')}-delete"
            with io_guard(d.path, f"deleting {plog.dir}"):
                os.replace(plog.dir, target)
        self.scheduler.schedule(lambda: shutil.rmtree(target, ignore_errors=True))
        self._write_checkpoints(d)

    def update_config(self, topic: str, config: LogConfig) -> None:
        for tp, plog in list(self.logs.items()):
            if tp.topic == topic:
                plog.config = config

    # -- background work ------------------------------------------------------------------------
    def start_background(self) -> None:
        iv = self.intervals
        self.scheduler.schedule(self._guarded(self.flush_dirty_logs), iv.flush_check_ms / 1000, iv.flush_check_ms / 1000)
        self.scheduler.schedule(
            self._guarded(self.checkpoint_all), iv.recovery_checkpoint_ms / 1000, iv.recovery_checkpoint_ms / 1000
        )
        self.scheduler.schedule(
            self._guarded(self.run_retention), iv.retention_check_ms / 1000, iv.retention_check_ms / 1000
        )
        self.scheduler.start()

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

    def run_retention(self) -> int:
        deleted = 0

        def retain(plog: PartitionLog) -> None:
            nonlocal deleted
            deleted += plog.delete_old_segments()

        self._each_log(retain)
        return deleted

    def checkpoint_all(self) -> None:
        for d in self.online_dirs:
            try:
                self._write_checkpoints(d)
            except KafkaStorageError as exc:
                self.handle_dir_failure(exc)

    def _write_checkpoints(self, d: LogDir) -> None:
        logs = {tp: plog for tp, plog in list(self.logs.items()) if self._dir_of.get(tp) is d}
        d.recovery_points.write({tp: p.recovery_point for tp, p in logs.items()})
        d.log_start_offsets.write({tp: p.log_start_offset for tp, p in logs.items()})
        d.replication_offsets.write({tp: p.high_watermark for tp, p in logs.items()})

    # -- failures -------------------------------------------------------------------------------
    def handle_dir_failure(self, exc: KafkaStorageError) -> None:
        """The single place an IO error lands: that dir goes offline, the others keep serving."""
        d = next((d for d in self.dirs if str(d.path) == exc.log_dir), None)
        if d is None:
            log.error("storage error outside any known log dir: %s", exc)
            return
        if not d.online:
            return
        self._mark_dir_offline(d, str(exc))

    def _mark_dir_offline(self, d: LogDir, reason: str) -> None:
        d.offline_reason = reason
        log.error("log dir %s is offline: %s", d.path, reason)
        with self._lock:
            doomed = [tp for tp, owner in self._dir_of.items() if owner is d]
            for tp in doomed:
                plog = self.logs.pop(tp)
                self._dir_of.pop(tp)
                self.offline_partitions[tp] = f"log dir {d.path} is offline"
                plog.close_without_flush()
        for fn in self._dir_failure_listeners:
            try:
                fn(str(d.path), reason)
            except Exception:
                log.exception("log dir failure listener failed")

    # -- shutdown -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Flushes everything, snapshots producer state, checkpoints and marks each dir clean."""
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
                d.mark_clean()
            except KafkaStorageError as exc:
                self.handle_dir_failure(exc)
        for d in self.dirs:
            d.close()
        log.info("log manager shut down cleanly")
