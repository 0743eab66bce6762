"""What one partition's log gives a fetch (consumers' and followers') and ListOffsets, checked
against the partition's state. These run on the IO threads and take ``log.lock``; a follower's
fetch also tells the leader's ``FollowerTracking`` and may move the high watermark."""

from __future__ import annotations

import logging
import os
import time

from kio.schema.errors import ErrorCode

from logkeel.records.batch import NO_TIMESTAMP
from logkeel.server.replica.partition import Partition
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
) -> tuple[FetchPartitionResult, bool]:
    """One partition of a fetch: (the result, whether a follower's fetch moved the high
    watermark). Storage errors other than an offset out of range propagate."""
    tp = p.tp
    follower = replica_id >= 0
    error = p.state_error(leader_only=replica_id != DEBUGGING_CONSUMER_ID)
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
