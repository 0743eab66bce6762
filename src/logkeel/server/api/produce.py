"""Produce (API key 0), versions 3-13: record batches in, offsets out.

Versions: 3 is the first with RecordBatch v2 (the only format the log stores); 13 names topics
by id. acks=0 sends no response and, like Kafka, closes the connection when any partition
failed (the only way to tell such a producer to refresh its metadata); acks=1 answers after
the leader's append; acks=-1 waits in the produce purgatory until the high watermark covers
the records or ``timeout`` passes.

Validation in Kafka's order: acks, topic (name, internal, existence, auto-creation), partition,
leadership, then the records (exactly one v2 batch per partition from a client, CRC, size,
producer sequence and epoch; an idempotent retry gets the original offsets back).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import MetadataStore, TopicState, topic_id_text
from logkeel.records.batch import MAGIC_V2, BatchHeader, InvalidBatchError
from logkeel.records.walk import iter_headers
from logkeel.server.api.messages import ProduceRequest, ProduceResponse
from logkeel.server.api.responses import build, nested_types, node_endpoints, response
from logkeel.server.api.topic_refs import WRITE_PROTECTED_TOPICS
from logkeel.server.authorization import RequestAuthorizer, per_entry
from logkeel.server.errors import CloseConnection, error_name
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.quotas import ClientQuotas
from logkeel.server.replica.appends import Appends
from logkeel.server.replica.results import PartitionAppendResult
from logkeel.storage.topic_partition import TopicPartition, validate_topic_name

__all__ = ["MAX_VERSION", "MIN_VERSION", "ProduceApi", "register"]

log = logging.getLogger(__name__)

MIN_VERSION = 3
MAX_VERSION = 13
_TOPIC_IDS_FROM = 13
# Kafka lets its own admin client write to internal topics; nobody else.
_ADMIN_CLIENT_ID = "__admin_client"
# baseOffset (8) + batchLength (4) + partitionLeaderEpoch (4): the magic byte follows.
_MAGIC_OFFSET = 16
# magic (1) + crc (4) follow; then the int16 attributes, whose bit 4 marks a transaction.
_ATTRIBUTES_OFFSET = 21
_TRANSACTIONAL_FLAG = 0x10


# (transactional id, producer id, epoch, partition) -> NONE if the batch may be appended.
TxnVerifier = Callable[[str, int, int, TopicPartition], ErrorCode]


def _timestamp(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


class ProduceApi:
    def __init__(
        self,
        metadata: MetadataStore,
        appends: Appends,
        ensure_topic: Callable[[str], Awaitable[TopicState | None]],
        authorizer: RequestAuthorizer,
        verify_txn: TxnVerifier | None = None,
        quotas: ClientQuotas | None = None,
    ) -> None:
        self._quotas = quotas
        self._authorizer = authorizer
        self._metadata = metadata
        self._appends = appends
        self._ensure_topic = ensure_topic
        self._verify_txn = verify_txn

    def _txn_error(
        self, transactional_id: str | None, records: bytes, tp: TopicPartition
    ) -> tuple[ErrorCode, str | None]:
        """Transactional records come with their transactional id (Kafka's rule), from its
        current producer, for a partition added to its open transaction (KIP-890's
        verification): a stray batch would open a transaction nobody ends, holding back
        read_committed readers for good."""
        if transactional_id is None:
            return ErrorCode.invalid_record, "transactional records without a transactional id"
        header = _first_header(records)
        if header is None or self._verify_txn is None:
            return ErrorCode.none, None
        code = self._verify_txn(transactional_id, header.producer_id, header.producer_epoch, tp)
        return code, None if code == ErrorCode.none else f"{tp} is not in the transaction"

    async def handle(
        self, ctx: RequestContext, request: ProduceRequest
    ) -> ProduceResponse | None:  # None: acks=0, nothing is sent back
        version = ctx.api_version
        acks = int(request.acks)
        timeout_ms = round(request.timeout.total_seconds() * 1000)
        metadata = self._metadata
        # (topic key, partition index, tp or None, pre-append error or None, message)
        slots: list[tuple[Any, int, TopicPartition | None, ErrorCode | None, str | None]] = []
        entries: dict[TopicPartition, bytes] = {}
        order: list[Any] = []
        tid = request.transactional_id
        txn_denied = tid is not None and not self._authorizer.allowed(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid
        )
        for topic in request.topic_data:
            if hasattr(topic, "topic_id"):  # v13+
                key = topic.topic_id
                state = metadata.topic_by_id(topic_id_text(key)) if key is not None else None
                name = state.name if state is not None else None
                topic_error = (
                    ErrorCode.unknown_topic_id if name is None else self._denied(ctx, name)
                )
            else:
                key = name = str(topic.name)
                topic_error = await self._topic_error(ctx, name)
            if txn_denied:
                topic_error = ErrorCode.transactional_id_authorization_failed
            if key not in order:
                order.append(key)
            for pdata in topic.partition_data:
                index = int(pdata.index)
                if acks not in (-1, 0, 1):
                    slots.append((key, index, None, ErrorCode.invalid_required_acks, None))
                    continue
                if topic_error is not None or name is None:
                    slots.append((key, index, None, topic_error, None))
                    continue
                tp = TopicPartition(name, index)
                records = pdata.records
                problem = _check_records(records)
                if problem is not None or records is None:
                    slots.append((key, index, tp, ErrorCode.invalid_record, problem))
                    continue
                if _is_transactional(records):
                    code, why = self._txn_error(request.transactional_id, records, tp)
                    if code != ErrorCode.none:
                        slots.append((key, index, tp, code, why))
                        continue
                entries[tp] = records
                slots.append((key, index, tp, None, None))

        results: dict[TopicPartition, PartitionAppendResult] = {}
        if entries:
            results = await self._appends.append_to_partitions(
                entries, acks, timeout_ms, origin_is_client=True, on_submitted=ctx.release
            )

        if acks == 0:
            failed = [
                f"{key}-{index}: {error_name(err)}"
                for key, index, _, err, _ in slots
                if err is not None
            ] + [f"{tp}: {error_name(r.error)}" for tp, r in results.items() if r.error]
            if failed:
                raise CloseConnection("acks=0 produce failed for " + ", ".join(failed[:10]))
            if self._quotas is not None:
                # No response to tell the client: Kafka mutes the channel all the same.
                ctx.mute(self._quotas.produced(ctx, ctx.size))
            return None

        mod = nested_types(ApiKey.PRODUCE, version)
        by_topic: dict[Any, list[Any]] = {key: [] for key in order}
        leaders: set[int] = set()
        for key, index, slot_tp, err, message in slots:
            if err is not None:
                result = PartitionAppendResult(err, error_message=message)
            else:
                assert slot_tp is not None
                result = results[slot_tp]
            by_topic[key].append(self._partition_response(mod, index, result))
            if result.error == ErrorCode.not_leader_or_follower and result.leader_id >= 0:
                leaders.add(result.leader_id)
        topics = []
        for key, partitions in by_topic.items():
            if version >= _TOPIC_IDS_FROM:
                topics.append(
                    build(
                        mod.TopicProduceResponse,
                        topic_id=key,
                        partition_responses=tuple(partitions),
                    )
                )
            else:
                topics.append(
                    build(mod.TopicProduceResponse, name=key, partition_responses=tuple(partitions))
                )
        return response(
            ctx,
            throttle_ms=self._quotas.produced(ctx, ctx.size) if self._quotas else 0,
            responses=tuple(topics),
            node_endpoints=node_endpoints(mod, self._metadata.brokers(), leaders),
        )

    async def _topic_error(self, ctx: RequestContext, name: str) -> ErrorCode | None:
        if validate_topic_name(name) is not None:
            return ErrorCode.invalid_topic_exception
        if name in WRITE_PROTECTED_TOPICS and ctx.client_id != _ADMIN_CLIENT_ID:
            # By name, like Kafka: never auto-created as an ordinary topic by a producer.
            return ErrorCode.invalid_topic_exception
        if (denied := self._denied(ctx, name)) is not None:
            return denied
        state = self._metadata.topic(name)
        if state is None and self._authorizer.may_create_topic(ctx, name):
            state = await self._ensure_topic(name)
        if state is None:  # absent, and this client may not create it
            return ErrorCode.unknown_topic_or_partition
        if state.internal and ctx.client_id != _ADMIN_CLIENT_ID:
            return ErrorCode.invalid_topic_exception
        return None

    def _denied(self, ctx: RequestContext, name: str) -> ErrorCode | None:
        if self._authorizer.allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, name):
            return None
        return ErrorCode.topic_authorization_failed

    @staticmethod
    def _partition_response(mod: ModuleType, index: int, r: PartitionAppendResult) -> Any:
        values: dict[str, Any] = {
            "index": index,
            "error_code": r.error,
            "base_offset": r.base_offset,
            "log_append_time": _timestamp(r.log_append_time) if not r.error else None,
            "log_start_offset": r.log_start_offset,
            "record_errors": tuple(
                mod.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                for i, m in r.record_errors
            )
            if r.error and hasattr(mod, "BatchIndexAndErrorMessage")
            else (),
            "error_message": r.error_message if r.error else None,
        }
        if r.error == ErrorCode.not_leader_or_follower and r.leader_id >= 0:
            leader_type = getattr(mod, "LeaderIdAndEpoch", None)
            if leader_type is not None:
                values["current_leader"] = leader_type(
                    leader_id=r.leader_id, leader_epoch=r.leader_epoch
                )
        return build(mod.PartitionProduceResponse, **values)

    def error_response(
        self, ctx: RequestContext, request: ProduceRequest, code: ErrorCode
    ) -> ProduceResponse | None:
        """Every partition of the request answers ``code`` (Kafka's getErrorResponse)."""
        if int(request.acks) == 0:
            return None
        mod = nested_types(ApiKey.PRODUCE, ctx.api_version)
        topics = []
        for topic in request.topic_data:
            partitions = tuple(
                self._partition_response(mod, int(p.index), PartitionAppendResult(code))
                for p in topic.partition_data
            )
            if hasattr(topic, "topic_id"):
                topics.append(
                    build(
                        mod.TopicProduceResponse,
                        topic_id=topic.topic_id,
                        partition_responses=partitions,
                    )
                )
            else:
                topics.append(
                    build(mod.TopicProduceResponse, name=topic.name, partition_responses=partitions)
                )
        return response(ctx, responses=tuple(topics))


def _check_records(records: bytes | None) -> str | None:
    """Kafka's ProduceRequest rules for v3+: exactly one batch, magic v2. Deeper checks (CRC,
    structure, size) belong to the log, which answers CORRUPT_MESSAGE/MESSAGE_TOO_LARGE."""
    if records is None:
        return "the partition's records are null"
    if len(records) > _MAGIC_OFFSET and records[_MAGIC_OFFSET] != MAGIC_V2:
        return f"produce v3+ only carries magic v2 batches, got magic {records[_MAGIC_OFFSET]}"
    try:
        for count, _ in enumerate(iter_headers(records), 1):
            if count > 1:
                return "produce v3+ carries exactly one record batch per partition"
    except InvalidBatchError:
        return None  # malformed: the log reports CORRUPT_MESSAGE
    return None


def _first_header(records: bytes) -> BatchHeader | None:
    try:
        for _, header in iter_headers(records):
            return header
    except InvalidBatchError:
        pass  # malformed: the log reports CORRUPT_MESSAGE
    return None


def _is_transactional(records: bytes) -> bool:
    if len(records) < _ATTRIBUTES_OFFSET + 2:
        return False
    return bool(records[_ATTRIBUTES_OFFSET + 1] & _TRANSACTIONAL_FLAG)


def register(
    registry: HandlerRegistry,
    metadata: MetadataStore,
    appends: Appends,
    ensure_topic: Callable[[str], Awaitable[TopicState | None]],
    authorizer: RequestAuthorizer,
    verify_txn: TxnVerifier | None = None,
    quotas: ClientQuotas | None = None,
) -> ProduceApi:
    """``ensure_topic`` returns a topic, auto-created if the broker allows, or None."""
    api = ProduceApi(metadata, appends, ensure_topic, authorizer, verify_txn, quotas)
    registry.register(
        ApiKey.PRODUCE, MIN_VERSION, MAX_VERSION, api.handle,
        rule=per_entry(
            "WRITE on each topic (TOPIC_AUTHORIZATION_FAILED), an unknown one auto-created only "
            "with CREATE on the cluster or the topic; with a transactional id, WRITE on it "
            "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition)"
        ),
        error_response=api.error_response,
    )  # fmt: skip
    return api
