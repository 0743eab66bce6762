"""Arrow batches of the segment reader, built from decoded record columns without a Python
object per record.

Record columns (`logkeel.records.columns`) arrive as Arrow-layout buffers and are wrapped as
they are; the batch's own fields (where it lives, its header) are one value per batch, derived
from all headers of the chunk at once and spread over the records with a ``take`` on the
per-record batch index (or built directly when the whole chunk shares one value).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from itertools import chain
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from logkeel.records.batch import BatchHeader, CompressionType
from logkeel.records.columns import BinaryColumn, ColumnBuilder, HeaderColumns, RecordColumns
from logkeel.spark.segment_scan import SegmentFile

COMPRESSION_NAMES = {c.value: c.name.lower() for c in CompressionType}
# The names by the attributes' 3 codec bits (5-7 are refused before a batch gets here).
_CODEC_NAMES = pa.array([COMPRESSION_NAMES.get(i) for i in range(8)], pa.string())


class RecordChunk:
    """Valid batches decoded into one Arrow batch to be.

    Per batch only its header and position are kept (two list appends): the batch columns are
    derived from all headers at once when the Arrow batch is built, so a chunk of many small
    batches costs little Python per batch.
    """

    def __init__(self, schema: pa.Schema, builder: ColumnBuilder) -> None:
        self.schema = schema
        self.builder = builder
        self._reset()

    def _reset(self) -> None:
        self.headers: list[BatchHeader] = []
        self.positions: list[int] = []
        self.segments: list[tuple[SegmentFile, int]] = []  # each segment and its first batch

    @property
    def rows(self) -> int:
        return self.builder.rows

    @property
    def nbytes(self) -> int:
        return self.builder.nbytes

    def add(
        self, segment: SegmentFile, position: int, data: bytes | memoryview, header: BatchHeader
    ) -> None:
        """The records of the batch ``data``, whose ``header`` a scan has parsed and checked
        (CRC included); InvalidBatchError, and nothing added, when they do not decode."""
        self.builder.add(data, 0, header)
        if not self.segments or self.segments[-1][0] is not segment:
            self.segments.append((segment, len(self.headers)))
        self.headers.append(header)
        self.positions.append(position)

    def take(self) -> pa.RecordBatch:
        batch = record_batch(self.schema, self.builder.take(), self._batch_columns())
        self._reset()
        return batch

    def _batch_columns(self) -> dict[str, pa.Array]:
        """The columns that hold one value per batch, one entry per batch."""
        n = len(self.headers)
        runs = [
            (segment, end - first)
            for (segment, first), end in zip(
                self.segments, [first for _, first in self.segments[1:]] + [n], strict=True
            )
        ]
        fields = list(zip(*self.headers, strict=True)) if n else [()] * len(BatchHeader._fields)
        header = dict(zip(BatchHeader._fields, fields, strict=True))
        attributes = pa.array(header["attributes"], pa.int32())
        base_offset = pa.array(header["base_offset"], pa.int64())

        def per_segment(value: Callable[[SegmentFile], Any], type_: pa.DataType) -> pa.Array:
            return pa.array(
                list(chain.from_iterable([value(seg)] * count for seg, count in runs)), type_
            )

        def flag(mask: int) -> pa.Array:
            return pc.not_equal(pc.bit_wise_and(attributes, mask), 0)

        return {
            "topic": per_segment(lambda s: s.topic, pa.string()),
            "partition": per_segment(lambda s: s.partition, pa.int32()),
            "logDir": per_segment(lambda s: s.log_dir, pa.string()),
            "segment": per_segment(lambda s: s.path, pa.string()),
            "timestampType": pc.bit_wise_and(pc.shift_right(attributes, 3), 1),
            "position": pa.array(self.positions, pa.int64()),
            "baseOffset": base_offset,
            "lastOffset": pc.add_checked(
                base_offset, pa.array(header["last_offset_delta"], pa.int64())
            ),
            "leaderEpoch": pa.array(header["partition_leader_epoch"], pa.int32()),
            "producerId": pa.array(header["producer_id"], pa.int64()),
            "producerEpoch": pa.array(header["producer_epoch"], pa.int32()),
            "baseSequence": pa.array(header["base_sequence"], pa.int32()),
            "isTransactional": flag(0x10),
            "isControl": flag(0x20),
            "compression": _CODEC_NAMES.take(pc.bit_wise_and(attributes, 0x07)),
            "crcValid": pa.repeat(True, n),
            "corrupt": pa.repeat(False, n),
        }


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


def _spread(values: pa.Array, type_: pa.DataType, index: pa.Array) -> pa.Array:
    """One value per batch, spread over the records of each (``index``: the batch of each)."""
    values = values.cast(type_)
    n = len(index)
    if len(values) == 0 or pc.count_distinct(values, mode="all").as_py() > 1:
        return values.take(index)
    # The same value for every batch of the chunk (most columns, most of the time): built
    # directly, which is 2-5x cheaper than a take.
    first = values[0].as_py()
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
    schema: pa.Schema, cols: RecordColumns, per_batch: dict[str, pa.Array]
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
