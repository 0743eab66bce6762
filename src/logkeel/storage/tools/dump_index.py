"""`log dump` of index files (`.index`, `.timeindex`, `.txnindex`), and ``--verify``: each
offset or time index entry checked against the segment's `.log` in one forward pass, by the
engine's index verifier (the one validation uses).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from logkeel.storage.engine.index_check import (
    BatchSpan,
    IndexProblem,
    IndexVerifier,
    OffsetIndexVerifier,
    TimeIndexVerifier,
)
from logkeel.storage.engine.offset_index import OffsetIndex, OffsetPosition
from logkeel.storage.engine.segment import LOG_SUFFIX
from logkeel.storage.engine.time_index import TimeIndex, TimestampOffset
from logkeel.storage.engine.txn_index import ABORTED_TXN_VERSION, TransactionIndex
from logkeel.storage.errors import CorruptIndexError, StorageError
from logkeel.storage.tools.dump_log import LogWalk
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
    return _dump_index(Path(path), FileKind.OFFSET_INDEX, OffsetIndex, OffsetIndexVerifier, verify)


def dump_time_index(path: str | Path, *, verify: bool = False) -> FileDump:
    """The entries of a `.timeindex` file with absolute offsets: ``{"timestamp", "offset"}``.

    With ``verify``: timestamps must increase and offsets must not decrease from entry to entry,
    and each entry's offset must be the last offset of a batch of the `.log` next to it whose
    max timestamp is the entry's timestamp and the largest of the log up to that batch.
    """
    return _dump_index(Path(path), FileKind.TIME_INDEX, TimeIndex, TimeIndexVerifier, verify)


def _dump_index(
    path: Path,
    kind: FileKind,
    index_type: type[OffsetIndex] | type[TimeIndex],
    verifier_type: type[OffsetIndexVerifier] | type[TimeIndexVerifier],
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
    dump._source = _index_items(dump, index, verifier_type if verify else None)
    return dump


class _LogSpans:
    """The batches of the segment's log for a verifier, walked once and lazily (no CRC check:
    the entries are judged against the batch headers); an IO error ends the walk as an error
    of the dump."""

    def __init__(self, dump: FileDump, log_path: Path) -> None:
        self.dump = dump
        self.log_path = log_path
        self.walk = LogWalk(log_path)
        self._batches = self.walk.batches(check_crc=False)

    def __iter__(self) -> Iterator[BatchSpan]:
        while True:
            try:
                batch = next(self._batches, None)
            except StorageError as exc:
                self.dump.errors.append(problem(str(exc), "io_error"))
                return
            if batch is None:
                return
            h = batch.header
            yield BatchSpan(batch.position, h.size, h.base_offset, h.last_offset, h.max_timestamp)

    def finish(self) -> None:
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


def _mismatch(found: IndexProblem, entry: OffsetPosition | TimestampOffset) -> Json:
    described = " ".join(f"{k}: {v}" for k, v in entry._asdict().items())
    return problem(
        f"entry {found.entry} ({described}): {found.message}",
        "mismatch",
        entry=found.entry,
        **entry._asdict(),
        **found.facts,
    )


def _index_items(
    dump: FileDump,
    index: OffsetIndex | TimeIndex,
    verifier_type: type[OffsetIndexVerifier] | type[TimeIndexVerifier] | None,
) -> Generator[Json, None, None]:
    log_path = sibling(Path(dump.file), LOG_SUFFIX)
    spans: _LogSpans | None = None
    try:
        try:
            entries: Iterator[OffsetPosition | TimestampOffset] = index.iter_entries()
        except StorageError as exc:
            dump.errors.append(problem(str(exc), "io_error"))
            return
        dump.tail["entry_count"] = 0
        verifier: IndexVerifier[Any] | None = None
        if verifier_type is not None:
            if log_path.is_file():
                spans = _LogSpans(dump, log_path)
                verifier = verifier_type(spans, log_path.name)
            else:
                dump.errors.append(problem(f"cannot verify: no log file {log_path}", "missing_log"))
        for n, entry in enumerate(entries):
            dump.tail["entry_count"] = n + 1
            if verifier is not None:
                found = verifier.check(entry)
                if found is not None:
                    assert dump.mismatches is not None
                    dump.mismatches.append(_mismatch(found, entry))
            yield entry._asdict()
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            dump.errors.append(problem(str(exc), "corrupt_index"))
    finally:
        if spans is not None:
            spans.finish()
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
