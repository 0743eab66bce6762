"""What the data path's operations (appends, fetches, offset queries) use of the replica
manager: the partitions, the IO threads, the purgatories where requests wait, and the two
hand-offs back to it (a storage failure, a moved high watermark)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from logkeel.server.replica.partition import Partition
from logkeel.server.replica.purgatory import DelayedOperationPurgatory
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["DataPath"]

T = TypeVar("T")


class DataPath(Protocol):
    produce_purgatory: DelayedOperationPurgatory[TopicPartition]
    fetch_purgatory: DelayedOperationPurgatory[TopicPartition]

    @property
    def stopped(self) -> bool:
        """Stopping or stopped: nothing new waits in a purgatory, the IO threads may be gone."""
        ...

    def partition(self, tp: TopicPartition) -> Partition | None: ...

    async def run_in_io(self, fn: Callable[..., T], *args: Any) -> T: ...

    def submit_io(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]: ...

    def storage_failed(self, p: Partition, exc: KafkaStorageError) -> None:
        """An IO error in ``p``'s log: it stops serving, its dir goes offline, and what waits
        on it is answered now."""
        ...

    def high_watermark_moved(self, tp: TopicPartition) -> None:
        """Completes what waits for ``tp``'s high watermark, from any thread."""
        ...
