"""Offset lookups and log-start moves: ListOffsets, OffsetForLeaderEpoch, DeleteRecords.

- ListOffsets (key 2) v1-11: earliest (-2), latest (-1), max timestamp (-3), earliest local
  (-4, the same as earliest without tiered storage), latest tiered / earliest pending upload
  (-5/-6: "no offset", as Kafka answers without tiered storage), or the first offset whose
  timestamp is at least the one given. Consumers see offsets up to the high watermark
  (READ_UNCOMMITTED) or the last stable offset (READ_COMMITTED); followers up to the log end.
- OffsetForLeaderEpoch (key 23) v2-4: the end offset of a leader epoch from the partition's
  leader-epoch cache (followers truncate with it; consumers detect truncation, KIP-320).
- DeleteRecords (key 21) v0-2: moves the log start offset (-1: to the high watermark); the new
  start is written to the log-start-offset checkpoint before the answer.

Authorization, Kafka's: ListOffsets needs DESCRIBE on each topic, DeleteRecords DELETE
(TOPIC_AUTHORIZATION_FAILED for that topic's partitions); OffsetForLeaderEpoch from a follower
CLUSTER_ACTION on the cluster (the whole request fails), from a consumer DESCRIBE on each topic.
"""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import INTERNAL_TOPICS
from logkeel.server.api.messages import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from logkeel.server.api.responses import build, nested_types, response
from logkeel.server.authorization import RequestAuthorizer, per_entry
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.replica.offset_queries import OffsetQueries
from logkeel.server.replica.results import READ_UNCOMMITTED, ListOffsetResult
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["DeleteRecordsApi", "ListOffsetsApi", "OffsetForLeaderEpochApi", "register"]

_DENIED = ErrorCode.topic_authorization_failed


