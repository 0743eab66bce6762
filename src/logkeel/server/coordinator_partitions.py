"""Which partitions of a coordinator's internal topic (``__consumer_offsets``,
``__transaction_state``) this broker serves: the one mechanism by which the group and the
transaction coordinators follow leadership, as Kafka's coordinators do.

A partition led here is read back in the background (at start-up, or when the replica manager
reports that leadership moved here); while it loads, its keys are answered
COORDINATOR_LOAD_IN_PROGRESS; once leadership moves away, the coordinator drops what it held
for it and its keys are answered NOT_COORDINATOR. A load whose partition was unloaded (or
loaded again) meanwhile keeps nothing it read: the coordinator's ``load`` asks ``current()``
before it applies anything.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from logkeel.storage.topic_partition import TopicPartition

__all__ = ["CoordinatorPartitions", "LeadershipSource"]

log = logging.getLogger(__name__)

_LOADING = "loading"
_LOADED = "loaded"
_FAILED = "failed"

# ``load(partition, current)``: reads the partition back and applies it if ``current()`` is
# still true; False if it could not be read.
Load = Callable[[int, Callable[[], bool]], Awaitable[bool]]


class LeadershipSource(Protocol):
    """What of the internal topic's store this uses: its size and who leads a partition."""

    def num_partitions(self) -> int | None: ...

    def leads(self, partition: int) -> bool: ...


class CoordinatorPartitions:
    """The partitions of ``topic`` led here and the state of their loads."""

    def __init__(
        self,
        topic: str,
        store: LeadershipSource,
        load: Load,
        unload: Callable[[int], None],
        spawn: Callable[[Coroutine[Any, Any, None]], object],
    ) -> None:
        self.topic = topic
        self._store = store
        self._load = load
        self._unload = unload
        self._spawn = spawn
        self._states: dict[int, str] = {}
        self._loads: dict[int, object] = {}
        self.num_partitions: int | None = None
        # While our own creation of the topic runs, the count is not taken from the metadata:
        # a cluster's metadata cache shows a new topic's partitions one by one.
        self.creating_topic = False

    def start(self) -> None:
        """Starts loading every partition of an existing topic that is led here."""
        n = self._store.num_partitions()
        if n is not None:
            self.num_partitions = n
            self.follow(range(n))

    def partitions_changed(self, tps: list[TopicPartition]) -> None:
        """Replica manager listener (event loop): leadership of some partitions moved."""
        changed = [tp.partition for tp in tps if tp.topic == self.topic]
        if not changed:
            return
        n = None if self.creating_topic else self._store.num_partitions()
        if n is not None:
            self.num_partitions = n
        if self.num_partitions is None:
            return
        self.follow(changed)

    def follow(self, partitions: Iterable[int]) -> None:
        """Loads the partitions led here that are not loaded, unloads those no longer led."""
        for p in partitions:
            leads = self._store.leads(p)
            if leads and p not in self._states:
                self._states[p] = _LOADING
                token = self._loads[p] = object()
                self._spawn(self._run_load(p, token))
            elif not leads and p in self._states:
                self._states.pop(p, None)
                self._loads.pop(p, None)
                self._unload(p)

    def created(self, n: int, existed: bool) -> None:
        """The topic exists now with ``n`` partitions; one created just now holds nothing."""
        if self.num_partitions is not None:
            return
        self.num_partitions = n
        if existed:
            self.follow(range(n))
            return
        for p in range(n):
            if self._store.leads(p):
                self._states.setdefault(p, _LOADED)

    async def _run_load(self, partition: int, token: object) -> None:
        ok = await self._load(partition, lambda: self._loads.get(partition) is token)
        if self._loads.get(partition) is token:
            self._states[partition] = _LOADED if ok else _FAILED

    def check(self, partition: int) -> ErrorCode:
        """COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR for the keys of ``partition``, or
        NONE if it is loaded here."""
        state = self._states.get(partition)
        if state == _LOADING:
            return ErrorCode.coordinator_load_in_progress
        if state is None or state == _FAILED:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    def is_loading(self) -> bool:
        return any(s == _LOADING for s in self._states.values())
