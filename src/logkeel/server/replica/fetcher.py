"""One follower fetcher: an asyncio task that replicates a set of partitions from one leader.

Kafka's AbstractFetcherThread, as a task. Each partition it holds first truncates by leader
epoch (KIP-101/KIP-279): the follower asks the leader (OffsetForLeaderEpoch) for the end of the
latest epoch in its own cache and cuts its log to where the two agree; a follower with no epoch
at all falls back to its high watermark. Then it fetches (Fetch as a replica) from its log end,
appends the leader's batches with their offsets and epochs unchanged, and takes the leader's
high watermark. A fetch answer carrying a diverging epoch (KIP-320) truncates the same way.
Fetches go through a fetch session (KIP-227, ``fetcher_session``): after the first, a request
carries only the partitions whose position changed and the answer only those that changed. The
positions are kept between rounds (``followed``) and read again only for the partitions that
something may have moved, so a round costs what changed, not what the fetcher follows.

Errors: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH and the like back the
partition off for ``replica.fetch.backoff.ms`` (new partition state fixes them: the manager then
hands the partition over again); OFFSET_OUT_OF_RANGE below the leader's log start restarts the
log there, above the leader's log end truncates again by epoch. A failed connection backs every
partition off. Disk work (appends, truncation) runs on the IO threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v15 import request as fetch_request
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_request
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from logkeel.cluster.metadata import BrokerInfo
from logkeel.server.fetch_sessions import FetchParams
from logkeel.server.network.client import BrokerConnectionError
from logkeel.server.replica.context import ReplicationSettings
from logkeel.server.replica.fetcher_session import FetcherSession, FetchPlan
from logkeel.server.replica.followed import FetchState, FollowedPartitions
from logkeel.server.replica.partition import Partition
from logkeel.storage.errors import KafkaStorageError, StorageError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ReplicaFetcher", "RunInIo", "StorageFailure", "truncation_offset"]

log = logging.getLogger(__name__)

RunInIo = Callable[..., Awaitable[Any]]
StorageFailure = Callable[[Partition, KafkaStorageError], None]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


def truncation_offset(
    leader_epoch: int,
    leader_end_offset: int,
    local_end_for: Callable[[int], tuple[int, int]],
    log_end_offset: int,
    high_watermark: int,
) -> tuple[int, bool]:
    """Where a follower cuts its log given the leader's (epoch, end offset) answer for the
    follower's latest epoch: (offset, whether truncation is complete). Kafka's rules: an
    undefined answer falls back to the high watermark; when the follower knows the leader's
    epoch, the smaller of the two ends of it; when it does not, the end of its own largest
    epoch below the leader's, and another round."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(high_watermark, log_end_offset), True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end_offset, log_end_offset), True
    local_epoch, local_end = local_end_for(leader_epoch)
    if local_epoch == UNDEFINED_EPOCH:
        return min(leader_end_offset, log_end_offset), True
    if local_epoch != leader_epoch:
        return min(local_end, log_end_offset), False
    return min(leader_end_offset, local_end, log_end_offset), True


@dataclass(slots=True)
class _Append:
    """A partition's part of a fetch answer, to append."""

    tp: TopicPartition
    state: FetchState
    records: bytes
    high_watermark: int
    log_start_offset: int
    fetch_offset: int  # where the leader read the records: our log end, unless it moved since


def _append_all(appends: list[_Append]) -> list[StorageError | None]:
    """IO thread: each partition's records with the leader's offsets and epochs; per
    partition, the storage error it raised or None. Other exceptions propagate (the round
    fails and backs off, as a single append's would)."""
    outcomes: list[StorageError | None] = []
    for a in appends:
        try:
            a.state.partition.append_as_follower(
                a.records, a.state.leader_epoch, a.high_watermark, a.log_start_offset,
                expected_log_end=a.fetch_offset,
            )  # fmt: skip
        except StorageError as exc:
            outcomes.append(exc)
        else:
            outcomes.append(None)
    return outcomes


# Errors that new partition state resolves: wait, then try again in case it came.
_BACKOFF_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.kafka_storage_error,
    }
)


_SESSION_ERRORS = frozenset(
    {ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch}
)


