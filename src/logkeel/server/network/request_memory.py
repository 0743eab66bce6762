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

__all__ = ["TRIM_BYTES", "RequestMemory", "malloc_trim"]


class RequestMemory:
    """``limit`` bytes of requests at once; ``limit <= 0`` is unbounded (Kafka's -1)."""

    def __init__(self, limit: int = -1, trim: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self.trims = 0
        # Called once TRIM_BYTES have been given back since the last call (malloc_trim).
        self._trim = trim
        self._high = 0  # the most used since the last trim
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
        self._high = max(self._high, self.used)

    def release(self, nbytes: int) -> None:
        """Gives back ``nbytes``; wakes the connections waiting for memory while any is free."""
        if nbytes <= 0:
            return
        self.used -= nbytes
        assert self.used >= 0, "released more request memory than was reserved"
        if self._trim is not None and self._high - self.used >= TRIM_BYTES:
            self._high = self.used
            self.trims += 1
            self._trim()
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


# Freed request memory worth handing back to the OS at once (see ``trim``).
TRIM_BYTES = 16 * 1024 * 1024


def malloc_trim() -> Callable[[], None] | None:
    """glibc's ``malloc_trim(0)``: gives the free pages of the heap back to the OS; None where
    there is no glibc.

    Large request buffers come from the heap once glibc has raised its mmap threshold (it
    does, to the size of each mmapped block freed), and freed heap memory stays with the
    process: three connections' 100 MB frames left the broker 300 MB larger after they closed
    (issue 26). Fixing the threshold instead (mallopt) would mmap and fault in every large
    buffer afresh, which costs the produce path dearly (+50% broker CPU per MB here)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)
