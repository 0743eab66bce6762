"""Full decoding of RecordBatch v2: the records inside a batch.

Record layout (inside the records section, after decompression):

    length varint            bytes that follow, up to the end of this record
    attributes int8          unused, always 0
    timestampDelta varlong   from the batch's baseTimestamp
    offsetDelta varint       from the batch's baseOffset
    keyLength varint, key    -1 for a null key
    valueLength varint, value
    headersCount varint, then per header: keyLength varint, key (UTF-8), valueLength varint, value

Everything a corrupt or hostile batch could get wrong raises ``InvalidBatchError``: the records
are bounded by their own lengths, the count must match the header, offset deltas must increase
strictly and stay within ``lastOffsetDelta``, and no bytes may be left over.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .batch import (
    HEADER_SIZE,
    MIN_RECORD_SIZE,
    BatchHeader,
    InvalidBatchError,
    compute_crc,
    validate_structure,
)
from .compression import decompress
from .varint import decode_varint, decode_varlong
from .walk import iter_headers

Buffer = bytes | bytearray | memoryview
Headers = tuple[tuple[str, bytes | None], ...]

_ATTR_COMPRESSION_MASK = 0x07
_ATTR_LOG_APPEND_TIME = 0x08


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


# Building a frozen dataclass through __init__ goes through object.__setattr__ once per field;
# setting the slots through their descriptors is twice as fast, and decoding makes one Record
# per record, so the hot loop uses these.
_new = object.__new__
_set_offset = Record.__dict__["offset"].__set__
_set_timestamp = Record.__dict__["timestamp"].__set__
_set_key = Record.__dict__["key"].__set__
_set_value = Record.__dict__["value"].__set__
_set_headers = Record.__dict__["headers"].__set__


def read_header(buf: Buffer, pos: int = 0, *, verify_crc: bool = True) -> BatchHeader:
    """Parses and checks the header of the batch at ``pos`` (magic, length bounds, CRC)."""
    header = BatchHeader.parse(buf, pos)
    validate_structure(header, len(buf) - pos)
    if verify_crc and compute_crc(buf, pos, header.size) != header.crc:
        raise InvalidBatchError(
            f"CRC mismatch in batch at offset {header.base_offset} (position {pos}): "
            f"stored {header.crc:#010x}, computed {compute_crc(buf, pos, header.size):#010x}"
        )
    return header


def records_section(buf: Buffer, header: BatchHeader, pos: int = 0) -> Buffer:
    """The records section of the batch at ``pos``, decompressed if the batch is compressed.

    An uncompressed section is returned as a view, without copying.
    """
    view = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    if header.attributes & _ATTR_COMPRESSION_MASK:
        return decompress(header.attributes & _ATTR_COMPRESSION_MASK, view)
    return view


def decode_records(
    buf: Buffer, pos: int = 0, *, verify_crc: bool = True
) -> tuple[BatchHeader, list[Record]]:
    """Decodes the whole batch at ``pos``: its header and every record, with absolute offsets
    and timestamps (``maxTimestamp`` for all records when the batch uses LogAppendTime)."""
    header = read_header(buf, pos, verify_crc=verify_crc)
    if header.attributes & _ATTR_COMPRESSION_MASK:
        data: Buffer = records_section(buf, header, pos)
        start, end = 0, len(data)
    elif type(buf) is bytes:
        # Bytes can be sliced directly; every read below is bounded by `end`, not len(buf).
        data, start, end = buf, pos + HEADER_SIZE, pos + header.size
    else:
        data = memoryview(buf)
        start, end = pos + HEADER_SIZE, pos + header.size
    return header, decode_section(header, data, start, end)


def decode_section(header: BatchHeader, data: Buffer, start: int, end: int) -> list[Record]:
    """The records of the batch ``header`` heads, from its (decompressed) records section
    ``data[start:end]``."""
    count = header.records_count
    if count * MIN_RECORD_SIZE > end - start:
        raise InvalidBatchError(
            f"batch at offset {header.base_offset} claims {count} records "
            f"in {end - start} bytes of records"
        )
    base_offset = header.base_offset
    last_delta = header.last_offset_delta
    base_ts = header.base_timestamp
    append_time = header.max_timestamp if header.attributes & _ATTR_LOG_APPEND_TIME else None

    records: list[Record] = []
    append = records.append
    prev_delta = -1
    p = start
    # The varints of each field are decoded inline (fast paths for one and two bytes,
    # varint.py's decoder otherwise) rather than by a call per field: calls dominate decode
    # time, and the segment reader and Spark source decode millions of records. Measured on
    # 200 records of 100 bytes: 1.45 us per record inline, 2.05 us with a call per varint.
    try:
        for _ in range(count):
            b = data[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                b = (b & 0x7F) | (data[p + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                length, p = decode_varint(data, p)
            if length < MIN_RECORD_SIZE - 1 or length > end - p:
                raise InvalidBatchError(
                    f"record length {length} at position {p} is out of bounds (end {end})"
                )
            rec_end = p + length
            p += 1  # attributes: unused by v2

            b = data[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                b = (b & 0x7F) | (data[p + 1] << 7)
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                ts_delta, p = decode_varlong(data, p)

            b = data[p]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                b = (b & 0x7F) | (data[p + 1] << 7)
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                offset_delta, p = decode_varint(data, p)
            if offset_delta <= prev_delta or offset_delta > last_delta:
                raise InvalidBatchError(
                    f"offset delta {offset_delta} after {prev_delta} is out of order or beyond "
                    f"lastOffsetDelta {last_delta}"
                )
            prev_delta = offset_delta

            b = data[p]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                b = (b & 0x7F) | (data[p + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                n, p = decode_varint(data, p)
            if n < 0:
                key = None
            else:
                if p + n > rec_end:
                    raise InvalidBatchError(f"key of {n} bytes runs past its record")
                key = bytes(data[p : p + n])
                p += n

            b = data[p]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                p += 1
            elif data[p + 1] < 0x80:
                b = (b & 0x7F) | (data[p + 1] << 7)
                n = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                n, p = decode_varint(data, p)
            if n < 0:
                value = None
            else:
                if p + n > rec_end:
                    raise InvalidBatchError(f"value of {n} bytes runs past its record")
                value = bytes(data[p : p + n])
                p += n

            b = data[p]
            if b:
                headers, p = _decode_headers(data, p, rec_end)
            else:
                headers = ()
                p += 1

            if p != rec_end:
                raise InvalidBatchError(
                    f"record at offset delta {offset_delta} declares {length} bytes "
                    f"but its fields take {length + p - rec_end}"
                )
            record = _new(Record)
            _set_offset(record, base_offset + offset_delta)
            _set_timestamp(record, base_ts + ts_delta if append_time is None else append_time)
            _set_key(record, key)
            _set_value(record, value)
            _set_headers(record, headers)
            append(record)
    except IndexError:
        exc = InvalidBatchError(
            f"record {len(records)} of batch at offset {base_offset} runs past the end of the batch"
        )
        exc.record_index = len(records)  # type: ignore[attr-defined]
        raise exc from None
    except InvalidBatchError as exc:
        # Which record broke: the produce path answers it in record_errors.
        exc.record_index = len(records)  # type: ignore[attr-defined]
        raise
    if p != end:
        raise InvalidBatchError(
            f"{end - p} bytes left after the {count} records of batch at offset {base_offset}"
        )
    return records


def _decode_headers(data: Buffer, p: int, rec_end: int) -> tuple[Headers, int]:
    count, p = decode_varint(data, p)
    if count < 0 or count > rec_end - p:
        raise InvalidBatchError(f"invalid record header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        b = data[p]
        if b < 0x80:  # header keys and values are short: one-byte lengths inline
            n = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            n, p = decode_varint(data, p)
        if n < 0 or p + n > rec_end:
            raise InvalidBatchError(f"invalid record header key length {n}")
        try:
            key = str(data[p : p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise InvalidBatchError(f"record header key is not UTF-8: {e}") from None
        p += n
        b = data[p]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            n, p = decode_varint(data, p)
        if n < 0:
            headers.append((key, None))
        else:
            if p + n > rec_end:
                raise InvalidBatchError(f"record header value of {n} bytes runs past its record")
            headers.append((key, bytes(data[p : p + n])))
            p += n
    return tuple(headers), p


def iter_batches(
    buf: Buffer, *, verify_crc: bool = True
) -> Iterator[tuple[int, BatchHeader, list[Record]]]:
    """Decodes each complete batch in ``buf`` (a segment slice or a fetch response's records):
    yields (position, header, records). A partial trailing batch ends the iteration, as
    fetch responses may legally end with one."""
    for pos, _ in iter_headers(buf):
        header, records = decode_records(buf, pos, verify_crc=verify_crc)
        yield pos, header, records


def iter_records(buf: Buffer, *, verify_crc: bool = True) -> Iterator[Record]:
    """Every record of every complete batch in ``buf``, control records included."""
    for _, _, records in iter_batches(buf, verify_crc=verify_crc):
        yield from records
