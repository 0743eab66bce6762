"""Watches on many znodes at once: one-shot ZooKeeper watches re-armed on every delivery with
kazoo's asynchronous reads, so that thousands of them (a partition state each) are read
pipelined, where kazoo's `DataWatch` re-reads each changed znode with a blocking call, one
after the other, on its one event thread.

Deliveries run on kazoo's callback thread, in the order the answers come. A read that fails
for another reason than a missing znode (a lost connection) goes to ``on_error``; the watch on
that znode is then gone and the owner reloads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

__all__ = ["WatchedZnodes"]

OnData = Callable[[bytes | None, Any], None]


class WatchedZnodes:
    def __init__(self, zk: KazooClient, on_error: Callable[[str, BaseException], None]) -> None:
        self._zk = zk
        self._on_error = on_error
        self._watched: set[str] = set()
        self._closed = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # Watches set (("data" | "children", path)) and those that delivered at least once.
        self._armed: set[tuple[str, str]] = set()
        self._delivered: set[tuple[str, str]] = set()
        # A read failed: its watch will never deliver, so waiting for it is over (the owner
        # was told through ``on_error`` and reads again with watches of its own).
        self._failed = False
        # While quiet (not None): the watches of ``_quiet_paths`` that fired, each with its
        # read, left for `catch_up`.
        self._deferred: dict[tuple[str, str], Callable[[], None]] | None = None
        self._quiet_paths: Callable[[str], bool] = lambda _path: False
        self._on_noted: Callable[[], None] | None = None

    def quiet(
        self, paths: Callable[[str], bool], on_noted: Callable[[], None] | None = None
    ) -> None:
        """From now on a data watch of a znode ``paths`` takes that fires is only noted (and
        ``on_noted()`` called, on kazoo's thread), not read again (nor re-armed) until
        ``catch_up``: an owner that needs the view later (a standby controller)
        reads a znode that changed ten times once, and one that writes in bursts (the
        controller in office) reads after its burst, not between its writes."""
        with self._lock:
            self._quiet_paths = paths
            self._on_noted = on_noted
            if self._deferred is None:
                self._deferred = {}

    def catch_up(self) -> int:
        """Reads again what changed so far (``wait_loaded`` waits for it), staying quiet; how
        many znodes that is."""
        with self._lock:
            pending = self._deferred or {}
            if self._deferred is not None:
                self._deferred = {}
            self._delivered.difference_update(pending)
        for again in pending.values():
            again()
        return len(pending)

    def close(self) -> None:
        """Stops every watch (each ends at its next delivery)."""
        self._closed = True

    def forget(self, path: str) -> None:
        """Stops watching ``path`` (its next delivery is dropped); `data` may watch it again."""
        with self._lock:
            self._watched.discard(path)
            self._armed.discard(("data", path))
            self._delivered.discard(("data", path))

    def wait_loaded(self, timeout_s: float) -> bool:
        """Waits until every watch set so far (those set by deliveries meanwhile too) has
        delivered once; False at once if a read failed (its watch never delivers: a
        controller taking office waited out the whole timeout for it)."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._failed or self._armed <= self._delivered, timeout_s
            )
            return not self._failed and self._armed <= self._delivered

    def undelivered(self) -> list[tuple[str, str]]:
        """The watches not delivered once yet (what ``wait_loaded`` waits for)."""
        with self._changed:
            return sorted(self._armed - self._delivered)

    def wait_delivered(self, paths: set[str], timeout_s: float) -> bool:
        """Waits until the data watch of each of ``paths`` has delivered once (False at once
        if a read failed)."""
        keys = {("data", p) for p in paths}
        with self._changed:
            self._changed.wait_for(lambda: self._failed or keys <= self._delivered, timeout_s)
            return not self._failed and keys <= self._delivered

    @property
    def failed(self) -> bool:
        return self._failed

    def data(self, path: str, on_data: OnData) -> bool:
        """``on_data(data, stat)`` soon and on every change of ``path``; (None, None) while it
        does not exist (its creation is watched). False if ``path`` was watched already."""
        with self._lock:
            if path in self._watched:
                return False
            self._watched.add(path)
            self._armed.add(("data", path))
        self._read_data(path, on_data)
        return True

    def children(self, path: str, on_children: Callable[[list[str]], None]) -> None:
        """``on_children(names)`` now and on every change of ``path``'s children ([] while
        it does not exist)."""

        def deliver(result: Any) -> None:
            try:
                names = list(result.get())
            except NoNodeError:
                names = []
            on_children(names)
            self._mark(("children", path))

        with self._lock:
            self._armed.add(("children", path))
        self._read(path, lambda watch: self._zk.get_children_async(path, watch=watch), deliver,
                   lambda: self.children(path, on_children), ("children", path))  # fmt: skip

    def _mark(self, key: tuple[str, str]) -> None:
        if key in self._delivered:
            return
        with self._changed:
            if key in self._armed:
                self._delivered.add(key)
                self._changed.notify_all()

    def _live(self, path: str | None) -> bool:
        return not self._closed and (path is None or path in self._watched)

    def _read_data(self, path: str, on_data: OnData) -> None:
        def again() -> None:
            if self._live(path):
                self._read_data(path, on_data)

        def created(result: Any) -> None:
            if result.get() is not None:
                again()

        def deliver(result: Any) -> None:
            try:
                data, stat = result.get()
            except NoNodeError:
                # Watched for its creation; created meanwhile, it is read again at once.
                self._read(path, lambda w: self._zk.exists_async(path, watch=w),
                           created, again, ("data", path))  # fmt: skip
                if self._live(path):
                    on_data(None, None)
                    self._mark(("data", path))
                return
            if self._live(path):
                on_data(data, stat)
                self._mark(("data", path))

        self._read(
            path,
            lambda watch: self._zk.get_async(path, watch=watch),
            deliver,
            again,
            ("data", path),
        )

    def _read(
        self,
        path: str,
        start: Callable[[Callable[[object], None]], Any],
        deliver: Callable[[Any], None],
        again: Callable[[], None],
        key: tuple[str, str],
    ) -> None:
        """Starts one read with a one-shot watch that calls ``again`` (or, quiet, notes it
        under ``key``); its answer goes to ``deliver`` (on kazoo's thread)."""
        if self._closed:
            return

        def fired(_event: object) -> None:
            if self._closed:
                return
            with self._lock:
                noted = self._deferred is not None and key[0] == "data" and self._quiet_paths(path)
                if noted:
                    self._deferred[key] = again  # type: ignore[index]
                on_noted = self._on_noted
            if not noted:
                again()
            elif on_noted is not None:
                on_noted()

        def done(result: Any) -> None:
            try:
                deliver(result)
            except Exception as exc:  # noqa: BLE001 - a lost connection: the owner reloads
                if not self._closed:
                    with self._changed:
                        self._failed = True
                        self._changed.notify_all()
                    self._on_error(path, exc)

        start(fired).rawlink(done)
