"""Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26) and
TxnOffsetCommit (28), versions 0-3 (the per-producer versions clients send; the batched
broker-to-broker AddPartitionsToTxn v4+ and the epoch-bumping EndTxn v5 of KIP-890 are not
served). The transactional InitProducerId is in ``producer_id``.

Clients older than KIP-588 do not know PRODUCER_FENCED: they get INVALID_PRODUCER_EPOCH, as
Kafka answers them.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import MetadataStore
from logkeel.server.api.commit_offsets import commit_offsets_of
from logkeel.server.api.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from logkeel.server.api.responses import Endpoint, nested, register_family, response
from logkeel.server.authorization import READ_GROUP, WRITE_TXN, RequestAuthorizer, gated
from logkeel.server.group.coordinator import GroupCoordinator
from logkeel.server.group.records import OFFSETS_TOPIC
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.txn.coordinator import TransactionCoordinator
from logkeel.server.txn.state import TxnError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["TransactionsApi", "register", "visible_code"]

# The first version of each API that may answer PRODUCER_FENCED (KIP-588).
_FENCED_SINCE = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}


def visible_code(ctx: RequestContext, code: ErrorCode) -> ErrorCode:
    """``code`` as the client's version of the API knows it."""
    if code == ErrorCode.producer_fenced and ctx.api_version < _FENCED_SINCE.get(
        ApiKey(ctx.api_key), 0
    ):
        return ErrorCode.invalid_producer_epoch
    return code


