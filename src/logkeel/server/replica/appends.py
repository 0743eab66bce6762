"""Appends as leader, for produce requests, transaction markers and the coordinators' own
topics: refused up front when the partition cannot take them, written on the IO threads (one
trip per request), answered per partition with Kafka's error codes, and with ``acks=-1`` held
in the produce purgatory until the high watermark covers them.

Ordering: the network layer starts a connection's pipelined produce requests in order, each
after the one before has handed its appends to the IO threads (``on_submitted``); a partition's
``AppendTurns`` make the IO threads append them in that order. Appends from different
connections are ordered by the log's lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from kio.schema.errors import ErrorCode

from logkeel.records.batch import InvalidBatchError
from logkeel.server.errors import error_code_for
from logkeel.server.replica import isr_rules
from logkeel.server.replica.append_checks import AppendRejected
from logkeel.server.replica.data_path import DataPath
from logkeel.server.replica.delayed import DelayedProduce
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.results import PartitionAppendResult
from logkeel.storage import errors as storage_errors
from logkeel.storage.engine.log_results import AppendInfo
from logkeel.storage.engine.producer_state import (
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["Appends", "storage_error_code"]

log = logging.getLogger(__name__)

# Refusals of a client's records (not of the partition's state): logged like the log's own.
_REFUSED_RECORDS = frozenset(
    {
        ErrorCode.corrupt_message,
        ErrorCode.invalid_record,
        ErrorCode.invalid_timestamp,
        ErrorCode.message_too_large,
    }
)

# How long after refusing a producer's append as not the leader a sequence gap is taken for
# that refusal (`_append_result`): librdkafka sends the refused requests again within a
# second or two (its metadata refresh and retry backoff).
_GAP_AFTER_REFUSAL_S = 10.0

# Storage exceptions that are not in logkeel.server.errors' table (transactions).
_EXTRA_ERROR_CODES: dict[type[BaseException], ErrorCode] = {
    InvalidTxnStateError: ErrorCode.invalid_txn_state,
    TransactionCoordinatorFencedError: ErrorCode.transaction_coordinator_fenced,
}


def storage_error_code(exc: BaseException) -> ErrorCode:
    """Kafka's error code for an exception raised by a log operation."""
    for cls in type(exc).__mro__:
        code = _EXTRA_ERROR_CODES.get(cls)
        if code is not None:
            return code
    return error_code_for(exc)


