"""Kafka's text checkpoint files: one mechanism, one line codec per kind of entry.

Every checkpoint file has the same shape (Kafka's CheckpointFile)::

    <version>
    <entry count>
    <entry>            one per line, fields separated by a space

- ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``replication-offset-checkpoint`` (OffsetCheckpointFile): version 0, ``topic partition offset``.
- ``leader-epoch-checkpoint`` in a partition dir (LeaderEpochCheckpointFile): version 0,
  ``epoch startOffset``.

Like Kafka, a missing or empty file reads as no entries, and a file holding only the version
line reads as no entries, except an empty ``leader-epoch-checkpoint``: its writes may be synced
later (see ``LeaderEpochFileCache.assign``), so no bytes there is what a machine crash left of
one, and the loader rebuilds the entries from the log's batches; anything else that does not parse is a CorruptCheckpointError naming
the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Generic, NamedTuple, Protocol, TypeVar

from logkeel.storage.errors import CorruptCheckpointError, io_guard
from logkeel.storage.fileio import atomic_write, read_file
from logkeel.storage.topic_partition import TopicPartition

T = TypeVar("T")
V = TypeVar("V")

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"

_INT = re.compile(r"^-?[0-9]+$")  # Python's int() would also take "1_0", " 1" and "+1"
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class CheckpointParseError(CorruptCheckpointError):
    """A checkpoint line that does not parse; says which file and which line (1-based)."""

    def __init__(self, path: Path, line_number: int, line: str, reason: str):
        self.path = path
        self.line_number = line_number
        self.line = line
        super().__init__(
            f"malformed line {line_number} in checkpoint file {path}: {reason}: {line!r}"
        )


class _BadLine(ValueError):
    """Raised by codecs; the reader adds file and line."""


def parse_int(text: str, bounds: tuple[int, int] = _INT64) -> int:
    if not _INT.match(text):
        raise _BadLine(f"{text!r} is not an integer")
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        raise _BadLine(f"{value} is out of range")
    return value


class LineCodec(Protocol[T]):
    def format(self, entry: T) -> str: ...

    def parse(self, line: str) -> T:
        """Raises ValueError when the line is not an entry."""
        ...


class CheckpointFile(Generic[T]):
    """A checkpoint file of entries of one type; writes are atomic (temp file, fsync, rename).

    ``log_dir`` is the dir an IO error is blamed on (it is taken offline by the caller).
    """

    def __init__(self, path: str | Path, version: int, codec: LineCodec[T], log_dir: str | Path):
        self.path = Path(path)
        self.version = version
        self.codec = codec
        self.log_dir = Path(log_dir)

    def write(self, entries: Iterable[T]) -> None:
        lines = [self.codec.format(e) for e in entries]
        text = f"{self.version}\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines)
        with io_guard(self.log_dir, f"writing checkpoint file {self.path}"):
            atomic_write(self.path, text.encode("utf-8"))

    def read(self) -> list[T]:
        with io_guard(self.log_dir, f"reading checkpoint file {self.path}"):
            try:
                data = read_file(self.path)
            except FileNotFoundError:
                return []
        return self.parse(data)

    def parse(self, data: bytes) -> list[T]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(
                f"checkpoint file {self.path} is not UTF-8: {exc}"
            ) from exc
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()  # the newline that ends the last line
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        if not lines:
            return []
        version = self._parse_line(1, lines[0], lambda s: parse_int(s, _INT32))
        if version != self.version:
            raise CheckpointParseError(
                self.path, 1, lines[0], f"unrecognised version (expected {self.version})"
            )
        if len(lines) == 1:
            return []
        count = self._parse_line(2, lines[1], lambda s: parse_int(s, _INT32))
        entries = [
            self._parse_line(n, line, self.codec.parse) for n, line in enumerate(lines[2:], 3)
        ]
        if len(entries) != count:
            raise CorruptCheckpointError(
                f"checkpoint file {self.path} declares {count} entries but holds {len(entries)}"
            )
        return entries

    def _parse_line(self, number: int, line: str, parse: Callable[[str], V]) -> V:
        try:
            return parse(line)
        except ValueError as exc:
            raise CheckpointParseError(self.path, number, line, str(exc)) from exc


def _split(line: str, fields: int) -> list[str]:
    parts = line.split()
    if len(parts) != fields:
        raise _BadLine(f"expected {fields} fields, found {len(parts)}")
    return parts


class TopicPartitionOffsetCodec:
    """``topic partition offset``; topic names cannot hold whitespace, so splitting is safe."""

    def format(self, entry: tuple[TopicPartition, int]) -> str:
        tp, offset = entry
        if not tp.topic or any(c.isspace() for c in tp.topic):
            raise ValueError(f"topic name {tp.topic!r} cannot be written to a checkpoint")
        return f"{tp.topic} {tp.partition} {offset}"

    def parse(self, line: str) -> tuple[TopicPartition, int]:
        topic, partition, offset = _split(line, 3)
        return TopicPartition(topic, parse_int(partition, (0, _INT32[1]))), parse_int(offset)


class EpochEntry(NamedTuple):
    """The first offset written in a leader epoch (Kafka's EpochEntry)."""

    epoch: int
    start_offset: int


class EpochEntryCodec:
    def format(self, entry: EpochEntry) -> str:
        return f"{entry.epoch} {entry.start_offset}"

    def parse(self, line: str) -> EpochEntry:
        epoch, start_offset = _split(line, 2)
        return EpochEntry(parse_int(epoch, _INT32), parse_int(start_offset))


class OffsetCheckpointFile:
    """Per-log-dir map of partition to offset (recovery point, log start, high watermark)."""

    VERSION = 0

    def __init__(self, path: str | Path, log_dir: str | Path | None = None):
        path = Path(path)
        self._file = CheckpointFile(
            path,
            self.VERSION,
            TopicPartitionOffsetCodec(),
            log_dir if log_dir is not None else path.parent,
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._file.write(offsets.items())

    def read(self) -> dict[TopicPartition, int]:
        return dict(self._file.read())


class LeaderEpochCheckpointFile:
    """A partition's ``leader-epoch-checkpoint``; IO errors are blamed on the dir above it."""

    VERSION = 0

    def __init__(self, path: str | Path, log_dir: str | Path | None = None):
        path = Path(path)
        self._file = CheckpointFile(
            path,
            self.VERSION,
            EpochEntryCodec(),
            log_dir if log_dir is not None else path.parent.parent,
        )

    @classmethod
    def in_partition_dir(cls, partition_dir: str | Path) -> LeaderEpochCheckpointFile:
        return cls(Path(partition_dir) / LEADER_EPOCH_CHECKPOINT_FILE)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: Iterable[EpochEntry]) -> None:
        self._file.write(entries)

    def read(self) -> list[EpochEntry]:
        """The entries; a file of no bytes at all (never written so: even no entry is two
        lines) is what a machine crash leaves of a write not yet synced, and is corrupt."""
        with io_guard(self._file.log_dir, f"reading checkpoint file {self.path}"):
            try:
                data = read_file(self.path)
            except FileNotFoundError:
                return []
        if not data:
            raise CorruptCheckpointError(f"checkpoint file {self.path} is empty")
        return self._file.parse(data)
