"""The broker-wide budget of request bytes (Kafka's ``queued.max.request.bytes``).

Pure bookkeeping, no sockets. Every connection reserves here the bytes of the requests it is
receiving (a large frame's buffer as it grows, see ``framing``) or holding (received, queued
or being handled), and gives them back when the request is done. When a reservation is refused
the connection stops reading and asks to be called back once bytes are given back; so the
memory taken by requests follows what clients have sent, never what they declare, and the sum
stays under the budget (plus at most one small frame per connection, see ``force``).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
from collections.abc import Callable

__all__ = ["RequestMemory", "return_freed_buffers_to_the_os"]


class RequestMemory:
    """``limit`` bytes of requests at once; ``limit <= 0`` is unbounded (Kafka's -1)."""

    def __init__(self, limit: int = -1) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._waiters: collections.deque[Callable[[], None]] = collections.deque()

    @property
    def bounded(self) -> bool:
        return self.limit > 0

    @property
    def exhausted(self) -> bool:
        return self.bounded and self.used >= self.limit

    def try_reserve(self, nbytes: int) -> bool:
        """Takes ``nbytes`` if they fit under the limit; False (nothing taken) if not."""
        if self.bounded and self.used + nbytes > self.limit:
            return False
        self.force(nbytes)
        return True

    def force(self, nbytes: int) -> None:
        """Takes ``nbytes`` whatever the limit: for bytes already read (a small frame that
        arrived in a connection's staging buffer cannot be unread); the connection then stops
        reading while the budget is exhausted."""
        self.used += nbytes
        self.peak = max(self.peak, self.used)

    def release(self, nbytes: int) -> None:
        """Gives back ``nbytes``; wakes the connections waiting for memory while any is free."""
        if nbytes <= 0:
            return
        self.used -= nbytes
        assert self.used >= 0, "released more request memory than was reserved"
        # Each waiter retries its reservation and waits again (at the back) if it still does
        # not fit, so one call wakes each waiter at most once.
        for _ in range(len(self._waiters)):
            if self.exhausted:
                break
            self._waiters.popleft()()

    def wait(self, callback: Callable[[], None]) -> None:
        """Calls ``callback`` (once) after the next release that leaves memory free."""
        self._waiters.append(callback)

    def cancel(self, callback: Callable[[], None]) -> None:
        """Forgets a waiter (its connection closed)."""
        with contextlib.suppress(ValueError):
            self._waiters.remove(callback)


# glibc's mallopt parameters.
_M_MMAP_THRESHOLD = -3


def return_freed_buffers_to_the_os(threshold: int = 128 * 1024) -> bool:
    """Makes glibc serve every allocation of ``threshold`` bytes or more (a large frame's
    buffer) with its own mmap, unmapped when freed.

    By default glibc raises that threshold to the size of each mmapped block freed (up to
    32 MiB), after which such buffers come from the heap, whose freed memory stays with the
    process: three connections' 100 MB frames left the broker 300 MB larger after they closed
    (issue 26). Fixing the threshold turns that adjustment off. False where there is no glibc.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
