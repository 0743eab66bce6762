"""AlterPartitionReassignments (45, v0) and ListPartitionReassignments (46, v0) of KIP-455:
moving a partition's replicas online (``kafka-reassign-partitions``, AdminClient, ``logkeel
reassign``), ALTER and DESCRIBE on the CLUSTER as Kafka.

The move is the metadata store's: in a cluster the controller applies the request (the answer
says the move started, as Kafka's) and completes it once the new replicas are in sync; the
list comes from the assignments every broker watches. v1's allow_replication_factor_change is
not offered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import MetadataStore
from logkeel.server.api.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from logkeel.server.api.responses import Endpoint, duration_ms, nested, register_family, response
from logkeel.server.authorization import ALTER_CLUSTER, DESCRIBE_CLUSTER, gated
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["register"]


class ReassignmentsApi:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    async def alter(
        self, ctx: RequestContext, request: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        targets: dict[TopicPartition, tuple[int, ...] | None] = {}
        for t in request.topics:
            for p in t.partitions:
                replicas = None if p.replicas is None else tuple(int(r) for r in p.replicas)
                targets[TopicPartition(str(t.name), int(p.partition_index))] = replicas
        timeout_s = max(1.0, duration_ms(request.timeout) / 1000)
        results = await asyncio.to_thread(self._metadata.alter_reassignments, targets, timeout_s)
        return self._altered(ctx, results, ErrorCode.none)

    def alter_error(
        self, ctx: RequestContext, request: AlterPartitionReassignmentsRequest, code: ErrorCode
    ) -> AlterPartitionReassignmentsResponse:
        named = {
            TopicPartition(str(t.name), int(p.partition_index)): (code.name.upper(), None)
            for t in request.topics
            for p in t.partitions
        }
        return self._altered(ctx, named, code)

    def _altered(
        self,
        ctx: RequestContext,
        results: Mapping[TopicPartition, tuple[str | None, str | None]],
        code: ErrorCode,
    ) -> Any:
        partition = nested(ctx, "ReassignablePartitionResponse")
        topic = nested(ctx, "ReassignableTopicResponse")
        by_topic: dict[str, list[Any]] = {}
        for tp, (error, why) in sorted(results.items()):
            by_topic.setdefault(tp.topic, []).append(
                partition(
                    partition_index=tp.partition,
                    error_code=ErrorCode.none if error is None else ErrorCode[error.lower()],
                    error_message=why,
                )
            )
        return response(
            ctx,
            error_code=code,
            error_message=None,
            responses=tuple(topic(name=n, partitions=tuple(ps)) for n, ps in by_topic.items()),
        )

    async def list(
        self, ctx: RequestContext, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        moving = self._metadata.reassignments()
        if request.topics is not None:
            wanted = {
                TopicPartition(str(t.name), int(p)) for t in request.topics
                for p in t.partition_indexes
            }  # fmt: skip
            moving = {tp: m for tp, m in moving.items() if tp in wanted}
        ongoing = nested(ctx, "OngoingPartitionReassignment")
        topic = nested(ctx, "OngoingTopicReassignment")
        by_topic: dict[str, list[Any]] = {}
        for tp, (replicas, adding, removing) in sorted(moving.items()):
            by_topic.setdefault(tp.topic, []).append(
                ongoing(
                    partition_index=tp.partition,
                    replicas=replicas,
                    adding_replicas=adding,
                    removing_replicas=removing,
                )  # fmt: skip
            )
        return response(
            ctx,
            error_code=ErrorCode.none,
            error_message=None,
            topics=tuple(topic(name=n, partitions=tuple(ps)) for n, ps in by_topic.items()),
        )

    def list_error(
        self, ctx: RequestContext, request: ListPartitionReassignmentsRequest, code: ErrorCode
    ) -> ListPartitionReassignmentsResponse:
        return response(ctx, error_code=code, error_message=None, topics=())


def register(registry: HandlerRegistry, metadata: MetadataStore) -> ReassignmentsApi:
    api = ReassignmentsApi(metadata)
    register_family(
        registry,
        {
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: Endpoint(
                0, 0, api.alter, api.alter_error, gated(ALTER_CLUSTER)
            ),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: Endpoint(
                0, 0, api.list, api.list_error, gated(DESCRIBE_CLUSTER)
            ),
        },
    )
    return api
