"""Offline inspection of a partition's files: logkeel's counterpart of Kafka's DumpLogSegments.

Each ``dump_*`` function inspects one file read-only (nothing is created, resized or rewritten,
so dumping the files of a live or crashed broker is safe) and returns a ``FileDump``: fields
known up front, then the batches or entries *streamed* one at a time, then the problems found.
Streaming is what lets a 1 GiB segment be dumped in a few MiB of memory: the `.log` walk reads
bounded chunks and never holds more than one batch (or one chunk) at a time.

``FileDump.to_dict()`` materialises everything as plain dicts (for tests and small files);
``dump_render`` turns dumps into Kafka-style lines or one JSON document
without materialising them. Nothing here prints or exits: that is the CLI's job.

Problems are reported, never raised: a corrupt region stops the batch walk with an error that
names its position and reason; a CRC mismatch or an index entry that disagrees with its log is
listed and the walk goes on.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

from logkeel.records.batch import NO_SEQUENCE
from logkeel.storage.engine.producer_snapshot import (
    ProducerSnapshotEntry,
    parse_snapshot_offset,
    read_snapshot,
)
from logkeel.storage.errors import StorageError, io_guard
from logkeel.storage.tools.dump_index import dump_offset_index, dump_time_index, dump_txn_index
from logkeel.storage.tools.dump_log import dump_log
from logkeel.storage.tools.dump_result import (
    INT31,
    FileDump,
    FileKind,
    Json,
    file_kind,
    file_size,
    log_dir_of,
    problem,
    unsupported_reason,
)


def dump_file(path: str | Path, *, print_data: bool = False, verify: bool = False) -> FileDump:
    """Dumps any supported file. Raises ValueError for a name ``unsupported_reason`` rejects."""
    path = Path(path)
    reason = unsupported_reason(path)
    if reason is not None:
        raise ValueError(reason)
    kind = file_kind(path)
    if kind == FileKind.LOG:
        return dump_log(path, print_data=print_data)
    if kind == FileKind.OFFSET_INDEX:
        return dump_offset_index(path, verify=verify)
    if kind == FileKind.TIME_INDEX:
        return dump_time_index(path, verify=verify)
    if kind == FileKind.TXN_INDEX:
        return dump_txn_index(path)
    return dump_producer_snapshot(path)


# ---- .snapshot -----------------------------------------------------------------------------


def dump_producer_snapshot(path: str | Path) -> FileDump:
    """The producers in a producer-state snapshot, with Kafka's field meanings."""
    path = Path(path)
    dump = FileDump(str(path), FileKind.PRODUCER_SNAPSHOT, "entries")
    dump.head["offset"] = parse_snapshot_offset(path.name)
    dump.head["size"] = file_size(path, dump)
    dump._source = _snapshot_items(dump, path)
    return dump


def _snapshot_items(dump: FileDump, path: Path) -> Generator[Json, None, None]:
    try:
        with io_guard(log_dir_of(path), f"reading {path}"):
            entries = read_snapshot(path)
    except StorageError as exc:
        dump.errors.append(problem(str(exc), "corrupt_snapshot"))
        return
    for entry in entries:
        yield _snapshot_entry_dict(entry)


def _snapshot_entry_dict(e: ProducerSnapshotEntry) -> Json:
    # Kafka's BatchMetadata.firstSeq: lastSeq - offsetDelta, wrapping like sequences do.
    first_sequence = (
        NO_SEQUENCE if e.last_sequence < 0 else (e.last_sequence - e.offset_delta) % INT31
    )
    return {
        "producer_id": e.producer_id,
        "producer_epoch": e.epoch,
        "coordinator_epoch": e.coordinator_epoch,
        "current_txn_first_offset": (
            None if e.current_txn_first_offset < 0 else e.current_txn_first_offset
        ),
        "last_timestamp": e.timestamp,
        "first_sequence": first_sequence,
        "last_sequence": e.last_sequence,
        "last_offset": e.last_offset,
        "offset_delta": e.offset_delta,
    }
