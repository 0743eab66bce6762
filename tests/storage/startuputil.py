"""Helpers for the start-up, recovery and corruption tests: write a realistic partition
(idempotent, plain and transactional batches, aborts and commits, many small segments),
fingerprint a loaded log, and load a dir lazily, eagerly or by a from-scratch rebuild."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from logkeel.records.builder import build_batch, build_control_batch
from logkeel.records.control import ControlRecordType
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_dir import CLEAN_SHUTDOWN_FILE, STARTUP_MANIFEST
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

from .logutil import all_records

TP = TopicPartition("t", 0)
CFG = LogConfig(segment_bytes=3000, index_interval_bytes=250, file_delete_delay_ms=0)
BASE_TS = 1_700_000_000_000


def append_workload(plog: PartitionLog, rounds: int, *, start: int = 0) -> None:
    """Per round: an idempotent batch (producer 1), a plain batch, and a transaction of
    producer 2 that is aborted every third round and committed otherwise."""
    for i in range(start, start + rounds):
        ts = BASE_TS + i * 10
        plog.append_as_leader(
            build_batch(
                [(ts, b"k%d" % i, b"idem-%d" % i, ())] * 2,
                producer_id=1,
                producer_epoch=0,
                base_sequence=2 * i,
            ),
            0,
        )
        plog.append_as_leader(build_batch([(ts + 1, b"p%d" % i, b"plain-%d" % i * 3, ())]), 0)
        plog.append_as_leader(
            build_batch(
                [(ts + 2, b"x%d" % i, b"txn-%d" % i, ())],
                producer_id=2,
                producer_epoch=0,
                base_sequence=i,
                is_transactional=True,
            ),
            0,
        )
        kind = ControlRecordType.ABORT if i % 3 == 0 else ControlRecordType.COMMIT
        marker = build_control_batch(
            kind, producer_id=2, producer_epoch=0, coordinator_epoch=0, timestamp=ts + 3
        )
        plog.append_as_leader(marker, 0, origin_is_client=False)


def write_dir(
    path: Path, rounds: int = 40, *, cfg: LogConfig = CFG, shutdown: bool = True
) -> LogManager:
    m = LogManager([path], default_config=cfg)
    m.startup(start_background=False)
    plog = m.get_or_create_log(TP)
    append_workload(plog, rounds)
    plog.high_watermark = plog.log_end_offset
    if shutdown:
        m.shutdown()
    return m


def crash(m: LogManager) -> None:
    """What kill -9 leaves: files as written, no flush, no marker, locks released."""
    for plog in m.logs.values():
        plog.close_without_flush()
    for d in m.dirs:
        d.close()


def load(
    path: Path, *, validation: str = "lazy", cfg: LogConfig = CFG, force_recovery: bool = False
) -> LogManager:
    m = LogManager(
        [path], default_config=cfg, startup_validation=validation, validation_rate_bytes_per_sec=0
    )
    m.startup(start_background=False, force_recovery=force_recovery)
    return m


def rebuild_from_scratch(path: Path, cfg: LogConfig = CFG) -> LogManager:
    """The reference: every index, snapshot and checkpoint thrown away, the log rescanned."""
    for part in path.iterdir():
        if part.is_dir():
            for f in part.iterdir():
                if f.suffix in (".index", ".timeindex", ".txnindex", ".snapshot"):
                    f.unlink()
    for name in ("recovery-point-offset-checkpoint", CLEAN_SHUTDOWN_FILE, STARTUP_MANIFEST):
        (path / name).unlink(missing_ok=True)
    return load(path, cfg=cfg)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def fingerprint(
    plog: PartitionLog, *, indexes: bool = True, empty_last_segment: bool = True
) -> dict[str, object]:
    """Everything that must agree between two loads of the same data. Without
    ``empty_last_segment``, an empty last segment is left out of the bases: damage that cuts
    the active segment back to its base leaves it empty after a lazy start (as Kafka's
    truncation keeps it) while eager validation's cut drops it; the data, ends and offsets
    agree either way."""
    state = plog.producer_state
    producers = {
        pid: (
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.current_txn_first_offset,
            e.coordinator_epoch,
        )
        for pid, e in state.active_producers.items()
    }
    out: dict[str, object] = {
        "start": plog.log_start_offset,
        "end": plog.log_end_offset,
        "records": [(r.offset, r.key, r.value) for r in all_records(plog)],
        "producers": producers,
        "first_unstable": state.first_unstable_offset(),
        "epochs": plog.leader_epochs.entries,
        "bases": [
            s.base_offset
            for i, s in enumerate(plog.segments)
            if empty_last_segment or s.size or i < len(plog.segments) - 1
        ],
        "aborted": [
            tuple(t) for t in plog.collect_aborted_txns(plog.log_start_offset, plog.log_end_offset)
        ],
    }
    if indexes:
        out["indexes"] = [
            (
                s.base_offset,
                s.size,
                list(s.offset_index.iter_entries()),
                list(s.time_index.iter_entries()),
                s.txn_index.all_aborted_txns(),
            )
            for s in plog.segments
        ]
    return out


def settle(m: LogManager) -> None:
    """Validates everything lazily pending and applies what validation cut."""
    m.validate_all()


def segment_files(path: Path, suffix: str) -> list[Path]:
    return sorted(p for p in (path / TP.dir_name).iterdir() if p.name.endswith(suffix))


def scribble(path: Path, position: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, position)
    finally:
        os.close(fd)
