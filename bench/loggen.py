"""Writes Kafka-format log dirs fast, for the start-up and recovery benchmarks.

Files are written directly (not through PartitionLog) so that 100,000 segments take seconds
to make: one record batch is built and its base offset patched for every copy (the base
offset is outside the CRC). Indexes follow the broker's rule (an entry every
``index_interval`` bytes, keyed by the batch's last offset), trimmed as after a clean
shutdown. Inactive segments of every partition after the first can be hard links to the first
partition's files (``link=True``): the loader only reads them, and it saves disk and time.
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from logkeel.records.batch import set_base_offset
from logkeel.records.builder import build_batch
from logkeel.storage.engine.producer_snapshot import snapshot_path, write_snapshot
from logkeel.storage.engine.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, file_name
from logkeel.storage.log_dir import CLEAN_SHUTDOWN_FILE, META_PROPERTIES, MetaProperties
from logkeel.storage.topic_partition import TopicPartition

TIMESTAMP = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class PartitionShape:
    segments: int
    segment_bytes: int
    batch_bytes: int = 16 * 1024
    records_per_batch: int = 16
    index_interval: int = 4096


@dataclass(slots=True)
class WrittenPartition:
    log_end: int
    bytes: int
    bases: list[int]
    batch_size: int
    records_per_batch: int


def template_batch(shape: PartitionShape) -> bytes:
    value = max(1, shape.batch_bytes // shape.records_per_batch - 20)
    records = [
        (TIMESTAMP + i, b"key-%d" % i, os.urandom(value), ())
        for i in range(shape.records_per_batch)
    ]
    return build_batch(records)


def write_segment(
    path_dir: Path, base: int, count: int, template: bytes, records: int, interval: int
) -> int:
    """Writes ``count`` batches from offset ``base`` and the segment's indexes; returns bytes."""
    size = len(template)
    buf = bytearray(template * count)
    offsets = bytearray()
    counter = 0
    for i in range(count):
        set_base_offset(buf, base + i * records, i * size)
        if counter > interval:
            offsets += struct.pack(">ii", (i + 1) * records - 1, i * size)
            counter = 0
        counter += size
    (path_dir / file_name(base, LOG_SUFFIX)).write_bytes(buf)
    (path_dir / file_name(base, INDEX_SUFFIX)).write_bytes(offsets)
    # Every batch has the same max timestamp: one time-index entry, at the first batch.
    last_ts = TIMESTAMP + records - 1
    (path_dir / file_name(base, TIME_INDEX_SUFFIX)).write_bytes(
        struct.pack(">qi", last_ts, records - 1)
    )
    return len(buf)


def write_partition(
    directory: Path, shape: PartitionShape, *, link_from: Path | None = None
) -> WrittenPartition:
    """A partition dir of ``shape.segments`` full segments; the last one is the active one."""
    directory.mkdir(parents=True, exist_ok=True)
    template = template_batch(shape)
    per_segment = max(1, shape.segment_bytes // len(template))
    records = shape.records_per_batch
    bases = [i * per_segment * records for i in range(shape.segments)]
    total = 0
    for n, base in enumerate(bases):
        active = n == len(bases) - 1
        if link_from is not None and not active:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                os.link(link_from / file_name(base, suffix), directory / file_name(base, suffix))
            total += per_segment * len(template)
        else:
            total += write_segment(
                directory, base, per_segment, template, records, shape.index_interval
            )
    log_end = bases[-1] + per_segment * records
    write_snapshot(snapshot_path(directory, log_end), [])
    (directory / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    return WrittenPartition(log_end, total, bases, len(template), records)


def write_log_dir(
    log_dir: Path,
    partitions: int,
    shape: PartitionShape,
    *,
    topic: str = "bench",
    link: bool = True,
    clean: bool = True,
) -> dict[TopicPartition, WrittenPartition]:
    """A whole log dir as after a clean shutdown (marker, checkpoints, meta.properties)."""
    if log_dir.exists():
        shutil.rmtree(log_dir)
    log_dir.mkdir(parents=True)
    written: dict[TopicPartition, WrittenPartition] = {}
    first: Path | None = None
    for p in range(partitions):
        tp = TopicPartition(topic, p)
        directory = log_dir / tp.dir_name
        written[tp] = write_partition(directory, shape, link_from=first if link else None)
        first = first or directory
    write_checkpoints(log_dir, {tp: w.log_end for tp, w in written.items()})
    meta = MetaProperties("benchbenchbenchbenchbe", 0, "AAAAAAAAAAAAAAAAAAAAAA")
    (log_dir / META_PROPERTIES).write_bytes(meta.render())
    if clean:
        (log_dir / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    return written


def write_checkpoints(
    log_dir: Path, recovery_points: dict[TopicPartition, int], *, log_start: int = 0
) -> None:
    def text(values: dict[TopicPartition, int]) -> str:
        lines = [f"{tp.topic} {tp.partition} {v}" for tp, v in values.items()]
        return f"0\n{len(lines)}\n" + "".join(line + "\n" for line in lines)

    (log_dir / "recovery-point-offset-checkpoint").write_text(text(recovery_points))
    (log_dir / "replication-offset-checkpoint").write_text(text(recovery_points))
    (log_dir / "log-start-offset-checkpoint").write_text(
        text({tp: log_start for tp in recovery_points})
    )


def drop_page_cache() -> bool:
    """Empties the page cache when allowed (root on Linux), for cold-cache measurements."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False
