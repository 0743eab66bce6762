"""The data path's delayed operations: an ``acks=all`` produce waiting for the high watermark,
and a long-poll fetch waiting for ``min.bytes``. They wait in the purgatories of
``purgatory`` and read only in-memory partition state (never the disk) to decide they are done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode

from logkeel.server.replica import isr_rules
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.purgatory import DelayedOperation
from logkeel.server.replica.results import (
    READ_COMMITTED,
    FetchPartitionRequest,
    PartitionAppendResult,
)
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["DelayedFetch", "DelayedProduce", "PartitionLookup"]


class PartitionLookup(Protocol):
    """Where a delayed operation finds the current partition of a topic-partition."""

    def partition(self, tp: TopicPartition) -> Partition | None: ...


class DelayedProduce(DelayedOperation):
    """acks=all: done when the high watermark has passed every partition's last offset."""

    def __init__(
        self,
        partitions: PartitionLookup,
        delay_ms: int,
        results: dict[TopicPartition, PartitionAppendResult],
    ) -> None:
        super().__init__(delay_ms)
        self._partitions = partitions
        self.results = results
        # A duplicate (a retry of a batch already in the log) waits too, for the high
        # watermark to pass the original batch, as Kafka's does: the original may not be
        # replicated yet, and acknowledging the retry at once would promise what a new leader
        # may not have.
        self.waiting = {
            tp: r.last_offset + 1 for tp, r in results.items() if r.error == ErrorCode.none
        }

    def try_complete(self) -> bool:
        for tp, required in list(self.waiting.items()):
            partition = self._partitions.partition(tp)
            result = self.results[tp]
            error = (
                ErrorCode.not_leader_or_follower if partition is None else partition.state_error()
            )
            if error is None and partition is not None and partition.high_watermark >= required:
                if isr_rules.check_min_insync(
                    len(partition.isr), partition.settings.min_insync_replicas
                ):
                    error = ErrorCode.not_enough_replicas_after_append
                else:
                    del self.waiting[tp]
                    continue
            if error is not None:
                result.error = error
                del self.waiting[tp]
        if not self.waiting:
            return self.force_complete()
        return False

    def on_expired(self) -> None:
        for tp in self.waiting:
            self.results[tp].error = ErrorCode.request_timed_out


class DelayedFetch(DelayedOperation):
    """A long poll: done when enough new bytes are readable, a partition changed state so the
    fetcher must hear about it, a follower's partition has a high watermark past the one its
    fetch was told, or the deadline passed.

    The high watermark rule is what lets a follower learn a new high watermark within a round
    trip rather than after ``replica.fetch.wait.max.ms``: the leader moves it on the fetch of
    the last in-sync follower to catch up, while the others' fetches are parked here with
    nothing new to read (Kafka completes them on a high watermark move too).

    The byte count is an estimate (Kafka's is too): bytes appended to a partition since the
    first read, counted once the partition has readable data past the fetch offset.
    """

    def __init__(
        self,
        partitions: PartitionLookup,
        delay_ms: int,
        requests: Sequence[FetchPartitionRequest],
        *,
        replica_id: int,
        min_bytes: int,
        isolation_level: int,
        bytes_already: int,
        answered_high_watermarks: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """``answered_high_watermarks``: per partition, the high watermark the first read
        answered (default: the partition's now)."""
        super().__init__(delay_ms)
        self._partitions = partitions
        self._requests = requests
        self._replica_id = replica_id
        self._min_bytes = min_bytes
        self._isolation_level = isolation_level
        self._bytes_already = bytes_already
        # Per partition: the partition object, its appended bytes when the fetch was parked,
        # and the high watermark the fetch was answered.
        answered = answered_high_watermarks or {}
        self._start: dict[TopicPartition, tuple[Partition | None, int, int]] = {}
        for r in requests:
            p = partitions.partition(r.tp)
            if p is None:
                self._start[r.tp] = (None, 0, -1)
            else:
                hw = answered.get(r.tp, p.high_watermark)
                self._start[r.tp] = (p, p.appended_bytes, hw)

    def try_complete(self) -> bool:
        accumulated = self._bytes_already
        follower = self._replica_id >= 0
        for r in self._requests:
            _, start_bytes, start_hw = self._start[r.tp]
            p = self._serving_as_parked(r)
            if p is None:
                return self.force_complete()
            plog = p.log
            assert plog is not None
            if r.fetch_offset > plog.log_end_offset or r.fetch_offset < plog.log_start_offset:
                return self.force_complete()  # truncated or deleted: the fetcher must know
            if follower:
                if plog.high_watermark > start_hw:
                    return self.force_complete()
                end = plog.log_end_offset
            elif self._isolation_level == READ_COMMITTED:
                end = p.last_stable_offset
            else:
                end = plog.high_watermark
            if end > r.fetch_offset:
                accumulated += max(1, min(p.appended_bytes - start_bytes, r.max_bytes))
        if accumulated >= self._min_bytes:
            return self.force_complete()
        return False

    def unchanged(self, log_starts: Mapping[TopicPartition, int]) -> bool:
        """Whether every partition is as the first read answered it: the same partition
        serving in the same leader epoch, no byte appended since, the same high watermark and
        log start (``log_starts``, as answered). A read now would answer the same."""
        for r in self._requests:
            _, start_bytes, start_hw = self._start[r.tp]
            p = self._serving_as_parked(r)
            if p is None or p.appended_bytes != start_bytes:
                return False
            plog = p.log
            if (
                plog is None
                or plog.high_watermark != start_hw
                or plog.log_start_offset != log_starts.get(r.tp)
            ):
                return False
        return True

    def _serving_as_parked(self, r: FetchPartitionRequest) -> Partition | None:
        """``r``'s partition if the one parked on still serves this fetch in its leader epoch
        (else the fetcher must be answered: moved, offline, fenced)."""
        first = self._start[r.tp][0]
        p = self._partitions.partition(r.tp)
        leader_only = self._replica_id < 0 and r.client_rack is None
        if p is None or p is not first or p.state_error(leader_only=leader_only) is not None:
            return None
        if p.epoch_error(r.current_leader_epoch) is not None:
            return None
        return p
