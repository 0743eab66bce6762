"""Offline inspection of a partition's files: logkeel's counterpart of Kafka's DumpLogSegments.

Each ``dump_*`` function inspects one file read-only (nothing is created, resized or rewritten,
so dumping the files of a live or crashed broker is safe) and returns a ``FileDump``: fields
known up front, then the batches or entries *streamed* one at a time, then the problems found.
Streaming is what lets a 1 GiB segment be dumped in a few MiB of memory: the `.log` walk reads
bounded chunks and never holds more than one batch (or one chunk) at a time.

``FileDump.to_dict()`` materialises everything as plain dicts (for tests and small files);
``render_text`` and ``render_json`` turn dumps into Kafka-style lines or one JSON document
without materialising them. Nothing here prints or exits: that is the CLI's job.

Problems are reported, never raised: a corrupt region stops the batch walk with an error that
names its position and reason; a CRC mismatch or an index entry that disagrees with its log is
listed and the walk goes on.
"""

from __future__ import annotations

import base64
import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

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
from logkeel.storage.engine.offset_index import OffsetIndex, OffsetPosition
from logkeel.storage.engine.producer_snapshot import (
    ProducerSnapshotEntry,
    parse_snapshot_offset,
    read_snapshot,
)
from logkeel.storage.engine.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_base_offset,
)
from logkeel.storage.engine.time_index import TimeIndex, TimestampOffset
from logkeel.storage.engine.txn_index import ABORTED_TXN_VERSION, TransactionIndex
from logkeel.storage.errors import CorruptIndexError, StorageError, io_guard

Json = dict[str, Any]

# How much of a `.log` is read at a time. Bounds the walk's memory, except for a batch larger
# than this whose records are wanted (--print-data): that one batch is read whole.
READ_CHUNK = 8 * 1024 * 1024

SNAPSHOT_SUFFIX = ".snapshot"
# Suffixes a segment's files carry while being deleted, cleaned or swapped in; such a file is
# dumped like the file it was.
_TRANSIENT_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)
_INT31 = 1 << 31
# Control characters other than tab, line feed and carriage return mark a value as binary.
_BINARY_BYTE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_LINE_ESCAPES = str.maketrans({"\t": "\\t", "\n": "\\n", "\r": "\\r"})


class FileKind(StrEnum):
    LOG = "log"
    OFFSET_INDEX = "offset_index"
    TIME_INDEX = "time_index"
    TXN_INDEX = "txn_index"
    PRODUCER_SNAPSHOT = "producer_snapshot"


_SUFFIX_KINDS = {
    LOG_SUFFIX: FileKind.LOG,
    INDEX_SUFFIX: FileKind.OFFSET_INDEX,
    TIME_INDEX_SUFFIX: FileKind.TIME_INDEX,
    TXN_INDEX_SUFFIX: FileKind.TXN_INDEX,
    SNAPSHOT_SUFFIX: FileKind.PRODUCER_SNAPSHOT,
}
_INDEX_KINDS = (FileKind.OFFSET_INDEX, FileKind.TIME_INDEX, FileKind.TXN_INDEX)
SUPPORTED_SUFFIXES = tuple(_SUFFIX_KINDS)


def _split_suffix(path: Path) -> tuple[str, str] | None:
    """(kind suffix, transient suffix) of a file name, e.g. ('.log', '.deleted')."""
    name = path.name
    transient = ""
    for t in _TRANSIENT_SUFFIXES:
        if name.endswith(t):
            name, transient = name[: -len(t)], t
            break
    for suffix in _SUFFIX_KINDS:
        if name.endswith(suffix):
            return suffix, transient
    return None


def file_kind(path: str | Path) -> FileKind | None:
    """What a file holds, from its suffix; None for a file this module cannot dump."""
    split = _split_suffix(Path(path))
    return None if split is None else _SUFFIX_KINDS[split[0]]


def unsupported_reason(path: str | Path) -> str | None:
    """Why ``path`` cannot be dumped (by its name alone), or None if it can."""
    path = Path(path)
    kind = file_kind(path)
    if kind is None:
        return (
            f"{path}: unknown file type (expected a name ending in {', '.join(SUPPORTED_SUFFIXES)})"
        )
    if kind in _INDEX_KINDS and parse_base_offset(path.name) is None:
        # Index entries are stored relative to the segment's base offset, which only the
        # file name carries (Kafka's offsetFromFile).
        return f"{path}: an index file name must start with its 20-digit base offset"
    return None


