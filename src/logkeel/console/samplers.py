"""What the console remembers between polls, in memory and bounded: each broker it has seen
(so one that died is shown dead, not forgotten), leader changes it observed, log end offsets
over time (throughput) and consumer lag over time (trend). Pure: times are passed in."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BrokerRoster", "LagHistory", "LeaderChanges", "OffsetRates"]


@dataclass
class BrokerRoster:
    """Every broker seen since the console started, alive or not as the last poll found it."""

    known: dict[int, dict[str, Any]] = field(default_factory=dict)

    def observe(self, now_ms: int, live: list[dict[str, Any]]) -> list[dict[str, Any]]:
        live_ids = {b["id"] for b in live}
        for b in live:
            self.known[b["id"]] = {**b, "alive": True, "last_seen_ms": now_ms}
        for node, b in self.known.items():
            if node not in live_ids and b["alive"]:
                # What it last reported is kept; its log dirs are unknown now.
                self.known[node] = {**b, "alive": False, "log_dirs": []}
        return [self.known[n] for n in sorted(self.known)]

    def mark_all_unreachable(self) -> list[dict[str, Any]]:
        for node, b in self.known.items():
            self.known[node] = {**b, "alive": False}
        return [self.known[n] for n in sorted(self.known)]

    def addresses(self) -> list[str]:
        return [f"{b['host']}:{b['port']}" for _, b in sorted(self.known.items())]


@dataclass
class LeaderChanges:
    """Leader changes seen between two polls (a new leader epoch with another leader, or none):
    the elections that happened while the console watched; bounded to ``limit``."""

    limit: int = 200
    _last: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    changes: deque[dict[str, Any]] = field(default_factory=deque)

    def observe(self, now_ms: int, partitions: list[dict[str, Any]]) -> None:
        for p in partitions:
            key = (p["topic"], p["partition"])
            now = (p["leader"], p["leader_epoch"])
            before = self._last.get(key)
            self._last[key] = now
            if before is None or before[0] == now[0]:
                continue
            self.changes.appendleft({
                "time_ms": now_ms, "topic": key[0], "partition": key[1],
                "from_leader": before[0], "to_leader": now[0], "leader_epoch": now[1],
                "in_isr": now[0] in p["isr"],
            })  # fmt: skip
            while len(self.changes) > self.limit:
                self.changes.pop()


@dataclass
class OffsetRates:
    """Records per second per topic and per leader broker, from log end offsets sampled over
    ``window_ms``; a partition whose offset is unknown in a sample adds nothing to it."""

    window_ms: int = 300_000
    _samples: deque[tuple[int, dict[tuple[str, int], tuple[int, int]]]] = field(
        default_factory=deque
    )

    def add(self, now_ms: int, offsets: dict[tuple[str, int], tuple[int, int]]) -> None:
        """``offsets``: (topic, partition) -> (log end offset, leader)."""
        self._samples.append((now_ms, offsets))
        while self._samples and self._samples[0][0] < now_ms - self.window_ms:
            self._samples.popleft()

    def series(self) -> dict[str, Any]:
        topics: dict[str, list[list[float]]] = {}
        brokers: dict[str, list[list[float]]] = {}
        pairs = list(zip(self._samples, list(self._samples)[1:], strict=False))
        for (t0, before), (t1, after) in pairs:
            seconds = max((t1 - t0) / 1000, 0.001)
            per_topic: dict[str, int] = {}
            per_broker: dict[str, int] = {}
            for key, (end, leader) in after.items():
                if key not in before:
                    continue
                grown = max(end - before[key][0], 0)
                per_topic[key[0]] = per_topic.get(key[0], 0) + grown
                per_broker[str(leader)] = per_broker.get(str(leader), 0) + grown
            for name in {k[0] for k in after}:
                topics.setdefault(name, []).append([t1, per_topic.get(name, 0) / seconds])
            for node, grown in per_broker.items():
                brokers.setdefault(node, []).append([t1, grown / seconds])
        return {"window_ms": self.window_ms, "topics": topics, "brokers": brokers}


@dataclass
class LagHistory:
    """Each group's total lag over the last ``points`` polls."""

    points: int = 150
    _lag: dict[str, deque[list[int]]] = field(default_factory=dict)

    def add(self, now_ms: int, lags: dict[str, int]) -> None:
        for group, lag in lags.items():
            self._lag.setdefault(group, deque(maxlen=self.points)).append([now_ms, lag])

    def trend(self, group: str) -> list[list[int]]:
        return list(self._lag.get(group, ()))
