"""Arrow batches of the segment reader, built from decoded record columns without a Python
object per record.

Record columns (`logkeel.records.columns`) arrive as Arrow-layout buffers and are wrapped as
they are; the batch's own fields (where it lives, its header) are one value per batch, spread
over its records with a ``take`` on the per-record batch index.
"""

from __future__ import annotations

import sys
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from logkeel.records.batch import BatchHeader, CompressionType
from logkeel.records.columns import BinaryColumn, ColumnBuilder, HeaderColumns, RecordColumns
from logkeel.spark.segment_scan import SegmentFile

COMPRESSION_NAMES = {c.value: c.name.lower() for c in CompressionType}
# Columns of a valid record that are the same for every record of its batch.
_PER_BATCH = (
    "topic",
    "partition",
    "timestampType",
    "logDir",
    "segment",
    "position",
    "baseOffset",
    "lastOffset",
    "leaderEpoch",
    "producerId",
    "producerEpoch",
    "baseSequence",
    "isTransactional",
    "isControl",
    "compression",
    "crcValid",
    "corrupt",
)


def batch_fields(segment: SegmentFile, position: int, header: BatchHeader) -> tuple[Any, ...]:
    """The values of ``_PER_BATCH`` for the records of one batch."""
    return (
        segment.topic,
        segment.partition,
        int(header.timestamp_type),
        segment.log_dir,
        segment.path,
        position,
        header.base_offset,
        header.last_offset,
        header.partition_leader_epoch,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.is_transactional,
        header.is_control,
        COMPRESSION_NAMES.get(header.attributes & 0x07),
        True,
        False,
    )


class RecordChunk:
    """Valid batches decoded into one Arrow batch to be."""

    def __init__(self, schema: pa.Schema, builder: ColumnBuilder) -> None:
        self.schema = schema
        self.builder = builder
        self.batches: list[tuple[Any, ...]] = []

    @property
    def rows(self) -> int:
        return self.builder.rows

    @property
    def nbytes(self) -> int:
        return self.builder.nbytes

    def add(self, segment: SegmentFile, position: int, data: bytes | memoryview) -> None:
        """The records of the batch ``data`` (CRC already checked); InvalidBatchError, and
        nothing added, when they do not decode."""
        header = self.builder.add(data)
        self.batches.append(batch_fields(segment, position, header))

    def take(self) -> pa.RecordBatch:
        cols = self.builder.take()
        columns = list(zip(*self.batches, strict=True)) or [()] * len(_PER_BATCH)
        per_batch = dict(zip(_PER_BATCH, columns, strict=True))
        self.batches = []
        return record_batch(self.schema, cols, per_batch)


def _binary(col: BinaryColumn, n: int, type_: pa.DataType) -> pa.Array:
    validity = pa.py_buffer(col.validity) if col.nulls else None
    return pa.Array.from_buffers(
        type_, n, [validity, pa.py_buffer(col.offsets), pa.py_buffer(col.data)], col.nulls
    )


def _int64(buf: bytes, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(buf)])


def _headers(h: HeaderColumns, n: int, type_: pa.ListType) -> pa.Array:
    struct_type = type_.value_type
    entries = pa.StructArray.from_arrays(
        [
            _binary(h.keys, len(h.keys.offsets) // 4 - 1, pa.string()),
            _binary(h.values, len(h.values.offsets) // 4 - 1, pa.binary()),
        ],
        fields=[struct_type.field(i) for i in range(struct_type.num_fields)],
    )
    validity = pa.py_buffer(h.list_validity) if h.list_nulls else None
    return pa.Array.from_buffers(
        type_, n, [validity, pa.py_buffer(h.list_offsets)], h.list_nulls, children=[entries]
    )


def _spread(values: tuple[Any, ...], type_: pa.DataType, index: pa.Array) -> pa.Array:
    """One value per batch, spread over the records of each (``index``: the batch of each)."""
    n = len(index)
    first = values[0] if values else None
    if any(v != first for v in values):
        return pa.array(values, type_).take(index)
    # The same value for every batch of the chunk (most columns, most of the time): built
    # directly, which is 2-5x cheaper than a take.
    if first is None:
        return pa.nulls(n, type_)
    if pa.types.is_boolean(type_):
        bitmap = bytearray((b"\xff" if first else b"\x00") * ((n + 7) // 8))
        if n & 7:
            bitmap[-1] &= (1 << (n & 7)) - 1
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(bitmap)])
    if pa.types.is_integer(type_):
        value = first.to_bytes(type_.bit_width // 8, sys.byteorder, signed=True)
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(value * n)])
    return pa.repeat(pa.scalar(first, type_), n)


def record_batch(
    schema: pa.Schema, cols: RecordColumns, per_batch: dict[str, tuple[Any, ...]]
) -> pa.RecordBatch:
    n = cols.rows
    index = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(cols.batch_index)])
    arrays = []
    for field in schema:
        name, type_ = field.name, field.type
        if name == "key":
            arrays.append(_binary(cols.keys, n, type_))
        elif name == "value":
            arrays.append(_binary(cols.values, n, type_))
        elif name == "offset":
            arrays.append(_int64(cols.offsets, n))
        elif name == "timestamp":
            # Kafka's milliseconds to Spark's microseconds, as batch_from_columns converts.
            arrays.append(pc.multiply(_int64(cols.timestamps, n), 1000).cast(type_))
        elif name == "headers":
            assert cols.headers is not None
            arrays.append(_headers(cols.headers, n, type_))
        elif name in per_batch:
            arrays.append(_spread(per_batch[name], type_, index))
        else:
            arrays.append(pa.nulls(n, type_))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
