"""Small durable-file primitives shared by checkpoints, snapshots and segments."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path: str | Path) -> bytes:
    """The whole of a small file: open, read, close (``Path.read_bytes`` makes three times
    the syscalls, and start-up reads two such files for each of thousands of partitions)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` so a crash leaves either the old or the new content:
    temp file, fsync, rename over the target, fsync the directory."""
    path = Path(path)
    # A unique temp name: two threads checkpointing the same file must not share one.
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_file(path: str | Path) -> None:
    """Syncs a file this process holds no descriptor of (its dirty pages are the kernel's)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
