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
    would: from the fullest dir to the emptiest, the largest replica whose move narrows the gap
    between them (one smaller than the gap), until no move narrows it. Every move strictly
    lowers the sum of squared dir sizes, so the plan ends; a replica moves at most once."""
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
        size, tp = max(candidates)
        del placed[fullest][tp]
        placed[emptiest][tp] = size
        totals[fullest] -= size
        totals[emptiest] += size
        moved.add(tp)
        plan.append(DirMove(tp[0], tp[1], size, fullest, emptiest))
    return plan
