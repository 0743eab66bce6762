"""Keeping what lives as long as the broker out of the cyclic collector's walks.

CPython's full collection walks every object the collector tracks, and stops every thread
while it does. Start-up freezes what it built (`gc.freeze`), but a topic created later is not:
at 10,000 partitions, RF 3, a broker held ~1.4M objects, and each full collection took
0.6-1.5 s, about every 15 s under a produce load. Those pauses showed up as event-loop stalls
and as acks=all waits of ~0.9 s at p99 (issue 19).

A full collection slower than ``slow_s`` is therefore followed by a freeze of what it left
alive: those objects survived a full collection, so they are the broker's long-lived state.
The next collections walk only what came since.

Frozen objects are never collected. Every ``refreeze_s`` everything is unfrozen, collected
once and frozen again, so that objects that died in a cycle meanwhile (a deleted topic's
partitions) are reclaimed. That costs one full walk every ``refreeze_s``, where the collector
made one every few seconds.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any

__all__ = ["GcFreezer"]

log = logging.getLogger(__name__)

SLOW_FULL_S = 0.1
REFREEZE_S = 600.0


class GcFreezer:
    """Freezes at start, after each slow full collection, and anew every ``refreeze_s``."""

    def __init__(self, *, slow_s: float = SLOW_FULL_S, refreeze_s: float = REFREEZE_S) -> None:
        self.slow_s = slow_s
        self.refreeze_s = refreeze_s
        self._slow = threading.Event()
        self._stop = threading.Event()
        self._started_at: float | None = None
        self._cpu_at = 0.0
        self._last = ""
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        gc.freeze()
        gc.callbacks.append(self._on_collection)
        self._thread = threading.Thread(target=self._run, name="gc-freezer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._slow.set()
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside the collector, on whichever thread triggered it: time it, nothing more.
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started_at = time.monotonic()
            self._cpu_at = time.thread_time()
        elif self._started_at is not None:
            took, self._started_at = time.monotonic() - self._started_at, None
            if took > self.slow_s:
                # Wall time and the collecting thread's CPU: on a loaded machine the first is
                # mostly the process waiting for a core while it holds the GIL.
                self._last = f"{took:.2f}s, {time.thread_time() - self._cpu_at:.2f}s of CPU"
                self._slow.set()

    def _run(self) -> None:
        next_refreeze = time.monotonic() + self.refreeze_s
        while not self._stop.is_set():
            slow = self._slow.wait(max(0.0, next_refreeze - time.monotonic()))
            if self._stop.is_set():
                return
            started = time.monotonic()
            if slow:
                self._slow.clear()
                gc.freeze()  # what the slow collection just found alive
                what = f"after a slow full collection ({self._last})"
            else:
                gc.unfreeze()
                gc.collect()
                gc.freeze()
                self._slow.clear()  # that collection was this one
                next_refreeze = time.monotonic() + self.refreeze_s
                what = "after collecting everything"
            # Not gc.get_freeze_count(): it walks every frozen object (~2M at 10,000
            # partitions) holding the GIL; py-spy found this thread in it for a quarter of
            # the GIL's samples through a failover.
            log.info("gc: frozen %s (%.2fs)", what, time.monotonic() - started)
