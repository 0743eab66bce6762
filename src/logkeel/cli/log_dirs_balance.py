"""The plan of ``logkeel log-dirs balance``: replica moves that spread one broker's replicas
over its online log dirs by size. Pure: sizes in, moves out."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DirMove", "plan_balance"]


@dataclass(frozen=True, slots=True)
class DirMove:
    topic: str
    partition: int
    size: int
    source: str
    target: str


def plan_balance(dirs: dict[str, dict[tuple[str, int], int]]) -> list[DirMove]:
    """``dirs``: each online dir's replicas and their sizes in bytes. Greedy, as an operator
    would: from the fullest dir to the emptiest, the replica whose move leaves the smallest gap
    between the two (the smaller one on a tie: fewer bytes to copy), until no move narrows it
    (every replica is as large as the gap). A replica moves at most once, so the plan ends."""
    totals = {d: sum(parts.values()) for d, parts in dirs.items()}
    placed = {d: dict(parts) for d, parts in dirs.items()}
    moved: set[tuple[str, int]] = set()
    plan: list[DirMove] = []
    while len(totals) > 1:
        fullest = max(totals, key=lambda d: (totals[d], d))
        emptiest = min(totals, key=lambda d: (totals[d], d))
        gap = totals[fullest] - totals[emptiest]
        candidates = [
            (size, tp) for tp, size in placed[fullest].items() if 0 < size < gap and tp not in moved
        ]
        if not candidates:
            break
        size, tp = min(candidates, key=lambda c: (abs(gap - 2 * c[0]), c[0], c[1]))
        del placed[fullest][tp]
        placed[emptiest][tp] = size
        totals[fullest] -= size
        totals[emptiest] += size
        moved.add(tp)
        plan.append(DirMove(tp[0], tp[1], size, fullest, emptiest))
    return plan
