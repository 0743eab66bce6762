"""How many segment indexes keep a memory map open at a time.

Before Python 3.13 every ``mmap`` holds a dup()ed descriptor of its file, so each mapped index
costs one descriptor for as long as it stays mapped: the two indexes of every partition's active
segment would be two thirds of a broker's descriptors (10,000 replicas: 20,000 for the indexes
alone, this machine's hard limit). An index is mapped only while it has entries
(``AbstractIndex._mapped``), and at most ``limit`` of them stay mapped: when another one maps,
the one used least recently (CLOCK: second chances) gives its map back. Its entries
stay in the page cache, dirty pages included; its next use maps the file again (one open and
mmap, ~20 us) and its next flush syncs the file through a descriptor. Since 3.13 a map costs no
descriptor (``trackfd=False``) and there is no limit.
"""

from __future__ import annotations

import resource
import sys
import threading
import weakref
from collections import OrderedDict
from typing import Protocol

# A quarter of the descriptors: the rest is for each active segment's .log (one per replica),
# sockets and everything else.
_SHARE = 4
_FLOOR = 64


class Mappable(Protocol):
    # Set by each use of the index, cleared by a pass of the budget (the CLOCK bit).
    _used: bool

    def _release_map_if_idle(self) -> bool:
        """Unmaps unless another thread is using the index; True if it no longer has a map."""
        ...


def limit_for(descriptors: int) -> int | None:
    """The budget for a process allowed ``descriptors`` open files; None: unlimited."""
    if sys.version_info >= (3, 13):
        return None
    return max(_FLOOR, descriptors // _SHARE)


class MapBudget:
    """The mapped indexes of this process, in CLOCK order (see the module's docstring)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        # Weak: an index dropped without being closed (its segment deleted, a test's) unmaps
        # when collected, as before there was a budget; its entry goes at the next pass.
        self._mapped: OrderedDict[int, weakref.ref[Mappable]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._mapped)

    def add(self, index: Mappable) -> None:
        """``index`` has just mapped its file; another may have to give its map back.

        Called with ``index``'s lock held; never waits for another index's lock (a busy one
        is passed over), so two indexes mapping at once cannot deadlock.
        """
        limit = self.limit
        if limit is None:
            return
        victims: list[Mappable] = []
        with self._lock:
            self._mapped[id(index)] = weakref.ref(index)
            self._mapped.move_to_end(id(index))
            over = len(self._mapped) - limit
            # Two turns at most: the first may only spend second chances (an index used since
            # the last pass goes to the back with its bit cleared).
            for _ in range(2 * len(self._mapped)):
                if over <= 0:
                    break
                key, ref = self._mapped.popitem(last=False)
                candidate = ref()
                if candidate is None:
                    over -= 1  # collected: its map is gone with it
                    continue
                if candidate is index or candidate._used:
                    candidate._used = False
                    self._mapped[key] = ref
                    continue
                victims.append(candidate)
                over -= 1
        kept = [v for v in victims if not v._release_map_if_idle()]
        if kept:
            with self._lock:
                for v in kept:
                    self._mapped[id(v)] = weakref.ref(v)

    def discard(self, index: Mappable) -> None:
        """``index`` no longer has a map (closed, deleted, unmapped)."""
        if self.limit is None:
            return
        with self._lock:
            self._mapped.pop(id(index), None)


def _soft_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# The process's one budget; the broker sets its limit from the descriptors it may open.
MAPS = MapBudget(limit_for(_soft_limit()))