# ---- the streamed result --------------------------------------------------------------------


@dataclass(eq=False)
class FileDump:
    """One file's dump. ``head`` is known up front; ``items()`` streams the batches or entries
    (once); ``tail``, ``errors`` and ``mismatches`` are complete when ``items()`` is exhausted.

    ``mismatches`` is None unless the dump verifies an index against its log.
    """

    file: str
    kind: FileKind
    items_key: str
    head: Json = field(default_factory=dict)
    tail: Json = field(default_factory=dict)
    errors: list[Json] = field(default_factory=list)
    mismatches: list[Json] | None = None
    _source: Generator[Json, None, None] | None = None
    _consumed: bool = False

    def items(self) -> Iterator[Json]:
        if self._source is None or self._consumed:
            raise RuntimeError(f"the items of {self.file} were already consumed")
        self._consumed = True
        return self._source

    def close(self) -> None:
        """Releases the file handles of an unfinished ``items()`` stream."""
        if self._source is not None:
            self._source.close()

    @property
    def problems(self) -> int:
        return len(self.errors) + len(self.mismatches or ())

    def to_dict(self) -> Json:
        """The whole dump as plain dicts (everything in memory: meant for small files).

        The same document ``render_json`` streams for this file.
        """
        doc: Json = {"file": self.file, "kind": str(self.kind), **self.head}
        doc[self.items_key] = list(self.items())
        doc.update(self.tail)
        doc["errors"] = self.errors
        if self.mismatches is not None:
            doc["mismatches"] = self.mismatches
        return doc


def _problem(message: str, kind: str, **fields: Any) -> Json:
    return {"kind": kind, **fields, "message": message}


def _log_dir_of(path: Path) -> Path:
    # <log dir>/<topic>-<partition>/<file>: the dir an IO error would take offline.
    return path.absolute().parent.parent


def dump_file(path: str | Path, *, print_data: bool = False, verify: bool = False) -> FileDump:
    """Dumps any supported file. Raises ValueError for a name ``unsupported_reason`` rejects."""
    path = Path(path)
    reason = unsupported_reason(path)
    if reason is not None:
        raise ValueError(reason)
    kind = file_kind(path)
    if kind == FileKind.LOG:
        return dump_log(path, print_data=print_data)
    if kind == FileKind.OFFSET_INDEX:
        return dump_offset_index(path, verify=verify)
    if kind == FileKind.TIME_INDEX:
        return dump_time_index(path, verify=verify)
    if kind == FileKind.TXN_INDEX:
        return dump_txn_index(path)
    return dump_producer_snapshot(path)


def _file_size(path: Path, dump: FileDump) -> int | None:
    try:
        with io_guard(_log_dir_of(path), f"stat {path}"):
            return path.stat().st_size
    except StorageError as exc:
        dump.errors.append(_problem(str(exc), "io_error"))
        return None


# ---- .log ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Batch:
    position: int
    header: BatchHeader
    computed_crc: int | None  # None when the CRC was not checked
    data: bytes | memoryview | None  # the whole batch, when its records are wanted

    @property
    def crc_valid(self) -> bool | None:
        return None if self.computed_crc is None else self.computed_crc == self.header.crc


