"""Whether a broker may still take writes as a leader, from the state of its ZooKeeper session.

A leader cut off from ZooKeeper cannot know whether the controller has given its partitions to
another broker: once its session has expired (or, while disconnected, once the session timeout
has passed without a word from ZooKeeper, since an expiry is only learnt on reconnecting) it
refuses writes, so that a client moves to the leader the controller elected meanwhile instead
of writing to a log that the new leader will make it truncate. Reads go on. Writes resume when
the broker is registered again in a new session (or its old session turns out alive). A broker
whose controlled shutdown is done refuses writes for the same reason until it exits.

Pure: fed the session states kazoo reports and a clock; tests drive it without ZooKeeper.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["SessionFence"]


class SessionFence:
    def __init__(
        self, session_timeout_ms: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        # kazoo reports SUSPENDED after two thirds of the session timeout without a word from
        # the server; the server may expire the session one third later.
        self._grace_s = session_timeout_ms / 1000 / 3
        self._clock = clock
        self._lock = threading.Lock()
        self._suspended_since: float | None = None
        self._expired = False
        self._left = False

    def on_state(self, state: str) -> None:
        """kazoo's "CONNECTED", "SUSPENDED" or "LOST" (any thread)."""
        with self._lock:
            if state == "SUSPENDED":
                if self._suspended_since is None:
                    self._suspended_since = self._clock()
            elif state == "LOST":
                self._expired = True
            elif state == "CONNECTED" and not self._expired:
                self._suspended_since = None  # the same session lived on

    def registered(self) -> None:
        """The broker is registered again in a new session."""
        with self._lock:
            self._expired = False
            self._suspended_since = None

    def left(self) -> None:
        """The controller moved this broker's leaderships away (its controlled shutdown is
        done): writes are refused until it exits, since this broker may not have applied every
        move yet and a write it took as a leader it no longer is would be truncated away."""
        with self._lock:
            self._left = True

    def why_fenced(self) -> str | None:
        """Why writes are refused now, or None."""
        with self._lock:
            if self._left:
                return "this broker is shutting down; its leaderships moved to other brokers"
            if self._expired:
                return "this broker's ZooKeeper session expired; it is not registered again yet"
            since = self._suspended_since
            if since is not None and self._clock() - since >= self._grace_s:
                return (
                    "this broker has been cut off from ZooKeeper for longer than "
                    "zookeeper.session.timeout.ms; its session may have expired"
                )
            return None
