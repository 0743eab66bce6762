"""WriteTxnMarkers (27), version 1 (the oldest kio has): the broker side of a transaction coordinator on another
broker asking this partition leader to write the COMMIT or ABORT markers of a transaction
(``TxnMarkers.write_local``, the path of the coordinator's own partitions)."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.api.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from logkeel.server.api.responses import Endpoint, nested, register_family, response
from logkeel.server.authorization import CLUSTER_ACTION, gated
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.txn.markers import Marker, TxnMarkers
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["register"]


class WriteTxnMarkersApi:
    def __init__(self, markers: TxnMarkers) -> None:
        self._markers = markers

    async def write_txn_markers(
        self, ctx: RequestContext, request: WriteTxnMarkersRequest
    ) -> WriteTxnMarkersResponse:
        results = []
        for m in request.markers:
            marker = Marker(
                int(m.producer_id),
                int(m.producer_epoch),
                int(m.coordinator_epoch),
                m.transaction_result,
            )
            tps = [TopicPartition(t.name, int(p)) for t in m.topics for p in t.partition_indexes]
            errors = await self._markers.write_local(marker, tps, time.time_ns() // 1_000_000)
            results.append(self._marker_result(ctx, int(m.producer_id), errors))
        return response(ctx, markers=tuple(results))

    def _marker_result(
        self, ctx: RequestContext, producer_id: int, errors: dict[TopicPartition, ErrorCode]
    ) -> Any:
        by_topic: dict[str, list[Any]] = defaultdict(list)
        partition_result = nested(ctx, "WritableTxnMarkerPartitionResult")
        for tp, code in errors.items():
            by_topic[tp.topic].append(
                partition_result(partition_index=tp.partition, error_code=code)
            )
        topic_result = nested(ctx, "WritableTxnMarkerTopicResult")
        return nested(ctx, "WritableTxnMarkerResult")(
            producer_id=producer_id,
            topics=tuple(topic_result(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )

    def error(
        self, ctx: RequestContext, request: WriteTxnMarkersRequest, code: ErrorCode
    ) -> WriteTxnMarkersResponse:
        """Every partition of every marker carries ``code``, under its marker's producer id."""
        return response(
            ctx,
            markers=tuple(
                self._marker_result(
                    ctx,
                    int(m.producer_id),
                    {
                        TopicPartition(t.name, int(p)): code
                        for t in m.topics
                        for p in t.partition_indexes
                    },
                )
                for m in request.markers
            ),
        )


def register(registry: HandlerRegistry, markers: TxnMarkers) -> WriteTxnMarkersApi:
    api = WriteTxnMarkersApi(markers)
    register_family(
        registry,
        {
            ApiKey.WRITE_TXN_MARKERS: Endpoint(
                1, 1, api.write_txn_markers, api.error, gated(CLUSTER_ACTION)
            )
        },
    )
    return api
