"""`GcFreezer` in a process of its own (the collector's state is the whole process's): what a
slow full collection leaves alive is frozen, and what dies in a cycle after being frozen is
still reclaimed at the next refreeze."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import gc, time, weakref
    from logkeel.server.gc_freezer import GcFreezer

    def wait(check, what):
        deadline = time.monotonic() + 10
        while not check():
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    freezer = GcFreezer(slow_s=0.0, refreeze_s=1.0)
    freezer.start()
    base = gc.get_freeze_count()
    # Built after start-up, as a topic's partitions are: tracked, long-lived.
    kept = [[i] for i in range(200_000)]  # lists are always tracked (a dict of ints is not)
    gc.collect()  # a full collection, slower than slow_s
    wait(lambda: gc.get_freeze_count() >= base + 200_000, "the survivors frozen")

    class Node:
        pass

    frozen = gc.get_freeze_count()
    node = Node()
    node.self = node  # a cycle: only the cyclic collector reclaims it
    gone = weakref.ref(node)
    gc.collect()
    wait(lambda: gc.get_freeze_count() > frozen, "the cycle frozen (a freeze after it was made)")
    del node
    gc.collect()  # frozen: not collected by this
    assert gone() is not None
    wait(lambda: gone() is None, "the frozen cycle reclaimed at the refreeze")
    freezer.stop()
    print("ok", len(kept))
    """
)


def test_survivors_of_a_slow_full_collection_are_frozen_and_frozen_cycles_still_reclaimed() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok 200000"
