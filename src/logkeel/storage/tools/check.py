"""A read-only fsck of log dirs: `logkeel log check`.

Everything is opened read-only and nothing is repaired, so it is safe on the dirs of a running
or crashed broker (a live broker's active segments may show a partial tail). It checks:

- every batch of every segment (structure, CRC-32C, offsets rising and below the next
  segment's base offset) and that nothing follows the last valid batch;
- the records of every batch (decompressed, their framing and count), as a produce is checked;
- every `.index`, `.timeindex` and `.txnindex` against the batches (the same rules the
  loader's validation uses, see logkeel.storage.engine.validation), and missing indexes;
- every producer snapshot (format and CRC) and the leader-epoch checkpoint;
- the dir's `meta.properties` and checkpoint files, and leftovers of interrupted operations.

Each problem names its file, the offset or position concerned, and what is wrong.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from logkeel.records.validator import records_problem
from logkeel.records.walk import BatchWindow, complete_batches
from logkeel.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)
from logkeel.storage.engine.offset_index import OffsetIndex
from logkeel.storage.engine.producer_snapshot import parse_snapshot_offset, read_snapshot
from logkeel.storage.engine.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    file_name,
    segment_bases,
)
from logkeel.storage.engine.segment_check import (
    offset_index_problem,
    scan_segment,
    time_index_problem,
    txn_index_problem,
)
from logkeel.storage.engine.time_index import TimeIndex
from logkeel.storage.engine.txn_index import TransactionIndex
from logkeel.storage.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptSnapshotError,
    KafkaStorageError,
)
from logkeel.storage.log_dir import (
    CLEAN_SHUTDOWN_FILE,
    META_PROPERTIES,
    MetaProperties,
    MetaPropertiesError,
    list_partition_dirs,
)
from logkeel.storage.topic_partition import TopicPartition

# index.interval.bytes decides where a rebuild would put offset-index entries; unknown to an
# offline check, so by default an index is checked for correct entries but not completeness.
_UNKNOWN_INTERVAL = 1 << 62


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    what: str
    offset: int | None = None
    position: int | None = None
    severity: str = "error"  # "error": damage; "warning": expected after a crash, repaired on load


@dataclass(slots=True)
class CheckReport:
    dirs: int = 0
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    bytes_scanned: int = 0
    problems: list[Problem] = field(default_factory=list)
    clean: bool = True
    elapsed_ms: float = 0.0

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def healthy(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, object]:
        return {
            "healthy": self.healthy,
            "dirs": self.dirs,
            "partitions": self.partitions,
            "segments": self.segments,
            "batches": self.batches,
            "bytes_scanned": self.bytes_scanned,
            "clean": self.clean,
            "problems": [asdict(p) for p in self.problems],
            "elapsed_ms": round(self.elapsed_ms, 3),
        }


Progress = Callable[[int], None]


def log_bytes(dirs: Iterable[Path]) -> int:
    """Total size of the `.log` files (what a check reads), for a progress bar."""
    total = 0
    for d in dirs:
        for part in list_partition_dirs(d):
            for name in os.listdir(part):
                if name.endswith(LOG_SUFFIX):
                    total += os.stat(part / name).st_size
    return total


def check_dirs(
    dirs: Iterable[Path],
    *,
    index_interval_bytes: int | None = None,
    progress: Progress | None = None,
) -> CheckReport:
    started = time.monotonic()
    report = CheckReport()
    for d in dirs:
        report.dirs += 1
        _check_log_dir(Path(d), report, index_interval_bytes or _UNKNOWN_INTERVAL, progress)
    report.elapsed_ms = (time.monotonic() - started) * 1000
    return report


def _check_log_dir(d: Path, report: CheckReport, interval: int, progress: Progress | None) -> None:
    if not d.is_dir():
        report.problems.append(Problem(str(d), "not a directory"))
        return
    meta = d / META_PROPERTIES
    if meta.exists():
        try:
            MetaProperties.parse(meta.read_text())
        except (MetaPropertiesError, UnicodeDecodeError) as exc:
            report.problems.append(Problem(str(meta), f"unreadable: {exc}"))
    else:
        report.problems.append(Problem(str(meta), "missing", severity="warning"))
    if not (d / CLEAN_SHUTDOWN_FILE).exists():
        report.clean = False
        report.problems.append(
            Problem(
                str(d),
                "no clean-shutdown marker: data after the recovery points has not "
                "been recovered yet",
                severity="warning",
            )
        )
    recovery_points: dict[TopicPartition, int] = {}
    for name in (
        RECOVERY_POINT_CHECKPOINT_FILE,
        LOG_START_OFFSET_CHECKPOINT_FILE,
        REPLICATION_OFFSET_CHECKPOINT_FILE,
    ):
        path = d / name
        if not path.exists():
            continue
        try:
            values = OffsetCheckpointFile(path, d).read()
        except CorruptCheckpointError as exc:
            report.problems.append(Problem(str(path), str(exc)))
            continue
        if name == RECOVERY_POINT_CHECKPOINT_FILE:
            recovery_points = values
    ends: dict[TopicPartition, int] = {}
    for part in list_partition_dirs(d):
        report.partitions += 1
        tp = TopicPartition.parse_dir_name(part.name)
        try:
            ends[tp] = _check_partition(part, report, interval, progress)
        except (OSError, KafkaStorageError) as exc:
            # An unreadable file is a finding too; the check goes on with the next partition.
            report.problems.append(Problem(str(part), f"cannot be read: {exc}"))
    for tp, point in recovery_points.items():
        end = ends.get(tp)
        if end is not None and point > end:
            report.problems.append(
                Problem(
                    str(d / RECOVERY_POINT_CHECKPOINT_FILE),
                    f"recovery point {point} of {tp} is past its log end {end}",
                    offset=point,
                )
            )


def _check_partition(
    part: Path, report: CheckReport, interval: int, progress: Progress | None
) -> int:
    names = sorted(os.listdir(part))
    bases = segment_bases(names)
    present = set(names)
    for n in names:
        if n.endswith((SWAP_SUFFIX, CLEANED_SUFFIX, DELETED_SUFFIX)) or n.endswith(".tmp"):
            report.problems.append(
                Problem(str(part / n), "leftover of an interrupted operation", severity="warning")
            )
        elif (
            n[:20].isdigit()
            and n.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))
            and int(n[:20]) not in bases
        ):
            report.problems.append(
                Problem(str(part / n), "index of a segment whose log file is missing")
            )
    log_end = bases[0] if bases else 0
    for i, base in enumerate(bases):
        upper = bases[i + 1] if i + 1 < len(bases) else None
        active = upper is None
        report.segments += 1
        log_end = _check_segment(part, base, upper, active, present, report, interval, progress)
    for n in names:
        if n.endswith(".snapshot"):
            offset = parse_snapshot_offset(n)
            if offset is None:
                report.problems.append(Problem(str(part / n), "snapshot file name holds no offset"))
                continue
            try:
                read_snapshot(part / n)
            except CorruptSnapshotError as exc:
                report.problems.append(Problem(str(part / n), str(exc), offset=offset))
                continue
            if offset > log_end:
                report.problems.append(
                    Problem(
                        str(part / n),
                        f"snapshot is past the log end {log_end}",
                        offset=offset,
                        severity="warning",
                    )
                )
    epochs = part / LEADER_EPOCH_CHECKPOINT_FILE
    if epochs.exists():
        try:
            entries = LeaderEpochCheckpointFile(epochs, part.parent).read()
            for a, b in zip(entries, entries[1:], strict=False):
                if b.epoch <= a.epoch or b.start_offset <= a.start_offset:
                    report.problems.append(Problem(str(epochs), f"entry {b} does not follow {a}"))
                    break
        except CorruptCheckpointError as exc:
            report.problems.append(Problem(str(epochs), str(exc)))
    return log_end


def _record_problems(fd: int, valid_end: int, path: Path) -> list[Problem]:
    """Batches whose framing and CRC hold but whose records do not decode (a payload that does
    not decompress, broken record framing, a wrong record count): written by a broker that did
    not validate what clients sent. A reader of such a batch fails; the rest of the log serves."""
    window = BatchWindow(pread=lambda pos, n: os.pread(fd, n, pos), size=valid_end)
    problems = []
    for pos, header in complete_batches(window):
        problem = records_problem(window.bytes_of(pos, header.size), 0, header)
        if problem is not None:
            problems.append(
                Problem(
                    str(path),
                    f"records of the batch at offsets {header.base_offset}..{header.last_offset} "
                    f"do not decode: {problem}",
                    offset=header.base_offset,
                    position=pos,
                )
            )
    return problems


def _check_segment(
    part: Path,
    base: int,
    upper: int | None,
    active: bool,
    present: set[str],
    report: CheckReport,
    interval: int,
    progress: Progress | None,
) -> int:
    path = part / file_name(base, LOG_SUFFIX)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        scan = scan_segment(
            fd,
            size,
            base,
            index_interval_bytes=interval,
            upper_bound=upper,
            throttle=progress,
            where=(part.parent, str(path)),
        )
        report.problems += _record_problems(fd, scan.valid_end, path)
    finally:
        os.close(fd)
    report.batches += scan.batches
    report.bytes_scanned += scan.valid_end
    if scan.truncated:
        report.problems.append(
            Problem(
                str(path),
                scan.stop_reason or "invalid data",
                offset=scan.stop_offset if scan.stop_offset is not None else scan.next_offset,
                position=scan.valid_end,
            )
        )
    for suffix, kind in ((INDEX_SUFFIX, "offset"), (TIME_INDEX_SUFFIX, "time")):
        name = file_name(base, suffix)
        if name not in present:
            if scan.batches:
                report.problems.append(
                    Problem(
                        str(part / name), "missing (the loader rebuilds it)", severity="warning"
                    )
                )
            continue
        index = (OffsetIndex if kind == "offset" else TimeIndex)(
            part / name, base, writable=False, log_dir=part.parent
        )
        try:
            index.sanity_check()
            if isinstance(index, OffsetIndex):
                problem = offset_index_problem(scan, list(index.iter_entries()))
            else:
                problem = time_index_problem(scan, list(index.iter_entries()), inactive=not active)
        except (CorruptIndexError, ValueError) as exc:
            problem = str(exc)
        finally:
            index.close_handler()
        if problem:
            report.problems.append(Problem(str(part / name), problem))
    name = file_name(base, TXN_INDEX_SUFFIX)
    if name in present:
        txn = TransactionIndex(part / name, base, log_dir=part.parent)
        try:
            txn.sanity_check()
            problem = txn_index_problem(scan, txn.all_aborted_txns())
        except (CorruptIndexError, ValueError) as exc:
            problem = str(exc)
        if problem:
            report.problems.append(Problem(str(part / name), problem))
    return scan.next_offset
