"""Making an unclean load durable: every recovered partition's syncs, together at the end.

After a crash each partition's recovery writes a little (rebuilt index entries, a truncated
tail, a producer snapshot at the new log end) that must be on disk before the recovery point
checkpoint claims it; and the bytes it recovered may still sit dirty in the page cache (a
process crash, not a machine crash), so even an untouched active segment is synced.

``log.recovery.sync.method``:

- ``syncfs`` (default, Linux): one ``syncfs`` of the log dir's filesystem after every partition
  is loaded, as PostgreSQL's ``recovery_init_sync_method=syncfs``. On ext4 every fsync ends in
  a cache flush of the device even for a file with nothing dirty, so thousands of per-file
  syncs cost thousands of device flushes (~1.2 s for 2,000 partitions on the development VM);
  one syncfs writes everything back with one journal commit and one flush. It also writes back
  other dirty files of that filesystem, which on a shared, busy filesystem can take longer.
- ``fsync``: each partition's files are fsynced, 16 partitions at a time (an fsync waits on the
  disk, not the GIL, and concurrent fsyncs share the filesystem's journal commits).

Either way the log manager writes the checkpoints only after every sync has returned.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from logkeel.storage.errors import io_guard

# Enough to keep the disk's queue full; the threads only wait on fsync.
SYNC_THREADS = 16

SYNCFS = "syncfs"
FSYNC = "fsync"
RECOVERY_SYNC_METHODS = (SYNCFS, FSYNC)

Sync = Callable[[], None]


@dataclass(frozen=True, slots=True)
class PendingSync:
    """What one partition's unclean load leaves to make durable."""

    files: Sync  # fsyncs every file the load wrote or recovered
    snapshot: Sync | None = None  # writes the producer snapshot at the log end (durably)


def _load_syncfs() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_syncfs = _load_syncfs()


def syncfs_available() -> bool:
    return _syncfs is not None


def syncfs(path: Path, log_dir: Path) -> None:
    """Writes back every dirty page and inode of the filesystem holding ``path`` and flushes
    the device (Linux ``syncfs``; since 5.8 it reports writeback errors)."""
    assert _syncfs is not None
    with io_guard(log_dir, f"syncfs of the filesystem of {path}"):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _syncfs(fd) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code) if code else "syncfs failed")
        finally:
            os.close(fd)


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


def sync_all(
    jobs: Iterable[tuple[object, PendingSync]], log_dir: Path, method: str = SYNCFS
) -> dict[object, BaseException]:
    """Makes every job durable; returns the errors by key (the others succeeded). With
    ``syncfs`` a failed syncfs fails every key."""
    jobs = list(jobs)
    if not jobs:
        return {}
    if method == SYNCFS and _syncfs is not None:
        errors = _run_all([(key, job.snapshot) for key, job in jobs if job.snapshot is not None])
        try:
            syncfs(log_dir, log_dir)
        except Exception as exc:  # noqa: BLE001 - reported per partition by the caller
            return {key: exc for key, _ in jobs}
        return errors
    return _run_all([(key, _both(job)) for key, job in jobs])


def _both(job: PendingSync) -> Sync:
    def run() -> None:
        job.files()
        if job.snapshot is not None:
            job.snapshot()

    return run


def _run_all(jobs: list[tuple[object, Sync]]) -> dict[object, BaseException]:
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
