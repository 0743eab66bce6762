"""ElectLeaders (43, v0-2; KIP-183/KIP-460): preferred and unclean leader elections asked by an
admin client (``kafka-leader-election.sh``, AdminClient.elect_leaders, ``logkeel elect``).

The election itself is the metadata store's: in a cluster the controller runs it on fresh
reports of the replicas' logs (an unclean one picks the highest (last leader epoch, log end
offset), never simply the first live replica) and the answer waits for its result; a single
node leads every partition alone, so nothing is ever needed. As Kafka, a request for every
partition (null) leaves out those where no election was needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import MetadataStore
from logkeel.cluster.partition_state import ElectionRequest
from logkeel.server.api.messages import ElectLeadersRequest, ElectLeadersResponse
from logkeel.server.api.responses import Endpoint, duration_ms, nested, register_family, response
from logkeel.server.authorization import ALTER_CLUSTER, gated
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["register"]

ELECTION_TYPES = {0: "preferred", 1: "unclean"}  # Kafka's ElectionType codes


class ElectionsApi:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    async def elect_leaders(
        self, ctx: RequestContext, request: ElectLeadersRequest
    ) -> ElectLeadersResponse:
        code = int(getattr(request, "election_type", 0))  # v0 has preferred elections only
        kind = ELECTION_TYPES.get(code)
        if kind is None:
            return self.error(ctx, request, ErrorCode.invalid_request)
        partitions = (
            None
            if request.topic_partitions is None
            else frozenset(
                TopicPartition(str(t.topic), int(p))
                for t in request.topic_partitions
                for p in t.partitions
            )
        )
        timeout_s = max(1.0, duration_ms(request.timeout) / 1000)
        results = await asyncio.to_thread(
            self._metadata.elect_leaders, ElectionRequest(kind, partitions), timeout_s
        )
        if partitions is None:
            results = {tp: r for tp, r in results.items() if r[0] != "ELECTION_NOT_NEEDED"}
        return self._answer(ctx, results, ErrorCode.none)

    def _answer(
        self,
        ctx: RequestContext,
        results: Mapping[TopicPartition, tuple[str | None, str | None]],
        code: ErrorCode,
    ) -> Any:
        partition_result = nested(ctx, "PartitionResult")
        by_topic: dict[str, list[Any]] = {}
        for tp, (error, why) in sorted(results.items()):
            by_topic.setdefault(tp.topic, []).append(
                partition_result(
                    partition_id=tp.partition,
                    error_code=ErrorCode.none if error is None else ErrorCode[error.lower()],
                    error_message=why,
                )
            )
        election_result = nested(ctx, "ReplicaElectionResult")
        return response(
            ctx,
            error_code=code,
            replica_election_results=tuple(
                election_result(topic=topic, partition_result=tuple(parts))
                for topic, parts in by_topic.items()
            ),
        )

    def error(
        self, ctx: RequestContext, request: ElectLeadersRequest, code: ErrorCode
    ) -> ElectLeadersResponse:
        """Every named partition answers ``code`` (v0 has no top-level error)."""
        named = {
            TopicPartition(str(t.topic), int(p)): (code.name.upper(), None)
            for t in request.topic_partitions or ()
            for p in t.partitions
        }
        return self._answer(ctx, named, code)


def register(registry: HandlerRegistry, metadata: MetadataStore) -> ElectionsApi:
    api = ElectionsApi(metadata)
    register_family(
        registry,
        {ApiKey.ELECT_LEADERS: Endpoint(0, 2, api.elect_leaders, api.error, gated(ALTER_CLUSTER))},
    )
    return api
