"""Offset requests answered from partitions led here: ListOffsets, OffsetForLeaderEpoch and
DeleteRecords (whose new log start is checkpointed before it is answered)."""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from logkeel.server.replica import partition_reads
from logkeel.server.replica.data_path import DataPath
from logkeel.server.replica.results import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_CONSUMER_ID,
    READ_UNCOMMITTED,
    ListOffsetResult,
)
from logkeel.storage import errors as storage_errors
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["OffsetQueries"]

log = logging.getLogger(__name__)


class OffsetQueries:
    """ListOffsets, OffsetForLeaderEpoch and DeleteRecords for one partition at a time."""

    def __init__(self, path: DataPath, log_manager: LogManager) -> None:
        self._path = path
        self._log_manager = log_manager

    async def offset_for_timestamp(
        self,
        tp: TopicPartition,
        timestamp: int,
        *,
        isolation_level: int | None = READ_UNCOMMITTED,
        current_leader_epoch: int = -1,
        replica_id: int = CONSUMER_REPLICA_ID,
    ) -> ListOffsetResult:
        """ListOffsets for one partition. ``isolation_level`` None: a follower's request,
        answered up to the log end."""
        p = self._path.partition(tp)
        if p is None:
            return ListOffsetResult(ErrorCode.unknown_topic_or_partition)
        error = p.state_error(leader_only=replica_id != DEBUGGING_CONSUMER_ID)
        error = error or p.epoch_error(current_leader_epoch)
        if error is not None:
            return ListOffsetResult(error)
        try:
            return await self._path.run_in_io(
                partition_reads.offset_for_timestamp, p, timestamp, isolation_level
            )
        except KafkaStorageError as exc:
            self._path.storage_failed(p, exc)
            return ListOffsetResult(ErrorCode.kafka_storage_error)

    def end_offset_for_epoch(
        self,
        tp: TopicPartition,
        current_leader_epoch: int,
        leader_epoch: int,
        replica_id: int = CONSUMER_REPLICA_ID,
    ) -> tuple[ErrorCode, int, int]:
        """OffsetForLeaderEpoch: (error, the largest epoch <= ``leader_epoch``, its end offset).

        In memory only (the epoch cache), so it runs on the event loop.
        """
        p = self._path.partition(tp)
        if p is None:
            return ErrorCode.unknown_topic_or_partition, -1, -1
        error = p.state_error(leader_only=replica_id != DEBUGGING_CONSUMER_ID)
        error = error or p.epoch_error(current_leader_epoch)
        if error is not None:
            return error, -1, -1
        epoch, end = p.end_offset_for_epoch(leader_epoch)
        return ErrorCode.none, epoch, end

    async def delete_records(
        self, tp: TopicPartition, offset: int, timeout_ms: int = 30_000
    ) -> tuple[ErrorCode, int]:
        """DeleteRecords: moves the log start offset to ``offset`` (-1: the high watermark);
        returns (error, low watermark). The new log start is checkpointed before answering."""
        p = self._path.partition(tp)
        if p is None:
            return ErrorCode.unknown_topic_or_partition, -1
        error = p.state_error()
        if error is not None:
            return error, -1
        plog = p.log
        assert plog is not None
        if offset == -1:
            offset = plog.high_watermark
        if offset < 0 or offset > plog.high_watermark:
            return ErrorCode.offset_out_of_range, -1
        try:
            moved = await self._path.run_in_io(plog.maybe_increment_log_start_offset, offset)
        except storage_errors.OffsetOutOfRangeError:
            return ErrorCode.offset_out_of_range, -1
        except KafkaStorageError as exc:
            self._path.storage_failed(p, exc)
            return ErrorCode.kafka_storage_error, -1
        if moved:
            await self._checkpoint_log_start_offsets(timeout_ms)
        self._path.fetch_purgatory.check_and_complete(tp)
        return ErrorCode.none, plog.log_start_offset

    async def _checkpoint_log_start_offsets(self, timeout_ms: int) -> None:
        """Writes the checkpoints on the log manager's scheduler thread (which owns them, so
        two writers never race on the same temp file) and waits for it, within reason."""
        lm = self._log_manager
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def checkpoint() -> None:
            try:
                lm.checkpoint_all()
            finally:
                loop.call_soon_threadsafe(_set_done, done)

        try:
            lm.scheduler.schedule(checkpoint)
        except Exception:
            log.warning("could not schedule the log-start-offset checkpoint", exc_info=True)
            return
        try:
            async with asyncio.timeout(max(0.1, min(timeout_ms, 10_000) / 1000)):
                await asyncio.shield(done)
        except TimeoutError:
            log.warning("log-start-offset checkpoint is slow; answering DeleteRecords anyway")


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
