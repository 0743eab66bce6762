"""Records of many batches decoded into column buffers laid out as Arrow lays them out.

Readers that hand records on in bulk (the Spark segment reader) need columns, not one Python
object per record: ~3 us of the pure-Python decoder's time per 100-byte record goes to
building and then unpacking those objects. ``column_builder()`` returns the one interface, with
two implementations that give byte-identical buffers:

- the compiled ``logkeel.records._columns`` (``native/columns.c``, built at install when a C
  compiler and Python's headers are present), which decodes straight into the buffers;
- ``PyColumnBuilder``, the reference, on top of ``record.decode_records``, used when the
  extension is not built.

Both accept exactly the batches ``decode_records`` accepts and raise its ``InvalidBatchError``
(same words) otherwise; a batch is added whole or not at all. One deliberate addition: a record
whose offset or timestamp leaves int64 is refused too, as no reader could represent it.

Nothing here needs pyarrow: buffers are ``bytes`` (native byte order, which is Arrow's on every
platform logkeel runs on), and the Spark side wraps them without copying.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from .batch import HEADER_SIZE, BatchHeader, InvalidBatchError
from .record import Record, decode_records, decode_section, read_header, records_section

try:
    from . import _columns as _native  # type: ignore[attr-defined]  # a C extension, no stubs
except ImportError:  # not built: no compiler or headers at install
    _native = None

Buffer = bytes | bytearray | memoryview
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_ATTR_COMPRESSION_MASK = 0x07
_ATTR_LOG_APPEND_TIME = 0x08


class BinaryColumn(NamedTuple):
    """An Arrow binary (or string) column: ``offsets`` int32 × (n + 1), ``data``, and the
    validity bitmap (bit i set when value i is not null; unused bits clear)."""

    offsets: bytes
    data: bytes
    validity: bytes
    nulls: int


class HeaderColumns(NamedTuple):
    """Record headers as an Arrow list<struct<key string, value binary>>: ``list_offsets``
    int32 × (rows + 1) index the header entries; a record without headers is a null list."""

    list_offsets: bytes
    list_validity: bytes
    list_nulls: int
    keys: BinaryColumn  # UTF-8, never null
    values: BinaryColumn


class RecordColumns(NamedTuple):
    rows: int
    batch_index: bytes  # int32 per record: which ``add`` (since the last ``take``) it came from
    offsets: bytes  # int64 per record
    timestamps: bytes  # int64 epoch milliseconds per record (maxTimestamp under LogAppendTime)
    keys: BinaryColumn
    values: BinaryColumn
    headers: HeaderColumns | None  # when the builder was asked for them


class ColumnBuilder(Protocol):
    @property
    def rows(self) -> int: ...

    @property
    def nbytes(self) -> int:
        """Key, value and header bytes held: readers ``take`` before this grows past what one
        Arrow column may hold (2 GiB)."""
        ...

    def add(
        self, buf: bytes | memoryview, pos: int = 0, header: BatchHeader | None = None
    ) -> BatchHeader:
        """Decodes the batch at ``pos`` of ``buf`` (its CRC is not checked: the caller has);
        its records become rows. InvalidBatchError, and nothing added, when they do not decode.
        ``header``: the batch's header, when the caller has parsed and validated it already
        (a batch walk has), so that it is not parsed again."""
        ...

    def add_records(self, header: BatchHeader, data: Buffer, start: int, end: int) -> int:
        """Like ``add``, for the records section of the batch ``header`` heads, already at
        hand (decompressed): ``data[start:end]``. Returns the rows added."""
        ...

    def take(self) -> RecordColumns:
        """The columns of the rows added so far; the builder starts afresh."""
        ...


class RecordScan(NamedTuple):
    """What validating a produced batch needs of its records, without keeping them."""

    min_timestamp: int
    max_timestamp: int
    null_keys: int
    first_null_key: int  # -1 when every key is set


def scan_records(header: BatchHeader, data: Buffer, start: int, end: int) -> RecordScan:
    """The checks of ``ColumnBuilder.add`` on the records section ``data[start:end]`` of the
    batch ``header`` heads, storing nothing: compiled when built, ``decode_section`` otherwise.
    InvalidBatchError (the reference decoder's words) when the records do not decode."""
    attributes = header.attributes
    append_time = header.max_timestamp if attributes & _ATTR_LOG_APPEND_TIME else None
    if _native is not None:
        try:
            return RecordScan(
                *_native.scan_records(
                    data,
                    start,
                    end,
                    header.records_count,
                    header.base_offset,
                    header.base_timestamp,
                    header.last_offset_delta,
                    append_time,
                )
            )
        except _native.DecodeError:
            decode_section(header, data, start, end)
            raise _out_of_range(header) from None
    records = decode_section(header, data, start, end)
    stamps = [r.timestamp for r in records]
    if records and (
        records[-1].offset > INT64_MAX
        or append_time is None
        and (min(stamps) < INT64_MIN or max(stamps) > INT64_MAX)
    ):
        raise _out_of_range(header)
    nulls = [i for i, r in enumerate(records) if r.key is None]
    return RecordScan(
        min(stamps, default=INT64_MAX),
        max(stamps, default=INT64_MIN),
        len(nulls),
        nulls[0] if nulls else -1,
    )


def native_available() -> bool:
    return _native is not None


def column_builder(with_headers: bool = False, decoder: str | None = None) -> ColumnBuilder:
    """A builder of ``decoder`` "native" or "python"; "auto" (or None): native when built."""
    choice = (decoder or "auto").lower()
    if choice not in ("auto", "native", "python"):
        raise ValueError(f"record decoder must be auto, native or python, not {choice!r}")
    if choice == "native" and _native is None:
        raise RuntimeError(
            "the compiled record decoder (logkeel.records._columns) is not built: reinstall "
            "with a C compiler and Python's headers present (scripts/setup), or use the "
            "python decoder"
        )
    if choice == "python" or _native is None:
        return PyColumnBuilder(with_headers)
    return NativeColumnBuilder(with_headers)


def _out_of_range(header: BatchHeader) -> InvalidBatchError:
    return InvalidBatchError(
        f"a record of batch at offset {header.base_offset} has an offset or timestamp beyond int64"
    )


class NativeColumnBuilder:
    __slots__ = ("_builder",)

    def __init__(self, with_headers: bool = False) -> None:
        assert _native is not None
        self._builder = _native.ColumnBuilder(with_headers)

    @property
    def rows(self) -> int:
        return int(self._builder.rows)

    @property
    def nbytes(self) -> int:
        return int(self._builder.nbytes)

    def add(
        self, buf: bytes | memoryview, pos: int = 0, header: BatchHeader | None = None
    ) -> BatchHeader:
        if header is None:
            header = read_header(buf, pos, verify_crc=False)
        if header.attributes & _ATTR_COMPRESSION_MASK:
            data = records_section(buf, header, pos)
            self.add_records(header, data, 0, len(data))
        else:
            self.add_records(header, buf, pos + HEADER_SIZE, pos + header.size)
        return header

    def add_records(self, header: BatchHeader, data: Buffer, start: int, end: int) -> int:
        try:
            added: int = self._builder.add(
                data,
                start,
                end,
                header.records_count,
                header.base_offset,
                header.base_timestamp,
                header.last_offset_delta,
                header.max_timestamp if header.attributes & _ATTR_LOG_APPEND_TIME else None,
            )
            return added
        except _native.DecodeError:
            # The reference decoder words the error; it accepts nothing the compiled one
            # refuses except offsets or timestamps beyond int64.
            decode_section(header, data, start, end)
            raise _out_of_range(header) from None

    def take(self) -> RecordColumns:
        rows, batch_index, offsets, timestamps, keys, values, headers = self._builder.take()
        return RecordColumns(
            rows,
            batch_index,
            offsets,
            timestamps,
            BinaryColumn(*keys),
            BinaryColumn(*values),
            None
            if headers is None
            else HeaderColumns(
                headers[0],
                headers[1],
                headers[2],
                BinaryColumn(*headers[3]),
                BinaryColumn(*headers[4]),
            ),
        )


class PyColumnBuilder:
    """The reference builder: ``decode_records``, then the records' fields into buffers."""

    __slots__ = ("_batch_index", "_batches", "_nbytes", "_records", "with_headers")

    def __init__(self, with_headers: bool = False) -> None:
        self.with_headers = with_headers
        self._records: list[Record] = []
        self._batch_index = array("i")
        self._batches = 0
        self._nbytes = 0

    @property
    def rows(self) -> int:
        return len(self._records)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def add(
        self, buf: bytes | memoryview, pos: int = 0, header: BatchHeader | None = None
    ) -> BatchHeader:
        header, records = decode_records(buf, pos, verify_crc=False)
        self._add(header, records)
        return header

    def add_records(self, header: BatchHeader, data: Buffer, start: int, end: int) -> int:
        records = decode_section(header, data, start, end)
        self._add(header, records)
        return len(records)

    def _add(self, header: BatchHeader, records: list[Record]) -> None:
        # Offsets increase within a batch; timestamps need not.
        if records and (
            records[-1].offset > INT64_MAX
            or not (
                header.attributes & _ATTR_LOG_APPEND_TIME
                or min(r.timestamp for r in records) >= INT64_MIN
                and max(r.timestamp for r in records) <= INT64_MAX
            )
        ):
            raise _out_of_range(header)
        self._batch_index.extend([self._batches] * len(records))
        self._batches += 1
        self._records.extend(records)
        self._nbytes += sum(
            len(r.key or b"")
            + len(r.value or b"")
            + (sum(len(k) + len(v or b"") for k, v in r.headers) if self.with_headers else 0)
            for r in records
        )

    def take(self) -> RecordColumns:
        records = self._records
        columns = RecordColumns(
            len(records),
            self._batch_index.tobytes(),
            array("q", [r.offset for r in records]).tobytes(),
            array("q", [r.timestamp for r in records]).tobytes(),
            binary_column([r.key for r in records]),
            binary_column([r.value for r in records]),
            header_columns([r.headers for r in records]) if self.with_headers else None,
        )
        self.__init__(self.with_headers)  # type: ignore[misc]
        return columns


def binary_column(values: Sequence[bytes | None]) -> BinaryColumn:
    offsets = array("i", [0])
    validity = bytearray((len(values) + 7) // 8)
    total = nulls = 0
    for i, v in enumerate(values):
        if v is None:
            nulls += 1
        else:
            validity[i >> 3] |= 1 << (i & 7)
            total += len(v)
        offsets.append(total)
    return BinaryColumn(offsets.tobytes(), b"".join(v for v in values if v), bytes(validity), nulls)


def header_columns(headers: Sequence[tuple[tuple[str, bytes | None], ...]]) -> HeaderColumns:
    list_offsets = array("i", [0])
    validity = bytearray((len(headers) + 7) // 8)
    total = nulls = 0
    for i, h in enumerate(headers):
        if h:
            validity[i >> 3] |= 1 << (i & 7)
            total += len(h)
        else:
            nulls += 1
        list_offsets.append(total)
    entries = [kv for h in headers for kv in h]
    return HeaderColumns(
        list_offsets.tobytes(),
        bytes(validity),
        nulls,
        binary_column([k.encode() for k, _ in entries]),
        binary_column([v for _, v in entries]),
    )
