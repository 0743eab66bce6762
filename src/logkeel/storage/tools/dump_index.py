"""`log dump` of index files (`.index`, `.timeindex`, `.txnindex`), and ``--verify``: each
offset or time index entry checked against the segment's `.log` in one forward pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from logkeel.storage.engine.offset_index import OffsetIndex, OffsetPosition
from logkeel.storage.engine.segment import LOG_SUFFIX
from logkeel.storage.engine.time_index import TimeIndex, TimestampOffset
from logkeel.storage.engine.txn_index import ABORTED_TXN_VERSION, TransactionIndex
from logkeel.storage.errors import CorruptIndexError, StorageError
from logkeel.storage.tools.dump_log import LogWalk, WalkedBatch
from logkeel.storage.tools.dump_result import (
    FileDump,
    FileKind,
    Json,
    file_size,
    log_dir_of,
    problem,
    require_base_offset,
    sibling,
)

# ---- .index / .timeindex -------------------------------------------------------------------


def dump_offset_index(path: str | Path, *, verify: bool = False) -> FileDump:
    """The entries of a `.index` file with absolute offsets: ``{"offset", "position"}``.

    With ``verify``, each entry is checked against the `.log` next to it: its position must be
    where a batch starts, and that batch's last offset must be the entry's offset (logkeel, like
    Kafka, keys index entries by a batch's last offset).
    """
    return _dump_index(Path(path), FileKind.OFFSET_INDEX, OffsetIndex, _OffsetIndexCheck, verify)


def dump_time_index(path: str | Path, *, verify: bool = False) -> FileDump:
    """The entries of a `.timeindex` file with absolute offsets: ``{"timestamp", "offset"}``.

    With ``verify``: timestamps must increase and offsets must not decrease from entry to entry,
    and each entry's offset must lie in a batch of the `.log` next to it whose max timestamp is
    the entry's timestamp.
    """
    return _dump_index(Path(path), FileKind.TIME_INDEX, TimeIndex, _TimeIndexCheck, verify)


def _dump_index(
    path: Path,
    kind: FileKind,
    index_type: type[OffsetIndex] | type[TimeIndex],
    check_type: Callable[[FileDump, Path], _IndexCheck],
    verify: bool,
) -> FileDump:
    base_offset = require_base_offset(path)
    dump = FileDump(str(path), kind, "entries")
    dump.head["base_offset"] = base_offset
    dump.head["size"] = file_size(path, dump)
    index = index_type(path, base_offset, writable=False, log_dir=log_dir_of(path))
    if verify:
        dump.mismatches = []
        dump.head["log_file"] = str(sibling(path, LOG_SUFFIX))
    dump._source = _index_items(dump, index, check_type if verify else None)
    return dump


class _IndexCheck(ABC):
    """Checks index entries against the segment's log in one forward pass over both.

    Entries of a sound index are ordered the way the log is, so a single merge-like walk
    verifies them all without holding the log (or the entries) in memory.
    """

    def __init__(self, dump: FileDump, log_path: Path) -> None:
        self.dump = dump
        self.log_path = log_path
        self.walk = LogWalk(log_path)
        self._batches: Generator[WalkedBatch, None, None] | None = None
        self.current: WalkedBatch | None = None
        self.previous_batch: WalkedBatch | None = None

    def start(self) -> bool:
        if not self.log_path.is_file():
            self.dump.errors.append(
                problem(f"cannot verify: no log file {self.log_path}", "missing_log")
            )
            return False
        self._batches = self.walk.batches(check_crc=False)
        self._advance()
        return True

    def _advance(self) -> None:
        assert self._batches is not None
        self.previous_batch = self.current
        try:
            self.current = next(self._batches, None)
        except StorageError as exc:
            self.dump.errors.append(problem(str(exc), "io_error"))
            self.current = None

    def finish(self) -> None:
        if self._batches is not None:
            self._batches.close()
        stop = self.walk.stop
        if stop is not None:
            self.dump.errors.append(
                problem(
                    f"{self.log_path} is corrupt at {stop['message']}; entries past position "
                    f"{stop['position']} cannot be verified",
                    "log_corrupt",
                    position=stop["position"],
                )
            )

    def mismatch(
        self, n: int, entry: OffsetPosition | TimestampOffset, message: str, **fields: Any
    ) -> None:
        assert self.dump.mismatches is not None
        described = " ".join(f"{k}: {v}" for k, v in entry._asdict().items())
        self.dump.mismatches.append(
            problem(
                f"entry {n} ({described}): {message}",
                "mismatch",
                entry=n,
                **entry._asdict(),
                **fields,
            )
        )

    @abstractmethod
    def check(self, n: int, entry: Any) -> None:
        """Checks the n-th entry; entries come in file order."""


class _OffsetIndexCheck(_IndexCheck):
    def __init__(self, dump: FileDump, log_path: Path) -> None:
        super().__init__(dump, log_path)
        self.last: OffsetPosition | None = None

    def check(self, n: int, entry: OffsetPosition) -> None:
        if self.last is not None and (
            entry.offset <= self.last.offset or entry.position <= self.last.position
        ):
            self.mismatch(
                n,
                entry,
                f"out of order after offset {self.last.offset} position {self.last.position}",
            )
            return
        self.last = entry
        while self.current is not None and self.current.position < entry.position:
            self._advance()
        batch = self.current
        if batch is None:
            self.mismatch(
                n,
                entry,
                f"position {entry.position} is past the last batch of {self.log_path.name} "
                f"(its batches end at position {self.walk.valid_bytes})",
            )
        elif batch.position != entry.position:
            before = self.previous_batch
            where = f"inside the batch at position {before.position}, " if before else ""
            self.mismatch(
                n,
                entry,
                f"position {entry.position} is not the start of a batch ({where}next batch at "
                f"position {batch.position})",
            )
        elif batch.header.last_offset != entry.offset:
            self.mismatch(
                n,
                entry,
                f"the batch at position {entry.position} has last offset "
                f"{batch.header.last_offset}, not {entry.offset}",
                log_offset=batch.header.last_offset,
            )


class _TimeIndexCheck(_IndexCheck):
    def __init__(self, dump: FileDump, log_path: Path) -> None:
        super().__init__(dump, log_path)
        self.last: TimestampOffset | None = None

    def check(self, n: int, entry: TimestampOffset) -> None:
        if self.last is not None and (
            entry.timestamp <= self.last.timestamp or entry.offset < self.last.offset
        ):
            self.mismatch(
                n,
                entry,
                f"out of order after timestamp {self.last.timestamp} offset {self.last.offset} "
                f"(timestamps must increase, offsets must not decrease)",
            )
            return
        self.last = entry
        while self.current is not None and self.current.header.last_offset < entry.offset:
            self._advance()
        batch = self.current
        if batch is None:
            self.mismatch(
                n,
                entry,
                f"offset {entry.offset} is past the last batch of {self.log_path.name}",
            )
        elif batch.header.base_offset > entry.offset:
            self.mismatch(
                n,
                entry,
                f"offset {entry.offset} is in no batch (the next batch starts at offset "
                f"{batch.header.base_offset})",
            )
        elif batch.header.max_timestamp != entry.timestamp:
            self.mismatch(
                n,
                entry,
                f"the batch holding offset {entry.offset} (offsets {batch.header.base_offset}"
                f"..{batch.header.last_offset}, position {batch.position}) has max timestamp "
                f"{batch.header.max_timestamp}, not {entry.timestamp}",
                log_timestamp=batch.header.max_timestamp,
            )


def _index_items(
    dump: FileDump,
    index: OffsetIndex | TimeIndex,
    check_type: Callable[[FileDump, Path], _IndexCheck] | None,
) -> Generator[Json, None, None]:
    check = check_type(dump, sibling(Path(dump.file), LOG_SUFFIX)) if check_type else None
    try:
        try:
            entries = index.iter_entries()
        except StorageError as exc:
            dump.errors.append(problem(str(exc), "io_error"))
            return
        dump.tail["entry_count"] = 0
        if check is not None and not check.start():
            check = None
        for n, entry in enumerate(entries):
            dump.tail["entry_count"] = n + 1
            if check is not None:
                check.check(n, entry)
            yield entry._asdict()
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            dump.errors.append(problem(str(exc), "corrupt_index"))
    finally:
        if check is not None:
            check.finish()
        index.close_handler()


# ---- .txnindex -----------------------------------------------------------------------------


def dump_txn_index(path: str | Path) -> FileDump:
    """The aborted transactions of a `.txnindex` file: ``{"version", "producer_id",
    "first_offset", "last_offset", "last_stable_offset"}``."""
    path = Path(path)
    base_offset = require_base_offset(path)
    dump = FileDump(str(path), FileKind.TXN_INDEX, "entries")
    dump.head["base_offset"] = base_offset
    dump.head["size"] = file_size(path, dump)
    dump._source = _txn_items(dump, TransactionIndex(path, base_offset, log_dir=log_dir_of(path)))
    return dump


def _txn_items(dump: FileDump, index: TransactionIndex) -> Generator[Json, None, None]:
    # Transaction indexes are small (one entry per aborted transaction), so reading the file
    # whole, as TransactionIndex does, is fine.
    try:
        txns = index.all_aborted_txns()
    except StorageError as exc:
        dump.errors.append(problem(str(exc), "corrupt_index"))
        return
    for txn in txns:
        yield {"version": ABORTED_TXN_VERSION, **txn._asdict()}
    try:
        index.sanity_check()
    except StorageError as exc:
        dump.errors.append(problem(str(exc), "corrupt_index"))
    index.close()
