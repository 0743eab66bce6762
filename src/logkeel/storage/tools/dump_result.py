"""What a dump of one file is: the kind of file, the streamed ``FileDump``, and the helpers
every kind of dump shares (problem records, the log dir an IO error belongs to, sibling files).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

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
from logkeel.storage.errors import StorageError, io_guard

Json = dict[str, Any]

INT31 = 1 << 31  # sequences wrap at 2**31

SNAPSHOT_SUFFIX = ".snapshot"
# Suffixes a segment's files carry while being deleted, cleaned or swapped in; such a file is
# dumped like the file it was.
TRANSIENT_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)


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


def split_suffix(path: Path) -> tuple[str, str] | None:
    """(kind suffix, transient suffix) of a file name, e.g. ('.log', '.deleted')."""
    name = path.name
    transient = ""
    for t in TRANSIENT_SUFFIXES:
        if name.endswith(t):
            name, transient = name[: -len(t)], t
            break
    for suffix in _SUFFIX_KINDS:
        if name.endswith(suffix):
            return suffix, transient
    return None


def file_kind(path: str | Path) -> FileKind | None:
    """What a file holds, from its suffix; None for a file this module cannot dump."""
    split = split_suffix(Path(path))
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


def problem(message: str, kind: str, **fields: Any) -> Json:
    return {"kind": kind, **fields, "message": message}


def log_dir_of(path: Path) -> Path:
    # <log dir>/<topic>-<partition>/<file>: the dir an IO error would take offline.
    return path.absolute().parent.parent


def file_size(path: Path, dump: FileDump) -> int | None:
    try:
        with io_guard(log_dir_of(path), f"stat {path}"):
            return path.stat().st_size
    except StorageError as exc:
        dump.errors.append(problem(str(exc), "io_error"))
        return None


def sibling(path: Path, suffix: str) -> Path:
    """The file of the same segment with another suffix (``.deleted`` and the like kept)."""
    split = split_suffix(path)
    assert split is not None
    kind_suffix, transient = split
    stem = path.name[: len(path.name) - len(transient) - len(kind_suffix)]
    return path.with_name(stem + suffix + transient)


def require_base_offset(path: Path) -> int:
    base_offset = parse_base_offset(path.name)
    if base_offset is None:
        raise ValueError(unsupported_reason(path) or f"{path}: no base offset in the name")
    return base_offset
