"""`spark.read.format("logkeel-segments").load(PATHS)`: records straight from segment files.

No broker is involved: the paths are log dirs (or partition dirs) of any number of brokers, read
read-only, so live, crashed or archived dirs are all fine. Rows have the Kafka connector's
columns plus where the record lives and its batch's metadata (see `schema.segment_schema`).

Corruption is data here, not an error, unless asked (``mode``):

- ``PERMISSIVE`` (default): each damaged stretch becomes one row with ``corrupt = true``:
  ``offset``..``lastOffset`` are the offsets that may be lost (``lastOffset`` null when nothing
  valid follows), ``position``/``corruptBytes`` the bytes, ``corruptReason`` why; the batch
  columns hold what the damaged header claims, when it parses. Reading goes on after it.
  Offsets that are in no file (a missing segment) are such a row with ``corruptBytes = 0``.
- ``DROPMALFORMED``: damaged stretches are skipped silently.
- ``FAILFAST``: the first damaged stretch fails the query, naming file, position and reason.

Options: ``subscribe`` / ``subscribePattern`` / ``assign`` select partitions as in the Kafka
connector (default: all); ``includeHeaders``; ``maxPartitionBytes`` (default 128 MiB) bounds
the segment bytes one Spark task reads, ``minPartitions`` (default: the cores) how many tasks
small inputs are spread over; a segment file is never split. ``decoder``: ``auto`` (default:
the compiled record decoder when it is built, else the pure-Python one), ``native`` (fails when
it is not built) or ``python``; both give the same rows (`logkeel.records.columns`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from logkeel.records.batch import InvalidBatchError
from logkeel.records.columns import column_builder
from logkeel.spark import options as opts
from logkeel.spark.schema import arrow_schema, batch_from_columns, segment_schema
from logkeel.spark.segment_scan import (
    CorruptRange,
    SegmentFile,
    find_partitions,
    list_segments,
    scan_segment,
)
from logkeel.spark.segments_arrow import COMPRESSION_NAMES, RecordChunk

PERMISSIVE = "PERMISSIVE"
DROPMALFORMED = "DROPMALFORMED"
FAILFAST = "FAILFAST"
_MODES = (PERMISSIVE, DROPMALFORMED, FAILFAST)
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
MIN_SPLIT_BYTES = 4 * 1024 * 1024  # below this a task costs more than it reads (openCostInBytes)
# Spark's cost per Arrow batch is high: fed prebuilt batches, it read ~2x more rows/s here with
# 64k-row batches than with 8k ones.
ROWS_PER_ARROW_BATCH = 65536
BYTES_PER_ARROW_BATCH = 64 * 1024 * 1024  # key/value bytes; an Arrow binary column holds < 2 GiB
_DECODERS = ("auto", "native", "python")


class CorruptSegmentError(RuntimeError):
    """FAILFAST met a damaged stretch of a segment file."""


def parse_paths(options: dict[str, str]) -> list[str]:
    raw = options.get("paths")
    paths: list[str] = []
    if raw:
        try:
            loaded = json.loads(raw)
        except json.JSONDecodeError:
            loaded = [raw]
        paths = [str(p) for p in (loaded if isinstance(loaded, list) else [loaded])]
    if options.get("path"):
        paths.insert(0, options["path"])
    if not paths:
        raise opts.OptionError("logkeel-segments needs the log dirs to read: .load(PATHS)")
    return paths


class SegmentPartition(InputPartition):
    """Segment files one Spark task reads, in order."""

    def __init__(self, segments: tuple[SegmentFile, ...]) -> None:
        super().__init__(segments)

    @property
    def segments(self) -> tuple[SegmentFile, ...]:
        segments: tuple[SegmentFile, ...] = self.value
        return segments


class SegmentDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "logkeel-segments"

    def schema(self) -> StructType:
        return segment_schema(opts.get_bool(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return SegmentReader(dict(self.options), schema)


class SegmentReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.paths = parse_paths(options)
        mode = (opts.get(options, "mode", PERMISSIVE) or PERMISSIVE).upper()
        if mode not in _MODES:
            raise opts.OptionError(
                f"option 'mode' must be one of {', '.join(_MODES)}, not {mode!r}"
            )
        self.mode = mode
        self.selection = opts.TopicSelection.parse(options, required=False)
        self.max_partition_bytes = opts.get_int(
            options, "maxPartitionBytes", DEFAULT_MAX_PARTITION_BYTES, minimum=1
        )
        self.min_partitions = opts.get_int(options, "minPartitions", None, minimum=1)
        self.decoder = (opts.get(options, "decoder", "auto") or "auto").lower()
        if self.decoder not in _DECODERS:
            raise opts.OptionError(
                f"option 'decoder' must be one of {', '.join(_DECODERS)}, not {self.decoder!r}"
            )
        column_builder(decoder=self.decoder)  # refuses "native" here when it is not built
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        segments = [
            seg
            for replica in find_partitions(self.paths)
            if self.selection.selects(*replica.topic_partition)
            for seg in list_segments(replica)
        ]
        # As Spark's file sources: small inputs are spread over about as many tasks as there are
        # cores (the planner runs without a SparkContext, so this machine's cores stand in for
        # spark.default.parallelism), large ones cut at maxPartitionBytes.
        wanted = self.min_partitions or os.cpu_count() or 1
        floor = 1 if self.min_partitions else MIN_SPLIT_BYTES
        total = sum(seg.size for seg in segments)
        target = min(
            self.max_partition_bytes or DEFAULT_MAX_PARTITION_BYTES,
            max(floor, -(-total // wanted)),
        )
        return pack_segments(segments, target)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SegmentPartition)
        yield from read_segments(
            partition.segments, arrow_schema(self.schema), self.mode, self.decoder
        )


def pack_segments(segments: list[SegmentFile], max_bytes: int) -> list[InputPartition]:
    """Consecutive segments grouped into tasks of at most ``max_bytes`` (one segment at least)."""
    parts: list[InputPartition] = []
    group: list[SegmentFile] = []
    size = 0
    for seg in segments:
        if group and size + seg.size > max_bytes:
            parts.append(SegmentPartition(tuple(group)))
            group, size = [], 0
        group.append(seg)
        size += seg.size
    if group:
        parts.append(SegmentPartition(tuple(group)))
    return parts


class _CorruptRows:
    """Column lists for the rows of corrupt ranges (one Arrow batch)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.cols: dict[str, list[Any]] = {n: [] for n in names}
        self.rows = 0

    def add_corrupt(self, segment: SegmentFile, item: CorruptRange) -> None:
        h = item.header
        row: dict[str, Any] = {
            "topic": segment.topic,
            "partition": segment.partition,
            "offset": item.first_offset,
            "logDir": segment.log_dir,
            "segment": segment.path,
            "position": item.position,
            "lastOffset": item.last_offset,
            "crcValid": item.crc_valid,
            "corrupt": True,
            "corruptBytes": item.size,
            "corruptReason": item.reason,
        }
        if h is not None:
            # What the damaged header claims; int32/int16 fields are in range by construction.
            row.update(
                baseOffset=h.base_offset,
                leaderEpoch=h.partition_leader_epoch,
                producerId=h.producer_id,
                producerEpoch=h.producer_epoch,
                baseSequence=h.base_sequence,
                isTransactional=h.is_transactional,
                isControl=h.is_control,
                compression=COMPRESSION_NAMES.get(h.attributes & 0x07),
            )
        for name in self.names:
            self.cols[name].append(row.get(name))
        self.rows += 1

    def take(self, schema: pa.Schema) -> pa.RecordBatch:
        batch = batch_from_columns(schema, self.cols)
        self.cols = {n: [] for n in self.names}
        self.rows = 0
        return batch


