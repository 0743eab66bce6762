"""Keyed one-shot timers for the group coordinator: heartbeat/session expiry, join and sync
deadlines, the initial rebalance delay and offset expiry all go through a ``Timer``.
``LoopTimer`` runs them on the asyncio loop; ``ManualTimer`` lets tests move time by hand."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["LoopTimer", "ManualTimer", "Timer"]

log = logging.getLogger(__name__)


class Timer(Protocol):
    """Keyed one-shot timers: scheduling a key again replaces its pending timer."""

    def now_ms(self) -> int: ...

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None: ...

    def cancel(self, key: str) -> None: ...

    def cancel_all(self) -> None: ...


class LoopTimer:
    """Timers on the running asyncio loop, wall-clock ``now_ms`` (commit timestamps)."""

    def __init__(self) -> None:
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None:
        self.cancel(key)
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            if self._handles.get(key) is handle:
                del self._handles[key]
            try:
                fn()
            except Exception:
                log.exception("group coordinator timer %s failed", key)

        handle = loop.call_later(max(delay_ms, 0) / 1000, fire)
        self._handles[key] = handle

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def pending(self) -> set[str]:
        return set(self._handles)


class ManualTimer:
    """Time that moves only when ``advance`` is called: deterministic tests of timeouts."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._seq = itertools.count()
        self._heap: list[tuple[int, int, str]] = []
        self._live: dict[str, tuple[int, Callable[[], None]]] = {}

    def now_ms(self) -> int:
        return self._now

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None:
        seq = next(self._seq)
        self._live[key] = (seq, fn)
        heapq.heappush(self._heap, (self._now + max(delay_ms, 0), seq, key))

    def cancel(self, key: str) -> None:
        self._live.pop(key, None)

    def cancel_all(self) -> None:
        self._live.clear()
        self._heap.clear()

    def pending(self) -> set[str]:
        return set(self._live)

    def advance(self, ms: int) -> None:
        """Moves time forward by ``ms``, firing due timers in deadline order."""
        target = self._now + ms
        while self._heap and self._heap[0][0] <= target:
            deadline, seq, key = heapq.heappop(self._heap)
            live = self._live.get(key)
            if live is None or live[0] != seq:
                continue  # cancelled or rescheduled
            del self._live[key]
            self._now = max(self._now, deadline)
            live[1]()
        self._now = target