class _PartitionOffsetsApi:
    """The three APIs answer from the replica manager, one partition at a time."""

    MIN_VERSION: int
    MAX_VERSION: int
    RULE: str  # the per-partition checks, in words

    def __init__(self, offsets: OffsetQueries, authorizer: RequestAuthorizer) -> None:
        self._offsets = offsets
        self._authorizer = authorizer

    def _may(self, ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
        return self._authorizer.allowed(ctx, operation, ResourceType.TOPIC, topic)


class ListOffsetsApi(_PartitionOffsetsApi):
    MIN_VERSION = 1
    MAX_VERSION = 11
    RULE = "DESCRIBE on each topic (TOPIC_AUTHORIZATION_FAILED)"

    async def handle(self, ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
        mod = nested_types(ApiKey.LIST_OFFSETS, ctx.api_version)
        replica_id = int(request.replica_id)
        # Followers (replica id >= 0) read to the log end: no isolation level applies.
        isolation: int | None = (
            None if replica_id >= 0 else int(getattr(request, "isolation_level", READ_UNCOMMITTED))
        )
        queries = self._offsets

        async def one(topic: str, part: Any) -> Any:
            if not self._may(ctx, AclOperation.DESCRIBE, topic):
                return self._partition(mod, int(part.partition_index), ListOffsetResult(_DENIED))
            result = await queries.offset_for_timestamp(
                TopicPartition(topic, int(part.partition_index)),
                int(part.timestamp),
                isolation_level=isolation,
                current_leader_epoch=int(getattr(part, "current_leader_epoch", -1)),
                replica_id=replica_id,
            )
            return self._partition(mod, int(part.partition_index), result)

        topics = []
        for topic in request.topics:
            name = str(topic.name)
            partitions = await asyncio.gather(*(one(name, p) for p in topic.partitions))
            topics.append(
                mod.ListOffsetsTopicResponse(name=topic.name, partitions=tuple(partitions))
            )
        return response(ctx, topics=tuple(topics))

    @staticmethod
    def _partition(mod: ModuleType, index: int, r: ListOffsetResult) -> Any:
        return build(
            mod.ListOffsetsPartitionResponse,
            partition_index=index,
            error_code=r.error,
            timestamp=r.timestamp,
            offset=r.offset,
            leader_epoch=r.leader_epoch,
        )

    def error_response(
        self, ctx: RequestContext, request: ListOffsetsRequest, code: ErrorCode
    ) -> ListOffsetsResponse:
        mod = nested_types(ApiKey.LIST_OFFSETS, ctx.api_version)
        topics = tuple(
            mod.ListOffsetsTopicResponse(
                name=t.name,
                partitions=tuple(
                    self._partition(mod, int(p.partition_index), ListOffsetResult(code))
                    for p in t.partitions
                ),
            )
            for t in request.topics
        )
        return response(ctx, topics=topics)


class OffsetForLeaderEpochApi(_PartitionOffsetsApi):
    MIN_VERSION = 2
    MAX_VERSION = 4
    RULE = (
        "a client: DESCRIBE on each topic (TOPIC_AUTHORIZATION_FAILED); a follower (replica id "
        ">= 0): CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED)"
    )

    async def handle(
        self, ctx: RequestContext, request: OffsetForLeaderEpochRequest
    ) -> OffsetForLeaderEpochResponse:
        mod = nested_types(ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
        replica_id = int(getattr(request, "replica_id", -1))
        if replica_id >= 0 and not self._authorizer.allowed(
            ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER
        ):
            return self.error_response(ctx, request, ErrorCode.cluster_authorization_failed)
        queries = self._offsets
        topics = []
        for topic in request.topics:
            partitions = []
            described = replica_id >= 0 or self._may(ctx, AclOperation.DESCRIBE, str(topic.topic))
            for p in topic.partitions:
                if not described:
                    partitions.append(
                        mod.EpochEndOffset(
                            error_code=_DENIED,
                            partition=p.partition,
                            leader_epoch=-1,
                            end_offset=-1,
                        )  # fmt: skip
                    )
                    continue
                error, epoch, end = queries.end_offset_for_epoch(
                    TopicPartition(str(topic.topic), int(p.partition)),
                    int(p.current_leader_epoch),
                    int(p.leader_epoch),
                    replica_id,
                )
                partitions.append(
                    mod.EpochEndOffset(
                        error_code=error,
                        partition=p.partition,
                        leader_epoch=epoch,
                        end_offset=end,
                    )
                )
            topics.append(
                mod.OffsetForLeaderTopicResult(topic=topic.topic, partitions=tuple(partitions))
            )
        return response(ctx, topics=tuple(topics))

    def error_response(
        self, ctx: RequestContext, request: OffsetForLeaderEpochRequest, code: ErrorCode
    ) -> OffsetForLeaderEpochResponse:
        mod = nested_types(ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
        topics = tuple(
            mod.OffsetForLeaderTopicResult(
                topic=t.topic,
                partitions=tuple(
                    mod.EpochEndOffset(
                        error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        )
        return response(ctx, topics=topics)


class DeleteRecordsApi(_PartitionOffsetsApi):
    MIN_VERSION = 0
    MAX_VERSION = 2
    RULE = "DELETE on each topic (TOPIC_AUTHORIZATION_FAILED)"

    async def handle(
        self, ctx: RequestContext, request: DeleteRecordsRequest
    ) -> DeleteRecordsResponse:
        mod = nested_types(ApiKey.DELETE_RECORDS, ctx.api_version)
        timeout_ms = round(request.timeout.total_seconds() * 1000)
        queries = self._offsets

        async def one(topic: str, p: Any) -> Any:
            if not self._may(ctx, AclOperation.DELETE, topic):
                error, low = _DENIED, -1
            elif topic in INTERNAL_TOPICS:
                # Kafka's ReplicaManager: "Cannot delete records of internal topic".
                error, low = ErrorCode.invalid_topic_exception, -1
            else:
                error, low = await queries.delete_records(
                    TopicPartition(topic, int(p.partition_index)), int(p.offset), timeout_ms
                )
            return mod.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=low, error_code=error
            )

        topics = []
        for topic in request.topics:
            partitions = await asyncio.gather(*(one(str(topic.name), p) for p in topic.partitions))
            topics.append(
                mod.DeleteRecordsTopicResult(name=topic.name, partitions=tuple(partitions))
            )
        return response(ctx, topics=tuple(topics))

    def error_response(
        self, ctx: RequestContext, request: DeleteRecordsRequest, code: ErrorCode
    ) -> DeleteRecordsResponse:
        mod = nested_types(ApiKey.DELETE_RECORDS, ctx.api_version)
        topics = tuple(
            mod.DeleteRecordsTopicResult(
                name=t.name,
                partitions=tuple(
                    mod.DeleteRecordsPartitionResult(
                        partition_index=p.partition_index, low_watermark=-1, error_code=code
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        )
        return response(ctx, topics=topics)


def register(
    registry: HandlerRegistry, offsets: OffsetQueries, authorizer: RequestAuthorizer
) -> None:
    for api_key, api in (
        (ApiKey.LIST_OFFSETS, ListOffsetsApi(offsets, authorizer)),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, OffsetForLeaderEpochApi(offsets, authorizer)),
        (ApiKey.DELETE_RECORDS, DeleteRecordsApi(offsets, authorizer)),
    ):
        registry.register(
            api_key,
            api.MIN_VERSION,
            api.MAX_VERSION,
            api.handle,
            rule=per_entry(api.RULE),
            error_response=api.error_response,
        )
