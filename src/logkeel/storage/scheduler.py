"""A single background thread running delayed and periodic storage tasks.

Flushes, checkpoints, retention and delayed file deletion are blocking disk work; they run
here, never on the server's event loop. A failing task is logged and never stops the thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, name: str = "logkeel-scheduler") -> None:
        self._name = name
        self._queue: list[tuple[float, int, Callable[[], None], float | None]] = []
        self._counter = itertools.count()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        with self._cv:
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def schedule(
        self, fn: Callable[[], None], delay_s: float = 0.0, period_s: float | None = None
    ) -> None:
        with self._cv:
            heapq.heappush(
                self._queue, (time.monotonic() + delay_s, next(self._counter), fn, period_s)
            )
            self._cv.notify()

    def shutdown(self, run_pending_once: bool = False) -> None:
        """Stops the thread; with ``run_pending_once`` runs the one-shot tasks still queued."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=30)
        if run_pending_once:
            with self._cv:
                pending = [fn for _, _, fn, period in self._queue if period is None]
                self._queue.clear()
            for fn in pending:
                self._run_one(fn)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopping and (
                    not self._queue or self._queue[0][0] > time.monotonic()
                ):
                    timeout = self._queue[0][0] - time.monotonic() if self._queue else None
                    self._cv.wait(timeout)
                if self._stopping:
                    return
                _, _, fn, period = heapq.heappop(self._queue)
            self._run_one(fn)
            if period is not None:
                self.schedule(fn, period, period)

    @staticmethod
    def _run_one(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("background task %s failed", getattr(fn, "__name__", fn))
