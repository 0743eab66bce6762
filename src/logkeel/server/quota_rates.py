"""Measured rates against client quotas and the throttle time a violation earns, as Kafka's
ClientQuotaManager computes them. Pure: time is passed in, nothing here does IO.

A rate is the sum of ``quota.window.num`` samples of ``quota.window.size.seconds`` each,
divided by the time they cover; a rate younger than the full window counts it as if all but
the current sample had passed (Kafka's ``Rate.windowSize``), so a client's first burst is not
measured over a few milliseconds. A value is recorded first and then checked: a client over
its bound is throttled for the time its rate needs to fall back to the bound, at most the whole
window: ``total / bound - elapsed``, where elapsed is the time the samples really cover.

Once the window is full that is Kafka's ``(rate - bound) / bound * window``. Before, Kafka's
formula measures over the padded window, which does not grow while the client waits: a client
sending as fast as it may is let through again long before its rate is back at the bound, and
gets about a fifth more than its quota in its first ten seconds (measured with
confluent-kafka). Counting the real time makes the first window's rate the bound too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["QuotaRates", "Rate", "RateWindow"]


@dataclass(frozen=True, slots=True)
class RateWindow:
    samples: int = 11  # quota.window.num
    sample_s: float = 1.0  # quota.window.size.seconds

    @property
    def max_throttle_s(self) -> float:
        return self.samples * self.sample_s


@dataclass(slots=True)
class Rate:
    """One rate: samples as [start, total], oldest first."""

    window: RateWindow
    samples: list[list[float]] = field(default_factory=list)
    last_used: float = 0.0

    def _current(self, now: float) -> list[float]:
        if not self.samples or now >= self.samples[-1][0] + self.window.sample_s:
            self.samples.append([now, 0.0])
        return self.samples[-1]

    def _purge(self, now: float) -> None:
        horizon = now - self.window.samples * self.window.sample_s
        while self.samples and self.samples[0][0] + self.window.sample_s <= horizon:
            self.samples.pop(0)
        del self.samples[: max(0, len(self.samples) - self.window.samples)]

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        self._current(now)[1] += value
        self.last_used = now

    def measure(self, now: float) -> float:
        """Units per second over the samples kept."""
        self._purge(now)
        if not self.samples:
            return 0.0
        total = sum(s[1] for s in self.samples)
        return total / self.elapsed_s(now)

    def elapsed_s(self, now: float) -> float:
        w = self.window
        elapsed = now - self.samples[0][0] if self.samples else 0.0
        full = int(elapsed / w.sample_s)
        if full < w.samples - 1:
            elapsed += (w.samples - 1 - full) * w.sample_s
        return elapsed


class QuotaRates:
    """The rates of one quota type (produce bytes, fetch bytes, request time), keyed by the
    (user, client id) a resolved quota charges (``cluster.client_quotas.resolve``)."""

    def __init__(self, window: RateWindow) -> None:
        self.window = window
        self._rates: dict[tuple[str, str], Rate] = {}

    def record(self, key: tuple[str, str], value: float, bound: float, now: float) -> int:
        """Records ``value`` and returns the throttle time in ms (0: within ``bound``)."""
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = Rate(self.window)
        rate.record(value, now)
        return self.throttle_ms(rate, bound, now)

    def unrecord(self, key: tuple[str, str], value: float, now: float) -> None:
        """Takes back a value recorded for an answer that was not given (Kafka's throttled
        Fetch answers empty, so its bytes do not count)."""
        rate = self._rates.get(key)
        if rate is not None:
            rate.record(-value, now)

    def measure(self, key: tuple[str, str], now: float) -> float:
        rate = self._rates.get(key)
        return rate.measure(now) if rate is not None else 0.0

    def throttle_ms(self, rate: Rate, bound: float, now: float) -> int:
        observed = rate.measure(now)
        if observed <= bound:
            return 0
        total = observed * rate.elapsed_s(now)
        seconds = max(total / bound - (now - rate.samples[0][0]), 0.0)
        return int(min(seconds, self.window.max_throttle_s) * 1000)

    def expire(self, now: float, idle_s: float = 3600.0) -> None:
        """Forgets rates unused for ``idle_s`` (Kafka's quota sensors expire after an hour)."""
        for key in [k for k, r in self._rates.items() if now - r.last_used > idle_s]:
            del self._rates[key]

    def __len__(self) -> int:
        return len(self._rates)
