"""Delayed operations: requests that wait for something to happen, or for their deadline.

Kafka parks an ``acks=all`` produce until the high watermark passes its records and a fetch
until ``min.bytes`` of data have arrived; both must answer at their deadline at the latest.
This is the same idea on asyncio: an operation is watched under the keys (partitions) whose
changes may complete it, and whoever changes a partition calls ``check_and_complete(key)``.

Besides operations, a key may have *listeners*: told of every ``check_and_complete`` of their
key, for as long as they listen (a follower's fetch session learns which of its thousands of
partitions changed between its Fetches, without checking each: ``session_reads``).

Everything here runs on the event loop thread, so there is no locking: ``try_complete`` must
only read cheap in-memory state (offsets, leadership), never touch the disk.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class DelayedOperation(ABC):
    """Something one request waits for. Subclasses say when it is done in ``try_complete``.

    ``completed`` turns true exactly once: by ``try_complete`` finding the condition met (it
    calls ``force_complete``), by the deadline (``expired`` is then true), or by the purgatory
    shutting down.
    """

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = max(0, delay_ms)
        self.completed = False
        self.expired = False
        self._future: asyncio.Future[None] | None = None

    @abstractmethod
    def try_complete(self) -> bool:
        """Checks the condition; if met, calls ``force_complete()`` and returns its result."""

    def force_complete(self) -> bool:
        """Completes the operation now; False if it was already completed."""
        if self.completed:
            return False
        self.completed = True
        if self._future is not None and not self._future.done():
            self._future.set_result(None)
        return True

    def _expire(self) -> None:
        if not self.completed:
            self.expired = True
            self.force_complete()


class DelayedOperationPurgatory(Generic[K]):
    """Operations waiting under keys; ``wait`` parks one, ``check_and_complete`` wakes them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[K, set[DelayedOperation]] = {}
        self._listeners: dict[K, set[Callable[[K], None]]] = {}
        self._pending = 0
        self._closed = False

    @property
    def pending(self) -> int:
        """Operations currently waiting (for metrics and tests)."""
        return self._pending

    def watched_keys(self) -> int:
        return len(self._watchers)

    def listen(self, key: K, fn: Callable[[K], None]) -> None:
        """``fn(key)`` on every check of ``key`` from now on, until ``unlisten``."""
        self._listeners.setdefault(key, set()).add(fn)

    def unlisten(self, key: K, fn: Callable[[K], None]) -> None:
        fns = self._listeners.get(key)
        if fns is not None:
            fns.discard(fn)
            if not fns:
                del self._listeners[key]

    def listeners(self) -> int:
        """Keys listened to (for tests: a closed session leaves none behind)."""
        return len(self._listeners)

    async def wait(self, op: DelayedOperation, keys: Iterable[K]) -> None:
        """Returns once ``op`` is complete: at once if ``try_complete`` says so, else after a
        ``check_and_complete`` of one of ``keys`` completes it, or at its deadline."""
        if op.completed or op.try_complete():
            return
        if self._closed or op.delay_ms == 0:
            op._expire()
            return
        loop = asyncio.get_running_loop()
        op._future = loop.create_future()
        keys = list(dict.fromkeys(keys))
        for key in keys:
            self._watchers.setdefault(key, set()).add(op)
        self._pending += 1
        timer = loop.call_later(op.delay_ms / 1000, op._expire)
        try:
            await op._future
        finally:
            timer.cancel()
            self._pending -= 1
            for key in keys:
                ops = self._watchers.get(key)
                if ops is not None:
                    ops.discard(op)
                    if not ops:
                        del self._watchers[key]
            if not op.completed:
                # The waiting request was cancelled (its connection went away).
                op.completed = True

    def check_and_complete(self, key: K) -> int:
        """Re-checks the operations watching ``key``; returns how many completed."""
        return self.check_and_complete_keys((key,))

    def check_and_complete_keys(self, keys: Iterable[K]) -> int:
        """Re-checks each operation watching any of ``keys`` once (a follower's fetch watches
        every partition it replicates: checked once per key after thousands of leaderships
        changed, its thousands of partitions were walked thousands of times, seconds of the
        event loop); returns how many completed."""
        ops: dict[DelayedOperation, None] = {}
        for key in keys:
            for fn in list(self._listeners.get(key, ())):
                try:
                    fn(key)
                except Exception:
                    log.exception("%s: a listener of %r failed", self.name, key)
            ops.update(dict.fromkeys(self._watchers.get(key, ())))
        done = 0
        for op in ops:
            if op.completed:
                continue
            try:
                if op.try_complete():
                    done += 1
            except Exception:
                # A broken check must not leave its request hanging until the deadline.
                log.exception("%s: checking delayed operation %r failed", self.name, op)
                if op.force_complete():
                    done += 1
        return done

    def check_all(self) -> int:
        """Re-checks every waiting operation (after a broad change such as a dir failure)."""
        return self.check_and_complete_keys(list({**self._watchers, **self._listeners}))

    def shutdown(self) -> None:
        """Completes every waiting operation now, so their requests answer before closing."""
        self._closed = True
        for ops in list(self._watchers.values()):
            for op in list(ops):
                op._expire()
