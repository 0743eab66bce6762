"""The offset index (``<base offset>.index``): sparse map from offsets to log file positions.

Format (apache/kafka ``OffsetIndex``): 8-byte big-endian entries, int32 offset relative to the
segment's base offset, then int32 byte position of the batch in the ``.log`` file. The segment adds
an entry every ``log.index.interval.bytes`` of log, keyed by the batch's **last** offset: last
offsets increase strictly from batch to batch, base offsets need not (a batch's base offset is not
always its first record's; keying by it is what broke index rebuilds in Kafka 0.11, see the
index-corruption incident in docs/proposals.md). A lookup for offset X lands on a batch whose last
offset <= X; the caller scans forward.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from logkeel.storage.engine.index_file import (
    INT32_MAX,
    AbstractIndex,
)
from logkeel.storage.errors import (
    InvalidIndexEntryError,
    InvalidOffsetError,
)

OFFSET_INDEX_ENTRY_SIZE = 8


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(AbstractIndex[OffsetPosition]):
    entry_size = OFFSET_INDEX_ENTRY_SIZE
    _codec = struct.Struct(">ii")
    _offset_field = 0
    _values_strictly_increase = True  # every entry is a different batch, so a later position
    _kind = "offset index"
    # The last entry as this fast path wrote it: (entries, map, relative offset, position). Valid
    # only while both the count and the map are still those (any other change of the entries
    # raises, truncates below the count, or maps the file anew), so no other path resets it.
    _tail: tuple[int, object, int, int] = (-1, None, 0, 0)

    def _to_entry(self, raw: tuple[int, int]) -> OffsetPosition:
        return OffsetPosition(self._base_offset + raw[0], raw[1])

    @property
    def last_entry(self) -> OffsetPosition:
        """The last entry, or (base offset, 0) if there is none."""
        with self._lock:
            self._ensure_loaded()
            if self._entries == 0:
                return OffsetPosition(self._base_offset, 0)
            return self._entry(self._entries - 1)

    @property
    def last_offset(self) -> int:
        return self.last_entry.offset

    def append(self, offset: int, position: int) -> None:
        """Adds (offset, position); both must exceed the last entry's.

        Raises InvalidOffsetError for an offset not above the last one, IndexFullError when
        there is no free slot, IndexOffsetOverflowError when offset - base does not fit an int32.
        """
        with self._lock:
            self._used = True
            if not self._loaded:
                self._ensure_loaded()
            relative = offset - self._base_offset
            n = self._entries
            slot = n * 8
            tail = self._tail
            if tail[0] == n and tail[1] is self._mm:
                last_relative, last_position = tail[2], tail[3]
            elif n:
                last_relative, last_position = self._codec.unpack_from(self._mapped(), slot - 8)
            else:
                last_relative = last_position = -1
            # One test for the usual case (runs for every indexed batch); the precise error
            # for anything else comes from _append_checked.
            if (
                last_relative < relative <= INT32_MAX
                and last_position < position <= INT32_MAX
                and slot + 8 <= self._length
                and self._writable
            ):
                if slot + 8 > self._reserved:
                    self._ensure_reserved(slot + 8)
                mm = self._mm or self._mapped()
                self._codec.pack_into(mm, slot, relative, position)
                self._entries = n + 1
                self._tail = (n + 1, mm, relative, position)
                return
            self._append_checked(offset, position)

    def _append_checked(self, offset: int, position: int) -> None:
        relative = self.relative_offset(offset)
        if not 0 <= position <= INT32_MAX:
            raise InvalidIndexEntryError(
                f"position {position} for offset {offset} is not a valid int32 file "
                f"position ({self._path})"
            )
        n = self._entries
        if n:
            last_relative, last_position = self._codec.unpack_from(self._mapped(), (n - 1) * 8)
            if relative <= last_relative:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to slot {n}, no larger than the "
                    f"last offset appended ({last_relative + self._base_offset}) to {self._path}"
                )
            if position <= last_position:
                raise InvalidIndexEntryError(
                    f"attempt to append position {position} for offset {offset}, no larger "
                    f"than the last position indexed ({last_position}) in {self._path}"
                )
        self._append_raw((relative, position))

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the greatest offset <= ``target_offset``; (base offset, 0) if none."""
        with self._lock:
            self._ensure_loaded()
            slot = self._search(target_offset, 0)
            if slot < 0:
                return OffsetPosition(self._base_offset, 0)
            return self._entry(slot)

    def lookup_by_position(self, position: int) -> OffsetPosition | None:
        """The entry with the greatest position <= ``position``, or None.

        Positions rise with offsets, so this finds the last indexed batch starting within a
        byte range: a fetch skips every header before it.
        """
        with self._lock:
            self._ensure_loaded()
            slot = self._search(position, 1)
            return None if slot < 0 else self._entry(slot)

    def fetch_upper_bound_offset(
        self, start_position: int, fetch_size: int
    ) -> OffsetPosition | None:
        """The first entry at or past ``start_position + fetch_size``, or None.

        Its offset is guaranteed to be outside a fetch of ``fetch_size`` bytes from
        ``start_position`` (not necessarily the smallest such offset).
        """
        with self._lock:
            self._ensure_loaded()
            slot = self._count_below(start_position + fetch_size, 1)
            if slot >= self._entries:
                return None
            return self._entry(slot)
