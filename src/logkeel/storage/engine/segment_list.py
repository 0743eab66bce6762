"""A partition's segments, each ``LogSegment`` object made on first use.

After a clean shutdown nothing of a partition is read before it serves (the start-up
manifest vouches for it), and making one object per segment on disk was then most of what a
start-up with many segments cost: at 100 segments a partition, three times a start with one.
``LazySegments`` holds the base offsets and makes each segment's object the first time it is
asked for (by index, slice or iteration); ``PartitionLog`` uses it as its segment list.
Objects are made under a lock, so two threads asking for the same segment get one object.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import overload

from logkeel.storage.engine.segment import LogSegment


class LazySegments:
    """The list operations ``PartitionLog`` uses, over base offsets (ascending)."""

    __slots__ = ("_bases", "_items", "_lock", "_make")

    def __init__(self, bases: list[int], make: Callable[[int], LogSegment]) -> None:
        self._bases = list(bases)
        self._items: list[LogSegment | None] = [None] * len(bases)
        self._make = make
        self._lock = threading.Lock()

    def _at(self, i: int) -> LogSegment:
        segment = self._items[i]
        if segment is None:
            with self._lock:
                segment = self._items[i]
                if segment is None:
                    segment = self._items[i] = self._make(self._bases[i])
        return segment

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> LogSegment: ...
    @overload
    def __getitem__(self, i: slice) -> list[LogSegment]: ...
    def __getitem__(self, i: int | slice) -> LogSegment | list[LogSegment]:
        if isinstance(i, slice):
            return [self._at(k) for k in range(*i.indices(len(self._items)))]
        n = len(self._items)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("segment index out of range")
        return self._at(i)

    def __iter__(self) -> Iterator[LogSegment]:
        for k in range(len(self._items)):
            yield self._at(k)

    def __setitem__(self, i: int, segment: LogSegment) -> None:
        with self._lock:
            self._items[i] = segment
            self._bases[i] = segment.base_offset

    def append(self, segment: LogSegment) -> None:
        with self._lock:
            self._items.append(segment)
            self._bases.append(segment.base_offset)

    def index(self, segment: LogSegment) -> int:
        k = bisect.bisect_left(self._bases, segment.base_offset)
        if k < len(self._items) and self._items[k] is segment:
            return k
        raise ValueError(f"{segment} is not in this log")

    @property
    def base_offsets(self) -> list[int]:
        return list(self._bases)

    def made(self) -> list[LogSegment]:
        """The segments whose objects exist (the others were never touched)."""
        return [s for s in self._items if s is not None]


def base_offsets(segments: Iterable[LogSegment]) -> list[int]:
    """The base offsets of a segment list, without making the objects of a lazy one."""
    if isinstance(segments, LazySegments):
        return segments.base_offsets
    return [s.base_offset for s in segments]


def made_segments(segments: Iterable[LogSegment]) -> list[LogSegment]:
    """The segment objects that exist (all of a plain list)."""
    if isinstance(segments, LazySegments):
        return segments.made()
    return list(segments)
