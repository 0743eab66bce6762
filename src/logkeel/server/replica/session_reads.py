"""The partitions of an incremental fetch session (KIP-227) that the leader answers without
reading them: those whose last read found nothing to return and nothing has changed since.

An idle follower's session names ~667 partitions at 2,000 partitions RF 3, and each of its
Fetches read every one of them (~12 µs each: the follower's fetch recorded, the high watermark
tried, a result built) to answer nothing, since an incremental response omits the partitions
that did not change. Here a partition whose read returned no records and no error, asked at
the end of what it may read (the log end for a follower, the high watermark or last stable
offset for a consumer), keeps a *stamp* of what decided that answer: the partition and its log
(objects), the metadata state applied (leader, epochs, replicas, ISR), the log end, high
watermark, log start and last stable offset, and the isolation level. While the stamp still
holds and the fetcher does not change its parameters, a read would answer the same, so none is
made: the partition is left out of the response, and its long poll still watches it.

A follower's caught-up time must not stop with its reads: each Fetch of its session that finds
such a partition unchanged is a fetch at the log end its last read reached, so it counts as
caught up at that Fetch's arrival (`FollowerTracking.unread`, the session's `FetchClock`). A
follower that stops fetching stops the clock, and one that falls behind has had records
appended to its partition: the stamp no longer holds, the partition is read, and from then on
its reads decide as before.

Not answered without a read: partitions of a consumer that may be sent to another replica
(KIP-392, the answer depends on other brokers), of a follower outside the ISR (its read may
propose it for the ISR, and a throttle may hold it back), and anything the last read answered
with records, an error, a diverging epoch or a preferred replica.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from logkeel.server.fetch_sessions import PartitionKey
from logkeel.server.replica.follower_tracking import FetchClock
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.results import (
    READ_COMMITTED,
    FetchPartitionRequest,
    FetchPartitionResult,
)
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ChangeFeed", "SessionReads", "Stamp", "Unread", "stamp"]


class Stamp(NamedTuple):
    """Compared as a whole: objects by identity, offsets by value (each only moves forward
    while the partition and its log stay the same objects in one metadata state)."""

    partition: Partition
    log: object
    applied: object  # the metadata state last applied: leader, epochs, replicas, ISR
    log_end_offset: int
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    isolation_level: int


def stamp(
    p: Partition | None, r: FetchPartitionRequest, replica_id: int, isolation_level: int
) -> Stamp | None:
    """What a read of ``r`` now would answer with nothing to read; None if it may read
    something, or may answer more than offsets."""
    if p is None or r.client_rack is not None or p.offline_reason is not None:
        return None
    plog = p.log
    if plog is None or not p.is_leader:
        return None
    if replica_id >= 0:
        if replica_id not in p.isr:
            return None
        end = plog.log_end_offset
    elif isolation_level == READ_COMMITTED:
        end = p.last_stable_offset
    else:
        end = plog.high_watermark
    if r.fetch_offset != end:
        return None
    return Stamp(
        p,
        plog,
        p.applied,
        plog.log_end_offset,
        plog.high_watermark,
        plog.log_start_offset,
        p.last_stable_offset,
        isolation_level,
    )


def answers_nothing(result: FetchPartitionResult, before: Stamp | None) -> bool:
    """Whether ``result`` is what a read of a partition stamped ``before`` (just before the
    read) answers when nothing changed during it: no records, nothing to tell but offsets,
    and the stamp's offsets."""
    return (
        before is not None
        and result.error == ErrorCode.none
        and result.records is None
        and result.diverging_epoch is None
        and result.preferred_read_replica < 0
        and not result.throttled
        and not result.read_earlier
        and not result.aborted_transactions
        and result.high_watermark == before.high_watermark
        and result.log_start_offset == before.log_start_offset
        and result.last_stable_offset == before.last_stable_offset
    )


