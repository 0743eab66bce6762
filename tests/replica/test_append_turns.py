"""AppendTurns: appends handed over in one order run in that order, whatever thread takes them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from logkeel.server.replica.append_turns import AppendTurns


def test_work_handed_over_in_order_runs_in_order_on_many_threads() -> None:
    turns = AppendTurns()
    ran: list[int] = []
    gate = threading.Event()

    def work(turn: int) -> None:
        if turn == 0:
            gate.wait(5)  # the first is slow: every later one must wait for it
        turns.wait(turn)
        try:
            ran.append(turn)
        finally:
            turns.done(turn)

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(work, turns.take()) for _ in range(200)]
        gate.set()
        for f in futures:
            f.result(timeout=10)
    assert ran == list(range(200))


def test_a_turn_given_up_ahead_of_running_ones_does_not_stop_later_ones() -> None:
    turns = AppendTurns()
    first, second, third = turns.take(), turns.take(), turns.take()
    turns.done(second)  # given up (the IO threads stopped) while the first still runs
    turns.wait(first)
    turns.done(first)  # does not move back
    done = threading.Event()
    threading.Thread(target=lambda: (turns.wait(third), done.set()), daemon=True).start()
    assert done.wait(5)
