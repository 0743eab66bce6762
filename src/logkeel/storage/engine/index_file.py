"""The shared machinery of the memory-mapped, fixed-entry segment indexes (.index, .timeindex).

Kafka's layout (checked against apache/kafka's ``AbstractIndex``): an active index file is
preallocated to ``log.index.size.max.bytes`` rounded down to a multiple of the entry size and
memory-mapped; entries are appended in key order; when the segment is rolled or closed the file is
trimmed to its valid entries, so a trimmed file holds exactly ``length / entry_size`` entries.

Two things differ from Kafka on purpose:

* **Lazy.** Constructing an index touches no file. The file is opened on first use, so broker
  start-up costs nothing per inactive segment (KIP-263). ``is_loaded`` tells whether that has
  happened; ``close()`` returns the object to the unloaded state. A loaded index is mapped only
  while it holds entries, and gives its map back when too many are mapped (``index_maps``):
  before Python 3.13 each map holds a descriptor.
* **Crash-tolerant entry count.** Kafka trusts ``length / entry_size`` and rebuilds every index past
  the recovery point after an unclean shutdown. We keep indexes across a crash and only supplement
  them (AKIP-2, docs/proposals.md), so a preallocated file that was never trimmed must yield exactly
  the entries that were appended, not ``max_entries`` of mostly zeros (the mistake behind KAFKA-1112
  and the index-corruption incident in docs/proposals.md). See ``index_recovery``.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Generic, Self, TypeVar

from logkeel.storage.engine.index_maps import MAPS
from logkeel.storage.engine.index_recovery import (
    crashed_head,
    longest_valid_prefix,
    written_slots,
)
from logkeel.storage.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    StorageError,
    io_guard,
)
from logkeel.storage.fileio import fsync_file

log = logging.getLogger(__name__)

# log.index.size.max.bytes
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024

INT32_MAX = 2**31 - 1

# Kafka's "warm section": lookups from in-sync followers and consumers hit the last few pages of
# an index; searching those first keeps the pages a lookup touches hot in the page cache.
_WARM_SECTION_BYTES = 8192

# Blocks are reserved ahead of the mmap writes in chunks of this size (see _ensure_reserved).
_RESERVE_CHUNK = 64 * 1024

# Since 3.13, mmap can skip dup()ing the descriptor; before that every mapped index costs one fd
# (which is why an index is mapped only while it has entries, and only so many at a time: see
# index_maps).
_MMAP_KWARGS: dict[str, bool] = {"trackfd": False} if sys.version_info >= (3, 13) else {}

E = TypeVar("E", bound=tuple[int, int])


class AbstractIndex(ABC, Generic[E]):
    """A file of fixed-size big-endian entries, each (key, value), both ascending.

    Subclasses set ``entry_size``, ``_codec`` (the raw field layout), how a raw tuple maps to
    their entry type, which entry field holds the offset, and whether values must strictly
    increase. Entries are ``E`` tuples whose field 0 is the search key and field 1 the value.

    Thread-safe: every method takes the index's lock. Storage work runs in threads; a lookup
    racing a resize would otherwise read a mapping that was just closed.
    """

    entry_size: ClassVar[int]
    _codec: ClassVar[struct.Struct]
    _offset_field: ClassVar[int]
    _values_strictly_increase: ClassVar[bool]
    _kind: ClassVar[str]

    def __init__(
        self,
        path: str | Path,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        *,
        writable: bool = True,
        log_dir: str | Path | None = None,
    ) -> None:
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        # <log dir>/<topic>-<partition>/<base offset>.index
        self._log_dir = Path(log_dir) if log_dir is not None else self._path.parent.parent
        self._lock = threading.RLock()
        self._mm: mmap.mmap | None = None
        self._loaded = False
        self._deleted = False
        self._length = 0
        self._entries = 0
        self._reserved = 0
        # Written through a map since dropped: the next flush syncs the file itself.
        self._unsynced = False
        self._used = False

    # ---- identity (never touches the file) -------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def log_dir(self) -> Path:
        return self._log_dir

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def is_loaded(self) -> bool:
        """Whether the file has been opened (tests count these to check laziness)."""
        return self._loaded

    @property
    def is_mapped(self) -> bool:
        """Whether the file is memory-mapped now (a descriptor before Python 3.13)."""
        return self._mm is not None

    def update_parent_dir(self, parent_dir: str | Path) -> None:
        """Points at the same file name in another directory (the partition dir was renamed)."""
        with self._lock:
            self._path = Path(parent_dir) / self._path.name

    def __repr__(self) -> str:
        state = f"entries={self._entries}" if self._loaded else "unloaded"
        return (
            f"{type(self).__name__}({str(self._path)!r}, base_offset={self._base_offset}, {state})"
        )

    # ---- sizes -----------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        """The number of valid entries."""
        with self._lock:
            self._ensure_loaded()
            return self._entries

    @property
    def max_entries(self) -> int:
        with self._lock:
            self._ensure_loaded()
            return self._length // self.entry_size

    @property
    def length(self) -> int:
        """The file's length in bytes (preallocated size while active)."""
        with self._lock:
            self._ensure_loaded()
            return self._length

    @property
    def size_in_bytes(self) -> int:
        """The bytes actually used by entries."""
        return self.entries * self.entry_size

    def is_full(self) -> bool:
        if self._loaded:  # checked before every append: no call
            return self._entries >= self._length // self.entry_size
        return self._entries >= self._capacity(0)

    def _capacity(self, reserved_slots: int) -> int:
        # Checked before every append: no lock once loaded (two int reads; appends to an
        # active index are serialised by the log's lock anyway).
        if not self._loaded:
            with self._lock:
                self._ensure_loaded()
        return self._length // self.entry_size - reserved_slots

    # ---- reading ---------------------------------------------------------------------------

    def entry(self, n: int) -> E:
        """The n-th entry (0-based)."""
        with self._lock:
            self._ensure_loaded()
            if not 0 <= n < self._entries:
                raise IndexError(
                    f"entry {n} requested from {self._kind} {self._path} with {self._entries} entries"
                )
            return self._entry(n)

    def iter_entries(self) -> Iterator[E]:
        """All valid entries in order (a snapshot taken under the lock)."""
        with self._lock:
            self._ensure_loaded()
            raw = self._mapped()[: self._entries * self.entry_size] if self._entries else b""
        return map(self._to_entry, self._codec.iter_unpack(raw))

    def relative_offset(self, offset: int) -> int:
        relative = offset - self._base_offset
        if not 0 <= relative <= INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} is not within int32 of base offset {self._base_offset} "
                f"({self._path})"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self._base_offset <= INT32_MAX

    # ---- mutation --------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drops every entry whose offset is >= ``offset``; larger than all entries: no effect."""
        with self._lock:
            self._ensure_loaded()
            self._truncate_to_entries(self._count_below(offset, self._offset_field))

    def truncate(self) -> None:
        """Drops all entries (the file keeps its size)."""
        with self._lock:
            self._ensure_loaded()
            self._truncate_to_entries(0)

    def reset(self) -> None:
        """Drops all entries and grows the file back to ``max_index_size`` (before a rebuild)."""
        with self._lock:
            self.truncate()
            self.resize(self._max_index_size)

    def resize(self, new_size: int) -> bool:
        """Sets the file (and map) length to ``new_size`` rounded down to whole entries.

        Used to trim on roll/close and to grow a reloaded active segment's index back to the
        maximum. Returns whether anything changed.
        """
        with self._lock:
            rounded = self.entry_size * (new_size // self.entry_size)
            if not self._loaded and self._writable:
                # Growing an index not yet loaded (the active segment's at recovery or on its
                # first append): opened, extended and mapped in one trip.
                self._ensure_loaded(grow_to=rounded)
            else:
                self._ensure_loaded()
            if rounded == self._length:
                return False
            self._require_writable("resize")
            if rounded < self._entries * self.entry_size:
                raise ValueError(
                    f"cannot resize {self._kind} {self._path} to {rounded} bytes: it holds "
                    f"{self._entries} entries; truncate first"
                )
            try:
                with io_guard(self._log_dir, f"resizing {self._kind} {self._path}"):
                    fd = os.open(self._path, os.O_RDWR | os.O_CLOEXEC)
                    try:
                        os.ftruncate(fd, rounded)
                        new_mm = self._map(fd, rounded) if self._entries else None
                    finally:
                        os.close(fd)
            except BaseException:
                # The file may or may not have its new length now; the old map may reach past
                # its end (SIGBUS on touch). Drop it: the next access maps the file afresh.
                self._unload()
                raise
            old, self._mm = self._mm, new_mm
            if old is not None:
                self._unsynced = True
                old.close()
            if new_mm is None:
                MAPS.discard(self)
            else:
                MAPS.add(self)
            self._length = rounded
            self._reserved = min(self._reserved, rounded)
            return True

    def trim_to_valid_size(self) -> None:
        """Shrinks the file to exactly its valid entries (on roll and close)."""
        with self._lock:
            self._ensure_loaded()
            self.resize(self._entries * self.entry_size)

    def flush(self) -> None:
        """Writes the mapped pages to disk (msync). Nothing to do if never loaded."""
        with self._lock:
            if not self._writable:
                return
            if self._unsynced:
                # Pages written through a map since dropped are the file's dirty pages now.
                with io_guard(self._log_dir, f"flushing {self._kind} {self._path}"):
                    fsync_file(self._path)
                self._unsynced = False
            elif self._mm is not None:
                with io_guard(self._log_dir, f"flushing {self._kind} {self._path}"):
                    self._mm.flush()

    def close(self) -> None:
        """Trims a writable index to its entries and unmaps it; a later access reloads it."""
        with self._lock:
            if not self._loaded:
                return
            try:
                if self._writable:
                    self.trim_to_valid_size()
            finally:
                self._unload()

    def close_handler(self) -> None:
        """Unmaps without writing anything (the disk may have failed)."""
        with self._lock:
            self._unload()

    def delete(self) -> bool:
        """Unmaps and deletes the file; True if it existed.

        The object is unusable afterwards: a lookup racing retention must not recreate the file.
        """
        with self._lock:
            self._unload()
            self._deleted = True
            with io_guard(self._log_dir, f"deleting {self._kind} {self._path}"):
                try:
                    os.unlink(self._path)
                except FileNotFoundError:
                    return False
            return True

    def rename(self, new_path: str | Path) -> None:
        """Renames the file (``.deleted``/``.swap`` suffixes); a missing file only moves the name.

        A live mapping stays valid across a rename, so a loaded index keeps working.
        """
        new_path = Path(new_path)
        with self._lock:
            with io_guard(self._log_dir, f"renaming {self._kind} {self._path} to {new_path}"):
                try:
                    os.replace(self._path, new_path)
                except FileNotFoundError:
                    if self._path.exists():
                        raise  # the target directory is missing
            self._path = new_path

    def sanity_check(self) -> None:
        """Raises CorruptIndexError if the file is inconsistent with itself.

        Cheap checks first (Kafka's: whole entries, last offset >= base offset), then one pass
        over all entries for ordering. Checking against the segment's log (positions within
        the log, last offset below the log end) is the segment's job.
        """
        with self._lock:
            self._ensure_loaded()
            if self._length % self.entry_size:
                raise CorruptIndexError(
                    f"{self._kind} {self._path} is corrupt: {self._length} bytes is not a "
                    f"multiple of the entry size {self.entry_size}"
                )
            if self._entries:
                last_offset = self._entry(self._entries - 1)[self._offset_field]
                if last_offset < self._base_offset:
                    raise CorruptIndexError(
                        f"{self._kind} {self._path} is corrupt: last offset {last_offset} is "
                        f"less than the base offset {self._base_offset}"
                    )
            raw = self._mapped()[: self._entries * self.entry_size] if self._entries else b""
            valid, reason = self._longest_valid_prefix(raw)
            if valid < self._entries:
                raise CorruptIndexError(f"{self._kind} {self._path} is corrupt: {reason}")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- subclass hooks --------------------------------------------------------------------

    @abstractmethod
    def _to_entry(self, raw: tuple[int, int]) -> E:
        """Turns a raw (stored) tuple into the public entry, adding the base offset."""

    # ---- internals (caller holds the lock) --------------------------------------------------

    def _entry(self, n: int) -> E:
        return self._to_entry(
            self._codec.unpack_from(self._mm or self._mapped(), n * self.entry_size)
        )

    def _require_writable(self, what: str) -> None:
        if not self._writable:
            raise ValueError(f"cannot {what} read-only {self._kind} {self._path}")

    def _ensure_loaded(self, grow_to: int = 0) -> None:
        """Opens and maps the file; ``grow_to``: a larger length to extend it to first (the
        entries are those of the file as it was)."""
        self._used = True
        if self._loaded:
            return
        if self._deleted:
            raise StorageError(f"{self._kind} {self._path} was deleted")
        if (
            self._writable
            and self._max_index_size < self.entry_size
            and not os.path.exists(self._path)
        ):
            raise ValueError(f"invalid max index size {self._max_index_size} for {self._path}")
        with io_guard(self._log_dir, f"opening {self._kind} {self._path}"):
            fd, created = self._open()
            try:
                if created:
                    # Sparse, like Kafka's RandomAccessFile.setLength; see _ensure_reserved.
                    size = self.entry_size * (self._max_index_size // self.entry_size)
                    os.ftruncate(fd, size)
                length = os.fstat(fd).st_size
                # What a preallocated (crashed) index ends with is read here, not through the
                # map: a fault on a page of its sparse tail zero-fills a large folio (~1 ms on
                # the development VM, seconds for a broker's worth of partitions).
                head = None if created else crashed_head(fd, length, self.entry_size)
                entries = 0 if created else self._recover_entry_count(fd, length, head)
                mapped = length
                if grow_to > length:
                    os.ftruncate(fd, grow_to)
                    mapped = grow_to
                # No map while there is no entry (see _mapped).
                mm = self._map(fd, mapped) if entries else None
            finally:
                os.close(fd)
        self._mm, self._length, self._entries, self._loaded = mm, mapped, entries, True
        self._reserved = entries * self.entry_size
        if mm is not None:
            MAPS.add(self)

    def _open(self) -> tuple[int, bool]:
        if not self._writable:
            return os.open(self._path, os.O_RDONLY | os.O_CLOEXEC), False
        # Existing files first: a start-up opens thousands, a roll creates two.
        try:
            return os.open(self._path, os.O_RDWR | os.O_CLOEXEC), False
        except FileNotFoundError:
            pass
        try:
            return os.open(
                self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644
            ), True
        except FileExistsError:
            return os.open(self._path, os.O_RDWR | os.O_CLOEXEC), False

    def _map(self, fd: int, length: int) -> mmap.mmap | None:
        # mmap refuses length 0; an empty (trimmed, entry-less) index simply has no map.
        if length == 0:
            return None
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
        return mmap.mmap(fd, length, access=access, **_MMAP_KWARGS)

    def _mapped(self) -> mmap.mmap:
        """The map of a loaded index, made now if it has none: an index is mapped from its
        first entry on, and again after giving its map back (index_maps)."""
        mm = self._mm
        if mm is not None:
            return mm
        with io_guard(self._log_dir, f"mapping {self._kind} {self._path}"):
            fd = os.open(self._path, (os.O_RDWR if self._writable else os.O_RDONLY) | os.O_CLOEXEC)
            try:
                mm = self._map(fd, self._length)
            finally:
                os.close(fd)
        if mm is None:
            raise StorageError(f"{self._kind} {self._path} has no room for an entry")
        self._mm = mm
        MAPS.add(self)
        return mm

    def _release_map_if_idle(self) -> bool:
        """Unmaps, keeping what is known of the file, unless another thread holds the lock
        (index_maps calls this on the index used least recently)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            mm, self._mm = self._mm, None
            if mm is not None:
                if self._writable:
                    self._unsynced = True
                mm.close()
            return True
        finally:
            self._lock.release()

    def _unload(self) -> None:
        mm, self._mm = self._mm, None
        self._loaded = False
        self._entries = self._length = self._reserved = 0
        if mm is not None:
            MAPS.discard(self)
            mm.close()

    def _recover_entry_count(self, fd: int, length: int, head: bytes | None) -> int:
        """How many entries an existing file holds (see index_recovery). ``head``: None for a
        file whose last slot is not all zeros, else its written part (see crashed_head)."""
        if head is None:
            return length // self.entry_size
        written = written_slots(head, self.entry_size)
        valid, reason = self._longest_valid_prefix(head[: written * self.entry_size])
        if valid < written:
            log.warning(
                "%s %s: keeping %d of %d written entries after an unclean shutdown: %s",
                self._kind,
                self._path,
                valid,
                written,
                reason,
            )
            if self._writable:
                # So that a later crash cannot mistake the junk for entries.
                _pwrite_all(fd, bytes((written - valid) * self.entry_size), valid * self.entry_size)
        return valid

    def _longest_valid_prefix(self, raw: bytes) -> tuple[int, str | None]:
        return longest_valid_prefix(
            raw,
            self._codec,
            values_strictly_increase=self._values_strictly_increase,
            describe=self._to_entry,
        )

    def _zero_slots(self, start: int, end: int) -> None:
        if end > start:
            self._mapped()[start * self.entry_size : end * self.entry_size] = bytes(
                (end - start) * self.entry_size
            )

    def _truncate_to_entries(self, n: int) -> None:
        if n < self._entries:
            self._require_writable("truncate")
            # Zeroing keeps "everything past the entries is zero" true, which is what lets an
            # untrimmed file be read back after a crash (see index_recovery).
            self._zero_slots(n, self._entries)
            self._entries = n

    def _search(self, target: int, field: int) -> int:
        """The largest slot whose ``field`` is <= ``target``, or -1. O(log n) map reads.

        Searches Kafka's warm section (the last 8 KiB of entries) first when the target lies
        there, so that lookups near the end of the log touch only pages that stay cached.
        """
        n = self._entries
        if n == 0:
            return -1
        first_warm = max(0, n - 1 - _WARM_SECTION_BYTES // self.entry_size)
        if self._entry(first_warm)[field] <= target:
            lo, hi = first_warm, n - 1
        elif self._entry(0)[field] > target:
            return -1
        else:
            lo, hi = 0, first_warm
        # Invariant: entry(lo)[field] <= target; the answer lies in [lo, hi]. No early exit on
        # equality: with non-strict values (time index offsets) the last equal slot is wanted.
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if self._entry(mid)[field] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _count_below(self, target: int, field: int) -> int:
        """How many entries have ``field`` < ``target`` (fields are integers)."""
        return self._search(target - 1, field) + 1

    def _append_raw(self, raw: tuple[int, int]) -> None:
        """Writes ``raw`` into the next slot; the caller has validated it."""
        self._require_writable("append to")
        if self._entries >= self._length // self.entry_size:
            raise IndexFullError(
                f"attempt to append to a full {self._kind} {self._path} ({self._entries} entries)"
            )
        mm = self._mapped()
        position = self._entries * self.entry_size
        self._ensure_reserved(position + self.entry_size)
        self._codec.pack_into(mm, position, *raw)
        self._entries += 1

    def _ensure_reserved(self, end: int) -> None:
        """Allocates disk blocks for the map up to ``end`` before writing through it.

        The preallocated file is sparse. A store into a hole of a full disk raises SIGBUS,
        which kills the process (Kafka's JVM dies of the same thing). Writing the next chunk's
        zeros with pwrite first turns that into ENOSPC here, an IO error that takes only this
        log dir offline. It also puts those pages in the page cache, dirty: the first store
        into a page that is not (a fresh or fallocated one) faults into the filesystem, which
        took 1-10 ms here (ext4 waiting on its journal) with the partition's lock held.
        One call per 64 KiB of index, i.e. per ~32 MiB of log.
        """
        if end <= self._reserved:
            return
        new_end = min(self._length, -(-end // _RESERVE_CHUNK) * _RESERVE_CHUNK)
        with io_guard(self._log_dir, f"reserving space for {self._kind} {self._path}"):
            fd = os.open(self._path, os.O_RDWR | os.O_CLOEXEC)
            try:
                # Slots at and past _reserved hold no entry (zeros end the index), so writing
                # zeros there changes nothing a reader can see.
                _pwrite_all(fd, bytes(new_end - self._reserved), self._reserved)
            finally:
                os.close(fd)
        self._reserved = new_end


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view, position = view[n:], position + n
