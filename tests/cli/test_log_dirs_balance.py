"""The plan of `logkeel log-dirs balance`, without sockets."""

from __future__ import annotations

from logkeel.cli.log_dirs_balance import DirMove, plan_balance


def _totals(dirs: dict[str, dict[tuple[str, int], int]], plan: list[DirMove]) -> dict[str, int]:
    totals = {d: sum(parts.values()) for d, parts in dirs.items()}
    for m in plan:
        totals[m.source] -= m.size
        totals[m.target] += m.size
    return totals


def test_the_replica_that_leaves_the_smallest_gap_moves_first() -> None:
    dirs = {
        "/a": {("t", 0): 600, ("t", 1): 300, ("t", 2): 100},
        "/b": {("t", 3): 100},
    }
    plan = plan_balance(dirs)
    # 600 and 300 both leave a gap of 300: the smaller copy wins; then 100 narrows it to 100.
    assert plan == [DirMove("t", 1, 300, "/a", "/b"), DirMove("t", 2, 100, "/a", "/b")]
    assert _totals(dirs, plan) == {"/a": 600, "/b": 500}
    assert len({(m.topic, m.partition) for m in plan}) == len(plan)


def test_a_balanced_or_single_dir_broker_gets_no_move() -> None:
    assert plan_balance({"/a": {("t", 0): 10}, "/b": {("t", 1): 10}}) == []
    assert plan_balance({"/a": {("t", 0): 10, ("t", 1): 5}}) == []
    # One replica larger than the gap: moving it would not narrow anything.
    assert plan_balance({"/a": {("t", 0): 1000}, "/b": {}}) == []


def test_three_dirs_end_within_the_largest_replica_of_each_other() -> None:
    dirs: dict[str, dict[tuple[str, int], int]] = {
        "/a": {("t", i): 50 + i for i in range(20)},
        "/b": {},
        "/c": {("u", 0): 70},
    }
    plan = plan_balance(dirs)
    totals = _totals(dirs, plan)
    assert max(totals.values()) - min(totals.values()) <= 69
    assert all(m.source != m.target for m in plan)
