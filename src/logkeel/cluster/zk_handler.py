"""kazoo's threading handler with a cheaper ``select``, and calls that a leaving broker does
not let wait for a ZooKeeper out of reach.

kazoo's connection thread calls ``handler.select`` before every read and write of a packet
(three times per response), and its stock select builds and closes an epoll selector each time:
five system calls, each of which lets go of the GIL. In a broker whose other threads keep the
GIL busy, every release costs the connection thread up to a switch interval (5 ms) to get it
back, so a burst of thousands of watch re-reads or state writes (a controller moving hundreds of
leaderships) crawled. ``poll`` needs one system call and no file descriptor of its own.

kazoo queues a call made while its connection is down until it is back, and its blocking calls
wait without a bound: a broker told to stop while ZooKeeper was frozen hung for ever in the
first write of its shutdown (and, had that failed, in the next). Once the broker leaves
(`PollingHandler.give_up_when`), a blocking call fails with `GaveUp` whenever the connection is
down, and a new call is not even queued (`GivingUpClient`). `GaveUp` is kazoo's
ConnectionClosedError: kazoo's own retrying recipes (a DataWatch retries a lost connection for
ever, and kazoo's stop waits for its thread) end on it rather than retry.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError
from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

__all__ = ["GaveUp", "GivingUpClient", "PollingHandler", "poll_select"]

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT
_DONE = select.POLLERR | select.POLLHUP | select.POLLNVAL
# How often a blocking call waiting for its answer looks whether it should give up.
_GIVE_UP_CHECK_S = 0.25


class GaveUp(ConnectionClosedError):  # type: ignore[misc]
    """ZooKeeper is out of reach while the broker stops: the call was not waited for."""

    def __init__(self) -> None:
        super().__init__("ZooKeeper out of reach while the broker stops")


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
    def __init__(self) -> None:
        super().__init__()
        self.give_up: Callable[[], bool] = lambda: False

    def give_up_when(self, condition: Callable[[], bool]) -> None:
        """From now on, a blocking call still waiting for its answer fails with `GaveUp` as
        soon as ``condition()`` holds (checked every quarter second), the calls waiting
        already included."""
        self.give_up = condition

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)

    def async_result(self) -> AsyncResult:
        return _GivingUpResult(self)


class _GivingUpResult(AsyncResult):  # type: ignore[misc]
    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block and timeout is None:
            # kazoo's blocking calls wait here without a bound.
            while not self.ready():
                with self._condition:
                    if not self.ready():
                        self._condition.wait(_GIVE_UP_CHECK_S)
                if not self.ready() and self._handler.give_up():
                    raise GaveUp()
            return super().get(block=False)
        return super().get(block, timeout)


class GivingUpClient(KazooClient):  # type: ignore[misc]
    """kazoo's client on a `PollingHandler`, whose calls are not queued once it gives up."""

    def _call(self, request: Any, async_object: Any) -> Any:
        # kazoo queues a call made while its connection is down, and wakes its connection
        # thread with a byte on a socket pair that only a connected thread drains: calls
        # retried in a loop while the broker stopped (each failing at once) filled it, and
        # then every call blocked in that write, the controlled shutdown's own.
        if self.handler.give_up():
            async_object.set_exception(GaveUp())
            return False
        return super()._call(request, async_object)
