"""One partition replica on this broker: its leadership state, high watermark and log access.

A ``Partition`` is built by the replica manager from cluster metadata over a log from the log
manager. It answers for itself whether it can serve a request (offline, not the leader, a
fenced epoch), appends as leader, reads for consumers and followers, and moves the high
watermark; the replica manager routes requests to it and handles failures of its log dir.
Methods that touch the log run on the IO threads and take ``log.lock``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import PartitionState
from logkeel.config import TopicConfig
from logkeel.records.batch import NO_TIMESTAMP, InvalidBatchError
from logkeel.records.walk import iter_headers
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
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.log_results import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
)
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["AppendRejected", "Partition", "TopicSettings"]


class AppendRejected(Exception):
    """An append refused before it reached the log; ``code`` is the partition's answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """Topic configs read on every append (Kafka's names in the comments)."""

    min_insync_replicas: int = 1  # min.insync.replicas
    timestamp_before_max_ms: int | None = None  # message.timestamp.before.max.ms
    timestamp_after_max_ms: int | None = None  # message.timestamp.after.max.ms
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime

    @classmethod
    def from_topic_config(cls, config: TopicConfig) -> TopicSettings:
        return cls(
            min_insync_replicas=_int_config(config, "min.insync.replicas") or 1,
            timestamp_before_max_ms=_int_config(config, "message.timestamp.before.max.ms"),
            timestamp_after_max_ms=_int_config(config, "message.timestamp.after.max.ms"),
            log_append_time=_str_config(config, "message.timestamp.type") == "LogAppendTime",
        )


class Partition:
    """One partition replica on this broker: leadership, ISR, high watermark, and its log.

    Attributes are read on the event loop and written under ``log.lock`` (appends, high
    watermark) or by metadata changes; each write is a single attribute store.
    """

    def __init__(self, tp: TopicPartition, topic_id: str, node_id: int) -> None:
        self.tp = tp
        self.topic_id = topic_id
        self.node_id = node_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = 0
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.log: PartitionLog | None = None
        self.offline_reason: str | None = None
        # Log end offsets followers reported in their fetches (replica id -> offset).
        self.follower_end_offsets: dict[int, int] = {}
        # Bytes appended since start: delayed fetches compare it to decide they have enough.
        self.appended_bytes = 0
        # Cached under the log's lock after every change, for cheap reads on the event loop.
        self.last_stable_offset = 0
        # The topic's settings the data path checks on every append, refreshed on each
        # metadata change of the topic (configs only change through metadata).
        self.settings = TopicSettings()

    def __repr__(self) -> str:
        return (
            f"Partition({self.tp}, leader={self.leader_id}, epoch={self.leader_epoch}, "
            f"isr={self.isr}, offline={self.offline_reason is not None})"
        )

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark if self.log is not None else -1

    @property
    def online(self) -> bool:
        return self.offline_reason is None and self.log is not None

    def apply_state(self, state: PartitionState) -> bool:
        """Takes leader, epoch, replicas and ISR from metadata; True if the epoch moved."""
        moved = state.leader_epoch != self.leader_epoch or state.leader != self.leader_id
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        for replica in list(self.follower_end_offsets):
            if replica not in self.replicas:
                del self.follower_end_offsets[replica]
        return moved

    def state_error(self, *, leader_only: bool = True) -> ErrorCode | None:
        """Why this replica cannot serve a request now, or None."""
        if self.offline_reason is not None:
            return ErrorCode.kafka_storage_error
        if self.log is None or self.node_id not in self.replicas:
            return ErrorCode.not_leader_or_follower
        if leader_only and not self.is_leader:
            return ErrorCode.not_leader_or_follower
        return None

    def epoch_error(self, current_leader_epoch: int) -> ErrorCode | None:
        """Kafka's check of a request's ``current_leader_epoch`` (-1: not checked)."""
        if current_leader_epoch < 0:
            return None
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.unknown_leader_epoch
        return None

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset over the ISR; only ever moves forward.

        Call with ``log.lock`` held (producer state learns the new HW too).
        """
        plog = self.log
        if plog is None or not self.is_leader:
            return False
        new_hw = plog.log_end_offset
        for replica in self.isr:
            if replica != self.node_id:
                new_hw = min(new_hw, self.follower_end_offsets.get(replica, plog.high_watermark))
        changed = new_hw > plog.high_watermark
        if changed:
            plog.high_watermark = new_hw
            plog.producer_state.on_high_watermark_updated(new_hw)
        self.last_stable_offset = plog.last_stable_offset()
        return changed

    def become_leader_or_follower(self) -> None:
        """After a leadership change: a new leader starts its epoch at the log end."""
        plog = self.log
        assert plog is not None
        with plog.lock:
            if self.is_leader:
                latest = plog.leader_epochs.latest_epoch
                if self.leader_epoch >= 0 and (latest is None or latest < self.leader_epoch):
                    plog.leader_epochs.assign(self.leader_epoch, plog.log_end_offset)
                self.maybe_increment_high_watermark()
            else:
                self.last_stable_offset = plog.last_stable_offset()

    # -- appends (IO threads) -------------------------------------------------------------------

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, origin_is_client: bool
    ) -> AppendInfo:
        """Appends ``records`` and moves the high watermark; raises ``AppendRejected`` when
        this replica cannot take them, storage errors as the log raises them."""
        plog = self.log
        if plog is None:
            raise AppendRejected(ErrorCode.kafka_storage_error, f"{self.tp} is offline")
        if origin_is_client:
            self._validate_client_batches(records)
        with plog.lock:
            if self.log is not plog or not self.is_leader:
                raise AppendRejected(ErrorCode.not_leader_or_follower, f"{self.tp} changed state")
            info = plog.append_as_leader(
                records, max(self.leader_epoch, 0), origin_is_client=origin_is_client
            )
            self.maybe_increment_high_watermark()
        return info

    def _validate_client_batches(self, records: bytes | bytearray | memoryview) -> None:
        """What Kafka's LogValidator checks beyond structure and CRC (the log checks those):
        no control batches from clients, and CreateTime timestamps within the topic's bounds."""
        settings = self.settings
        before = settings.timestamp_before_max_ms
        after = settings.timestamp_after_max_ms
        now = int(time.time() * 1000)
        try:
            for _, header in iter_headers(records):
                if header.is_control:
                    raise AppendRejected(
                        ErrorCode.invalid_record, "clients may not write control batches"
                    )
                if settings.log_append_time or header.records_count == 0:
                    continue
                for ts in (header.base_timestamp, header.max_timestamp):
                    if ts == NO_TIMESTAMP:
                        continue
                    if (before is not None and now - ts > before) or (
                        after is not None and ts - now > after
                    ):
                        raise AppendRejected(
                            ErrorCode.invalid_timestamp,
                            f"timestamp {ts} of a batch for {self.tp} is out of the range allowed "
                            "by message.timestamp.before.max.ms/after.max.ms",
                        )
        except InvalidBatchError:
            return  # the log's own parse reports it as CORRUPT_MESSAGE

    # -- reads (IO threads) ---------------------------------------------------------------------

    def read(
        self,
        r: FetchPartitionRequest,
        replica_id: int,
        limit: int,
        isolation_level: int,
        min_one_message: bool,
    ) -> tuple[FetchPartitionResult, bool]:
        """One partition of a fetch: (the result, whether a follower's fetch moved the high
        watermark). Storage errors other than an offset out of range propagate."""
        tp = self.tp
        follower = replica_id >= 0
        error = self.state_error(leader_only=replica_id != DEBUGGING_CONSUMER_ID)
        error = error or self.epoch_error(r.current_leader_epoch)
        if error is None and follower and replica_id not in self.replicas:
            # Only assigned replicas read past the high watermark.
            error = ErrorCode.not_leader_or_follower
        if error is not None:
            result = FetchPartitionResult(
                tp, error, leader_id=self.leader_id, leader_epoch=self.leader_epoch
            )
            return result, False
        plog = self.log
        assert plog is not None
        hw_moved = False
        try:
            with plog.lock:
                if self.log is not plog:
                    return FetchPartitionResult(tp, ErrorCode.kafka_storage_error), False
                if follower:
                    hw_moved = self._update_follower_locked(replica_id, r.fetch_offset)
                hw = plog.high_watermark
                lso = plog.last_stable_offset()
                self.last_stable_offset = lso
                result = FetchPartitionResult(
                    tp,
                    high_watermark=hw,
                    last_stable_offset=lso,
                    log_start_offset=plog.log_start_offset,
                )
                if r.last_fetched_epoch >= 0:
                    epoch, end = plog.leader_epochs.end_offset_for(
                        r.last_fetched_epoch, plog.log_end_offset
                    )
                    if end < r.fetch_offset or epoch < r.last_fetched_epoch:
                        result.diverging_epoch = (epoch, end)
                        return result, hw_moved
                if follower:
                    max_offset = None
                elif isolation_level == READ_COMMITTED:
                    max_offset = lso
                else:
                    max_offset = hw
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
                return result, hw_moved
        except storage_errors.OffsetOutOfRangeError:
            result = FetchPartitionResult(
                tp,
                ErrorCode.offset_out_of_range,
                high_watermark=plog.high_watermark,
                last_stable_offset=self.last_stable_offset,
                log_start_offset=plog.log_start_offset,
            )
            return result, hw_moved

    def _update_follower_locked(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower fetching from ``fetch_offset`` has everything below it; True if the high
        watermark moved."""
        if replica_id not in self.replicas or replica_id == self.node_id:
            return False
        previous = self.follower_end_offsets.get(replica_id, -1)
        if fetch_offset <= previous:
            return False
        self.follower_end_offsets[replica_id] = fetch_offset
        return self.maybe_increment_high_watermark()

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(the largest epoch <= ``leader_epoch``, its end offset), from the in-memory epoch
        cache: cheap enough for the event loop."""
        plog = self.log
        assert plog is not None
        return plog.leader_epochs.end_offset_for(leader_epoch, plog.log_end_offset)

    def offset_for_timestamp(self, timestamp: int, isolation_level: int | None) -> ListOffsetResult:
        """ListOffsets on the IO threads; ``isolation_level`` None: a follower's request."""
        plog = self.log
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
                ErrorCode.none, NO_TIMESTAMP, last_fetchable, max(self.leader_epoch, -1)
            )
        if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            # No tiered storage: Kafka answers "no offset" for these.
            return ListOffsetResult(ErrorCode.none, NO_TIMESTAMP, -1, -1)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            timestamp = EARLIEST_TIMESTAMP
        if timestamp < MAX_TIMESTAMP:
            return ListOffsetResult(ErrorCode.invalid_request)
        found = plog.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return ListOffsetResult(ErrorCode.none)
        if (
            isolation_level is not None
            and timestamp != EARLIEST_TIMESTAMP
            and found.offset >= last_fetchable
        ):
            return ListOffsetResult(ErrorCode.none)
        return ListOffsetResult(ErrorCode.none, found.timestamp, found.offset, found.leader_epoch)


def _int_config(config: TopicConfig, name: str) -> int | None:
    try:
        value = config.get(name)
    except KeyError:
        return None
    return None if value is None else int(value)


def _str_config(config: TopicConfig, name: str) -> str | None:
    try:
        value = config.get(name)
    except KeyError:
        return None
    return None if value is None else str(value)
