"""What a partition directory holds, from one listing: segments, indexes, snapshots.

Listing is the whole per-partition cost of a clean start-up besides the active segment, so it
is done once (no stat or open per segment) and its result can be cached in the start-up
manifest written at clean shutdown (``cached_listing`` / ``listing_from_cache``). Listing also
finishes or removes what interrupted operations left (``.swap``, ``.cleaned``, ``.deleted``,
``.tmp``) and the indexes of segments whose log file is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from logkeel.storage.engine.producer_snapshot import SNAPSHOT_SUFFIX
from logkeel.storage.engine.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    file_name,
    parse_base_offset,
    segment_bases,
)
from logkeel.storage.fileio import fsync_dir

log = logging.getLogger(__name__)

_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")


@dataclass(slots=True)
class PartitionListing:
    bases: list[int]
    missing_index: set[int]
    missing_time_index: set[int]
    snapshots: list[str]  # names of the `.snapshot` files
    has_txn_index: set[int]
    # what listing did about leftovers (file names)
    removed_files: list[str] = field(default_factory=list)
    swapped_in: list[str] = field(default_factory=list)
    missing_segments: list[int] = field(default_factory=list)


@dataclass(slots=True)
class _Names:
    logs: set[str]
    index_stems: set[str]
    time_stems: set[str]
    txn_stems: set[str]
    leftovers: list[str]
    snapshots: list[str]

    def orphans(self) -> bool:
        return any(
            (stems - self.logs) for stems in (self.index_stems, self.time_stems, self.txn_stems)
        )

    def listing(self) -> PartitionListing:
        logs = self.logs
        return PartitionListing(
            sorted(map(int, logs)),
            {int(s) for s in logs - self.index_stems},
            {int(s) for s in logs - self.time_stems},
            self.snapshots,
            {int(s) for s in self.txn_stems & logs},
        )


def _sort_names(names: list[str]) -> _Names:
    logs: set[str] = set()
    index_stems: set[str] = set()
    time_stems: set[str] = set()
    txn_stems: set[str] = set()
    buckets = {
        LOG_SUFFIX: logs,
        INDEX_SUFFIX: index_stems,
        TIME_INDEX_SUFFIX: time_stems,
        TXN_INDEX_SUFFIX: txn_stems,
    }
    others: list[str] = []
    for n in names:
        bucket = buckets.get(n[20:])
        if bucket is None:
            others.append(n)
        else:
            bucket.add(n[:20])
    for stems in (logs, index_stems, time_stems, txn_stems):
        odd = [stem for stem in stems if not stem.isdigit()]
        stems.difference_update(odd)
    return _Names(
        logs,
        index_stems,
        time_stems,
        txn_stems,
        [n for n in others if n.endswith(_LEFTOVER_SUFFIXES)],
        [n for n in others if n.endswith(SNAPSHOT_SUFFIX)],
    )


def cached_listing(directory: Path) -> dict[str, object] | None:
    """The listing of a partition dir as the start-up manifest keeps it (read-only), or None
    when the dir holds leftovers that the next start-up must deal with."""
    names = _sort_names(os.listdir(directory))
    if names.leftovers or names.orphans():
        return None
    listing = names.listing()
    return {
        "mtime_ns": os.stat(directory).st_mtime_ns,
        "bases": listing.bases,
        "missing_index": sorted(listing.missing_index),
        "missing_time_index": sorted(listing.missing_time_index),
        "snapshots": listing.snapshots,
        "txn": sorted(listing.has_txn_index),
    }


def listing_from_cache(directory: Path, cached: object) -> PartitionListing | None:
    """The cached listing if the dir is unchanged since (same mtime: no file added, removed or
    renamed in it), else None."""
    try:
        assert isinstance(cached, dict)
        if os.stat(directory).st_mtime_ns != cached["mtime_ns"]:
            return None
        return PartitionListing(
            list(map(int, cached["bases"])),
            {int(b) for b in cached["missing_index"]},
            {int(b) for b in cached["missing_time_index"]},
            [str(n) for n in cached["snapshots"]],
            {int(b) for b in cached["txn"]},
        )
    except (AssertionError, KeyError, TypeError, ValueError, OSError):
        return None


def list_partition(directory: Path, names_listed: list[str] | None = None) -> PartitionListing:
    """One directory listing: segment base offsets, which indexes exist, leftovers handled.

    No per-segment stat or open: start-up cost per partition is this listing. Names are
    sorted into buckets in one pass (a partition may hold thousands of files).
    ``names_listed``: the dir's names when the caller has just listed it.
    """
    names = _sort_names(names_listed if names_listed is not None else os.listdir(directory))
    logs, index_stems, time_stems, txn_stems = (
        names.logs,
        names.index_stems,
        names.time_stems,
        names.txn_stems,
    )
    removed_files: list[str] = []
    swapped_in: list[str] = []
    missing: list[int] = []
    removed = False
    swaps: list[str] = []
    for name in names.leftovers:
        if name.endswith(SWAP_SUFFIX):
            swaps.append(name)
        else:
            (directory / name).unlink(missing_ok=True)
            removed_files.append(name)
            removed = True
    for name in swaps:
        # A .swap file is complete (it was renamed from .cleaned once fully written): finish
        # the replacement. Its indexes are rebuilt, because their swap copies may not be.
        real = name[: -len(SWAP_SUFFIX)]
        base = parse_base_offset(real)
        path = directory / name
        removed = True
        if base is None or not real.endswith(LOG_SUFFIX):
            path.unlink(missing_ok=True)
            removed_files.append(name)
            continue
        os.replace(path, directory / real)
        stem = real[:20]
        for suffix, present in ((INDEX_SUFFIX, index_stems), (TIME_INDEX_SUFFIX, time_stems)):
            (directory / (stem + suffix)).unlink(missing_ok=True)
            present.discard(stem)
        logs.add(stem)
        swapped_in.append(real)
    for present, suffix in (
        (index_stems, INDEX_SUFFIX),
        (time_stems, TIME_INDEX_SUFFIX),
        (txn_stems, TXN_INDEX_SUFFIX),
    ):
        for stem in present - logs:
            # The index of a segment whose log is gone: the data is lost, the index useless.
            (directory / (stem + suffix)).unlink(missing_ok=True)
            removed_files.append(stem + suffix)
            removed = True
            if int(stem) not in missing:
                missing.append(int(stem))
        present &= logs
    if removed:
        fsync_dir(directory)
    listing = names.listing()
    listing.removed_files, listing.swapped_in, listing.missing_segments = (
        removed_files,
        swapped_in,
        sorted(missing),
    )
    return listing


def recovery_plan(
    directory: Path, recovery_point: int | None, names: list[str] | None = None
) -> tuple[int, int]:
    """(segments, bytes) an unclean load of ``directory`` will rescan; read-only, for progress.
    ``names``: the dir's names when the caller has just listed it."""
    bases = segment_bases(names if names is not None else os.listdir(directory))
    rp = recovery_point or 0
    first = max((i for i, b in enumerate(bases) if b <= rp), default=0)
    todo = bases[first:]
    nbytes = 0
    for b in todo:
        with contextlib.suppress(FileNotFoundError):
            nbytes += os.stat(directory / file_name(b, LOG_SUFFIX)).st_size
    return len(todo), nbytes
