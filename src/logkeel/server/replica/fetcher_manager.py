"""Which partitions this broker follows, and from which fetcher: Kafka's ReplicaFetcherManager.

Partition state decides: a partition with a replica here, online, whose leader is another live
broker, is followed. Each source broker gets ``num.replica.fetchers`` fetchers, and a partition
always lands on the same one (its topic and number hashed), so a partition never has two
fetchers. A new leader or leader epoch hands the partition over afresh, which makes the fetcher
truncate by epoch before it fetches again. Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable, Iterable

from logkeel.cluster.metadata import BrokerInfo
from logkeel.server.replica.context import ReplicationSettings
from logkeel.server.replica.fetcher import ReplicaFetcher, RunInIo, StorageFailure
from logkeel.server.replica.partition import Partition
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ReplicaFetcherManager", "fetcher_id"]

log = logging.getLogger(__name__)

# (source broker, fetcher id)
FetcherKey = tuple[int, int]


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """The fetcher of ``tp`` among a source broker's ``num_fetchers`` (stable across runs)."""
    return (zlib.crc32(tp.topic.encode()) * 31 + tp.partition) % max(1, num_fetchers)


class ReplicaFetcherManager:
    def __init__(
        self,
        node_id: int,
        settings: ReplicationSettings,
        brokers: Callable[[], list[BrokerInfo]],
        run_in_io: RunInIo,
        storage_failure: StorageFailure,
        appended: Callable[[TopicPartition], object] | None = None,
        connection_failed: Callable[[], object] | None = None,
    ) -> None:
        self._node_id = node_id
        self._connection_failed = connection_failed
        self._settings = settings
        self._brokers = brokers
        self._run_in_io = run_in_io
        self._storage_failure = storage_failure
        self._appended = appended
        self._fetchers: dict[FetcherKey, ReplicaFetcher] = {}
        # tp -> (fetcher, the partition object and leader epoch it was handed over with)
        self._assigned: dict[TopicPartition, tuple[FetcherKey, Partition, int]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._shut_down = False

    def fetchers(self) -> list[ReplicaFetcher]:
        return list(self._fetchers.values())

    def following(self, tp: TopicPartition) -> int | None:
        """The broker ``tp`` is fetched from, or None."""
        entry = self._assigned.get(tp)
        return entry[0][0] if entry is not None else None

    def partitions_changed(
        self, tps: Iterable[TopicPartition], lookup: Callable[[TopicPartition], Partition | None]
    ) -> None:
        """Brings the fetchers in line with the current state of ``tps``."""
        if self._shut_down:
            return  # a leadership change seen while the broker stops starts no fetcher
        for tp in tps:
            p = lookup(tp)
            if p is None or not self._should_follow(p):
                self._unassign(tp)
                continue
            key = (p.leader_id, fetcher_id(tp, self._settings.num_fetchers))
            current = self._assigned.get(tp)
            if current == (key, p, p.leader_epoch):
                # Still followed as it was: its ISR, topic configs or log may have changed,
                # which its fetcher (keeping each position between rounds) reads again.
                self.touch([tp])
                continue
            self._unassign(tp)
            fetcher = self._fetchers.get(key) or self._new_fetcher(key)
            if fetcher is None:
                continue
            fetcher.add(p, p.leader_epoch)
            self._assigned[tp] = (key, p, p.leader_epoch)
            log.info(
                "following %s from broker %d in leader epoch %d", tp, p.leader_id, p.leader_epoch
            )

    def touch(self, tps: Iterable[TopicPartition]) -> None:
        """The fetch positions of ``tps`` may have moved without their fetchers (a log
        replaced): their fetchers read them again."""
        for tp in tps:
            entry = self._assigned.get(tp)
            fetcher = self._fetchers.get(entry[0]) if entry is not None else None
            if fetcher is not None:
                fetcher.touch(tp)

    def _should_follow(self, p: Partition) -> bool:
        return (
            p.online
            and p.node_id in p.replicas
            and p.leader_id >= 0
            and p.leader_id != self._node_id
        )

    def _new_fetcher(self, key: FetcherKey) -> ReplicaFetcher | None:
        source = next((b for b in self._brokers() if b.node_id == key[0]), None)
        if source is None:
            log.warning("leader broker %d is not among the known brokers; not fetching", key[0])
            return None
        fetcher = ReplicaFetcher(
            source,
            key[1],
            self._node_id,
            self._settings,
            self._run_in_io,
            self._storage_failure,
            self._appended,
            self._connection_failed,
        )
        self._fetchers[key] = fetcher
        return fetcher

    def _unassign(self, tp: TopicPartition) -> None:
        entry = self._assigned.pop(tp, None)
        if entry is None:
            return
        fetcher = self._fetchers.get(entry[0])
        if fetcher is None:
            return
        fetcher.remove(tp)
        if not fetcher.partitions:
            # Idle: close its connection (the source may be gone, or move to a new address).
            del self._fetchers[entry[0]]
            task = asyncio.get_running_loop().create_task(fetcher.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def shutdown(self) -> None:
        self._shut_down = True
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._assigned.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
