"""Replication throttles (Kafka's ReplicationQuotaManager): the broker's
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` (dynamic
broker configs, bytes/s), charged only by the replicas a topic's
``{leader,follower}.replication.throttled.replicas`` lists while they are not in sync, so that
a reassignment's catch-up cannot starve producers or in-sync followers.

A follower leaves throttled partitions out of its fetches while its rate is over the bound (and
waits the time the rate needs to come back, so it never spins); a leader answers a throttled
follower's partitions empty while its rate is over, delaying that answer up to the fetch's
max wait. The rate and throttle time are `quota_rates`' (Kafka's windowed rate).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from logkeel.cluster.dynamic_broker_configs import rate
from logkeel.server.quota_rates import QuotaRates, RateWindow

__all__ = ["ReplicationQuota", "ReplicationThrottles"]

_KEY = ("replication", "")
# Two samples of a second, not Kafka's 11 (replication.quota.window.num): a young rate counts
# as spread over the whole window less one sample, so Kafka's window lets a move catch up
# ten seconds' worth of its rate at full speed before the bound bites, and again every time
# the samples of that burst expire (measured: 40 MiB bursts every 11 s under a 4 MiB/s
# throttle). This one holds the catch-up to about a second's worth at a time.
REPLICATION_WINDOW = RateWindow(samples=2, sample_s=1.0)


class ReplicationQuota:
    """One side's bound (None: unlimited, Kafka's Long.MAX_VALUE default) and rate; charged
    from IO threads and the event loop, hence the lock."""

    def __init__(self, window: RateWindow | None = None) -> None:
        self.bound: float | None = None
        self._rates = QuotaRates(window or REPLICATION_WINDOW)
        self._lock = threading.Lock()

    def set_bound(self, bytes_per_s: float | None) -> None:
        self.bound = bytes_per_s

    def throttle_ms(self, now: float) -> int:
        """How long the throttled replicas must wait for the rate to be back within the bound
        (0: they may fetch now)."""
        bound = self.bound
        if bound is None:
            return 0
        with self._lock:
            if self._rates.measure(_KEY, now) <= bound:
                return 0
            return max(1, self._rates.record(_KEY, 0, bound, now))

    def record(self, size: int, now: float) -> None:
        bound = self.bound
        if bound is None or size <= 0:
            return
        with self._lock:
            self._rates.record(_KEY, size, bound, now)


class ReplicationThrottles:
    def __init__(self) -> None:
        self.leader = ReplicationQuota()
        self.follower = ReplicationQuota()

    def configure(self, configs: Mapping[str, str]) -> None:
        """Takes the dynamic broker configs in effect (`cluster.dynamic_broker_configs`)."""
        self.leader.set_bound(rate(configs, "leader.replication.throttled.rate"))
        self.follower.set_bound(rate(configs, "follower.replication.throttled.rate"))
