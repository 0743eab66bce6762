"""The transaction index (``<base offset>.txnindex``): the aborted transactions whose abort
markers were written in a segment, for READ_COMMITTED fetches.

Format (apache/kafka ``AbortedTxn``/``TransactionIndex``): a plain append-only file of 34-byte
big-endian entries: int16 version (0), int64 producer id, int64 first offset, int64 last offset,
int64 last stable offset (the partition's LSO once the transaction was aborted). Entries are
appended in the order of their markers, so last offsets increase strictly.

Not mapped and not preallocated. The file is created by the first append, and nothing is read
until the index is first used (KIP-263). The entries are small and few, so they are read once
into memory; no descriptor stays open between calls.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from logkeel.storage.errors import CorruptIndexError, InvalidOffsetError, StorageError, io_guard
from logkeel.storage.fileio import fsync_file, read_file

ABORTED_TXN_SIZE = 34
ABORTED_TXN_VERSION = 0

_CODEC = struct.Struct(">hqqqq")
assert _CODEC.size == ABORTED_TXN_SIZE


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _CODEC.pack(ABORTED_TXN_VERSION, *self)


class TxnIndexSearchResult(NamedTuple):
    aborted_txns: list[AbortedTxn]
    # True once an entry's LSO reached the upper bound: later segments cannot hold more
    # transactions overlapping the fetch, so the search can stop here.
    is_complete: bool


class TransactionIndex:
    def __init__(
        self, path: str | Path, start_offset: int, *, log_dir: str | Path | None = None
    ) -> None:
        self._path = Path(path)
        self._start_offset = start_offset
        self._log_dir = Path(log_dir) if log_dir is not None else self._path.parent.parent
        self._lock = threading.RLock()
        self._loaded = False
        self._deleted = False
        self._data = bytearray()  # the whole entries in the file
        self._torn = 0  # bytes of a partial entry after them (a crash mid-append)
        self._dirty = False

    @property
    def path(self) -> Path:
        return self._path

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def log_dir(self) -> Path:
        return self._log_dir

    @property
    def is_loaded(self) -> bool:
        return self._loaded

    def update_parent_dir(self, parent_dir: str | Path) -> None:
        with self._lock:
            self._path = Path(parent_dir) / self._path.name

    def __repr__(self) -> str:
        state = f"entries={len(self._data) // ABORTED_TXN_SIZE}" if self._loaded else "unloaded"
        return f"TransactionIndex({str(self._path)!r}, start_offset={self._start_offset}, {state})"

    @property
    def is_empty(self) -> bool:
        """No entry and no stray bytes (a missing file is empty)."""
        with self._lock:
            self._ensure_loaded()
            return not self._data and not self._torn

    @property
    def last_offset(self) -> int | None:
        """The last offset of the last aborted transaction, or None if there is none."""
        with self._lock:
            self._ensure_loaded()
            if not self._data:
                return None
            last: int = _CODEC.unpack_from(self._data, len(self._data) - ABORTED_TXN_SIZE)[3]
            return last

    def append(self, txn: AbortedTxn) -> None:
        """Appends an aborted transaction; its last offset must exceed the previous one's."""
        with self._lock:
            last = self.last_offset
            if last is not None and txn.last_offset <= last:
                raise InvalidOffsetError(
                    f"the last offset of appended transactions must increase: "
                    f"{txn.last_offset} is not greater than {last} in {self._path}"
                )
            if txn.first_offset > txn.last_offset:
                raise InvalidOffsetError(f"{txn} ends before it starts ({self._path})")
            entry = txn.to_bytes()
            with io_guard(self._log_dir, f"appending to transaction index {self._path}"):
                fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
                try:
                    if self._torn:
                        # A partial entry left by a crash would shift every later entry.
                        os.ftruncate(fd, len(self._data))
                        self._torn = 0
                    _pwrite_all(fd, entry, len(self._data))
                finally:
                    os.close(fd)
            self._data += entry
            self._dirty = True

    def all_aborted_txns(self) -> list[AbortedTxn]:
        with self._lock:
            return list(self._iter())

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset).

        ``is_complete`` says whether the search can stop at this segment: an entry whose LSO is
        at or past the upper bound proves that no transaction overlapping the range had its
        abort marker written later.
        """
        found: list[AbortedTxn] = []
        with self._lock:
            for txn in self._iter():
                if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                    found.append(txn)
                if txn.last_stable_offset >= upper_bound_offset:
                    return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def truncate_to(self, offset: int) -> None:
        """Drops the first entry whose last offset is >= ``offset`` and everything after it."""
        with self._lock:
            for i, txn in enumerate(self._iter()):
                if txn.last_offset >= offset:
                    self._truncate_file(i * ABORTED_TXN_SIZE)
                    return

    def reset(self) -> None:
        """Drops all entries (before a rebuild); a missing file stays missing."""
        with self._lock:
            self._ensure_loaded()
            if os.path.exists(self._path):
                self._truncate_file(0)

    def sanity_check(self) -> None:
        """Raises CorruptIndexError if the file is inconsistent with itself or its segment."""
        with self._lock:
            self._ensure_loaded()
            if self._torn:
                raise CorruptIndexError(
                    f"transaction index {self._path} is corrupt: "
                    f"{len(self._data) + self._torn} bytes is not a multiple of {ABORTED_TXN_SIZE}"
                )
            previous: AbortedTxn | None = None
            for txn in self._iter():
                if txn.last_offset < self._start_offset:
                    raise CorruptIndexError(
                        f"last offset of aborted transaction {txn} in index {self._path} is "
                        f"less than start offset {self._start_offset}"
                    )
                if txn.first_offset > txn.last_offset:
                    raise CorruptIndexError(
                        f"aborted transaction {txn} in index {self._path} ends before it starts"
                    )
                if previous is not None and txn.last_offset <= previous.last_offset:
                    raise CorruptIndexError(
                        f"aborted transaction {txn} in index {self._path} does not follow "
                        f"{previous}"
                    )
                previous = txn

    def flush(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            with io_guard(self._log_dir, f"flushing transaction index {self._path}"):
                fsync_file(self._path)
            self._dirty = False

    def close(self) -> None:
        """Forgets the entries read; a later access reads the file again."""
        with self._lock:
            self._loaded = False
            self._data = bytearray()
            self._torn = 0

    def delete(self) -> bool:
        """Deletes the file; True if it existed. The object is unusable afterwards."""
        with self._lock:
            self.close()
            self._deleted = True
            with io_guard(self._log_dir, f"deleting transaction index {self._path}"):
                try:
                    os.unlink(self._path)
                except FileNotFoundError:
                    return False
            return True

    def rename(self, new_path: str | Path) -> None:
        """Renames the file if it exists (it need not: it is created by the first append)."""
        new_path = Path(new_path)
        with self._lock:
            with io_guard(self._log_dir, f"renaming {self._path} to {new_path}"):
                try:
                    os.replace(self._path, new_path)
                except FileNotFoundError:
                    if self._path.exists():
                        raise
            self._path = new_path

    # ---- internals (caller holds the lock) --------------------------------------------------

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        if self._deleted:
            raise StorageError(f"transaction index {self._path} was deleted")
        with io_guard(self._log_dir, f"reading transaction index {self._path}"):
            try:
                data = read_file(self._path)
            except FileNotFoundError:
                data = b""
        whole = len(data) - len(data) % ABORTED_TXN_SIZE
        self._data = bytearray(data[:whole])
        self._torn = len(data) - whole
        self._loaded = True

    def _iter(self) -> Iterator[AbortedTxn]:
        self._ensure_loaded()
        for version, *fields in _CODEC.iter_unpack(bytes(self._data)):
            if version != ABORTED_TXN_VERSION:
                raise CorruptIndexError(
                    f"unexpected aborted transaction version {version} in transaction index "
                    f"{self._path}, current version is {ABORTED_TXN_VERSION}"
                )
            yield AbortedTxn(*fields)

    def _truncate_file(self, size: int) -> None:
        with io_guard(self._log_dir, f"truncating transaction index {self._path}"):
            fd = os.open(self._path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
        del self._data[size:]
        self._torn = 0
        self._dirty = True


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
