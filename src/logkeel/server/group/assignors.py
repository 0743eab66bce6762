"""Server-side partition assignors of consumer-protocol groups (KIP-848): ``uniform`` and
``range``, named as in Kafka's ``group.consumer.assignors``.

An assignor is a pure function from the members' subscriptions, the topics' partition counts
and the current target assignment to the next target assignment. Kafka's semantics are kept:

- ``uniform`` balances the number of partitions across members (counts differ by at most one
  among members with the same subscription) and is sticky: a member keeps the partitions it has
  unless the balance needs them elsewhere. Kafka's exact choice of which partition moves is not
  reproduced (its builders are an implementation detail), only these properties.
- ``range`` assigns each topic on its own: the members subscribed to it, ordered by member id,
  get consecutive ranges, the first ``partitions % members`` one partition more, so members
  subscribed to co-partitioned topics get the same partition numbers of each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Assignor",
    "MemberSubscription",
    "RangeAssignor",
    "UniformAssignor",
    "assignor_named",
    "to_assignment",
]

# topic name -> partitions
Assignment = dict[str, frozenset[int]]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What an assignor knows of a member: the topics it subscribes to (already resolved from
    its regex, and only topics that exist) and its rack."""

    topics: frozenset[str]
    rack: str | None = None


class Assignor(Protocol):
    name: str

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        partitions: Mapping[str, int],
        current: Mapping[str, Assignment],
    ) -> dict[str, Assignment]: ...


def to_assignment(owned: set[tuple[str, int]]) -> Assignment:
    out: dict[str, set[int]] = {}
    for topic, p in owned:
        out.setdefault(topic, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


class UniformAssignor:
    """Balanced and sticky: see the module's docstring."""

    name = "uniform"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        partitions: Mapping[str, int],
        current: Mapping[str, Assignment],
    ) -> dict[str, Assignment]:
        order = sorted(members)
        owned: dict[str, set[tuple[str, int]]] = {m: set() for m in order}
        taken: set[tuple[str, int]] = set()
        # Stickiness: each member keeps what it had that it still subscribes to and exists.
        for m in order:
            sub = members[m].topics
            for topic, ps in current.get(m, {}).items():
                if topic not in sub:
                    continue
                n = partitions.get(topic, 0)
                for p in ps:
                    if p < n and (topic, p) not in taken:
                        owned[m].add((topic, p))
                        taken.add((topic, p))
        eligible: dict[tuple[str, int], list[str]] = {}
        for topic in sorted({t for s in members.values() for t in s.topics}):
            subscribers = [m for m in order if topic in members[m].topics]
            for p in range(partitions.get(topic, 0)):
                eligible[(topic, p)] = subscribers
        # Partitions with the fewest candidates go first, each to its least loaded candidate.
        unassigned = sorted(
            (tp for tp in eligible if tp not in taken), key=lambda tp: (len(eligible[tp]), tp)
        )
        for tp in unassigned:
            best = min(eligible[tp], key=lambda m: (len(owned[m]), m))
            owned[best].add(tp)
        self._balance(owned, eligible)
        return {m: to_assignment(owned[m]) for m in order}

    @staticmethod
    def _balance(
        owned: dict[str, set[tuple[str, int]]], eligible: Mapping[tuple[str, int], list[str]]
    ) -> None:
        """Moves partitions from a member to an eligible one holding two or more fewer, until
        no such move exists. Each move lowers the sum of squared counts, so this ends."""
        moved = True
        while moved:
            moved = False
            for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
                for tp in sorted(owned[giver]):
                    taker = min(eligible[tp], key=lambda m: (len(owned[m]), m))
                    if len(owned[taker]) + 1 < len(owned[giver]):
                        owned[giver].discard(tp)
                        owned[taker].add(tp)
                        moved = True
                if moved:
                    break


class RangeAssignor:
    """Per-topic ranges over the subscribers ordered by member id: see the module's docstring."""

    name = "range"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        partitions: Mapping[str, int],
        current: Mapping[str, Assignment],
    ) -> dict[str, Assignment]:
        out: dict[str, dict[str, frozenset[int]]] = {m: {} for m in sorted(members)}
        for topic in sorted({t for s in members.values() for t in s.topics}):
            n = partitions.get(topic, 0)
            subscribers = sorted(m for m in members if topic in members[m].topics)
            if n == 0 or not subscribers:
                continue
            quota, extra = divmod(n, len(subscribers))
            start = 0
            for i, m in enumerate(subscribers):
                size = quota + (1 if i < extra else 0)
                if size:
                    out[m][topic] = frozenset(range(start, start + size))
                start += size
        return out


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}

# Kafka's class names are accepted too in group.consumer.assignors.
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignor_named(name: str) -> Assignor | None:
    return ASSIGNORS.get(_CLASS_NAMES.get(name, name))
