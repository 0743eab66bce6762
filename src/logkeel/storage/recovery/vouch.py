"""What the start-up manifest vouches for, so a clean start reads nothing of a partition.

At clean shutdown each partition's manifest entry records, beside its directory listing, the
log end offset, the active segment's index-interval counter and producer-snapshot facts, and
the size and modification time of every file those facts come from (the active segment's
four files and the snapshot at the log end). At the next clean start a partition whose files
all still have that size and time, each older than the manifest itself, is loaded from the
entry: its active segment's indexes are not opened or checked and its (empty) producer
snapshot is not read. The active segment is still validated in full on its first access or
in the background (KIP-263), like every other segment.

Why a file's time must be older than the manifest: file times come from a coarse clock, so a
change made right after shutdown, within the same tick, could keep a file's time. A file
whose time is not strictly older than the manifest is not vouched for (the partition is
loaded the ordinary way), so any change after the manifest was written is seen; the manifest
is written again at shutdown until its time is later than every time it records.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.partition_dir import cached_listing
from logkeel.storage.engine.producer_snapshot import snapshot_file_name
from logkeel.storage.engine.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    file_name,
)

_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(frozen=True, slots=True)
class Vouched:
    log_end_offset: int
    bytes_since_last_index_entry: int
    # The snapshot at the log end holds no producer (or the log is empty and has none).
    empty_producer_state: bool


def _file_facts(path: str | Path) -> list[int] | None:
    """[size, mtime_ns], or None for a file that does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns]


def vouched_facts(plog: PartitionLog) -> dict[str, object]:
    """The manifest's facts of a closed (cleanly shut down) partition log. Raises OSError."""
    active = plog.active_segment
    files = {
        suffix: _file_facts(plog.dir / file_name(active.base_offset, suffix))
        for suffix in _SUFFIXES
    }
    state = plog.producer_state
    snapshot = state.latest_snapshot_offset
    return {
        "log_end": plog.log_end_offset,
        "active": active.base_offset,
        "since_index": active.bytes_since_last_index_entry,
        "files": files,
        "producers": state.producer_id_count,
        "snapshot": snapshot,
        "snapshot_file": (
            _file_facts(plog.dir / snapshot_file_name(snapshot)) if snapshot is not None else None
        ),
    }


def manifest_entries(logs: Iterable[PartitionLog]) -> tuple[dict[str, object], int]:
    """The start-up manifest of cleanly closed logs (dir name -> entry: the dir listing, the
    leader epochs, the facts above) and the newest time it records (the manifest must be
    written later than that; see ``LogDir.write_manifest``). A dir with leftovers to clean up
    gets no entry."""
    entries: dict[str, object] = {}
    newest = 0
    for plog in logs:
        try:
            cached = cached_listing(plog.dir)
        except OSError:
            continue
        if cached is None:
            continue
        cached["epochs"] = [list(e) for e in plog.leader_epochs.entries]
        # Without the facts the listing alone is still worth keeping.
        with contextlib.suppress(OSError):
            cached.update(vouched_facts(plog))
        newest = max(newest, newest_time(cached))
        entries[plog.dir.name] = cached
    return entries, newest


def newest_time(entry: dict[str, object]) -> int:
    """The latest file or dir time a manifest entry records (the manifest must be newer)."""
    times = [entry.get("mtime_ns")]
    files = entry.get("files")
    if isinstance(files, dict):
        times += [f[1] for f in files.values() if isinstance(f, list)]
    snapshot = entry.get("snapshot_file")
    if isinstance(snapshot, list):
        times.append(snapshot[1])
    return max((t for t in times if isinstance(t, int)), default=0)


def vouched(
    directory: Path,
    cached: object,
    active_base: int,
    manifest_mtime_ns: int | None,
    *,
    has_txn_index: bool = True,
) -> Vouched | None:
    """What the manifest entry ``cached`` vouches for, if every file it names is unchanged
    (same size and time, older than the manifest) and the entry is whole; else None.
    ``has_txn_index``: whether the (cached, still valid) listing shows the active segment's
    transaction index; a file the listing proves absent needs no stat."""
    if manifest_mtime_ns is None or not isinstance(cached, dict):
        return None
    try:
        if int(cached["active"]) != active_base or int(cached["mtime_ns"]) >= manifest_mtime_ns:
            return None
        files = cached["files"]
        # String paths: at thousands of partitions, building Path objects is a real cost.
        where = f"{directory}{os.sep}"
        checks = [
            (where + file_name(active_base, suffix), files[suffix])
            for suffix in _SUFFIXES
            if suffix != TXN_INDEX_SUFFIX or has_txn_index or files[suffix] is not None
        ]
        snapshot = cached["snapshot"]
        log_end = int(cached["log_end"])
        empty = int(cached["producers"]) == 0 and (
            snapshot == log_end or (snapshot is None and log_end == 0)
        )
        if empty and snapshot is not None:
            checks.append((where + snapshot_file_name(int(snapshot)), cached["snapshot_file"]))
        for path, facts in checks:
            now = _file_facts(path)
            if now != facts or (now is not None and now[1] >= manifest_mtime_ns):
                return None
        return Vouched(log_end, int(cached["since_index"]), empty)
    except (KeyError, TypeError, ValueError, OSError):
        return None
