"""`log dump` of a `.log` file: its batches streamed in bounded memory, with their records
when asked (Kafka's DumpLogSegments --print-data-log).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from logkeel.records.batch import (
    HEADER_SIZE,
    NO_SEQUENCE,
    BatchHeader,
    InvalidBatchError,
)
from logkeel.records.control import (
    ControlRecordType,
    decode_control_key,
    decode_end_txn_marker,
)
from logkeel.records.record import Record, decode_records
from logkeel.records.walk import BadBatch, BadKind, BatchWindow, OnBadBatch, walk_batches
from logkeel.storage.engine.segment import parse_base_offset
from logkeel.storage.errors import StorageError, io_guard
from logkeel.storage.tools.dump_result import (
    INT31,
    FileDump,
    FileKind,
    Json,
    file_size,
    log_dir_of,
    problem,
)

# How much of a `.log` is read at a time. Bounds the walk's memory, except for a batch larger
# than this whose records are wanted (--print-data): that one batch is read whole.
READ_CHUNK = 8 * 1024 * 1024
# Control characters other than tab, line feed and carriage return mark a value as binary.
_BINARY_BYTE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


# ---- .log ---------------------------------------------------------------------------------


@dataclass(slots=True)
class WalkedBatch:
    position: int
    header: BatchHeader
    computed_crc: int | None  # None when the CRC was not checked
    data: bytes | bytearray | memoryview | None  # the whole batch, when its records are wanted

    @property
    def crc_valid(self) -> bool | None:
        return None if self.computed_crc is None else self.computed_crc == self.header.crc


class LogWalk:
    """Streams the batches of a `.log` file from its start, in bounded memory.

    Stops at the first region that cannot be a batch (bad magic or length, a batch running
    past the end of the file, a partial header): ``stop`` then says where and why, and
    ``valid_bytes`` is where the last whole batch ended. A CRC mismatch does not stop the walk:
    the length still says where the next batch starts, as in Kafka's tool.
    """

    def __init__(self, path: Path, read_chunk: int = READ_CHUNK) -> None:
        self.path = path
        self.log_dir = log_dir_of(path)
        self.read_chunk = read_chunk
        self.size = 0
        self.valid_bytes = 0
        self.stop: Json | None = None

    def batches(
        self, *, check_crc: bool, want_data: bool = False
    ) -> Generator[WalkedBatch, None, None]:
        with io_guard(self.log_dir, f"opening {self.path}"):
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            with io_guard(self.log_dir, f"stat {self.path}"):
                self.size = os.fstat(fd).st_size
            yield from self._walk(fd, check_crc, want_data)
        finally:
            os.close(fd)

    def _walk(self, fd: int, check_crc: bool, want_data: bool) -> Iterator[WalkedBatch]:
        chunk = self.read_chunk
        win = BatchWindow(pread=lambda pos, n: self._read(fd, pos, n), size=self.size, chunk=chunk)
        # Records are decoded only from a batch whose CRC was computed.
        verify = check_crc or want_data
        for item in walk_batches(win, verify_crc=verify, on_bad=OnBadBatch.SKIP):
            if isinstance(item, BadBatch):
                if item.kind is not BadKind.CRC:
                    self._stopped(item)
                    return
                computed = item.computed_crc
            else:
                computed = item.header.crc if verify else None
            pos, header = item.position, item.header
            assert header is not None
            data: bytes | bytearray | memoryview | None = None
            if want_data:
                if header.size <= chunk:
                    data = win.bytes_of(pos, header.size)
                elif computed == header.crc:
                    # A batch bigger than a chunk is read whole only if it is a real batch.
                    data = self._read(fd, pos, header.size)
            batch = WalkedBatch(pos, header, computed, data)
            # No reference to the batch's bytes may outlive the consumer's use of them: a
            # batch larger than a chunk is a buffer of its own.
            data = None
            yield batch
            del batch
            self.valid_bytes = pos + header.size

    def _stopped(self, bad: BadBatch) -> None:
        pos, header = bad.position, bad.header
        if header is None:
            message = (
                f"position {pos}: {bad.size} bytes at the end of the file are too few for "
                f"a batch header ({HEADER_SIZE} bytes)"
            )
            self.stop = problem(message, "partial_batch", position=pos)
        elif bad.kind is BadKind.PARTIAL:
            message = (
                f"position {pos}: batch at offset {header.base_offset} needs {header.size} "
                f"bytes but only {bad.size} remain in the file (truncated write?)"
            )
            self.stop = problem(message, "partial_batch", position=pos, offset=header.base_offset)
        else:
            message = f"position {pos}: not a valid batch: {bad.reason}"
            self.stop = problem(message, "invalid_batch", position=pos, offset=header.base_offset)

    def _read(self, fd: int, pos: int, size: int) -> bytes:
        parts = []
        with io_guard(self.log_dir, f"reading {self.path}"):
            while size > 0:
                chunk = os.pread(fd, size, pos)
                if not chunk:
                    break
                parts.append(chunk)
                pos += len(chunk)
                size -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)


def dump_log(
    path: str | Path, *, print_data: bool = False, read_chunk: int = READ_CHUNK
) -> FileDump:
    """The batches of a `.log` file (``"batches"``), with their records if ``print_data``.

    Tail: ``size``, ``valid_bytes`` (where the last whole batch ends) and ``trailing_bytes``.
    Errors: the corrupt region that stopped the walk, CRC mismatches, base offsets that do not
    exceed the previous batch's last offset, and records that cannot be decoded.

    Memory is bounded by ``read_chunk`` (bytes read at a time), except that with ``print_data``
    a larger batch is read whole to decode it.
    """
    path = Path(path)
    dump = FileDump(str(path), FileKind.LOG, "batches")
    dump.head["base_offset"] = parse_base_offset(path.name)
    dump.head["size"] = file_size(path, dump)
    dump._source = _log_items(dump, LogWalk(path, read_chunk), print_data)
    return dump


def _log_items(dump: FileDump, walk: LogWalk, print_data: bool) -> Generator[Json, None, None]:
    prev_last: int | None = None
    try:
        for batch in walk.batches(check_crc=True, want_data=print_data):
            header, pos = batch.header, batch.position
            item = _batch_dict(batch)
            if not batch.crc_valid:
                dump.errors.append(
                    problem(
                        f"position {pos}: batch at offset {header.base_offset} fails its "
                        f"CRC-32C check: stored {header.crc}, computed {batch.computed_crc}",
                        "crc_mismatch",
                        position=pos,
                        offset=header.base_offset,
                    )
                )
            if prev_last is not None and header.base_offset <= prev_last:
                # Offsets must rise from batch to batch; the 0.11 index-corruption incident
                # (docs/proposals.md) is a log where they did not.
                dump.errors.append(
                    problem(
                        f"position {pos}: batch base offset {header.base_offset} is not above "
                        f"the previous batch's last offset {prev_last}",
                        "offset_order",
                        position=pos,
                        offset=header.base_offset,
                    )
                )
            prev_last = header.last_offset
            if print_data:
                item["data"] = _records_of(batch, dump)
                batch.data = None
            yield item
    except StorageError as exc:
        dump.errors.append(problem(str(exc), "io_error", position=walk.valid_bytes))
    if walk.stop is not None:
        dump.errors.append(walk.stop)
    dump.tail["valid_bytes"] = walk.valid_bytes
    dump.tail["trailing_bytes"] = max(0, walk.size - walk.valid_bytes)


def _batch_dict(batch: WalkedBatch) -> Json:
    h = batch.header
    return {
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "position": batch.position,
        "size": h.size,
        "crc": h.crc,
        "crc_valid": batch.crc_valid,
        "records": h.records_count,
        "magic": h.magic,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "last_sequence": h.last_sequence,
        "partition_leader_epoch": h.partition_leader_epoch,
        "is_transactional": h.is_transactional,
        "is_control": h.is_control,
        "compression": h.compression.name.lower(),
        "timestamp_type": _timestamp_type_name(h),
        "base_timestamp": h.base_timestamp,
        "max_timestamp": h.max_timestamp,
        # Kafka's cleaner stores the delete horizon in baseTimestamp when attribute bit 6 is set.
        "delete_horizon_ms": h.base_timestamp if h.has_delete_horizon else None,
    }


def _timestamp_type_name(header: BatchHeader) -> str:
    # Kafka's TimestampType names, as its tool prints them.
    return "LogAppendTime" if header.timestamp_type else "CreateTime"


def _records_of(batch: WalkedBatch, dump: FileDump) -> list[Json]:
    header, pos = batch.header, batch.position
    if batch.data is None:
        dump.errors.append(
            problem(
                f"position {pos}: records of batch at offset {header.base_offset} not decoded: "
                "it fails its CRC and is too large to read whole",
                "invalid_records",
                position=pos,
                offset=header.base_offset,
            )
        )
        return []
    try:
        # A batch with a bad CRC is decoded anyway: what it still holds helps a diagnosis.
        _, records = decode_records(batch.data, 0, verify_crc=False)
    except (ValueError, IndexError) as exc:
        dump.errors.append(
            problem(
                f"position {pos}: records of batch at offset {header.base_offset} cannot be "
                f"decoded: {exc}",
                "invalid_records",
                position=pos,
                offset=header.base_offset,
            )
        )
        return []
    return [_record_dict(header, r, pos, dump) for r in records]


def _bytes_field(data: bytes | None) -> tuple[str | None, str | None]:
    """(text, encoding): the bytes as text where they are UTF-8 without control characters
    (tab and line breaks allowed), else base64.

    Binary data that happens to decode (zero-filled values, packed integers) would otherwise
    come out as a long run of escapes, several times its size.
    """
    if data is None:
        return None, None
    if _BINARY_BYTE.search(data) is None:
        try:
            return data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode("ascii"), "base64"


def _record_dict(header: BatchHeader, record: Record, pos: int, dump: FileDump) -> Json:
    key, key_encoding = _bytes_field(record.key)
    value, value_encoding = _bytes_field(record.value)
    delta = record.offset - header.base_offset
    sequence = (
        NO_SEQUENCE
        if header.base_sequence == NO_SEQUENCE
        else (header.base_sequence + delta) % INT31
    )
    headers = []
    for hkey, hvalue in record.headers:
        text, encoding = _bytes_field(hvalue)
        headers.append({"key": hkey, "value": text, "value_encoding": encoding})
    item: Json = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key_size": -1 if record.key is None else len(record.key),
        "value_size": -1 if record.value is None else len(record.value),
        "sequence": sequence,
        "key": key,
        "key_encoding": key_encoding,
        "value": value,
        "value_encoding": value_encoding,
        "headers": headers,
    }
    if header.is_control:
        item["control"] = _control_dict(record, pos, dump)
    return item


def _control_dict(record: Record, pos: int, dump: FileDump) -> Json:
    key = record.key or b""
    type_id = int.from_bytes(key[2:4], "big", signed=True) if len(key) >= 4 else None
    try:
        control_type = decode_control_key(record.key)
        if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            marker = decode_end_txn_marker(record.key, record.value)
            return {
                "type": marker.type.name,
                "type_id": type_id,
                "coordinator_epoch": marker.coordinator_epoch,
            }
        return {"type": control_type.name, "type_id": type_id}
    except InvalidBatchError as exc:
        dump.errors.append(
            problem(
                f"position {pos}: control record at offset {record.offset} is malformed: {exc}",
                "invalid_records",
                position=pos,
                offset=record.offset,
            )
        )
        return {"type": None, "type_id": type_id, "error": str(exc)}
