"""A segment's `.log` file: append-only batches, read by position without copying.

Reads return `FileRegion`s — (file descriptor, position, size) — so the server can hand
them to `sendfile` instead of pulling record bytes through Python.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from logkeel.records.batch import HEADER_SIZE, BatchHeader
from logkeel.records.walk import (
    FILE_CHUNK,
    BadBatch,
    BatchCheck,
    BatchPosition,
    BatchWindow,
    complete_batches,
    walk_batches,
)
from logkeel.storage.errors import KafkaStorageError, io_guard

_SCAN_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``size`` bytes at ``position`` of an open segment file."""

    fd: int
    position: int
    size: int

    def read_bytes(self) -> bytes:
        chunks = []
        pos, remaining = self.position, self.size
        while remaining > 0:
            chunk = os.pread(self.fd, remaining, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)


class FileRecords:
    """The batches of one `.log` file. Opening the file is deferred to first use."""

    def __init__(self, path: Path, log_dir: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.log_dir = log_dir
        # Offline tools (dump, check) must neither need write access nor create a missing file.
        self.read_only = read_only
        self._fd: int | None = None
        self._size: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._fd is not None

    @property
    def fd(self) -> int:
        if self._fd is None:
            with io_guard(self.log_dir, f"open {self.path}"):
                flags = os.O_RDONLY if self.read_only else os.O_RDWR | os.O_CREAT
                self._fd = os.open(self.path, flags, 0o644)
                self._size = os.fstat(self._fd).st_size
        return self._fd

    @property
    def size(self) -> int:
        if self._size is None:
            if self._fd is None:
                with io_guard(self.log_dir, f"stat {self.path}"):
                    return os.stat(self.path).st_size
            self._size = os.fstat(self._fd).st_size
        return self._size

    def create(self) -> None:
        """Creates the file (empty) if it does not exist yet, and opens it."""
        _ = self.fd

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._size = None
            with io_guard(self.log_dir, f"close {self.path}"):
                os.close(fd)

    def rename(self, new_path: Path) -> None:
        with io_guard(self.log_dir, f"rename {self.path} to {new_path}"):
            try:
                os.replace(self.path, new_path)
            except FileNotFoundError:
                if self.path.exists():
                    raise
        self.path = new_path

    def delete(self) -> None:
        self.close()
        with io_guard(self.log_dir, f"delete {self.path}"):
            self.path.unlink(missing_ok=True)

    # -- writing -----------------------------------------------------------------------------
    def append(self, buffers: Sequence[bytes | bytearray | memoryview], size: int) -> int:
        """Writes the buffers, in order, at the end; returns the position they start at.
        ``size``: their total length (the caller knows it).

        Several buffers go out in one ``pwritev``, so a caller can patch a batch header
        without copying the batch.
        """
        fd = self._fd
        position = self._size
        if fd is None or position is None:
            fd, position = self.fd, self.size
        try:
            # Hot path: one syscall, no context manager; on a short write, finish the rest.
            written = os.pwritev(fd, buffers, position)
            if written < size:
                rest = memoryview(b"".join(buffers))[written:]
                while rest:
                    n = os.pwrite(fd, rest, position + written)
                    written += n
                    rest = rest[n:]
        except OSError as exc:
            raise KafkaStorageError(self.log_dir, f"append to {self.path}: {exc}", exc) from exc
        self._size = position + size
        return position

    def flush(self) -> None:
        if self._fd is not None:
            with io_guard(self.log_dir, f"fsync {self.path}"):
                os.fdatasync(self._fd)

    def truncate_to(self, size: int) -> int:
        """Cuts the file to ``size`` bytes; returns how many bytes were removed."""
        before = self.size
        if size >= before:
            return 0
        with io_guard(self.log_dir, f"truncate {self.path}"):
            os.ftruncate(self.fd, size)
        self._size = size
        return before - size

    # -- reading -----------------------------------------------------------------------------
    def region(self, position: int, size: int) -> FileRegion:
        return FileRegion(self.fd, position, max(0, min(size, self.size - position)))

    def read(self, position: int, size: int) -> bytes:
        with io_guard(self.log_dir, f"read {self.path}"):
            return self.region(position, size).read_bytes()

    def read_header(self, position: int) -> BatchHeader | None:
        """The header at ``position``, or None when fewer than a header's bytes remain."""
        with io_guard(self.log_dir, f"read {self.path}"):
            raw = os.pread(self.fd, HEADER_SIZE, position)
        if len(raw) < HEADER_SIZE:
            return None
        return BatchHeader.parse(raw)

    def window(self, end_position: int | None = None, *, chunk: int = FILE_CHUNK) -> BatchWindow:
        """The file up to ``end_position`` as a walkable window, read ``chunk`` bytes at a time."""
        end = self.size if end_position is None else min(end_position, self.size)
        return BatchWindow(pread=self._pread, size=end, chunk=chunk)

    def batches(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[BatchPosition]:
        """Headers of the complete, structurally valid batches from ``start_position`` on.

        Reads in 64 KiB chunks so that scanning many small batches costs few syscalls.
        Stops quietly at a partial tail; raises InvalidBatchError at a malformed header.
        CRCs are not checked here (see ``scan_valid``).
        """
        return complete_batches(self.window(end_position, chunk=_SCAN_CHUNK), start_position)

    def scan_valid(
        self, start_position: int = 0, check: BatchCheck | None = None
    ) -> Iterator[BatchPosition]:
        """Batches from ``start_position`` whose structure and CRC are valid and that ``check``
        accepts, in order. Ends at the first other one: everything after it is suspect.
        Reads each byte once, in large chunks, so a full scan runs at disk speed.
        """
        for item in walk_batches(self.window(), start_position, check=check):
            if type(item) is BadBatch:
                return
            yield item  # type: ignore[misc]

    def _pread(self, position: int, size: int) -> bytes:
        with io_guard(self.log_dir, f"read {self.path}"):
            return os.pread(self.fd, size, position)