def _fetch_request(node_id: int, settings: ReplicationSettings, plan: FetchPlan) -> Any:
    topics: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, index), p in plan.send.items():
        topics.setdefault(topic_id, []).append(
            fetch_request.FetchPartition(
                partition=i32(index),
                current_leader_epoch=i32(p.current_leader_epoch),
                fetch_offset=i64(p.fetch_offset),
                last_fetched_epoch=i32(p.last_fetched_epoch),
                log_start_offset=i64(p.log_start_offset),
                partition_max_bytes=i32(p.max_bytes),
            )
        )
    forgotten: dict[uuid.UUID, list[int]] = {}
    for topic_id, index in plan.forget:
        forgotten.setdefault(topic_id, []).append(index)
    return fetch_request.FetchRequest(
        replica_state=fetch_request.ReplicaState(
            replica_id=BrokerId(node_id), replica_epoch=i64(-1)
        ),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=settings.fetch_wait_max_ms)),
        min_bytes=i32(settings.fetch_min_bytes),
        max_bytes=i32(settings.fetch_response_max_bytes),
        session_id=i32(plan.session_id),
        session_epoch=i32(plan.epoch),
        topics=tuple(
            fetch_request.FetchTopic(topic_id=topic_id, partitions=tuple(parts))
            for topic_id, parts in topics.items()
        ),
        forgotten_topics_data=tuple(
            fetch_request.ForgottenTopic(topic_id=topic_id, partitions=tuple(i32(x) for x in parts))
            for topic_id, parts in forgotten.items()
        ),
    )


