"""The zero-copy response writer: a response's file regions go from the segment files to the
socket with ``sendfile``, never through Python (Fetch's data path).

A response given as parts is a list of bytes and file regions (objects with ``fd``,
``position``, ``size`` and ``read_bytes()``). On a TLS connection (encrypted in Python, so
no socket to ``sendfile`` into) each region is read once, off the loop, and written through
the transport.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["FileRegion", "FramePart", "send_parts"]


@runtime_checkable
class FileRegion(Protocol):
    """``size`` bytes at ``position`` of the open file ``fd``."""

    fd: int
    position: int
    size: int

    def __len__(self) -> int: ...

    def read_bytes(self) -> bytes: ...


FramePart = bytes | bytearray | memoryview | FileRegion

_T = TypeVar("_T")


async def send_parts(
    transport: asyncio.Transport,
    parts: Sequence[FramePart],
    drain: Callable[[], Awaitable[None]],
    is_lost: Callable[[], bool],
    *,
    zero_copy: bool = True,
    on_file_read: Callable[[float], object] | None = None,
) -> int:
    """Writes ``parts`` (bytes, or file regions) to ``transport`` in order; returns the bytes
    sent. ``drain`` waits while the transport's buffer is full; ``is_lost`` says the peer
    went away. ``zero_copy=False`` for a TLS transport: asyncio still hands out its raw
    socket, and ``sendfile`` into it would bypass the encryption. ``on_file_read`` is told
    the seconds each read of a region's file took on its thread (a ``sendfile`` call, or a
    copy for TLS): the only part of a send that can wait on the disk. Waiting for the socket
    to drain, for a thread or for the event loop is not in it."""
    total = sum(len(p) for p in parts)
    # A small region already in the page cache (a tail read: what was just appended) is
    # copied on the loop: handing it to a sendfile thread costs two thread switches, most of
    # a follower's round trip on an idle cluster. The read never blocks (RWF_NOWAIT), so a
    # region on a slow or cold disk still goes to the threads.
    parts = [_cached(p) if not isinstance(p, bytes | bytearray | memoryview) else p for p in parts]
    in_memory = [p for p in parts if isinstance(p, bytes | bytearray | memoryview)]
    if len(in_memory) == len(parts):
        transport.write(b"".join(in_memory))
        await drain()
        return total
    sock = transport.get_extra_info("socket") if zero_copy else None
    if sock is None or not hasattr(os, "sendfile"):
        # No socket to sendfile into (TLS encrypts in Python): one copy per region.
        for part in parts:
            if isinstance(part, bytes | bytearray | memoryview):
                transport.write(part)
            else:
                data, took = await asyncio.to_thread(_timed, part.read_bytes)
                if on_file_read is not None:
                    on_file_read(took)
                transport.write(data)
            await drain()
        return total
    # Our bytes go around the transport, so whatever it still buffers must go first.
    delay = 0.0005
    while transport.get_write_buffer_size() > 0:
        if is_lost():
            raise ConnectionResetError("connection lost")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)
    # A duplicate descriptor: if the transport is aborted meanwhile, this one still names
    # the same socket (never a newly opened file that reused the number).
    fd = os.dup(sock.fileno())
    try:
        loop = asyncio.get_running_loop()
        for part in parts:
            if isinstance(part, bytes | bytearray | memoryview):
                view = memoryview(part)
                while view:
                    try:
                        n = os.write(fd, view)
                    except BlockingIOError:
                        await _wait_writable(loop, fd)
                        continue
                    view = view[n:]
                continue
            offset, remaining = part.position, part.size
            while remaining > 0:
                n, took = await loop.run_in_executor(
                    _sendfile_executor(), _timed, _sendfile_some, fd, part.fd, offset, remaining
                )
                if on_file_read is not None:
                    on_file_read(took)
                if n < 0:
                    await _wait_writable(loop, fd)
                elif n == 0:
                    raise EOFError(
                        f"file region ended {remaining} bytes early (segment truncated?)"
                    )
                else:
                    offset += n
                    remaining -= n
    finally:
        os.close(fd)
    return total


_INLINE_MAX_BYTES = 64 * 1024
_NOWAIT = getattr(os, "RWF_NOWAIT", None)


def _cached(region: FileRegion) -> FramePart:
    """The region's bytes when it is small and wholly in the page cache, else the region."""
    if _NOWAIT is None or region.size > _INLINE_MAX_BYTES or region.size <= 0:
        return region
    buf = bytearray(region.size)
    try:
        n = os.preadv(region.fd, [buf], region.position, _NOWAIT)
    except OSError:
        # EAGAIN: not cached; EOPNOTSUPP: the filesystem cannot tell; any other error is
        # met again, and reported, on the sendfile path.
        return region
    return buf if n == region.size else region


_SENDFILE_THREADS = 4
_sendfile_pool: ThreadPoolExecutor | None = None


def _sendfile_executor() -> ThreadPoolExecutor:
    """Threads for ``sendfile``: the socket never blocks them (it is non-blocking), but the
    file side reads from disk when the data is not cached, which must not stall the loop."""
    global _sendfile_pool
    if _sendfile_pool is None:
        _sendfile_pool = ThreadPoolExecutor(
            _SENDFILE_THREADS, thread_name_prefix="logkeel-sendfile"
        )
    return _sendfile_pool


def _timed(fn: Callable[..., _T], *args: Any) -> tuple[_T, float]:
    """``fn(*args)`` and the seconds it took, timed on the thread that runs it: the call's
    own time (its disk reads), not the wait for that thread or for the loop to resume."""
    started = time.monotonic()
    result = fn(*args)
    return result, time.monotonic() - started


def _sendfile_some(out_fd: int, in_fd: int, offset: int, count: int) -> int:
    """Bytes sent (0: the file ended), or -1 when the socket buffer is full."""
    try:
        return os.sendfile(out_fd, in_fd, offset, count)
    except BlockingIOError:
        return -1


async def _wait_writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await fut
    finally:
        loop.remove_writer(fd)