@dataclass(frozen=True, slots=True)
class Unread:
    """A partition answered without a read: the request to read it with once it changes, and
    the stamp of its last read."""

    request: FetchPartitionRequest
    stamp: Stamp


class ChangeFeed(Protocol):
    """Who tells a session's partitions' changes: the fetch purgatory, whose key every change
    of a partition checks (an append, a high watermark move, a metadata change, going
    offline, DeleteRecords)."""

    def listen(self, key: TopicPartition, fn: Callable[[TopicPartition], None]) -> None: ...

    def unlisten(self, key: TopicPartition, fn: Callable[[TopicPartition], None]) -> None: ...


class SessionReads:
    """One fetch session's partitions answered without reading (by the session's partition
    key), and, for a follower's session, the clock of its fetches. Used on the event loop.

    Without a ``feed`` each Fetch checks every unread partition's stamp. With one (a
    follower's session) only those the feed said changed since are checked, and the session
    keeps the partitions it reads (``to_read``: every other partition of the session is
    unread), so a Fetch costs what changed, not the session's size. What changes a stamp
    without telling the feed (a log replaced by a move between dirs, the log start moved by
    retention, a dir found slow) is caught by a check of every partition at least every
    ``full_check_ms``; a slow dir anywhere checks them all on every Fetch."""

    def __init__(
        self, replica_id: int, feed: ChangeFeed | None = None, *, full_check_ms: int = 1_000
    ) -> None:
        self.replica_id = replica_id
        self.clock = FetchClock()
        self._unread: dict[PartitionKey, Unread] = {}
        self._feed = feed
        self.full_check_ms = full_check_ms
        self._checked_ms = 0  # the last check of every partition
        self._key_of: dict[TopicPartition, PartitionKey] = {}  # the unread, by partition
        self._changed: dict[PartitionKey, None] = {}  # unread ones the feed told of since
        self._to_read: dict[PartitionKey, None] = {}
        self._on_change = self._told  # one bound method: the feed unlistens the same object
        # While a Fetch of the session waits (its long poll): what wakes it, and how a change
        # is checked (the partition lookup and isolation level of that Fetch).
        self._wake: Callable[[], object] | None = None
        self._lookup: Callable[[TopicPartition], Partition | None] | None = None
        self._isolation_level = 0

    def __len__(self) -> int:
        return len(self._unread)

    @property
    def narrows(self) -> bool:
        """Whether the session knows its partitions to read (``to_read``) without a walk."""
        return self._feed is not None

    def to_read(self) -> list[PartitionKey]:
        """The session's partitions that a Fetch reads (with a feed): every other one is
        unread. In the order they are answered (one that returned records goes last)."""
        return list(self._to_read)

    def forget(self, keys: Iterable[PartitionKey]) -> None:
        """The fetcher changed these partitions' parameters (or added them): read them again."""
        for key in keys:
            self._drop(key)

    def remove(self, keys: Iterable[PartitionKey]) -> None:
        """These partitions left the session."""
        for key in keys:
            self._drop(key)
            self._to_read.pop(key, None)

    def unread(
        self,
        lookup: Callable[[TopicPartition], Partition | None],
        isolation_level: int,
        now_ms: int | None = None,
        *,
        read_anyway: Callable[[Partition], bool] | None = None,
        check_all: bool = False,
    ) -> Mapping[PartitionKey, Unread]:
        """A Fetch of the session arrived: the partitions still answered without a read (the
        others are read from now on; ``read_anyway``: those the leader reads whatever the
        stamp says; ``check_all``: check every partition, not only those the feed told of).
        A follower counts as having fetched them now. A view: it changes as partitions are
        read again."""
        fetched_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self._lookup, self._isolation_level = lookup, isolation_level
        if (
            self._feed is None
            or check_all
            or fetched_ms - self._checked_ms >= self.full_check_ms
            or fetched_ms < self._checked_ms
        ):
            keys: Iterable[PartitionKey] = list(self._unread)
            self._checked_ms = fetched_ms
        else:
            keys = list(self._changed)
        self._changed.clear()
        for key in keys:
            u = self._unread.get(key)
            if u is None:
                continue
            p = lookup(u.request.tp)
            if not (
                p is not None
                and stamp(p, u.request, self.replica_id, isolation_level) == u.stamp
                and (read_anyway is None or not read_anyway(p))
            ):
                self._drop(key)
        # After the check: every partition left unread was unchanged at this Fetch's arrival
        # (with a feed: none was told changed, which an append, the only way its log end
        # moves, always tells; Kafka too counts a follower caught up at a fetch that reached
        # the log end of its previous fetch).
        self.clock.fetched_ms = max(self.clock.fetched_ms, fetched_ms)
        return MappingProxyType(self._unread)

    def changed(self) -> list[tuple[PartitionKey, FetchPartitionRequest]]:
        """The unread partitions the feed told of whose stamps changed since ``unread``: read
        from now on; their keys and requests (to read them in the Fetch under way)."""
        lookup = self._lookup
        out = []
        for key in list(self._changed):
            u = self._unread.get(key)
            if u is None:
                continue
            p = lookup(u.request.tp) if lookup is not None else None
            if p is None or stamp(p, u.request, self.replica_id, self._isolation_level) != u.stamp:
                self._drop(key)
                out.append((key, u.request))
        self._changed.clear()
        return out

    def park(self, wake: Callable[[], object] | None) -> None:
        """A Fetch of the session waits (``wake`` ends its wait: called when one of the unread
        partitions changes), or no longer waits (None)."""
        self._wake = wake

    def read(
        self, key: PartitionKey, request: FetchPartitionRequest, before: Stamp | None,
        result: FetchPartitionResult,
    ) -> None:  # fmt: skip
        """``request`` was read (``before``: its stamp just before) and answered ``result``,
        told to the fetcher: whether it is answered without a read from now on."""
        if not answers_nothing(result, before):
            self._drop(key)
            if result.records is not None:
                # Last among those read: the next responses' byte budget reaches the others
                # first (the session's round robin).
                self._to_read.pop(key, None)
                self._to_read[key] = None
            return
        assert before is not None
        self._unread[key] = u = Unread(request, before)
        self._to_read.pop(key, None)
        if self._feed is not None and self._key_of.get(request.tp) != key:
            self._key_of[request.tp] = key
            self._feed.listen(request.tp, self._on_change)
        if self.replica_id >= 0:
            # (Again after a read during the long poll: the read ended the earlier link.)
            u.stamp.partition.followers.unread(self.replica_id, self.clock)

    def keep_reading(self, key: PartitionKey) -> None:
        """This partition is answered by every Fetch (an error: an ACL, an unknown topic id)."""
        self._drop(key)

    def drop(self, key: PartitionKey) -> None:
        """Read this partition from now on (its answer changed for other reasons: an ACL)."""
        self._drop(key)

    def close(self) -> None:
        """The session ended: the feed stops telling it anything."""
        for key in list(self._unread):
            self._drop(key)
        self._to_read.clear()
        self._wake = self._lookup = None

    def _told(self, tp: TopicPartition) -> None:
        key = self._key_of.get(tp)
        if key is None:
            return
        self._changed[key] = None
        wake, lookup = self._wake, self._lookup
        if wake is None or lookup is None:
            return
        u = self._unread.get(key)
        if u is not None and stamp(lookup(tp), u.request, self.replica_id, self._isolation_level) != u.stamp:  # fmt: skip
            wake()

    def _drop(self, key: PartitionKey) -> None:
        self._to_read[key] = None
        u = self._unread.pop(key, None)
        if u is None:
            return
        self._changed.pop(key, None)
        if self._feed is not None:
            tp = u.request.tp
            if self._key_of.get(tp) == key:
                del self._key_of[tp]
                self._feed.unlisten(tp, self._on_change)
        if self.replica_id >= 0:
            u.stamp.partition.followers.read_again(self.replica_id)
