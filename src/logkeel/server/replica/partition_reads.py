"""What one partition's log gives a fetch (consumers' and followers') and ListOffsets, checked
against the partition's state. These run on the IO threads and take ``log.lock``; a follower's
fetch also tells the leader's ``FollowerTracking`` and may move the high watermark.

KIP-392: a consumer that may read from a follower (``client_rack`` set) is told by the leader
which replica to read from (``replica_selector``) and served by a follower up to that
follower's high watermark (its last stable offset when read committed)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from logkeel.records.batch import NO_TIMESTAMP
from logkeel.server.replica import replica_selector
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.replica_selector import FollowerView, ReplicaView
from logkeel.server.replica.results import (
    DEBUGGING_CONSUMER_ID,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    READ_COMMITTED,
    FetchPartitionRequest,
    FetchPartitionResult,
    ListOffsetResult,
    RegionRecords,
)
from logkeel.storage import errors as storage_errors
from logkeel.storage.engine.log_results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

__all__ = ["offset_for_timestamp", "read"]

log = logging.getLogger(__name__)


def read(
    p: Partition,
    r: FetchPartitionRequest,
    replica_id: int,
    limit: int,
    isolation_level: int,
    min_one_message: bool,
    racks: Mapping[int, str | None] | None = None,
) -> tuple[FetchPartitionResult, bool]:
    """One partition of a fetch: (the result, whether a follower's fetch moved the high
    watermark). ``racks``: the live brokers' racks, for a consumer with a ``client_rack``.
    Storage errors other than an offset out of range propagate."""
    tp = p.tp
    follower = replica_id >= 0
    any_replica = replica_id == DEBUGGING_CONSUMER_ID or (
        not follower and r.client_rack is not None
    )
    error = p.state_error(leader_only=not any_replica)
    error = error or p.epoch_error(r.current_leader_epoch)
    if error is None and follower and replica_id not in p.replicas:
        # Only assigned replicas read past the high watermark.
        error = ErrorCode.not_leader_or_follower
    if error is not None:
        result = FetchPartitionResult(tp, error, leader_id=p.leader_id, leader_epoch=p.leader_epoch)
        return result, False
    plog = p.log
    assert plog is not None
    hw_moved = False
    now = int(time.time() * 1000)
    if follower:
        p.followers.fetch_started(replica_id, p.replicas, r.fetch_offset, now)
        p.followers.log_starts[replica_id] = r.log_start_offset
    served = False
    try:
        with plog.lock:
            if p.log is not plog:
                return FetchPartitionResult(tp, ErrorCode.kafka_storage_error), False
            lso = plog.last_stable_offset()
            p.last_stable_offset = lso
            result = FetchPartitionResult(
                tp,
                high_watermark=plog.high_watermark,
                last_stable_offset=lso,
                log_start_offset=plog.log_start_offset,
            )
            if r.client_rack is not None and racks is not None and p.is_leader:
                preferred = _preferred_read_replica(p, r, racks, plog.log_end_offset, now)
                if preferred >= 0:
                    # Kafka reads nothing for a consumer sent elsewhere.
                    result.preferred_read_replica = preferred
                    return result, False
            if r.last_fetched_epoch >= 0:
                epoch, end = plog.leader_epochs.end_offset_for(
                    r.last_fetched_epoch, plog.log_end_offset
                )
                if end < r.fetch_offset or epoch < r.last_fetched_epoch:
                    result.diverging_epoch = (epoch, end)
                    return result, False
            if follower:
                max_offset = None
            elif isolation_level == READ_COMMITTED:
                max_offset = lso
            else:
                max_offset = plog.high_watermark
            leader_end = plog.log_end_offset
            info = plog.read(
                r.fetch_offset,
                limit,
                max_offset=max_offset,
                min_one_message=min_one_message,
                include_aborted=isolation_level == READ_COMMITTED and not follower,
            )
            if info.region is not None and info.region.size > 0:
                result.records = RegionRecords(
                    os.dup(info.region.fd), info.region.position, info.region.size
                )
            if isolation_level == READ_COMMITTED and not follower:
                result.aborted_transactions = info.aborted_transactions
            if follower:
                served = True
                sending = result.records is not None
                if sending:
                    p.followers.read_being_sent(replica_id, r.fetch_offset, now)
                hw_moved = p.follower_fetched_locked(
                    replica_id, r.fetch_offset, now, leader_end, sending=sending
                )
                # The follower learns the high watermark its own fetch just moved.
                result.high_watermark = plog.high_watermark
                result.last_stable_offset = p.last_stable_offset
            return result, hw_moved
    except storage_errors.OffsetOutOfRangeError:
        if (
            not follower
            and not p.is_leader
            and r.current_leader_epoch < 0
            and r.fetch_offset > plog.log_end_offset
        ):
            # A consumer on a follower that has not replicated its offset yet, with no leader
            # epoch to tell whether it was sent here or came on stale metadata: Kafka answers
            # it empty (apache/kafka#12734) so it retries. One that gave its epoch gets
            # OFFSET_OUT_OF_RANGE and goes back to the leader, as KIP-392 has it.
            result = FetchPartitionResult(
                tp,
                high_watermark=plog.high_watermark,
                last_stable_offset=p.last_stable_offset,
                log_start_offset=plog.log_start_offset,
            )
            return result, hw_moved
        result = FetchPartitionResult(
            tp,
            ErrorCode.offset_out_of_range,
            high_watermark=plog.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=plog.log_start_offset,
        )
        return result, hw_moved
    finally:
        if follower and not served:
            p.followers.fetch_failed(replica_id, p.replicas, r.fetch_offset, now)


def _preferred_read_replica(
    p: Partition,
    r: FetchPartitionRequest,
    racks: Mapping[int, str | None],
    leader_end: int,
    now_ms: int,
) -> int:
    """The leader's answer to where this consumer should read (-1: here)."""
    isr = set(p.isr)
    log_starts = p.followers.log_starts
    followers = [
        FollowerView(
            broker_id,
            broker_id in isr,
            log_starts.get(broker_id, -1),
            state.log_end_offset,
            state.last_caught_up_ms,
        )
        for broker_id, state in p.followers.states.items()
    ]
    leader = ReplicaView(p.node_id, racks.get(p.node_id), leader_end)
    return replica_selector.preferred_read_replica(
        r.client_rack,
        leader,
        replica_selector.candidates(followers, racks, r.fetch_offset, now_ms),
    )


