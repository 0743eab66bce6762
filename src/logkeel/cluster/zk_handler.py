"""kazoo's threading handler with a cheaper ``select``.

kazoo's connection thread calls ``handler.select`` before every read and write of a packet
(three times per response), and its stock select builds and closes an epoll selector each time:
five system calls, each of which lets go of the GIL. In a broker whose other threads keep the
GIL busy, every release costs the connection thread up to a switch interval (5 ms) to get it
back, so a burst of thousands of watch re-reads or state writes (a controller moving hundreds of
leaderships) crawled. ``poll`` needs one system call and no file descriptor of its own.
"""

from __future__ import annotations

import select
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

__all__ = ["PollingHandler", "poll_select"]

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT
_DONE = select.POLLERR | select.POLLHUP | select.POLLNVAL


def poll_select(
    rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select``'s contract (ready readers, writers, and no exceptional list), over
    ``poll``: no limit on descriptor numbers, one system call. A descriptor in error or hung up
    counts as ready for what it was asked, as select reports it (the read or write then fails
    and kazoo reconnects)."""
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative")
    poller = select.poll()
    wanted: dict[int, int] = {}
    for obj in rlist:
        fd = fileobj_to_fd(obj)
        wanted[fd] = wanted.get(fd, 0) | _READ
    for obj in wlist:
        fd = fileobj_to_fd(obj)
        wanted[fd] = wanted.get(fd, 0) | _WRITE
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    ready = dict(poller.poll(None if timeout is None else timeout * 1000))
    readers = [o for o in rlist if ready.get(fileobj_to_fd(o), 0) & (_READ | _DONE)]
    writers = [o for o in wlist if ready.get(fileobj_to_fd(o), 0) & (_WRITE | _DONE)]
    return readers, writers, []


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)