def describe(segment: SegmentFile, item: CorruptRange) -> str:
    lost = (
        f"offsets {item.first_offset}..{item.last_offset}"
        if item.last_offset is not None
        else f"offsets from {item.first_offset}"
    )
    return (
        f"corrupt data in {segment.path} at position {item.position} ({item.size} bytes, "
        f"{lost}): {item.reason}"
    )


def read_segments(
    segments: tuple[SegmentFile, ...] | list[SegmentFile],
    schema: pa.Schema,
    mode: str,
    decoder: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``schema`` holding the records (and, in PERMISSIVE mode, the corrupt
    ranges) of ``segments``, in file order."""
    records = RecordChunk(schema, column_builder("headers" in schema.names, decoder))
    corrupt = _CorruptRows(schema.names)
    for segment in segments:
        for item in scan_segment(segment, with_data=True):
            if isinstance(item, CorruptRange):
                if records.rows:
                    yield records.take()
                _corrupt(corrupt, segment, item, mode)
                continue
            if corrupt.rows:
                yield corrupt.take(schema)
            assert item.data is not None
            try:
                records.add(segment, item.position, item.data, item.header)
            except InvalidBatchError as exc:
                # The CRC matched, so these are the bytes the producer sent: a writer bug.
                bad = CorruptRange(
                    item.position,
                    item.header.size,
                    item.header.base_offset,
                    item.header.last_offset,
                    f"records of a CRC-valid batch do not decode: {exc}",
                    item.header,
                    True,
                )
                if records.rows:
                    yield records.take()
                _corrupt(corrupt, segment, bad, mode)
                continue
            if records.rows >= ROWS_PER_ARROW_BATCH or records.nbytes >= BYTES_PER_ARROW_BATCH:
                yield records.take()
    if records.rows:
        yield records.take()
    if corrupt.rows:
        yield corrupt.take(schema)


def _corrupt(cols: _CorruptRows, segment: SegmentFile, item: CorruptRange, mode: str) -> None:
    if mode == FAILFAST:
        raise CorruptSegmentError(describe(segment, item) + " (mode FAILFAST)")
    if mode == PERMISSIVE:
        cols.add_corrupt(segment, item)
