"""The one check of offset and time index entries against the batches of their segment.

Both indexes are keyed by a batch's last offset, and their entries are ordered the way the log
is, so one forward walk over both verifies every entry without holding either in memory:

- an offset-index entry names the start position of a batch and that batch's last offset, and
  offsets and positions rise strictly from entry to entry;
- a time-index entry names the last offset of a batch B whose max timestamp is the entry's
  timestamp and the largest in the segment up to B (Kafka writes ``maxTimestampSoFar`` at
  ``shallowOffsetOfMaxTimestampSoFar``); timestamps rise strictly, offsets never fall.

A verifier judges one entry at a time (``check``), so a caller may stop at the first problem
(validation) or list them all while streaming the entries out (``log dump --verify``). Whether
the index reaches far enough is the caller's question: it depends on how the log was written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from logkeel.records.batch import NO_TIMESTAMP
from logkeel.storage.engine.offset_index import OffsetPosition
from logkeel.storage.engine.time_index import TimestampOffset

E = TypeVar("E", OffsetPosition, TimestampOffset)


class BatchSpan(NamedTuple):
    """What the index checks need to know of one batch of the log."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class IndexProblem:
    """What is wrong with entry number ``entry``; ``facts`` holds what the log says instead
    (``log_offset``, ``log_timestamp``) where that is one number."""

    entry: int
    message: str
    facts: dict[str, int] = field(default_factory=dict)


class IndexVerifier(ABC, Generic[E]):
    """Walks the batches forwards as the entries come, remembering the batch before the current
    one and the running max timestamp; subclasses hold the rules."""

    def __init__(self, batches: Iterable[BatchSpan], log_name: str = "the log") -> None:
        self._batches = iter(batches)
        self.log_name = log_name
        self.current: BatchSpan | None = None
        self.previous: BatchSpan | None = None
        self.running_max = NO_TIMESTAMP  # up to and including ``current``
        self.end = 0  # where the last batch seen ends
        self._entries = 0
        self._last: E | None = None
        self._advance()

    def check(self, entry: E) -> IndexProblem | None:
        """Judges the next entry of the index (entries must come in file order)."""
        n = self._entries
        self._entries += 1
        if self._last is not None:
            disorder = self._out_of_order(self._last, entry)
            if disorder:
                return IndexProblem(n, disorder)
        self._last = entry
        return self._judge(n, entry)

    @abstractmethod
    def _out_of_order(self, last: E, entry: E) -> str | None:
        """Why ``entry`` cannot follow ``last`` in the index, if it cannot."""

    @abstractmethod
    def _judge(self, n: int, entry: E) -> IndexProblem | None:
        """Checks an entry in order against the batches, walking them forwards to it."""

    def problems(self, entries: Iterable[E]) -> Iterator[IndexProblem]:
        """Every problem of the index, lazily: the first one costs only the walk up to it."""
        return (p for p in map(self.check, entries) if p is not None)

    def _walk_past(self, before: Callable[[BatchSpan], bool]) -> BatchSpan | None:
        """The first batch from the current one on that is not ``before`` the entry."""
        while self.current is not None and before(self.current):
            self._advance()
        return self.current

    @staticmethod
    def _not_last_offset(
        n: int, offset: int, batch: BatchSpan, described: str
    ) -> IndexProblem | None:
        # Both indexes are keyed by a batch's last offset (as Kafka's are).
        if batch.last_offset == offset:
            return None
        return IndexProblem(
            n,
            f"{described} has last offset {batch.last_offset}, not {offset}",
            {"log_offset": batch.last_offset},
        )

    def _advance(self) -> None:
        self.previous = self.current
        self.current = next(self._batches, None)
        if self.current is not None:
            self.running_max = max(self.running_max, self.current.max_timestamp)
            self.end = self.current.position + self.current.size


class OffsetIndexVerifier(IndexVerifier[OffsetPosition]):
    def _out_of_order(self, last: OffsetPosition, entry: OffsetPosition) -> str | None:
        if entry.offset <= last.offset or entry.position <= last.position:
            return f"out of order after offset {last.offset} position {last.position}"
        return None

    def _judge(self, n: int, entry: OffsetPosition) -> IndexProblem | None:
        batch = self._walk_past(lambda b: b.position < entry.position)
        if batch is None:
            return IndexProblem(
                n,
                f"position {entry.position} is past the last batch of {self.log_name} "
                f"(its batches end at position {self.end})",
            )
        if batch.position != entry.position:
            before = self.previous
            where = f"inside the batch at position {before.position}, " if before else ""
            return IndexProblem(
                n,
                f"position {entry.position} is not the start of a batch ({where}next batch at "
                f"position {batch.position})",
            )
        return self._not_last_offset(
            n, entry.offset, batch, f"the batch at position {batch.position}"
        )


class TimeIndexVerifier(IndexVerifier[TimestampOffset]):
    def _out_of_order(self, last: TimestampOffset, entry: TimestampOffset) -> str | None:
        if entry.timestamp <= last.timestamp or entry.offset < last.offset:
            return (
                f"out of order after timestamp {last.timestamp} offset {last.offset} "
                f"(timestamps must increase, offsets must not decrease)"
            )
        return None

    def _judge(self, n: int, entry: TimestampOffset) -> IndexProblem | None:
        batch = self._walk_past(lambda b: b.last_offset < entry.offset)
        if batch is None:
            return IndexProblem(
                n, f"offset {entry.offset} is past the last batch of {self.log_name}"
            )
        if batch.base_offset > entry.offset:
            return IndexProblem(
                n,
                f"offset {entry.offset} is in no batch (the next batch starts at offset "
                f"{batch.base_offset})",
            )
        described = (
            f"the batch holding offset {entry.offset} (offsets {batch.base_offset}"
            f"..{batch.last_offset}, position {batch.position})"
        )
        found = self._not_last_offset(n, entry.offset, batch, described)
        if found is not None:
            return found
        if batch.max_timestamp != entry.timestamp:
            return IndexProblem(
                n,
                f"{described} has max timestamp {batch.max_timestamp}, not {entry.timestamp}",
                {"log_timestamp": batch.max_timestamp},
            )
        if self.running_max != entry.timestamp:
            return IndexProblem(
                n,
                f"the log holds timestamp {self.running_max} at or before offset "
                f"{entry.offset}, larger than {entry.timestamp}",
                {"log_timestamp": self.running_max},
            )
        return None
