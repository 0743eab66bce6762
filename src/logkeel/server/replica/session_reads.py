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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

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

__all__ = ["SessionReads", "Stamp", "Unread", "stamp"]


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


class SessionReads:
    """One fetch session's partitions answered without reading (by the session's partition
    key), and, for a follower's session, the clock of its fetches. Used on the event loop."""

    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id
        self.clock = FetchClock()
        self._unread: dict[PartitionKey, Unread] = {}

    def __len__(self) -> int:
        return len(self._unread)

    def forget(self, keys: Iterable[PartitionKey]) -> None:
        """The fetcher changed (or dropped) these partitions' parameters: read them again."""
        if not self._unread:
            return
        for key in keys:
            self._drop(key)

    def unread(
        self,
        lookup: Callable[[TopicPartition], Partition | None],
        isolation_level: int,
        now_ms: int | None = None,
        *,
        read_anyway: Callable[[Partition], bool] | None = None,
    ) -> dict[PartitionKey, Unread]:
        """A Fetch of the session arrived: the partitions still answered without a read (the
        others are read from now on; ``read_anyway``: those the leader reads whatever the
        stamp says). A follower counts as having fetched them now."""
        fetched_ms = int(time.time() * 1000) if now_ms is None else now_ms
        still = {}
        for key, u in list(self._unread.items()):
            r = u.request
            p = lookup(r.tp)
            if (
                p is not None
                and stamp(p, r, self.replica_id, isolation_level) == u.stamp
                and (read_anyway is None or not read_anyway(p))
            ):
                still[key] = u
            else:
                self._drop(key)
        # After the check: every partition left unread was unchanged at this Fetch's arrival.
        self.clock.fetched_ms = max(self.clock.fetched_ms, fetched_ms)
        return still

    def read(
        self, key: PartitionKey, request: FetchPartitionRequest, before: Stamp | None,
        result: FetchPartitionResult,
    ) -> None:  # fmt: skip
        """``request`` was read (``before``: its stamp just before) and answered ``result``,
        told to the fetcher: whether it is answered without a read from now on."""
        if not answers_nothing(result, before):
            self._drop(key)
            return
        assert before is not None
        self._unread[key] = u = Unread(request, before)
        if self.replica_id >= 0:
            # (Again after a read during the long poll: the read ended the earlier link.)
            u.stamp.partition.followers.unread(self.replica_id, self.clock)

    def drop(self, key: PartitionKey) -> None:
        """Read this partition from now on (its answer changed for other reasons: an ACL)."""
        self._drop(key)

    def _drop(self, key: PartitionKey) -> None:
        u = self._unread.pop(key, None)
        if u is not None and self.replica_id >= 0:
            u.stamp.partition.followers.read_again(self.replica_id)