class ReplicaFetcher:
    """Fetches the partitions it holds from ``source``; all methods run on the event loop."""

    def __init__(
        self,
        source: BrokerInfo,
        fetcher_id: int,
        node_id: int,
        settings: ReplicationSettings,
        run_in_io: RunInIo,
        storage_failure: StorageFailure,
        appended: Callable[[TopicPartition], object] | None = None,
        connection_failed: Callable[[], object] | None = None,
    ) -> None:
        """``appended``: told of each partition this fetcher wrote to (KIP-392: consumers
        long-polling on this follower wake up); ``connection_failed``: told when a request
        to the source broker fails on its connection (its process may be gone)."""
        self.source = source
        self._appended = appended
        self._connection_failed = connection_failed
        self.fetcher_id = fetcher_id
        self._node_id = node_id
        self._settings = settings
        self._run_in_io = run_in_io
        self._storage_failure = storage_failure
        self._followed = FollowedPartitions(
            settings.fetch_max_bytes,
            settings.fetch_backoff_ms / 1000,
            self._throttled,
            self._log_listener,
        )
        self._changed = asyncio.Event()
        self._client = settings.inter_broker.client(
            source,
            client_id=f"logkeel-replica-fetcher-{node_id}-{source.node_id}-{fetcher_id}",
            request_timeout_ms=settings.socket_timeout_ms + settings.fetch_wait_max_ms,
            max_response_bytes=max(settings.fetch_response_max_bytes, settings.fetch_max_bytes)
            + (1 << 20),
        )
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._session = FetcherSession()

    def __repr__(self) -> str:
        return f"ReplicaFetcher(source={self.source.node_id}, id={self.fetcher_id})"

    @property
    def partitions(self) -> list[TopicPartition]:
        return list(self._followed.states)

    def add(self, partition: Partition, leader_epoch: int) -> None:
        """Starts (or restarts, truncating first) replicating ``partition`` in ``leader_epoch``."""
        self._followed.add(partition, leader_epoch)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=repr(self))

    def remove(self, tp: TopicPartition) -> None:
        if self._followed.remove(tp):
            self._changed.set()

    def touch(self, tp: TopicPartition) -> None:
        """``tp``'s fetch position, or whether it is throttled, may have changed without this
        fetcher (its log replaced, its metadata or topic configs changed): read it again."""
        if tp in self._followed.states:
            self._followed.touch(tp)
            self._changed.set()

    def _log_listener(self, tp: TopicPartition) -> Callable[[], None]:
        """What ``tp``'s log calls, from whichever thread moved it, when its position moved."""
        loop = asyncio.get_running_loop()

        def moved() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing to fetch
                loop.call_soon_threadsafe(self.touch, tp)

        return moved

    async def stop(self) -> None:
        # The flag as well as the cancel: a cancel swallowed by a library call must not leave
        # the loop fetching (and appending) after the broker stopped.
        self._stopped = True
        self._changed.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for tp in list(self._followed.states):
            self._followed.remove(tp)  # its logs stop telling this fetcher
        await self._client.close()

    # -- the loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopped:
            self._changed.clear()
            now = time.monotonic()
            try:
                if await self._round(now):
                    continue
            except BrokerConnectionError as exc:
                log.warning("%r: %s; backing off", self, exc)
                if self._connection_failed is not None:
                    self._connection_failed()
                self._back_off(self._followed.ready())
                continue
            except Exception:
                log.exception("%r: replication round failed; backing off", self)
                self._back_off(self._followed.ready())
                continue
            # Nothing ready: wait for a change or the first delay to end. Not wait_for: on
            # 3.11 it can swallow a cancel that lands as the event is set, and with no
            # partitions left this wait has no timeout, so stop() would hang.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._followed.next_due(time.monotonic())):
                    await self._changed.wait()

    async def _round(self, now: float) -> bool:
        """One round: the partitions due to truncate truncate, or else a Fetch; False when no
        partition was ready. What changed since the last round is recomputed, nothing else."""
        followed = self._followed
        followed.refresh(now)
        if followed.truncating:
            states = {tp: followed.states[tp] for tp in followed.truncating}
            try:
                await self._truncate(states)
            finally:
                for tp in states:
                    followed.touch(tp)
            return True
        quota = self._settings.throttles.follower
        if followed.throttled and followed.wanted and quota.bound is not None:
            wait_ms = quota.throttle_ms(now)
            if wait_ms:
                # Over follower.replication.throttled.rate: the throttled replicas wait until
                # the rate is back within it; the others fetch on.
                held = [followed.states.get(tp) for tp in followed.throttled]
                followed.back_off(
                    [s for s in held if s is not None and s.key in followed.wanted],
                    now + wait_ms / 1000,
                    now,
                )
                followed.refresh(now)
        if not followed.wanted:
            return False
        await self._fetch()
        return True

    def _back_off(self, states: Iterable[FetchState]) -> None:
        self._followed.back_off(states, None, time.monotonic())

    def _current(self, tp: TopicPartition, state: FetchState) -> bool:
        """The answer still concerns the partition as we hold it (not removed or re-added)."""
        return self._followed.states.get(tp) is state

    # -- truncation by leader epoch -----------------------------------------------------------

    async def _truncate(self, states: dict[TopicPartition, FetchState]) -> None:
        asked: dict[TopicPartition, tuple[FetchState, int]] = {}
        for tp, s in states.items():
            position = s.partition.fetch_position()
            if position is None:
                self._back_off([s])
                continue
            _, latest_epoch, _ = position
            if latest_epoch == UNDEFINED_EPOCH:
                # No epoch to ask about: keep only what is known to be committed.
                plog = s.partition.log
                hw = plog.high_watermark if plog is not None else 0
                await self._truncate_to(tp, s, hw, complete=True)
            else:
                asked[tp] = (s, latest_epoch)
        if not asked:
            return
        by_topic: dict[str, list[Any]] = {}
        for tp, (s, epoch) in asked.items():
            by_topic.setdefault(tp.topic, []).append(
                epoch_request.OffsetForLeaderPartition(
                    partition=i32(tp.partition),
                    current_leader_epoch=i32(s.leader_epoch),
                    leader_epoch=i32(epoch),
                )
            )
        request = epoch_request.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self._node_id),
            topics=tuple(
                epoch_request.OffsetForLeaderTopic(topic=TopicName(name), partitions=tuple(parts))
                for name, parts in by_topic.items()
            ),
        )
        response = await self._client.send(request)
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(str(topic.topic), int(part.partition))
                entry = asked.get(tp)
                if entry is None or not self._current(tp, entry[0]):
                    continue
                s = entry[0]
                if part.error_code != ErrorCode.none:
                    self._partition_error(tp, s, part.error_code, "OffsetForLeaderEpoch")
                    continue
                await self._truncate_on_epoch(tp, s, int(part.leader_epoch), int(part.end_offset))

    async def _truncate_on_epoch(
        self, tp: TopicPartition, s: FetchState, epoch: int, end_offset: int
    ) -> None:
        plog = s.partition.log
        if plog is None:
            self._back_off([s])
            return
        offset, complete = truncation_offset(
            epoch,
            end_offset,
            lambda e: plog.leader_epochs.end_offset_for(e, plog.log_end_offset),
            plog.log_end_offset,
            plog.high_watermark,
        )
        await self._truncate_to(tp, s, offset, complete=complete)

    async def _truncate_to(
        self,
        tp: TopicPartition,
        s: FetchState,
        offset: int,
        *,
        complete: bool,
        fully: bool = False,
    ) -> None:
        try:
            done = await self._run_in_io(
                functools.partial(
                    s.partition.truncate_as_follower, offset, s.leader_epoch, fully=fully
                )
            )
        except KafkaStorageError as exc:
            self._storage_failure(s.partition, exc)
            self.remove(tp)
            return
        if not done:
            self._back_off([s])
            return
        if self._current(tp, s):
            s.truncating = not complete

    # -- fetching -----------------------------------------------------------------------------

    async def _fetch(self) -> None:
        settings = self._settings
        followed = self._followed
        # A fetch session (KIP-227): only what changed is sent, only what changed comes back.
        plan = self._session.plan(followed.wanted, followed.take_changed())
        followed.planned += 1
        fetch = followed.planned
        try:
            response = await self._client.send(_fetch_request(self._node_id, settings, plan))
        except BaseException:
            self._session.reset()
            raise
        self._session.answered(plan, response.error_code, int(response.session_id))
        if response.error_code in _SESSION_ERRORS:
            log.info(
                "%r: fetch session lost (%s); fetching in full", self, response.error_code.name
            )
            return
        if response.error_code != ErrorCode.none:
            log.warning("%r: fetch failed with %s", self, response.error_code.name.upper())
            self._back_off(followed.ready())
            return
        quota = settings.throttles.follower
        appends: list[_Append] = []
        # An incremental answer leaves out the partitions that did not change: this costs what
        # the answer holds, and only the partitions it names are recomputed next round.
        for topic in response.responses:
            for part in topic.partitions:
                key = (topic.topic_id, int(part.partition_index))
                tp_or_none = followed.tp_of(key)
                if tp_or_none is None:
                    continue
                tp = tp_or_none
                fetched = followed.current(tp, fetch)
                if fetched is None:
                    continue
                followed.touch(tp)
                if quota.bound is not None and tp in followed.throttled:
                    quota.record(_records_size(part), time.monotonic())
                append = await self._fetched(tp, fetched, part, self._session.asked(plan, key))
                if append is not None:
                    appends.append(append)
        if appends:
            # Every partition of the answer in one trip to the IO threads: a trip per
            # partition would add two thread switches each to the round trip.
            outcomes = await self._run_in_io(_append_all, appends)
            for append, outcome in zip(appends, outcomes, strict=True):
                if outcome is not None:
                    self._append_failed(append, outcome)
                elif self._appended is not None:
                    self._appended(append.tp)

    def _throttled(self, tp: TopicPartition, p: Partition) -> bool:
        """This replica is listed in follower.replication.throttled.replicas and not in sync."""
        return p.settings.follower_throttled.covers(tp.partition, self._node_id) and (
            self._node_id not in p.isr
        )

    async def _fetched(
        self, tp: TopicPartition, s: FetchState, part: Any, asked: FetchParams | None
    ) -> _Append | None:
        """Handles one partition of a fetch answer (``asked``: what the leader read it with);
        records (or a new high watermark) to append are returned, to be appended with the
        others."""
        error = part.error_code
        if error == ErrorCode.offset_out_of_range:
            await self._out_of_range(tp, s, int(part.log_start_offset))
            return None
        if error != ErrorCode.none:
            self._partition_error(tp, s, error, "Fetch")
            return None
        diverging = part.diverging_epoch
        if diverging is not None and int(diverging.end_offset) >= 0:
            await self._truncate_on_epoch(tp, s, int(diverging.epoch), int(diverging.end_offset))
            return None
        records = bytes(part.records) if part.records else b""
        if records and asked is None:
            return None  # not asked for: nothing to append it after
        return _Append(
            tp,
            s,
            records,
            int(part.high_watermark),
            int(part.log_start_offset),
            asked.fetch_offset if asked is not None else -1,
        )

    def _append_failed(self, append: _Append, exc: StorageError) -> None:
        tp, s = append.tp, append.state
        if isinstance(exc, KafkaStorageError):
            self._storage_failure(s.partition, exc)
            if self._current(tp, s):
                self.remove(tp)
            return
        if not self._current(tp, s):
            return  # handed over afresh meanwhile: the new state truncates first anyway
        log.error("%r: appending to %s failed: %s; truncating again", self, tp, exc)
        s.truncating = True
        self._back_off([s])

    async def _out_of_range(self, tp: TopicPartition, s: FetchState, leader_start: int) -> None:
        """Kafka's reset: below the leader's log start, restart there with an empty log; above
        its log end, our tail diverged: truncate again by epoch."""
        position = s.partition.fetch_position()
        if position is None:
            self._back_off([s])
            return
        log_end = position[0]
        if leader_start >= 0 and log_end < leader_start:
            log.info(
                "%r: %s is below the leader's log start %d; restarting there",
                self,
                tp,
                leader_start,
            )
            await self._truncate_to(tp, s, leader_start, complete=True, fully=True)
        else:
            s.truncating = True

    def _partition_error(
        self, tp: TopicPartition, s: FetchState, error: ErrorCode, api: str
    ) -> None:
        level = logging.INFO if error in _BACKOFF_ERRORS else logging.WARNING
        log.log(level, "%r: %s for %s answered %s; backing off", self, api, tp, error.name.upper())
        self._back_off([s])


def _records_size(part: Any) -> int:
    records = part.records
    return len(records) if records else 0