class _LogWalk:
    """Streams the batches of a `.log` file from its start, in bounded memory.

    Stops at the first region that cannot be a batch (bad magic or length, a batch running
    past the end of the file, a partial header): ``stop`` then says where and why, and
    ``valid_bytes`` is where the last whole batch ended. A CRC mismatch does not stop the walk:
    the length still says where the next batch starts, as in Kafka's tool.
    """

    def __init__(self, path: Path, read_chunk: int = READ_CHUNK) -> None:
        self.path = path
        self.log_dir = _log_dir_of(path)
        self.read_chunk = read_chunk
        self.size = 0
        self.valid_bytes = 0
        self.stop: Json | None = None

    def batches(self, *, check_crc: bool, want_data: bool = False) -> Generator[_Batch, None, None]:
        with io_guard(self.log_dir, f"opening {self.path}"):
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            with io_guard(self.log_dir, f"stat {self.path}"):
                self.size = os.fstat(fd).st_size
            yield from self._walk(fd, check_crc, want_data)
        finally:
            os.close(fd)

    def _walk(self, fd: int, check_crc: bool, want_data: bool) -> Iterator[_Batch]:
        chunk = self.read_chunk
        win = BatchWindow(pread=lambda pos, n: self._read(fd, pos, n), size=self.size, chunk=chunk)
        # Records are decoded only from a batch whose CRC was computed.
        verify = check_crc or want_data
        for item in walk_batches(win, verify_crc=verify, on_bad=OnBadBatch.SKIP):
            if type(item) is BadBatch:
                if item.kind is not BadKind.CRC:
                    self._stopped(item)
                    return
                computed = item.computed_crc
            else:
                computed = item.header.crc if verify else None
            pos, header = item.position, item.header
            assert header is not None
            data: bytes | memoryview | None = None
            if want_data:
                if header.size <= chunk:
                    data = win.bytes_of(pos, header.size)
                elif computed == header.crc:
                    # A batch bigger than a chunk is read whole only if it is a real batch.
                    data = self._read(fd, pos, header.size)
            batch = _Batch(pos, header, computed, data)
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
            self.stop = _problem(message, "partial_batch", position=pos)
        elif bad.kind is BadKind.PARTIAL:
            message = (
                f"position {pos}: batch at offset {header.base_offset} needs {header.size} "
                f"bytes but only {bad.size} remain in the file (truncated write?)"
            )
            self.stop = _problem(message, "partial_batch", position=pos, offset=header.base_offset)
        else:
            message = f"position {pos}: not a valid batch: {bad.reason}"
            self.stop = _problem(message, "invalid_batch", position=pos, offset=header.base_offset)

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
    dump.head["size"] = _file_size(path, dump)
    dump._source = _log_items(dump, _LogWalk(path, read_chunk), print_data)
    return dump


