"""Kafka's connection limits (KIP-402, KIP-612): which new connection is served, which waits,
which is closed. Pure decisions over counts and times, no sockets.

- ``max.connections`` counts the connections of every listener but the inter-broker one
  (which is exempt, so brokers can always reach each other); ``listener.name.<l>.max.connections``
  counts one listener. A connection beyond either waits, unserved, until one closes, as
  Kafka's acceptor blocks; at most ``backlog`` (socket.listen.backlog.size) wait per listener,
  more are closed.
- ``max.connection.creation.rate`` (per second; inter-broker listener exempt) and
  ``listener.name.<l>.max.connection.creation.rate``: a connection beyond the rate waits until
  the connections of the last second fall below it.
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: a connection beyond its
  address's limit is closed when its turn comes (Kafka's TooManyConnectionsException).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ConnectionQuotas", "ListenerQuota", "UNLIMITED"]

UNLIMITED = 2**31 - 1  # Kafka's Int.MaxValue default of every limit here
_WINDOW = 1.0  # seconds over which a creation rate is measured


@dataclass(slots=True)
class _Rate:
    """Connections created in the last ``_WINDOW`` seconds, against a limit per second."""

    limit: int
    times: collections.deque[float] = field(default_factory=collections.deque)

    def next_free(self, now: float) -> float:
        """When one more connection fits (``now`` if it does now)."""
        if self.limit >= UNLIMITED:
            return now
        while self.times and self.times[0] <= now - _WINDOW:
            self.times.popleft()
        if len(self.times) < self.limit:
            return now
        if self.limit == 0:
            return float("inf")
        return self.times[len(self.times) - self.limit] + _WINDOW

    def record(self, now: float) -> None:
        if self.limit < UNLIMITED:
            self.times.append(now)


@dataclass(slots=True)
class ListenerQuota:
    max_connections: int = UNLIMITED
    max_creation_rate: int = UNLIMITED
    inter_broker: bool = False
    count: int = 0
    waiting: int = 0
    rate: _Rate = field(init=False)

    def __post_init__(self) -> None:
        self.rate = _Rate(self.max_creation_rate)


@dataclass(slots=True)
class _Waiter:
    listener: str
    ip: str
    admit: Callable[[], None]
    refuse: Callable[[str], None]


class ConnectionQuotas:
    """The broker's connection counts; one instance shared by all its listeners.

    A new connection ``arrive``s with two callbacks: ``admit`` (serve it; it now counts) or
    ``refuse`` (close it, with the reason), either called at once or later, from ``leave`` or
    ``pump``. ``pump(now)`` returns when to pump again for a connection waiting on a rate.
    """

    def __init__(
        self,
        max_connections: int = UNLIMITED,
        max_connections_per_ip: int = UNLIMITED,
        per_ip_overrides: dict[str, int] | None = None,
        max_creation_rate: int = UNLIMITED,
        backlog: int = 50,
    ) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.backlog = backlog
        self.total = 0  # connections of every listener but the inter-broker one
        self._rate = _Rate(max_creation_rate)
        self._listeners: dict[str, ListenerQuota] = {}
        self._per_ip: collections.Counter[str] = collections.Counter()
        self._waiting: collections.deque[_Waiter] = collections.deque()

    def add_listener(self, name: str, quota: ListenerQuota) -> None:
        self._listeners[name] = quota

    def listener(self, name: str) -> ListenerQuota:
        return self._listeners.setdefault(name, ListenerQuota())

    def ip_limit(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_connections_per_ip)

    def ip_count(self, ip: str) -> int:
        return self._per_ip[ip]

    def arrive(
        self,
        listener: str,
        ip: str,
        admit: Callable[[], None],
        refuse: Callable[[str], None],
        now: float,
    ) -> None:
        quota = self.listener(listener)
        waiter = _Waiter(listener, ip, admit, refuse)
        if not any(w.listener == listener for w in self._waiting) and self._try(waiter, now):
            return
        if quota.waiting >= self.backlog:
            refuse(
                f"{quota.waiting} connections already wait for a slot on listener {listener} "
                f"(socket.listen.backlog.size={self.backlog})"
            )
            return
        quota.waiting += 1
        self._waiting.append(waiter)

    def withdraw(self, admit: Callable[[], None]) -> None:
        """A waiting connection went away."""
        for waiter in self._waiting:
            if waiter.admit == admit:
                self._waiting.remove(waiter)
                self.listener(waiter.listener).waiting -= 1
                return

    def leave(self, listener: str, ip: str, now: float) -> float | None:
        """An admitted connection closed; admits waiting ones it makes room for. Returns as
        ``pump``."""
        quota = self.listener(listener)
        quota.count -= 1
        if not quota.inter_broker:
            self.total -= 1
        self._per_ip[ip] -= 1
        if self._per_ip[ip] <= 0:
            del self._per_ip[ip]
        return self.pump(now)

    def pump(self, now: float) -> float | None:
        """Admits (or refuses, per IP) the waiting connections that fit now, oldest first per
        listener; returns the earliest time a rate lets another in, None if none waits on one."""
        retry: float | None = None
        blocked: set[str] = set()
        for waiter in list(self._waiting):
            if waiter.listener in blocked:
                continue  # keep each listener's arrival order
            wait_until = self._blocked_until(waiter.listener, now)
            if wait_until is not None:
                blocked.add(waiter.listener)
                if wait_until != float("inf"):
                    retry = wait_until if retry is None else min(retry, wait_until)
                continue
            self._waiting.remove(waiter)
            self.listener(waiter.listener).waiting -= 1
            self._try(waiter, now)
        return retry

    def _blocked_until(self, listener: str, now: float) -> float | None:
        """None if a connection on ``listener`` may be served now, else until when it waits
        (inf: until a connection closes)."""
        quota = self.listener(listener)
        if quota.count >= quota.max_connections:
            return float("inf")
        if not quota.inter_broker and self.total >= self.max_connections:
            return float("inf")
        at = quota.rate.next_free(now)
        if not quota.inter_broker:
            at = max(at, self._rate.next_free(now))
        return None if at <= now else at

    def _try(self, waiter: _Waiter, now: float) -> bool:
        """Admits or refuses ``waiter`` if it need not wait; False if it must."""
        if self._blocked_until(waiter.listener, now) is not None:
            return False
        limit = self.ip_limit(waiter.ip)
        if self._per_ip[waiter.ip] >= limit:
            waiter.refuse(
                f"{waiter.ip} already has {self._per_ip[waiter.ip]} connections "
                f"(max.connections.per.ip{'.overrides' if waiter.ip in self.per_ip_overrides else ''}"
                f"={limit})"
            )
            return True
        quota = self.listener(waiter.listener)
        quota.count += 1
        quota.rate.record(now)
        if not quota.inter_broker:
            self.total += 1
            self._rate.record(now)
        self._per_ip[waiter.ip] += 1
        waiter.admit()
        return True
