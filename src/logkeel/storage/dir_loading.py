"""Loading the partitions of one log dir, at start-up and when an offline dir comes back.

A dir is clean or not as a whole (its clean-shutdown marker); an unclean one's recovery is
planned first, for the progress report. Partitions load on the dir's recovery threads and what
recovery wrote is made durable before anything serves it. One partition that cannot load is
reported offline alone; a device fault fails the whole dir.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.partition_dir import recovery_plan
from logkeel.storage.engine.validation import SegmentValidator
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.log_dir import META_PROPERTIES, LogDir, MetaProperties, MetaPropertiesError
from logkeel.storage.recovery.durability import PendingSync, sync_all
from logkeel.storage.recovery.load_report import LoadReport, RecoveryProgress, StartupReport
from logkeel.storage.recovery.loader import load_partition
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["DirLoader", "find_cluster_id"]

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]


def find_cluster_id(dirs: list[LogDir]) -> str | None:
    """The cluster id the first readable ``meta.properties`` among ``dirs`` holds."""
    for d in dirs:
        try:
            return MetaProperties.parse((d.path / META_PROPERTIES).read_text()).cluster_id
        except (OSError, MetaPropertiesError, UnicodeDecodeError):
            continue
    return None


class DirLoader:
    """Loads dirs with the broker's start-up settings; several dirs may load at once, each
    adding to one ``StartupReport`` under ``report_lock``. Each partition is handed over as it
    is settled: ``serve(d, tp, log)``, or ``set_offline(tp, reason)`` when it cannot load."""

    def __init__(
        self,
        *,
        config_for: Callable[[str], LogConfig],
        threads: int,
        validation: str,
        validator: SegmentValidator,
        sync_method: str,
        schedule_delete: Callable[[Callable[[], None], float], None],
        report_lock: threading.Lock,
        serve: Callable[[LogDir, TopicPartition, PartitionLog], None],
        set_offline: Callable[[TopicPartition, str], None],
    ) -> None:
        self._config_for = config_for
        self._threads = threads
        self._validation = validation
        self._validator = validator
        self._sync_method = sync_method
        self._schedule_delete = schedule_delete
        self._report_lock = report_lock
        self._serve = serve
        self._set_offline = set_offline

    def load(
        self, d: LogDir, report: StartupReport, force_recovery: bool = False
    ) -> tuple[Offsets, Offsets, Offsets]:
        """Loads every partition of ``d``; returns the recovery points, log start offsets and
        high watermarks its checkpoints held. Raises ``KafkaStorageError`` for a device fault."""
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
                    self._config_for(tp.topic),
                    log_dir=d.path,
                    recovery_point=recovery_points.get(tp),
                    log_start_offset=start_offsets.get(tp),
                    clean=clean,
                    schedule_delete=self._schedule_delete,
                    validation=self._validation,
                    validator=self._validator,
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
            except Exception as exc:
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

        with ThreadPoolExecutor(self._threads, thread_name_prefix="log-recovery") as pool:
            results = list(pool.map(load, partition_dirs))
        # What recovery wrote is durable before anything serves it or a checkpoint claims it.
        sync_errors = sync_all(syncs.items(), d.path, self._sync_method)
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
                self._set_offline(tp, error or "unknown")
                with self._report_lock:
                    report.offline.append((tp, error or "unknown"))
            else:
                self._serve(d, tp, plog)
                with self._report_lock:
                    report.add(r)
        if progress is not None:
            with self._report_lock:
                report.progress.extend(progress.lines)
        return recovery_points, start_offsets, replication