def _log_items(dump: FileDump, walk: _LogWalk, print_data: bool) -> Generator[Json, None, None]:
    prev_last: int | None = None
    try:
        for batch in walk.batches(check_crc=True, want_data=print_data):
            header, pos = batch.header, batch.position
            item = _batch_dict(batch)
            if not batch.crc_valid:
                dump.errors.append(
                    _problem(
                        f"position {pos}: batch at offset {header.base_offset} fails its "
                        f"CRC-32C check: stored {header.crc}, computed {batch.computed_crc}",
                        "crc_mismatch",
                        position=pos,
                        offset=header.base_offset,
                    )
                )
            if prev_last is not None and header.base_offset <= prev_last:
                # Offsets must rise from batch to batch; the 0.11 incident in seeds/ is a log
                # where they did not.
                dump.errors.append(
                    _problem(
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
        dump.errors.append(_problem(str(exc), "io_error", position=walk.valid_bytes))
    if walk.stop is not None:
        dump.errors.append(walk.stop)
    dump.tail["valid_bytes"] = walk.valid_bytes
    dump.tail["trailing_bytes"] = max(0, walk.size - walk.valid_bytes)


def _batch_dict(batch: _Batch) -> Json:
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


def _records_of(batch: _Batch, dump: FileDump) -> list[Json]:
    header, pos = batch.header, batch.position
    if batch.data is None:
        dump.errors.append(
            _problem(
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
            _problem(
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
        else (header.base_sequence + delta) % _INT31
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
            _problem(
                f"position {pos}: control record at offset {record.offset} is malformed: {exc}",
                "invalid_records",
                position=pos,
                offset=record.offset,
            )
        )
        return {"type": None, "type_id": type_id, "error": str(exc)}


# ---- .index / .timeindex -------------------------------------------------------------------


def _sibling(path: Path, suffix: str) -> Path:
    """The file of the same segment with another suffix (``.deleted`` and the like kept)."""
    split = _split_suffix(path)
    assert split is not None
    kind_suffix, transient = split
    stem = path.name[: len(path.name) - len(transient) - len(kind_suffix)]
    return path.with_name(stem + suffix + transient)


def dump_offset_index(path: str | Path, *, verify: bool = False) -> FileDump:
    """The entries of a `.index` file with absolute offsets: ``{"offset", "position"}``.

    With ``verify``, each entry is checked against the `.log` next to it: its position must be
    where a batch starts, and that batch's last offset must be the entry's offset (logkeel, like
    Kafka, keys index entries by a batch's last offset).
    """
    path = Path(path)
    base_offset = _require_base_offset(path)
    dump = FileDump(str(path), FileKind.OFFSET_INDEX, "entries")
    dump.head["base_offset"] = base_offset
    dump.head["size"] = _file_size(path, dump)
    index = OffsetIndex(path, base_offset, writable=False, log_dir=_log_dir_of(path))
    if verify:
        dump.mismatches = []
        dump.head["log_file"] = str(_sibling(path, LOG_SUFFIX))
    dump._source = _index_items(dump, index, _OffsetIndexCheck if verify else None)
    return dump


def dump_time_index(path: str | Path, *, verify: bool = False) -> FileDump:
    """The entries of a `.timeindex` file with absolute offsets: ``{"timestamp", "offset"}``.

    With ``verify``: timestamps must increase and offsets must not decrease from entry to entry,
    and each entry's offset must lie in a batch of the `.log` next to it whose max timestamp is
    the entry's timestamp.
    """
    path = Path(path)
    base_offset = _require_base_offset(path)
    dump = FileDump(str(path), FileKind.TIME_INDEX, "entries")
    dump.head["base_offset"] = base_offset
    dump.head["size"] = _file_size(path, dump)
    index = TimeIndex(path, base_offset, writable=False, log_dir=_log_dir_of(path))
    if verify:
        dump.mismatches = []
        dump.head["log_file"] = str(_sibling(path, LOG_SUFFIX))
    dump._source = _index_items(dump, index, _TimeIndexCheck if verify else None)
    return dump


def _require_base_offset(path: Path) -> int:
    base_offset = parse_base_offset(path.name)
    if base_offset is None:
        raise ValueError(unsupported_reason(path) or f"{path}: no base offset in the name")
    return base_offset


class _IndexCheck(ABC):
    """Checks index entries against the segment's log in one forward pass over both.

    Entries of a sound index are ordered the way the log is, so a single merge-like walk
    verifies them all without holding the log (or the entries) in memory.
    """

    def __init__(self, dump: FileDump, log_path: Path) -> None:
        self.dump = dump
        self.log_path = log_path
        self.walk = _LogWalk(log_path)
        self._batches: Generator[_Batch, None, None] | None = None
        self.current: _Batch | None = None
        self.previous_batch: _Batch | None = None

    def start(self) -> bool:
        if not self.log_path.is_file():
            self.dump.errors.append(
                _problem(f"cannot verify: no log file {self.log_path}", "missing_log")
            )
            return False
        self._batches = self.walk.batches(check_crc=False)
        self._advance()
        return True

    def _advance(self) -> None:
        assert self._batches is not None
        self.previous_batch = self.current
        try:
            self.current = next(self._batches, None)
        except StorageError as exc:
            self.dump.errors.append(_problem(str(exc), "io_error"))
            self.current = None

    def finish(self) -> None:
        if self._batches is not None:
            self._batches.close()
        stop = self.walk.stop
        if stop is not None:
            self.dump.errors.append(
                _problem(
                    f"{self.log_path} is corrupt at {stop['message']}; entries past position "
                    f"{stop['position']} cannot be verified",
                    "log_corrupt",
                    position=stop["position"],
                )
            )

    def mismatch(
        self, n: int, entry: OffsetPosition | TimestampOffset, message: str, **fields: Any
    ) -> None:
        assert self.dump.mismatches is not None
        described = " ".join(f"{k}: {v}" for k, v in entry._asdict().items())
        self.dump.mismatches.append(
            _problem(
                f"entry {n} ({described}): {message}",
                "mismatch",
                entry=n,
                **entry._asdict(),
                **fields,
            )
        )

    @abstractmethod
    def check(self, n: int, entry: Any) -> None:
        """Checks the n-th entry; entries come in file order."""


class _OffsetIndexCheck(_IndexCheck):
    def __init__(self, dump: FileDump, log_path: Path) -> None:
        super().__init__(dump, log_path)
        self.last: OffsetPosition | None = None

    def check(self, n: int, entry: OffsetPosition) -> None:
        if self.last is not None and (
            entry.offset <= self.last.offset or entry.position <= self.last.position
        ):
            self.mismatch(
                n,
                entry,
                f"out of order after offset {self.last.offset} position {self.last.position}",
            )
            return
        self.last = entry
        while self.current is not None and self.current.position < entry.position:
            self._advance()
        batch = self.current
        if batch is None:
            self.mismatch(
                n,
                entry,
                f"position {entry.position} is past the last batch of {self.log_path.name} "
                f"(its batches end at position {self.walk.valid_bytes})",
            )
        elif batch.position != entry.position:
            before = self.previous_batch
            where = f"inside the batch at position {before.position}, " if before else ""
            self.mismatch(
                n,
                entry,
                f"position {entry.position} is not the start of a batch ({where}next batch at "
                f"position {batch.position})",
            )
        elif batch.header.last_offset != entry.offset:
            self.mismatch(
                n,
                entry,
                f"the batch at position {entry.position} has last offset "
                f"{batch.header.last_offset}, not {entry.offset}",
                log_offset=batch.header.last_offset,
            )


class _TimeIndexCheck(_IndexCheck):
    def __init__(self, dump: FileDump, log_path: Path) -> None:
        super().__init__(dump, log_path)
        self.last: TimestampOffset | None = None

    def check(self, n: int, entry: TimestampOffset) -> None:
        if self.last is not None and (
            entry.timestamp <= self.last.timestamp or entry.offset < self.last.offset
        ):
            self.mismatch(
                n,
                entry,
                f"out of order after timestamp {self.last.timestamp} offset {self.last.offset} "
                f"(timestamps must increase, offsets must not decrease)",
            )
            return
        self.last = entry
        while self.current is not None and self.current.header.last_offset < entry.offset:
            self._advance()
        batch = self.current
        if batch is None:
            self.mismatch(
                n,
                entry,
                f"offset {entry.offset} is past the last batch of {self.log_path.name}",
            )
        elif batch.header.base_offset > entry.offset:
            self.mismatch(
                n,
                entry,
                f"offset {entry.offset} is in no batch (the next batch starts at offset "
                f"{batch.header.base_offset})",
            )
        elif batch.header.max_timestamp != entry.timestamp:
            self.mismatch(
                n,
                entry,
                f"the batch holding offset {entry.offset} (offsets {batch.header.base_offset}"
                f"..{batch.header.last_offset}, position {batch.position}) has max timestamp "
                f"{batch.header.max_timestamp}, not {entry.timestamp}",
                log_timestamp=batch.header.max_timestamp,
            )


def _index_items(
    dump: FileDump,
    index: OffsetIndex | TimeIndex,
    check_type: Callable[[FileDump, Path], _IndexCheck] | None,
) -> Generator[Json, None, None]:
    check = check_type(dump, _sibling(Path(dump.file), LOG_SUFFIX)) if check_type else None
    try:
        try:
            entries = index.iter_entries()
        except StorageError as exc:
            dump.errors.append(_problem(str(exc), "io_error"))
            return
        dump.tail["entry_count"] = 0
        if check is not None and not check.start():
            check = None
        for n, entry in enumerate(entries):
            dump.tail["entry_count"] = n + 1
            if check is not None:
                check.check(n, entry)
            yield entry._asdict()
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            dump.errors.append(_problem(str(exc), "corrupt_index"))
    finally:
        if check is not None:
            check.finish()
        index.close_handler()


# ---- .txnindex -----------------------------------------------------------------------------


def dump_txn_index(path: str | Path) -> FileDump:
    """The aborted transactions of a `.txnindex` file: ``{"version", "producer_id",
    "first_offset", "last_offset", "last_stable_offset"}``."""
    path = Path(path)
    base_offset = _require_base_offset(path)
    dump = FileDump(str(path), FileKind.TXN_INDEX, "entries")
    dump.head["base_offset"] = base_offset
    dump.head["size"] = _file_size(path, dump)
    dump._source = _txn_items(dump, TransactionIndex(path, base_offset, log_dir=_log_dir_of(path)))
    return dump


def _txn_items(dump: FileDump, index: TransactionIndex) -> Generator[Json, None, None]:
    # Transaction indexes are small (one entry per aborted transaction), so reading the file
    # whole, as TransactionIndex does, is fine.
    try:
        txns = index.all_aborted_txns()
    except StorageError as exc:
        dump.errors.append(_problem(str(exc), "corrupt_index"))
        return
    for txn in txns:
        yield {"version": ABORTED_TXN_VERSION, **txn._asdict()}
    try:
        index.sanity_check()
    except StorageError as exc:
        dump.errors.append(_problem(str(exc), "corrupt_index"))
    index.close()


# ---- .snapshot -----------------------------------------------------------------------------


def dump_producer_snapshot(path: str | Path) -> FileDump:
    """The producers in a producer-state snapshot, with Kafka's field meanings."""
    path = Path(path)
    dump = FileDump(str(path), FileKind.PRODUCER_SNAPSHOT, "entries")
    dump.head["offset"] = parse_snapshot_offset(path.name)
    dump.head["size"] = _file_size(path, dump)
    dump._source = _snapshot_items(dump, path)
    return dump


def _snapshot_items(dump: FileDump, path: Path) -> Generator[Json, None, None]:
    try:
        with io_guard(_log_dir_of(path), f"reading {path}"):
            entries = read_snapshot(path)
    except StorageError as exc:
        dump.errors.append(_problem(str(exc), "corrupt_snapshot"))
        return
    for entry in entries:
        yield _snapshot_entry_dict(entry)


def _snapshot_entry_dict(e: ProducerSnapshotEntry) -> Json:
    # Kafka's BatchMetadata.firstSeq: lastSeq - offsetDelta, wrapping like sequences do.
    first_sequence = (
        NO_SEQUENCE if e.last_sequence < 0 else (e.last_sequence - e.offset_delta) % _INT31
    )
    return {
        "producer_id": e.producer_id,
        "producer_epoch": e.epoch,
        "coordinator_epoch": e.coordinator_epoch,
        "current_txn_first_offset": (
            None if e.current_txn_first_offset < 0 else e.current_txn_first_offset
        ),
        "last_timestamp": e.timestamp,
        "first_sequence": first_sequence,
        "last_sequence": e.last_sequence,
        "last_offset": e.last_offset,
        "offset_delta": e.offset_delta,
    }


# ---- rendering -----------------------------------------------------------------------------


def _optional_long(value: int | None) -> str:
    # How Java prints an OptionalLong, which is what Kafka's tool shows.
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _text(value: str | None, encoding: str | None) -> str:
    if value is None:
        return "null"
    if encoding == "base64":
        return f"base64:{value}"
    # One record per line: the only control characters a text value may hold are these.
    return value.translate(_LINE_ESCAPES)


def _batch_line(b: Json) -> str:
    return (
        f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['records']} "
        f"baseSequence: {b['base_sequence']} lastSequence: {b['last_sequence']} "
        f"producerId: {b['producer_id']} producerEpoch: {b['producer_epoch']} "
        f"partitionLeaderEpoch: {b['partition_leader_epoch']} "
        f"isTransactional: {_bool(b['is_transactional'])} isControl: {_bool(b['is_control'])} "
        f"deleteHorizonMs: {_optional_long(b['delete_horizon_ms'])} position: {b['position']} "
        f"{b['timestamp_type']}: {b['max_timestamp']} size: {b['size']} magic: {b['magic']} "
        f"compresscodec: {b['compression']} crc: {b['crc']} isvalid: {_bool(b['crc_valid'])}"
    )


def _record_line(r: Json, timestamp_type: str) -> str:
    parts = [
        f"| offset: {r['offset']} {timestamp_type}: {r['timestamp']} keySize: {r['key_size']} "
        f"valueSize: {r['value_size']} sequence: {r['sequence']} "
        f"headerKeys: [{','.join(h['key'] for h in r['headers'])}]"
    ]
    control = r.get("control")
    if control is not None:
        if "coordinator_epoch" in control:
            parts.append(
                f"endTxnMarker: {control['type']} coordinatorEpoch: {control['coordinator_epoch']}"
            )
        else:
            parts.append(f"controlType: {control['type']}({control['type_id']})")
    else:
        if r["key"] is not None:
            parts.append(f"key: {_text(r['key'], r['key_encoding'])}")
        if r["value"] is not None:
            parts.append(f"payload: {_text(r['value'], r['value_encoding'])}")
        if r["headers"]:
            rendered = ",".join(
                f"{h['key']}={_text(h['value'], h['value_encoding'])}" for h in r["headers"]
            )
            parts.append(f"headers: [{rendered}]")
    return " ".join(parts)


def _bool(value: bool | None) -> str:
    return "true" if value else "false"


def _item_lines(kind: FileKind, item: Json) -> Iterator[str]:
    if kind == FileKind.LOG:
        yield _batch_line(item)
        for record in item.get("data", ()):
            yield _record_line(record, item["timestamp_type"])
    elif kind == FileKind.OFFSET_INDEX:
        yield f"offset: {item['offset']} position: {item['position']}"
    elif kind == FileKind.TIME_INDEX:
        yield f"timestamp: {item['timestamp']} offset: {item['offset']}"
    elif kind == FileKind.TXN_INDEX:
        yield (
            f"version: {item['version']} producerId: {item['producer_id']} "
            f"firstOffset: {item['first_offset']} lastOffset: {item['last_offset']} "
            f"lastStableOffset: {item['last_stable_offset']}"
        )
    else:
        yield (
            f"producerId: {item['producer_id']} producerEpoch: {item['producer_epoch']} "
            f"coordinatorEpoch: {item['coordinator_epoch']} "
            f"currentTxnFirstOffset: {_optional_long(item['current_txn_first_offset'])} "
            f"lastTimestamp: {item['last_timestamp']} firstSequence: {item['first_sequence']} "
            f"lastSequence: {item['last_sequence']} lastOffset: {item['last_offset']} "
            f"offsetDelta: {item['offset_delta']} timestamp: {item['last_timestamp']}"
        )


def render_text(dump: FileDump) -> Iterator[str]:
    """Kafka DumpLogSegments-style lines (without newlines) for one file, streamed.

    Problems are interleaved where they are found, each line starting with ``error:`` or
    ``mismatch:``.
    """
    yield f"Dumping {dump.file}"
    if dump.kind == FileKind.LOG and dump.head.get("base_offset") is not None:
        yield f"Log starting offset: {dump.head['base_offset']}"
    elif dump.kind == FileKind.PRODUCER_SNAPSHOT and dump.head.get("offset") is not None:
        yield f"Snapshot offset: {dump.head['offset']}"
    shown_errors = shown_mismatches = 0
    count = 0

    def new_problems() -> Iterator[str]:
        nonlocal shown_errors, shown_mismatches
        for e in dump.errors[shown_errors:]:
            yield f"error: {e['message']}"
        shown_errors = len(dump.errors)
        if dump.mismatches is not None:
            for m in dump.mismatches[shown_mismatches:]:
                yield f"mismatch: {m['message']}"
            shown_mismatches = len(dump.mismatches)

    for item in dump.items():
        count += 1
        yield from _item_lines(dump.kind, item)
        yield from new_problems()
    if count == 0 and dump.kind != FileKind.LOG:
        yield f"{dump.file} is empty."
    yield from new_problems()
    if dump.kind == FileKind.LOG and dump.tail.get("trailing_bytes"):
        yield f"Found {dump.tail['trailing_bytes']} invalid bytes at the end of {Path(dump.file).name}"
    if dump.mismatches is not None and not dump.mismatches and not dump.errors:
        yield f"{dump.file} passed verification against {dump.head.get('log_file')}."


def render_json(dumps: Iterable[FileDump], *, single: bool) -> Iterator[str]:
    """One JSON document, streamed in pieces: the file's document when ``single``, else
    ``{"files": [...]}``. Each batch or entry goes on its own line."""
    if not single:
        yield '{"files": [\n'
    for n, dump in enumerate(dumps):
        if n:
            yield ",\n"
        yield from _json_document(dump)
    if not single:
        yield "\n]}"
    yield "\n"


def _json_document(dump: FileDump) -> Iterator[str]:
    # Written by hand around the streamed items so that no list of them is ever built; every
    # value still goes through json.dumps.
    yield "{"
    yield f'"file": {json.dumps(dump.file)}, "kind": {json.dumps(str(dump.kind))}'
    for key, value in dump.head.items():
        yield f", {json.dumps(key)}: {json.dumps(value)}"
    yield f", {json.dumps(dump.items_key)}: ["
    for n, item in enumerate(dump.items()):
        yield ("\n" if n == 0 else ",\n") + json.dumps(item)
    yield "]"
    for key, value in dump.tail.items():
        yield f", {json.dumps(key)}: {json.dumps(value)}"
    yield f', "errors": {json.dumps(dump.errors)}'
    if dump.mismatches is not None:
        yield f', "mismatches": {json.dumps(dump.mismatches)}'
    yield "}"
