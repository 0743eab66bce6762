"""Making an unclean load durable: every recovered partition's syncs, together at the end.

After a crash each partition's recovery writes a little (rebuilt index entries, a truncated
tail, a producer snapshot at the new log end) that must be on disk before the recovery point
checkpoint claims it. Done one partition at a time that is a handful of fsyncs each, and at
thousands of partitions the fsyncs are the whole start-up. The loader leaves them here
instead; ``sync_all`` runs them side by side (an fsync waits on the disk, not the GIL, and
concurrent fsyncs share the filesystem's journal commits), and the log manager writes the
checkpoints only after every one has returned.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from logkeel.storage.errors import io_guard

# Enough to keep the disk's queue full; the threads only wait on fsync.
SYNC_THREADS = 16

Sync = Callable[[], None]


def fsync_file(path: Path, log_dir: Path) -> None:
    """fsync of a file by path: its dirty pages (written through any descriptor or map, since
    closed) reach the disk. A file that is gone has nothing to sync."""
    with io_guard(log_dir, f"syncing {path}"):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sync_all(syncs: Iterable[tuple[object, Sync]]) -> dict[object, BaseException]:
    """Runs every ``(key, sync)``; returns the errors by key (the others succeeded)."""
    jobs = list(syncs)
    errors: dict[object, BaseException] = {}
    if not jobs:
        return errors

    def run(job: tuple[object, Sync]) -> tuple[object, BaseException | None]:
        key, sync = job
        try:
            sync()
        except Exception as exc:  # noqa: BLE001 - reported per partition by the caller
            return key, exc
        return key, None

    with ThreadPoolExecutor(
        min(SYNC_THREADS, len(jobs)), thread_name_prefix="log-recovery-sync"
    ) as pool:
        for key, exc in pool.map(run, jobs):
            if exc is not None:
                errors[key] = exc
    return errors
