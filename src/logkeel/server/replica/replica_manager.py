"""The replica manager: holds this broker's partitions, routes the data path to them and takes
failed log dirs offline.

API handlers and the coordinators go through its data-path parts, never to the logs directly,
so that leadership, offline log dirs and the high watermark are respected everywhere:

- ``appends`` (``Appends``): ``append_to_partitions``, ``append_records`` (one partition);
- ``fetches`` (``Fetches``): ``fetch`` (long polls), ``read_records`` (internal readers),
  ``follower_response`` (how long a follower's response takes to send);
- ``offsets`` (``OffsetQueries``): ``offset_for_timestamp``, ``end_offset_for_epoch``,
  ``delete_records``.

Its own API (``async`` methods run on the event loop; disk work goes to the IO threads):

- ``partition(tp) -> Partition | None``, ``partitions()``
- ``async run_in_io(fn, *args)``: runs blocking storage work on the IO threads
  (``num.io.threads``).
- ``add_partition_listener(fn)``: ``fn(tps)`` runs on the event loop after metadata changed
  the state (leader, replicas, online) of partitions ``tps``; the group coordinator follows
  the leadership of ``__consumer_offsets`` with it.
- ``on_log_dir_failure(log_dir, reason)`` (the broker calls it from the thread in which the
  log manager took a dir offline; it only changes in-memory state), ``on_log_dir_online``,
  ``on_partition_failure``, ``start()``, ``prepare_shutdown()`` (answer every parked request
  now; call before stopping the listener), ``stop()``.

Offline partitions (not loaded, in a failed dir, or missing while a dir is offline: never
replaced by an empty log) answer KAFKA_STORAGE_ERROR.

Siblings: ``partition`` (one partition's state and log access), ``partition_table`` (the map,
kept in line with metadata), ``fetcher_manager``/``fetcher`` (following other leaders),
``results`` (request and result types), ``delayed`` (delayed produce and fetch), ``data_path``
(what the data-path parts use of the manager).

High watermark: the smallest log end offset over the ISR (``Partition``), moved by appends and
by followers' fetches; acks=all waits for it in the produce purgatory. As leader, a periodic
check every ``replica.lag.time.max.ms / 2`` proposes ISR shrinks through the context's
``isr_change_requested`` hook (expansions are proposed as followers' fetches catch up).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from logkeel.cluster.metadata import TopicState
from logkeel.server.replica.appends import Appends
from logkeel.server.replica.context import ReplicaManagerContext
from logkeel.server.replica.fetcher_manager import ReplicaFetcherManager
from logkeel.server.replica.fetches import Fetches
from logkeel.server.replica.offset_queries import OffsetQueries
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.partition_table import PartitionTable
from logkeel.server.replica.purgatory import DelayedOperationPurgatory
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ReplicaManager"]

log = logging.getLogger(__name__)
# How often the leaders suspected slow check whether to hand leadership over (`_check_isr_shrinks`).
_RESIGN_CHECK_S = 1.0

T = TypeVar("T")


class ReplicaManager:
    def __init__(self, ctx: ReplicaManagerContext) -> None:
        self._ctx = ctx
        self._log_manager = ctx.log_manager
        self.node_id = ctx.node_id
        self._table = PartitionTable(ctx)
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("produce")
        )
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory(
            "fetch"
        )
        self._executor = ThreadPoolExecutor(
            max(1, ctx.num_io_threads), thread_name_prefix="logkeel-io"
        )
        self._loop_thread: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fetcher_manager = ReplicaFetcherManager(
            ctx.node_id,
            ctx.replication,
            ctx.metadata.brokers,
            self.run_in_io,
            self._storage_failure,
            self.fetch_purgatory.check_and_complete,
            ctx.leader_connection_failed,
        )
        self._isr_task: asyncio.Task[None] | None = None
        self._partition_listeners: list[Callable[[list[TopicPartition]], None]] = []
        self._started = False
        self._stopped = False
        self.appends = Appends(self, ctx.write_fence)
        self.fetches = Fetches(
            self,
            follower_budget_ms=ctx.replication.isr.follower_fetch_process_time_max_ms,
            leader_quota=ctx.replication.throttles.leader,
            racks=lambda: {b.node_id: b.rack for b in ctx.metadata.brokers()},
        )
        self.offsets = OffsetQueries(self, ctx.log_manager)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Builds the partitions from metadata over the loaded logs; listens for changes."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._ctx.metadata.add_listener(self._on_metadata_change)
        await self.run_in_io(self._table.sync_all)
        self._table.started = self._started = True
        partitions = self._table.all()
        self.fetcher_manager.partitions_changed([p.tp for p in partitions], self._table.get)
        self._isr_task = self._loop.create_task(self._check_isr_shrinks(), name="isr-expiration")
        offline = [p for p in partitions if p.offline_reason is not None]
        log.info(
            "replica manager started: %d partition(s), %d led here, %d offline",
            len(partitions),
            sum(1 for p in partitions if p.is_leader),
            len(offline),
        )
        for p in offline:
            log.warning("partition %s is offline: %s", p.tp, p.offline_reason)

    def prepare_shutdown(self) -> None:
        """Answers every waiting produce and long-poll fetch now, and parks no new ones: call
        it before stopping the network server, so in-flight requests finish at once instead
        of at their deadlines."""
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()

    async def stop(self) -> None:
        """Answers every waiting produce and fetch now, then stops the IO threads."""
        if self._stopped:
            return
        self._stopped = True
        if self._isr_task is not None:
            self._isr_task.cancel()
        await self.fetcher_manager.shutdown()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        # Let the woken requests take their turn on the loop before the threads go.
        await asyncio.sleep(0)
        await asyncio.to_thread(self._executor.shutdown, True)
        self.fetches.dir_reads.shutdown()

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def run_in_io(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs blocking storage work ``fn(*args)`` on the IO threads (``num.io.threads``)."""
        return await self.submit_io(fn, *args)

    def submit_io(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Hands ``fn(*args)`` to the IO threads now (they start work in hand-over order);
        RuntimeError once they are stopped."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._executor, functools.partial(fn, *args))

    # -- partitions and metadata ----------------------------------------------------------------

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self._table.get(tp)

    def partitions(self) -> list[Partition]:
        return self._table.all()

    def add_partition_listener(self, fn: Callable[[list[TopicPartition]], None]) -> None:
        """``fn(tps)`` runs on the event loop after metadata changed partitions ``tps``."""
        self._partition_listeners.append(fn)

    async def _check_isr_shrinks(self) -> None:
        """Kafka's isr-expiration task every replica.lag.time.max.ms / 2: leaders propose
        dropping followers that fell behind. Between its runs, once a second, the leaders
        suspected slow check whether to hand leadership over (the rule is about the lag time
        passing; at half of it per check a 30 s lag moved leaderships up to 15 s late)."""
        full_every_s = self._ctx.replication.isr.replica_lag_time_max_ms / 2000
        tick_s = min(_RESIGN_CHECK_S, full_every_s)
        next_full = time.monotonic() + full_every_s
        while True:
            await asyncio.sleep(tick_s)
            now_ms = int(time.time() * 1000)
            if time.monotonic() >= next_full - tick_s / 2:
                next_full += full_every_s
                self._table.check_isr_shrinks(now_ms)
            else:
                self._table.check_resignations(now_ms)

    def _on_metadata_change(self, name: str, state: TopicState | None) -> None:
        """Metadata listener; runs in the thread that changed the metadata."""
        if not self._started and self._loop is None:
            return
        try:
            # New partitions serve (and are fetched) batch by batch as their logs are made.
            changed = self._table.apply_topic(name, state, progress=self._wake)
        except Exception:
            log.exception("applying the metadata change of topic %s failed", name)
            return
        self._wake(changed)

    def on_log_dir_failure(self, log_dir: str, reason: str) -> None:
        """A log dir went offline (called from the thread that took it offline): its
        partitions answer KAFKA_STORAGE_ERROR from now on, and requests waiting on them are
        answered. In-memory only, so safe on any thread."""
        self._wake(self._table.take_dir_offline(log_dir, reason))

    def on_log_dir_online(self, log_dir: str, loaded: list[TopicPartition]) -> None:
        """A failed log dir was loaded again (called from the thread that loaded it): its
        partitions serve again, as followers catching up or as leaders the controller picks."""
        self._wake(self._table.take_dir_online(log_dir, loaded))

    def on_log_replaced(self, tp: TopicPartition, plog: PartitionLog) -> None:
        """A replica moved to another log dir: it serves from ``plog`` now. Called with the old
        log's lock held; an append that took the old log finds it replaced under that lock and
        is refused (NOT_LEADER_OR_FOLLOWER, retried by the client) rather than written there."""
        p = self._table.get(tp)
        if p is not None and p.log is not None:
            p.log = plog
            # A follower's fetcher keeps its position between rounds: it reads the new log's.
            loop = self._loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self.fetcher_manager.touch, [tp])

    def on_partition_failure(self, tp: TopicPartition, reason: str) -> None:
        """One partition's log went offline for an error that is not a device fault (its dir
        keeps serving): it answers KAFKA_STORAGE_ERROR, and requests waiting on it are
        answered now rather than at their deadline. In-memory only, so safe on any thread."""
        p = self._table.get(tp)
        if p is None or p.offline_reason is not None:
            return
        p.offline_reason = reason
        p.log = None
        self._wake([tp])

    def _wake(self, tps: Iterable[TopicPartition]) -> None:
        """Re-checks the delayed operations of ``tps`` on the event loop, from any thread."""
        tps = list(tps)
        if not tps or self._loop is None or self._loop.is_closed():
            return

        def wake() -> None:
            if not self._stopped:
                self.fetcher_manager.partitions_changed(tps, self._table.get)
            self.produce_purgatory.check_and_complete_keys(tps)
            self.fetch_purgatory.check_and_complete_keys(tps)
            for fn in self._partition_listeners:
                try:
                    fn(tps)
                except Exception:
                    log.exception("a partition listener failed")

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            wake()
        else:
            self._loop.call_soon_threadsafe(wake)

    def high_watermark_moved(self, tp: TopicPartition) -> None:
        """Completes what waits for ``tp``'s high watermark (acks=all produces, consumers'
        long polls), from any thread. Not a state change: fetchers and partition listeners
        are not told."""

        def complete() -> None:
            self.produce_purgatory.check_and_complete(tp)
            self.fetch_purgatory.check_and_complete(tp)

        if threading.get_ident() == self._loop_thread:
            complete()
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(complete)

    def storage_failed(self, p: Partition, exc: KafkaStorageError) -> None:
        """An IO error in ``p``'s log met on the data path; what waits on ``p`` is answered
        now rather than at its deadline."""
        self._storage_failure(p, exc)
        self._wake([p.tp])

    def _storage_failure(self, p: Partition, exc: KafkaStorageError) -> None:
        """An IO error in ``p``'s log: the dir goes offline (the log manager tells us back).

        Taking a dir offline closes its logs, so on the event loop it is handed to the IO
        threads; the partition stops serving at once either way."""
        p.offline_reason = str(exc)
        p.log = None
        if threading.get_ident() == self._loop_thread and not self._stopped:
            try:
                self._executor.submit(self._handle_dir_failure, exc)
                return
            except RuntimeError:  # the IO threads are shutting down
                pass
        self._handle_dir_failure(exc)

    def _handle_dir_failure(self, exc: KafkaStorageError) -> None:
        try:
            self._log_manager.handle_dir_failure(exc)
        except Exception:
            log.exception("handling the failure of log dir %s failed", exc.log_dir)