class Appends:
    """Appends to partitions led here."""

    def __init__(self, path: DataPath, write_fence: Callable[[], str | None] | None) -> None:
        self._path = path
        # Why this broker may not take writes as a leader now (cut off from ZooKeeper).
        self._write_fence = write_fence

    async def append_records(
        self,
        tp: TopicPartition,
        records: bytes | bytearray | memoryview,
        acks: int = -1,
        timeout_ms: int = 30_000,
        origin_is_client: bool = True,
    ) -> PartitionAppendResult:
        """Appends ``records`` (one or more v2 batches) to ``tp`` as its leader."""
        results = await self.append_to_partitions({tp: records}, acks, timeout_ms, origin_is_client)
        return results[tp]

    async def append_to_partitions(
        self,
        entries: Mapping[TopicPartition, bytes | bytearray | memoryview],
        acks: int,
        timeout_ms: int,
        origin_is_client: bool = True,
        on_submitted: Callable[[], None] | None = None,
    ) -> dict[TopicPartition, PartitionAppendResult]:
        """Appends to several partitions in one trip to the IO threads; with ``acks=-1`` waits
        (up to ``timeout_ms``) until the high watermark covers every appended partition.

        ``on_submitted`` is called once the appends are handed over: later calls append to the
        same partitions after these."""
        results: dict[TopicPartition, PartitionAppendResult] = {}
        todo: list[tuple[Partition, bytes | bytearray | memoryview]] = []
        for tp, records in entries.items():
            p = self._path.partition(tp)
            refused = self._refuse_append(tp, p, acks)
            if refused is not None:
                results[tp] = refused
                if p is not None and refused.error == ErrorCode.not_leader_or_follower:
                    p.refused_not_leader_at = time.monotonic()
            else:
                assert p is not None  # a missing partition is refused
                todo.append((p, records))
        if todo:
            # One handoff per request, not per partition: the thread switch costs more than
            # a page-cache append, and appends to distinct partitions do not contend.
            turns = [p.append_turns.take() for p, _ in todo]
            pending: asyncio.Future[list[AppendInfo | BaseException]] | None
            try:
                pending = self._path.submit_io(self._append_all, todo, turns, origin_is_client)
            except RuntimeError:
                for (p, _), turn in zip(todo, turns, strict=True):
                    p.append_turns.done(turn)
                if not self._path.stopped:
                    raise
                # The IO threads are gone: shutting down. Clients retry elsewhere.
                pending = None
            if on_submitted is not None:
                on_submitted()
            if pending is not None:
                outcomes = await pending
            else:
                outcomes = [
                    AppendRejected(ErrorCode.not_leader_or_follower, "shutting down")
                ] * len(todo)
            for (p, _), outcome in zip(todo, outcomes, strict=True):
                results[p.tp] = self._append_result(p, outcome)
        results = {tp: results[tp] for tp in entries}
        if acks == -1 and any(r.error == ErrorCode.none for r in results.values()):
            op = DelayedProduce(self._path, timeout_ms, results)
            await self._path.produce_purgatory.wait(op, op.waiting)
            if op.expired:
                op.on_expired()
        return results

    def _refuse_append(
        self, tp: TopicPartition, p: Partition | None, acks: int
    ) -> PartitionAppendResult | None:
        """The answer for a partition that cannot take an append now, or None."""
        if p is None:
            return PartitionAppendResult(ErrorCode.unknown_topic_or_partition)
        error = p.state_error()
        if error is not None:
            return PartitionAppendResult(error, leader_id=p.leader_id, leader_epoch=p.leader_epoch)
        fenced = self._write_fence() if self._write_fence is not None else None
        if fenced is not None:
            return PartitionAppendResult(ErrorCode.not_leader_or_follower, error_message=fenced)
        if acks == -1 and isr_rules.check_min_insync(len(p.isr), p.settings.min_insync_replicas):
            return PartitionAppendResult(
                ErrorCode.not_enough_replicas,
                error_message=f"the ISR of {tp} has {len(p.isr)} replica(s), fewer than "
                "min.insync.replicas",
            )
        return None

    def _append_all(
        self,
        todo: list[tuple[Partition, bytes | bytearray | memoryview]],
        turns: list[int],
        origin_is_client: bool,
    ) -> list[AppendInfo | BaseException]:
        """IO thread: appends each partition's records in its turn; an exception is that
        partition's result."""
        outcomes: list[AppendInfo | BaseException] = []
        for (p, records), turn in zip(todo, turns, strict=True):
            try:
                p.append_turns.wait(turn)
                outcomes.append(p.append_as_leader(records, origin_is_client))
            except Exception as exc:  # noqa: BLE001 - mapped per partition by _append_result
                outcomes.append(exc)
            finally:
                p.append_turns.done(turn)
        return outcomes

    def _append_result(
        self, p: Partition, outcome: AppendInfo | BaseException
    ) -> PartitionAppendResult:
        tp = p.tp
        if isinstance(outcome, KafkaStorageError):
            log.error("append to %s failed: %s", tp, outcome)
            self._path.storage_failed(p, outcome)
            return PartitionAppendResult(ErrorCode.kafka_storage_error, error_message=str(outcome))
        if isinstance(outcome, AppendRejected):
            if outcome.code in _REFUSED_RECORDS:
                log.info(
                    "append to %s rejected with %s: %s", tp, outcome.code.name.upper(), outcome
                )
            return PartitionAppendResult(
                outcome.code, error_message=str(outcome), record_errors=outcome.record_errors
            )
        if isinstance(outcome, storage_errors.StorageError | InvalidBatchError):
            code = storage_error_code(outcome)
            if code == ErrorCode.unknown_server_error and isinstance(outcome, InvalidBatchError):
                code = ErrorCode.corrupt_message
            if code == ErrorCode.out_of_order_sequence_number and _refused_lately(p):
                # The gap is most likely the producer's requests this broker refused as not
                # yet the leader, pipelined ahead of this one: answered OUT_OF_ORDER, librdkafka
                # bumps its epoch and sends everything unacknowledged again, and what this
                # replica already held from the old leader was written twice (the history
                # checker saw it). Refused as not the leader, it is sent again after them, in
                # order. Kafka's brokers meet this less: they learn they lead before clients do.
                log.info("append to %s refused as NOT_LEADER_OR_FOLLOWER: %s, %.1fs after this "
                         "broker refused a send as not the leader", tp, outcome,
                         time.monotonic() - (p.refused_not_leader_at or 0))  # fmt: skip
                return PartitionAppendResult(
                    ErrorCode.not_leader_or_follower,
                    error_message=f"{outcome} (sends refused here as not the leader just before: "
                    "send them first)",
                )
            log.info("append to %s rejected with %s: %s", tp, code.name.upper(), outcome)
            return PartitionAppendResult(code, error_message=str(outcome))
        if isinstance(outcome, BaseException):
            log.error("append to %s failed", tp, exc_info=outcome)
            return PartitionAppendResult(ErrorCode.unknown_server_error, error_message=str(outcome))
        info = outcome
        if not info.duplicate:
            p.appended_bytes += info.valid_bytes
            self._path.fetch_purgatory.check_and_complete(tp)
            self._path.produce_purgatory.check_and_complete(tp)
        return PartitionAppendResult(
            ErrorCode.none,
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_append_time=info.log_append_time,
            log_start_offset=info.log_start_offset,
            duplicate=info.duplicate,
        )


def _refused_lately(p: Partition) -> bool:
    at = p.refused_not_leader_at
    return at is not None and time.monotonic() - at < _GAP_AFTER_REFUSAL_S
