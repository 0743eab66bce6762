"""The time index (``<base offset>.timeindex``): from timestamps to offsets, for ListOffsets by
time and time-based retention.

Format (apache/kafka ``TimeIndex``): 12-byte big-endian entries, int64 timestamp, then int32
offset relative to the segment's base offset. An entry (T, O) says: the largest timestamp seen
in the segment up to offset O is T, so any record with a timestamp above T comes after O.
Entries are appended only when the segment's max timestamp grows, so timestamps increase
strictly and offsets never decrease.

Kafka reserves the last slot: ``is_full()`` is true one entry early, so that when the segment is
rolled or closed its largest timestamp can still be written with ``skip_full_check=True``
(LogSegment.onBecomeInactiveSegment / close / recover do
``maybeAppend(maxTimestampSoFar, offsetOfMaxTimestampSoFar, true)``). That final entry is what
retention reads to decide when the segment expires.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from logkeel.records.batch import NO_TIMESTAMP
from logkeel.storage.engine.index_file import AbstractIndex
from logkeel.storage.errors import (
    IndexFullError,
    InvalidOffsetError,
    InvalidTimestampError,
)

TIME_INDEX_ENTRY_SIZE = 12


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(AbstractIndex[TimestampOffset]):
    entry_size = TIME_INDEX_ENTRY_SIZE
    _codec = struct.Struct(">qi")
    _offset_field = 1
    _values_strictly_increase = False  # Kafka accepts an equal offset with a larger timestamp
    _kind = "time index"

    def _to_entry(self, raw: tuple[int, int]) -> TimestampOffset:
        return TimestampOffset(raw[0], self._base_offset + raw[1])

    def is_full(self) -> bool:
        """True one slot early: the last slot is kept for the entry written on roll/close."""
        if self._loaded:  # checked before every append: no call
            return self._entries >= self._length // self.entry_size - 1
        return self._entries >= self._capacity(1)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (NO_TIMESTAMP, base offset) if there is none."""
        with self._lock:
            self._ensure_loaded()
            if self._entries == 0:
                return TimestampOffset(NO_TIMESTAMP, self._base_offset)
            return self._entry(self._entries - 1)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Appends (timestamp, offset) if ``timestamp`` exceeds the last entry's timestamp.

        An equal timestamp is ignored (the same entry again, as on roll after the last
        interval entry). A smaller timestamp raises InvalidTimestampError and a smaller offset
        InvalidOffsetError. ``skip_full_check`` is for the roll/close entry only: it may use
        the reserved last slot.
        """
        with self._lock:
            self._ensure_loaded()
            if not skip_full_check and self.is_full():
                raise IndexFullError(
                    f"attempt to append to a full time index {self._path} ({self._entries} entries)"
                )
            last = self.last_entry
            if self._entries:
                if offset < last.offset:
                    raise InvalidOffsetError(
                        f"attempt to append offset {offset} to slot {self._entries}, smaller "
                        f"than the last offset appended ({last.offset}) to {self._path}"
                    )
                if timestamp < last.timestamp:
                    raise InvalidTimestampError(
                        f"attempt to append timestamp {timestamp} to slot {self._entries}, "
                        f"smaller than the last timestamp appended ({last.timestamp}) to "
                        f"{self._path}"
                    )
            # Batches without timestamps (NO_TIMESTAMP) never make it in: the empty index
            # already answers with NO_TIMESTAMP.
            if timestamp > last.timestamp:
                self._append_raw((timestamp, self.relative_offset(offset)))

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the greatest timestamp <= ``target_timestamp``.

        (NO_TIMESTAMP, base offset) if there is none. The caller scans the log forward from the
        returned offset for the first record with a timestamp >= its target.
        """
        with self._lock:
            self._ensure_loaded()
            slot = self._search(target_timestamp, 0)
            if slot < 0:
                return TimestampOffset(NO_TIMESTAMP, self._base_offset)
            return self._entry(slot)
