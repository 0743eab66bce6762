"""All partition logs of a broker across its log dirs (JBOD): which logs serve from which dir.

The manager opens and loads the dirs at start-up (each through ``dir_loading``), places new
partitions, writes each dir's checkpoints, writes the clean-shutdown marker on close, and takes
a failed dir offline without touching the others (``offline_dirs`` brings one back). Its
periodic work (flushes, retention, the cleaner) is ``background_tasks``.
"""

from __future__ import annotations

import functools
import gc
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from logkeel.storage.background_tasks import BackgroundIntervals, BackgroundTasks
from logkeel.storage.descriptors import DescriptorBudget
from logkeel.storage.dir_loading import DirLoader, find_cluster_id
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.validation import LAZY, VALIDATION_MODES, SegmentValidator
from logkeel.storage.errors import KafkaStorageError, io_guard
from logkeel.storage.fileio import fsync_dir
from logkeel.storage.log_dir import LogDir, mark_for_deletion, partition_dir_named, random_uuid
from logkeel.storage.offline_dirs import OfflineDirs
from logkeel.storage.recovery.durability import RECOVERY_SYNC_METHODS, SYNCFS
from logkeel.storage.recovery.load_report import StartupReport
from logkeel.storage.recovery.loader import load_partition
from logkeel.storage.recovery.vouch import manifest_entries
from logkeel.storage.replica_moves import UNLIMITED_RATE, ReplicaMoves
from logkeel.storage.scheduler import Scheduler
from logkeel.storage.topic_partition import TopicPartition

# log.startup.validation.rate.bytes.per.sec
DEFAULT_VALIDATION_RATE = 50 * 1024 * 1024

log = logging.getLogger(__name__)

