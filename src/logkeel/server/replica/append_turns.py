"""Appends to one partition in the order they were handed to the IO threads.

A connection pipelines its Produce requests (see ``network/connection.py``), so two of them may
run on two IO threads at once; for a partition both write, the one handed over first must
append first (a producer's batches keep their order; an idempotent producer's sequences would
otherwise arrive out of order). A turn is taken on the event loop when the work is handed over,
and the IO thread waits for it before touching the log. The executor starts work in the order
it was handed over, so the holder of an earlier turn is always already running: no deadlock.
"""

from __future__ import annotations

import threading


class AppendTurns:
    """Numbered turns: ``take`` (event loop, in hand-over order), then ``wait`` and ``done``
    (IO thread). Every taken turn must be ``done``, or the later ones wait for ever."""

    __slots__ = ("_changed", "_next", "_serving")

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._next = 0
        self._serving = 0

    def take(self) -> int:
        turn = self._next
        self._next += 1
        return turn

    def wait(self, turn: int) -> None:
        if self._serving >= turn:  # the usual case: nobody ahead
            return
        with self._changed:
            while self._serving < turn:
                self._changed.wait()

    def done(self, turn: int) -> None:
        """Ends ``turn``; never moves back (a turn given up while the IO threads stop may be
        done before the ones ahead of it)."""
        with self._changed:
            self._serving = max(self._serving, turn + 1)
            self._changed.notify_all()