def offset_for_timestamp(
    p: Partition, timestamp: int, isolation_level: int | None
) -> ListOffsetResult:
    """ListOffsets on the IO threads; ``isolation_level`` None: a follower's request."""
    plog = p.log
    if plog is None:
        return ListOffsetResult(ErrorCode.kafka_storage_error)
    with plog.lock:
        if isolation_level is None:
            last_fetchable = plog.log_end_offset
        elif isolation_level == READ_COMMITTED:
            last_fetchable = plog.last_stable_offset()
        else:
            last_fetchable = plog.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        return ListOffsetResult(
            ErrorCode.none, NO_TIMESTAMP, last_fetchable, max(p.leader_epoch, -1)
        )
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        # No tiered storage: Kafka answers "no offset" for these.
        return ListOffsetResult(ErrorCode.none, NO_TIMESTAMP, -1, -1)
    if timestamp == EARLIEST_LOCAL_TIMESTAMP:
        timestamp = EARLIEST_TIMESTAMP
    if timestamp < MAX_TIMESTAMP:
        return ListOffsetResult(ErrorCode.invalid_request)
    try:
        found = plog.fetch_offset_by_timestamp(timestamp)
    except storage_errors.CorruptRecordError as exc:
        log.warning("%s: ListOffsets for timestamp %d: %s", p.tp, timestamp, exc)
        return ListOffsetResult(ErrorCode.corrupt_message)
    if found is None:
        return ListOffsetResult(ErrorCode.none)
    if (
        isolation_level is not None
        and timestamp != EARLIEST_TIMESTAMP
        and found.offset >= last_fetchable
    ):
        return ListOffsetResult(ErrorCode.none)
    return ListOffsetResult(ErrorCode.none, found.timestamp, found.offset, found.leader_epoch)