ConfigFor = Callable[[str], LogConfig]


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
        alter_log_dirs_rate: int = UNLIMITED_RATE,
    ) -> None:
        """``startup_validation`` is log.startup.validation (lazy|eager) and
        ``validation_rate_bytes_per_sec`` log.startup.validation.rate.bytes.per.sec (0: no
        background validation; segments are then validated on first access only);
        ``recovery_sync_method`` is log.recovery.sync.method (see recovery/durability.py);
        ``alter_log_dirs_rate`` is replica.alter.log.dirs.io.max.bytes.per.second."""
        if startup_validation not in VALIDATION_MODES:
            raise ValueError(
                f"log.startup.validation must be one of {VALIDATION_MODES}, not {startup_validation!r}"
            )
        if recovery_sync_method not in RECOVERY_SYNC_METHODS:
            raise ValueError(
                f"log.recovery.sync.method must be one of {RECOVERY_SYNC_METHODS}, "
                f"not {recovery_sync_method!r}"
            )
        self.dirs = [LogDir(p) for p in log_dirs]
        if not self.dirs:
            raise ValueError("at least one log dir is needed (log.dirs)")
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.default_config = default_config or LogConfig()
        self._config_for = config_for
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.offline_partitions: dict[TopicPartition, str] = {}
        self._dir_of: dict[TopicPartition, LogDir] = {}
        self._lock = threading.RLock()
        self.scheduler = Scheduler()
        self._dir_failure_listeners: list[Callable[[str, str], None]] = []
        self._partition_failure_listeners: list[Callable[[TopicPartition, str], None]] = []
        self._log_replaced_listeners: list[Callable[[TopicPartition, PartitionLog], None]] = []
        self.startup_report: StartupReport | None = None
        self.startup_validation = startup_validation
        self._report_lock = threading.Lock()
        self.validator = SegmentValidator(
            validation_rate_bytes_per_sec,
            run_later=lambda fn: self.scheduler.schedule(fn),
            on_dir_failure=self.handle_dir_failure,
        )
        self._loader = DirLoader(
            config_for=self.config_for,
            threads=max(1, recovery_threads_per_dir),
            validation=startup_validation,
            validator=self.validator,
            sync_method=recovery_sync_method,
            schedule_delete=self.schedule_delete,
            report_lock=self._report_lock,
            serve=self._serve,
            set_offline=self._set_offline,
        )
        self.offline_dirs = OfflineDirs(
            self.dirs,
            node_id=node_id,
            cluster_id=lambda: self.cluster_id,
            validation=startup_validation,
            load=lambda d, report: self._load_dir(d, report, force_recovery=True),
            served_again=self._served_again,
        )
        self.background = BackgroundTasks(
            self.logs,
            intervals or BackgroundIntervals(),
            scheduler=self.scheduler,
            on_failure=self.handle_dir_failure,
            checkpoint_all=self.checkpoint_all,
            probe_offline_dirs=self.offline_dirs.probe,
        )
        self.moves = ReplicaMoves(self, alter_log_dirs_rate)
        # Set by the broker (descriptors.configure): a new replica past it is refused.
        self.descriptors: DescriptorBudget | None = None

    # -- configuration --------------------------------------------------------------------------
    def config_for(self, topic: str) -> LogConfig:
        return self._config_for(topic) if self._config_for else self.default_config

    def schedule_delete(self, fn: Callable[[], None], delay_s: float) -> None:
        self.scheduler.schedule(fn, delay_s)

    def add_dir_failure_listener(self, fn: Callable[[str, str], None]) -> None:
        self._dir_failure_listeners.append(fn)

    def add_log_replaced_listener(self, fn: Callable[[TopicPartition, PartitionLog], None]) -> None:
        """``fn(tp, new_log)`` when a replica moved to another dir serves from its new log;
        called with the old log's lock held, so no append lands in between."""
        self._log_replaced_listeners.append(fn)

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
        """Opens every log dir and loads its partitions (see dir_loading); one bad partition
        goes offline alone, one failed dir goes offline alone.

        ``force_recovery`` treats every dir as shut down uncleanly (``logkeel log recover``).
        """
        started = time.monotonic()
        report = StartupReport(validation=self.startup_validation)
        self.cluster_id = self.cluster_id or find_cluster_id(self.dirs) or random_uuid()
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
            self.moves.resume()
            self.background.start()
            self.validator.start()
        return report

    def _load_dir(self, d: LogDir, report: StartupReport, force_recovery: bool = False) -> None:
        checkpointed = self._loader.load(d, report, force_recovery)
        if d.page_cache_lost:
            with self._lock:
                loaded = [plog for tp, plog in self.logs.items() if self._dir_of.get(tp) is d]
            for plog in loaded:
                plog.unflushed_lost = True
            log.warning(
                "%s: %d partition logs may have lost unflushed records (the machine went down)",
                d.path, len(loaded),
            )  # fmt: skip
        d.clear_clean_marker()
        # The loaded state becomes the checkpointed state, so a crash right after start-up
        # recovers from here rather than from before the previous run.
        self._write_checkpoints(d, unchanged_from=checkpointed)

    def _serve(self, d: LogDir, tp: TopicPartition, plog: PartitionLog) -> None:
        with self._lock:
            self.logs[tp] = plog
            self._dir_of[tp] = d

    def replace_log(self, tp: TopicPartition, plog: PartitionLog, d: LogDir) -> None:
        """``plog`` in ``d`` serves ``tp`` from now on (a replica moved between dirs)."""
        with self._lock:
            self.logs[tp] = plog
            self._dir_of[tp] = d
        self.validator.forget(tp)
        for fn in self._log_replaced_listeners:
            fn(tp, plog)

    def after_move(self, *dirs: LogDir) -> None:
        """The checkpoints of the dirs a replica moved between follow it."""
        for d in dirs:
            if not d.online:
                continue
            try:
                self._write_checkpoints(d)
            except KafkaStorageError as exc:
                self.handle_dir_failure(exc)

    def _set_offline(self, tp: TopicPartition, reason: str) -> None:
        with self._lock:
            self.offline_partitions[tp] = reason

    def validate_all(self) -> None:
        """Validates every segment still awaiting validation, now (tests, offline tools)."""
        self.validator.validate_all()

    # -- partitions -----------------------------------------------------------------------------
    def get_log(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get(tp)

    def get_or_create_log(
        self, tp: TopicPartition, config: LogConfig | None = None
    ) -> PartitionLog:
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        result = self.create_logs([tp], lambda _tp: config)[tp]
        if isinstance(result, KafkaStorageError):
            raise result
        return result

    def create_logs(
        self,
        tps: Iterable[TopicPartition],
        config_for: Callable[[TopicPartition], LogConfig | None] = lambda _tp: None,
    ) -> dict[TopicPartition, PartitionLog | KafkaStorageError]:
        """Each of ``tps``'s log, created empty where it has none: the existing log, the new
        one, or why it cannot be (offline, no descriptor room, the dir failed; the caller
        takes a failed dir offline). ``config_for``: a log's config (None: the topic's).

        A topic's new logs come in thousands (one metadata change creates them all): each dir
        that got new logs is synced once for all of them, before any of them is served, so a
        crash after a partition took writes cannot lose its dir's entry (one fsync per dir
        and batch, 0.4-12 ms each on the shared development VM). They are made one after the
        other: creating a log is a few file creates, CPU-bound here (2.6 ms of CPU a log),
        and 8 threads took 28% more CPU for no faster creation under load."""
        out: dict[TopicPartition, PartitionLog | KafkaStorageError] = {}
        with self._lock:
            placed: list[tuple[TopicPartition, LogDir]] = []
            todo = list(dict.fromkeys(tps))
            counts = self._dir_counts()
            for tp in todo:
                existing = self.logs.get(tp)
                if existing is not None:
                    out[tp] = existing
                    continue
                if tp in self.offline_partitions:
                    out[tp] = KafkaStorageError(
                        "", f"partition {tp} is offline: {self.offline_partitions[tp]}"
                    )
                    continue
                refusal = self.descriptors and self.descriptors.refusal(
                    len(self.logs) + len(placed) + 1
                )
                if refusal:
                    log.error("cannot create a log for %s: %s", tp, refusal)
                    # No dir's fault: log_dir "" takes only this partition offline.
                    out[tp] = KafkaStorageError("", f"cannot create a log for {tp}: {refusal}")
                    continue
                try:
                    d = self._choose_dir(counts)
                except KafkaStorageError as exc:
                    out[tp] = exc
                    continue
                counts[id(d)] = counts.get(id(d), 0) + 1
                placed.append((tp, d))
            if not placed:
                return out
            made = [self._create_one(tp, d, config_for(tp)) for tp, d in placed]
            dirs = {
                id(d): d
                for (_tp, d), plog in zip(placed, made, strict=True)
                if isinstance(plog, PartitionLog)
            }
            synced = {key: self._sync_dir(d) for key, d in dirs.items()}
            created: list[tuple[TopicPartition, LogDir]] = []
            for (tp, d), plog in zip(placed, made, strict=True):
                if isinstance(plog, KafkaStorageError):
                    out[tp] = plog
                    continue
                failed = synced[id(d)]
                if failed is not None:
                    plog.close_without_flush()
                    out[tp] = failed
                    continue
                self.logs[tp] = plog
                self._dir_of[tp] = d
                out[tp] = plog
                created.append((tp, d))
            if len(created) == 1:
                log.info("created log for %s in %s", *created[0])
            elif created:
                log.info(
                    "created %d logs (%s ... %s) in %s",
                    len(created),
                    created[0][0],
                    created[-1][0],
                    ", ".join(sorted({str(d.path) for _tp, d in created})),
                )
            return out

    def _create_one(
        self, tp: TopicPartition, d: LogDir, config: LogConfig | None
    ) -> PartitionLog | KafkaStorageError:
        path = d.path / tp.dir_name
        try:
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
                schedule_delete=self.schedule_delete,
                # Everything in a new log is written by this process: nothing to validate,
                # and a validator would CRC-scan the whole active segment on the first read.
                trusted=True,
            )
        except KafkaStorageError as exc:
            return exc
        return plog

    def _sync_dir(self, d: LogDir) -> KafkaStorageError | None:
        try:
            with io_guard(d.path, f"syncing {d.path} after creating logs"):
                fsync_dir(d.path)
        except KafkaStorageError as exc:
            return exc
        return None

    def _dir_counts(self) -> dict[int, int]:
        """How many logs each online dir holds (when there is more than one to choose from)."""
        online = self.online_dirs
        if len(online) <= 1:
            return {}
        counts = {id(d): 0 for d in online}
        for d in self._dir_of.values():
            if id(d) in counts:
                counts[id(d)] += 1
        return counts

    def _choose_dir(self, counts: dict[int, int]) -> LogDir:
        """The online dir holding the fewest logs (``counts``, from ``_dir_counts``: counting
        every log's dir for each new log made creating a topic of N partitions O(N^2))."""
        online = self.online_dirs
        if not online:
            raise KafkaStorageError(
                ",".join(str(d.path) for d in self.dirs), "no log dir is online"
            )
        if len(online) == 1:
            return online[0]
        return min(online, key=lambda d: counts.get(id(d), 0))

    def delete_log(self, tp: TopicPartition, *, checkpoint: bool = True) -> None:
        """Removes a partition: its dir in every online log dir (an offline partition's too)
        is renamed to a ``-delete`` name that fits the filesystem and removed in the
        background; a start-up removes any such dir a crash left. Without ``checkpoint`` its
        dir's checkpoints are left to the caller (`checkpoint_all` once after many: a topic
        of 300 partitions deleted wrote them 300 times, 9 s on a loaded broker, its metadata
        thread held up meanwhile)."""
        self.moves.cancel(tp)
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
                self.scheduler.schedule(
                    functools.partial(shutil.rmtree, target, ignore_errors=True)
                )
        if checkpoint and d is not None and d.online:
            self._write_checkpoints(d)

    def update_config(self, topic: str, config: LogConfig) -> None:
        for tp, plog in list(self.logs.items()):
            if tp.topic == topic:
                plog.config = config

    # -- checkpoints ----------------------------------------------------------------------------
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
        self.moves.cancel(tp)
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
        self.moves.cancel_dir(str(d.path))
        for fn in self._dir_failure_listeners:
            try:
                fn(str(d.path), reason)
            except Exception:
                log.exception("log dir failure listener failed")

    def _served_again(self, d: LogDir) -> list[TopicPartition]:
        """The partitions of ``d``, loaded again, that serve once more."""
        with self._lock:
            loaded = sorted(tp for tp, owner in self._dir_of.items() if owner is d)
            for tp in loaded:
                self.offline_partitions.pop(tp, None)
            # Partitions that went offline with the dir but had no log in it: free to be
            # created again (as a new replica that catches up).
            gone = f"log dir {d.path} is offline"
            for tp in [tp for tp, why in self.offline_partitions.items() if why == gone]:
                del self.offline_partitions[tp]
        return loaded

    # -- shutdown -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Flushes everything, snapshots producer state, checkpoints and marks each dir clean."""
        self.moves.close()
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
