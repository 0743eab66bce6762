"""Kafka's throttled-replica lists, the topic configs ``leader.replication.throttled.replicas``
and ``follower.replication.throttled.replicas``: ``partition:broker`` entries, or ``*`` for
every replica of the topic. Pure: the parse and the config validator."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["NO_THROTTLE", "ThrottledReplicas", "ThrottledReplicasFormat"]

_ENTRY = re.compile(r"\s*([0-9]+)\s*:\s*([0-9]+)\s*")


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    every: bool = False
    replicas: frozenset[tuple[int, int]] = frozenset()

    def covers(self, partition: int, broker: int) -> bool:
        return self.every or (partition, broker) in self.replicas

    @property
    def any(self) -> bool:
        return self.every or bool(self.replicas)

    @classmethod
    def parse(cls, items: Iterable[str]) -> ThrottledReplicas:
        """Raises ValueError naming the first entry that is neither ``*`` nor
        ``partition:broker``."""
        entries = [i.strip() for i in items if i.strip()]
        if entries == ["*"]:
            return cls(every=True)
        out = set()
        for entry in entries:
            m = _ENTRY.fullmatch(entry)
            if m is None:
                raise ValueError(
                    f"{entry!r} is not partition:broker (a list of them, or '*' alone)"
                )
            out.add((int(m.group(1)), int(m.group(2))))
        return cls(replicas=frozenset(out))


NO_THROTTLE = ThrottledReplicas()


@dataclass(frozen=True, slots=True)
class ThrottledReplicasFormat:
    """The config validator: every entry partition:broker, or ``*`` alone."""

    def check(self, value: Any) -> str | None:
        try:
            ThrottledReplicas.parse(value or ())
        except ValueError as e:
            return str(e)
        return None

    def describe(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],... or *"