class TransactionsApi:
    def __init__(
        self,
        metadata: MetadataStore,
        txn_coordinator: TransactionCoordinator,
        group_coordinator: GroupCoordinator,
        authorizer: RequestAuthorizer | None = None,
    ) -> None:
        self._metadata = metadata
        self._txns = txn_coordinator
        self._groups = group_coordinator
        self._authorizer = authorizer

    def _partition_exists(self, topic: str, partition: int) -> bool:
        state = self._metadata.topic(topic)
        return state is not None and 0 <= partition < len(state.partitions)

    # -- AddPartitionsToTxn -------------------------------------------------------------------

    async def add_partitions(
        self, ctx: RequestContext, request: AddPartitionsToTxnRequest
    ) -> AddPartitionsToTxnResponse:
        wanted = [(str(t.name), int(p)) for t in request.v3_and_below_topics for p in t.partitions]
        # Kafka's checks: WRITE on each topic (the transactional id is the gate's).
        refused = {
            tp: ErrorCode.topic_authorization_failed
            for tp in wanted
            if self._authorizer is not None
            and not self._authorizer.allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, tp[0])
        }
        for tp in wanted:
            if tp not in refused and not self._partition_exists(*tp):
                refused[tp] = ErrorCode.unknown_topic_or_partition
        if refused:
            # Nothing is added when one partition is refused or unknown.
            codes = {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
            return self._add_partitions_response(ctx, codes)
        try:
            await self._txns.add_partitions(
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                wanted,
            )
            code = ErrorCode.none
        except TxnError as exc:
            code = visible_code(ctx, exc.code)
        return self._add_partitions_response(ctx, dict.fromkeys(wanted, code))

    def _add_partitions_response(
        self, ctx: RequestContext, codes: dict[tuple[str, int], ErrorCode]
    ) -> Any:
        topic_type = nested(ctx, "AddPartitionsToTxnTopicResult")
        partition_type = nested(ctx, "AddPartitionsToTxnPartitionResult")
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), code in codes.items():
            by_topic.setdefault(topic, []).append(
                partition_type(partition_index=partition, partition_error_code=code)
            )
        return response(
            ctx,
            results_by_topic_v3_and_below=tuple(
                topic_type(name=t, results_by_partition=tuple(ps)) for t, ps in by_topic.items()
            ),
        )

    def add_partitions_error(
        self, ctx: RequestContext, request: AddPartitionsToTxnRequest, code: ErrorCode
    ) -> AddPartitionsToTxnResponse:
        return self._add_partitions_response(
            ctx,
            {(t.name, int(p)): code for t in request.v3_and_below_topics for p in t.partitions},
        )

    # -- AddOffsetsToTxn, EndTxn ----------------------------------------------------------------

    async def add_offsets(
        self, ctx: RequestContext, request: AddOffsetsToTxnRequest
    ) -> AddOffsetsToTxnResponse:
        code = await self._groups.ensure_offsets_topic()
        if code == ErrorCode.none:
            try:
                await self._txns.add_offsets(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    request.group_id,
                )
            except TxnError as exc:
                code = visible_code(ctx, exc.code)
        return response(ctx, error_code=code)

    async def end_txn(self, ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
        try:
            await self._txns.end_txn(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
            )
            code = ErrorCode.none
        except TxnError as exc:
            code = visible_code(ctx, exc.code)
        return response(ctx, error_code=code)

    def simple_error(
        self, ctx: RequestContext, request: AddOffsetsToTxnRequest | EndTxnRequest, code: ErrorCode
    ) -> AddOffsetsToTxnResponse | EndTxnResponse:
        return response(ctx, error_code=code)

    # -- TxnOffsetCommit -----------------------------------------------------------------------

    async def txn_offset_commit(
        self, ctx: RequestContext, request: TxnOffsetCommitRequest
    ) -> TxnOffsetCommitResponse:
        offsets, errors = commit_offsets_of(
            request.topics, self._partition_exists,
            lambda topic: self._authorizer is None
            or self._authorizer.allowed(ctx, AclOperation.READ, ResourceType.TOPIC, topic),
        )  # fmt: skip
        code = self._verify_offsets_partition(request)
        if code != ErrorCode.none:
            for o in offsets:
                errors[(o.topic, o.partition)] = visible_code(ctx, code)
            return self._txn_offset_commit_response(ctx, errors)
        code, per_partition = await self._groups.txn_commit_offsets(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            int(getattr(request, "generation_id", -1)),
            getattr(request, "member_id", ""),
            getattr(request, "group_instance_id", None),
            offsets,
        )
        for o in offsets:
            tp = (o.topic, o.partition)
            errors[tp] = visible_code(
                ctx, code if code != ErrorCode.none else per_partition.get(tp, ErrorCode.none)
            )
        return self._txn_offset_commit_response(ctx, errors)

    def _verify_offsets_partition(self, request: TxnOffsetCommitRequest) -> ErrorCode:
        """The group's ``__consumer_offsets`` partition must be in the producer's open
        transaction (AddOffsetsToTxn came first), or the offsets would stay pending for ever:
        no marker would ever reach that partition (e.g. a fenced zombie's late commit)."""
        partition = self._groups.partition_for(request.group_id)
        if partition is None:
            return ErrorCode.invalid_txn_state
        code = self._txns.verify_partition(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            TopicPartition(OFFSETS_TOPIC, partition),
        )
        return ErrorCode.producer_fenced if code == ErrorCode.invalid_producer_epoch else code

    def _txn_offset_commit_response(
        self, ctx: RequestContext, errors: dict[tuple[str, int], ErrorCode]
    ) -> Any:
        topic_type = nested(ctx, "TxnOffsetCommitResponseTopic")
        partition_type = nested(ctx, "TxnOffsetCommitResponsePartition")
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), code in errors.items():
            by_topic.setdefault(topic, []).append(
                partition_type(partition_index=partition, error_code=code)
            )
        return response(
            ctx,
            topics=tuple(topic_type(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )

    def txn_offset_commit_error(
        self, ctx: RequestContext, request: TxnOffsetCommitRequest, code: ErrorCode
    ) -> TxnOffsetCommitResponse:
        return self._txn_offset_commit_response(
            ctx,
            {(t.name, int(p.partition_index)): code for t in request.topics for p in t.partitions},
        )


def register(
    registry: HandlerRegistry,
    metadata: MetadataStore,
    txn_coordinator: TransactionCoordinator,
    group_coordinator: GroupCoordinator,
    authorizer: RequestAuthorizer | None = None,
) -> TransactionsApi:
    api = TransactionsApi(metadata, txn_coordinator, group_coordinator, authorizer)
    register_family(
        registry,
        {
            ApiKey.ADD_PARTITIONS_TO_TXN: Endpoint(
                0,
                3,
                api.add_partitions,
                api.add_partitions_error,
                gated(WRITE_TXN, per_entry="WRITE on each topic (TOPIC_AUTHORIZATION_FAILED)"),
            ),
            ApiKey.ADD_OFFSETS_TO_TXN: Endpoint(
                0, 3, api.add_offsets, api.simple_error, gated(WRITE_TXN, READ_GROUP)
            ),
            ApiKey.END_TXN: Endpoint(0, 3, api.end_txn, api.simple_error, gated(WRITE_TXN)),
            ApiKey.TXN_OFFSET_COMMIT: Endpoint(
                0,
                3,
                api.txn_offset_commit,
                api.txn_offset_commit_error,
                gated(
                    WRITE_TXN,
                    READ_GROUP,
                    per_entry="READ on each topic (TOPIC_AUTHORIZATION_FAILED)",
                ),
            ),
        },
    )
    return api
