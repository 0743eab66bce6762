"""The producer-state snapshot file: ``<20-digit offset>.snapshot`` in a partition dir.

Kafka's layout (ProducerSnapshot schema, version 1, not flexible), big-endian::

    version            int16   always 1
    crc                uint32  CRC-32C of every byte after this field
    entries            int32   count, then that many 46-byte entries:
      producerId           int64
      epoch                int16
      lastSequence         int32
      lastOffset           int64   -1 when the producer has no retained batch
      offsetDelta          int32   lastOffset - firstOffset of that batch
      timestamp            int64
      coordinatorEpoch     int32
      currentTxnFirstOffset int64  -1 when no transaction is open

The offset in the file name is exclusive: the snapshot holds the state of every batch below it.
Kafka keeps only the last batch per producer in the file, not the five kept in memory.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from logkeel.records.batch import crc32c
from logkeel.storage.errors import CorruptSnapshotError, io_guard
from logkeel.storage.fileio import atomic_write, read_file

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_END = _VERSION.size + _CRC.size  # the CRC covers everything from here on
_HEADER_SIZE = _CRC_END + _COUNT.size
_NAME = re.compile(r"^(\d{20})\.snapshot$")
_MAX_OFFSET = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer's row in a snapshot, with Kafka's field meanings."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


class SnapshotFile(NamedTuple):
    offset: int
    path: Path


class SnapshotListing(NamedTuple):
    """Snapshot files of a dir, oldest first, and ``*.snapshot`` names that carry no offset."""

    files: list[SnapshotFile]
    malformed: list[Path]


def encode_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    body = bytearray(_HEADER_SIZE)
    count = 0
    for e in entries:
        body += _ENTRY.pack(
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        count += 1
    _VERSION.pack_into(body, 0, SNAPSHOT_VERSION)
    _COUNT.pack_into(body, _CRC_END, count)
    _CRC.pack_into(body, _VERSION.size, crc32c(memoryview(body)[_CRC_END:]))
    return bytes(body)


def decode_snapshot(
    data: bytes | bytearray | memoryview, source: str = "snapshot"
) -> list[ProducerSnapshotEntry]:
    """Parses a whole snapshot file; any deviation from the layout is a CorruptSnapshotError."""
    if len(data) < _HEADER_SIZE:
        raise CorruptSnapshotError(
            f"{source}: {len(data)} bytes is shorter than the {_HEADER_SIZE}-byte header"
        )
    (version,) = _VERSION.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{source}: unknown snapshot version {version}")
    (stored_crc,) = _CRC.unpack_from(data, _VERSION.size)
    computed = crc32c(memoryview(data)[_CRC_END:])
    if stored_crc != computed:
        raise CorruptSnapshotError(
            f"{source}: CRC mismatch (stored {stored_crc:#010x}, computed {computed:#010x})"
        )
    (count,) = _COUNT.unpack_from(data, _CRC_END)
    if count < 0:
        raise CorruptSnapshotError(f"{source}: negative entry count {count}")
    expected = _HEADER_SIZE + count * _ENTRY.size
    if len(data) != expected:
        # A matching CRC with the wrong length means the writer was not Kafka's, or the bytes
        # were rewritten with a fresh CRC; either way the rows cannot be trusted.
        raise CorruptSnapshotError(
            f"{source}: {count} entries need {expected} bytes, file has {len(data)}"
        )
    return [
        ProducerSnapshotEntry(*_ENTRY.unpack_from(data, _HEADER_SIZE + i * _ENTRY.size))
        for i in range(count)
    ]


def write_snapshot(path: str | Path, entries: Iterable[ProducerSnapshotEntry]) -> None:
    """Writes atomically, so a crash leaves the old file or the complete new one. Raises OSError."""
    atomic_write(path, encode_snapshot(entries))


@dataclass(frozen=True, slots=True)
class PendingSnapshot:
    """A snapshot encoded (under the log's lock) and not yet written (possibly without it)."""

    path: Path
    offset: int
    data: bytes
    producers: int
    log_dir: Path

    def write(self) -> None:
        with io_guard(self.log_dir, f"writing producer snapshot {self.path}"):
            atomic_write(self.path, self.data)
        log.info("wrote producer snapshot %s with %d producer ids", self.path, self.producers)

    def discard(self) -> None:
        with io_guard(self.log_dir, f"deleting producer snapshot {self.path}"):
            self.path.unlink(missing_ok=True)


def read_snapshot(path: str | Path) -> list[ProducerSnapshotEntry]:
    """Raises CorruptSnapshotError for bad content and OSError if the file cannot be read."""
    return decode_snapshot(read_file(path), str(path))


def snapshot_file_name(offset: int) -> str:
    if not 0 <= offset <= _MAX_OFFSET:
        raise ValueError(f"snapshot offset {offset} is out of range")
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_path(partition_dir: str | Path, offset: int) -> Path:
    return Path(partition_dir) / snapshot_file_name(offset)


def parse_snapshot_offset(name: str) -> int | None:
    """The offset in a well-formed snapshot file name, else None."""
    m = _NAME.match(name)
    if m is None:
        return None
    offset = int(m.group(1))
    return offset if offset <= _MAX_OFFSET else None


def list_snapshot_files(partition_dir: str | Path) -> SnapshotListing:
    """Regular files ending in ``.snapshot``; a missing dir has none. Raises OSError."""
    try:
        scan = os.scandir(partition_dir)
    except FileNotFoundError:
        return SnapshotListing([], [])
    with scan:
        names = [e.name for e in scan if e.name.endswith(SNAPSHOT_SUFFIX) and e.is_file()]
    return snapshot_listing(partition_dir, names)


def snapshot_listing(partition_dir: str | Path, names: Iterable[str]) -> SnapshotListing:
    """Sorts file names (from a listing made elsewhere) into snapshots and malformed names."""
    files: list[SnapshotFile] = []
    malformed: list[Path] = []
    for name in names:
        if not name.endswith(SNAPSHOT_SUFFIX):
            continue
        offset = parse_snapshot_offset(name)
        if offset is None:
            malformed.append(Path(partition_dir) / name)
        else:
            files.append(SnapshotFile(offset, Path(partition_dir) / name))
    files.sort()
    malformed.sort()
    return SnapshotListing(files, malformed)
