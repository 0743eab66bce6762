"""Real log dirs for the Spark tests, written by logkeel's own storage engine, then damaged the
way disks and operators damage them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from logkeel.records.builder import build_batch
from logkeel.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from logkeel.storage.engine.file_records import FileRecords
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

RECORDS_PER_BATCH = 3
BASE_TIMESTAMP = 1_700_000_000_000


def record(offset: int) -> tuple[int, bytes, bytes, list[tuple[str, bytes]]]:
    """The record at ``offset`` of every test partition: content derived from its offset."""
    return (
        BASE_TIMESTAMP + offset,
        b"key-%d" % offset,
        b"value-%d-" % offset + b"x" * (offset % 37),
        [("n", str(offset).encode())],
    )


@dataclass
class Written:
    log_dir: Path
    tp: TopicPartition
    end_offset: int

    @property
    def partition_dir(self) -> Path:
        return self.log_dir / self.tp.dir_name

    def segments(self) -> list[Path]:
        return sorted(self.partition_dir.glob("*.log"))


def write_partition(
    log_dir: Path,
    topic: str,
    partition: int,
    batches: int,
    *,
    epochs: list[int] | None = None,
    segment_bytes: int = 2048,
    start_offset: int = 0,
) -> Written:
    """``batches`` batches of RECORDS_PER_BATCH records; batch i in leader epoch ``epochs[i]``."""
    manager = LogManager([log_dir], default_config=LogConfig(segment_bytes=segment_bytes))
    manager.startup(start_background=False)
    try:
        tp = TopicPartition(topic, partition)
        log = manager.get_or_create_log(tp)
        offset = start_offset
        for i in range(batches):
            epoch = epochs[i] if epochs else 0
            log.append_as_leader(
                build_batch([record(offset + j) for j in range(RECORDS_PER_BATCH)]),
                leader_epoch=epoch,
            )
            offset += RECORDS_PER_BATCH
        end = log.log_end_offset
    finally:
        manager.shutdown()
    return Written(log_dir, tp, end)


def batch_positions(segment: Path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of each batch of a segment, as storage sees them."""
    records = FileRecords(segment, segment.parent.parent, read_only=True)
    try:
        return [(b.position, b.header.size, b.header.base_offset) for b in records.batches()]
    finally:
        records.close()


def find_batch(w: Written, offset: int) -> tuple[Path, int, int]:
    """(segment, position, size) of the batch that holds ``offset``."""
    for segment in w.segments():
        for position, size, base in batch_positions(segment):
            if base <= offset < base + RECORDS_PER_BATCH:
                return segment, position, size
    raise LookupError(offset)


def scribble(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def corrupt_batch(w: Written, offset: int) -> tuple[Path, int, int]:
    """Flips bytes in the records of the batch holding ``offset``: its CRC no longer matches."""
    segment, position, size = find_batch(w, offset)
    scribble(segment, position + 70, b"\xde\xad\xbe\xef")
    return segment, position, size


def truncate_at(w: Written, offset: int, cut_into_batch: int = 10) -> None:
    """Cuts the log inside the batch holding ``offset`` (a torn write) and drops later segments."""
    segment, position, _ = find_batch(w, offset)
    with open(segment, "r+b") as f:
        f.truncate(position + cut_into_batch)
    for later in w.segments():
        if later > segment:
            remove_segment(later)


def remove_segment(segment: Path) -> None:
    stem = segment.with_suffix("")
    for suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"):
        p = Path(str(stem) + suffix)
        if p.exists():
            os.unlink(p)


def segment_holding(w: Written, offset: int) -> Path:
    return find_batch(w, offset)[0]


def write_brokers(
    root: Path, brokers: int, partitions: int, batches: int = 6, topic: str = "t"
) -> list[Path]:
    """``brokers`` log dirs, each holding a replica of ``topic``-0..``partitions``-1.

    One template replica is written by the storage engine (several segments, a leader epoch
    checkpoint); the others are copies of its files under their own partition dir names, and
    each dir's checkpoints name every partition. Thousands of partitions in seconds, where a
    LogManager per partition would take minutes.
    """
    template_dir = root / "template"
    w = write_partition(
        template_dir,
        topic,
        0,
        batches,
        epochs=[i // 2 for i in range(batches)],
        segment_bytes=512,
    )
    files = [(p.name, p.read_bytes()) for p in sorted(w.partition_dir.iterdir()) if p.is_file()]
    dirs = []
    for b in range(1, brokers + 1):
        log_dir = root / f"broker{b}"
        log_dir.mkdir(parents=True)
        ends = {}
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            part = log_dir / tp.dir_name
            part.mkdir()
            for name, data in files:
                (part / name).write_bytes(data)
            ends[tp] = w.end_offset
        OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT_FILE).write(
            dict.fromkeys(ends, 0)
        )
        OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT_FILE).write(ends)
        dirs.append(log_dir)
    return dirs
