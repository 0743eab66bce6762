"""Transaction markers: the COMMIT or ABORT control batch of a transaction, written to each of
its partitions by that partition's leader.

The coordinator's side (``TxnMarkers.write``) appends the markers of the partitions this broker
leads itself and sends WriteTxnMarkers (v1) to the leaders of the others, one inter-broker
connection per broker; the answer is an error code per partition, and the coordinator retries
the ones that failed (NOT_LEADER_OR_FOLLOWER after an election, a broker that is down). The
broker's side of WriteTxnMarkers is ``write_local``, the same path as the coordinator's own
partitions: the marker is appended as leader, then ``on_completed`` lets the group coordinator
make the transaction's offsets visible (commit) or drop them (abort).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.static.primitive import i16, i32

from logkeel.cluster.metadata import MetadataStore
from logkeel.records.builder import build_control_batch
from logkeel.records.control import ControlRecordType
from logkeel.server.network.client import BrokerClient, BrokerConnectionError
from logkeel.server.network.inter_broker import InterBroker
from logkeel.server.replica.appends import Appends
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["Marker", "TxnCompleted", "TxnMarkers"]

log = logging.getLogger(__name__)

MARKER_TIMEOUT_MS = 30_000
_MAX_RESPONSE_BYTES = 1 << 20

TxnCompleted = Callable[[int, list[TopicPartition], bool], None]


@dataclass(frozen=True, slots=True)
class Marker:
    """One transaction's outcome, as written to its partitions."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool


class TxnMarkers:
    def __init__(
        self,
        node_id: int,
        metadata: MetadataStore,
        appends: Appends,
        on_completed: TxnCompleted,
        inter_broker: InterBroker | None = None,
    ) -> None:
        self._node_id = node_id
        self._inter_broker = inter_broker or InterBroker()
        self._metadata = metadata
        self._appends = appends
        self._on_completed = on_completed
        self._clients: dict[int, BrokerClient] = {}

    async def write_local(
        self, marker: Marker, partitions: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, ErrorCode]:
        """Appends the marker to ``partitions`` as their leader here (WriteTxnMarkers' side).

        A marker needs a producer id and epoch (a transactional batch without one is not a
        batch Kafka writes): a request naming none gets INVALID_REQUEST for each partition."""
        if marker.producer_id < 0 or marker.producer_epoch < 0:
            return dict.fromkeys(partitions, ErrorCode.invalid_request)
        batch = build_control_batch(
            ControlRecordType.COMMIT if marker.committed else ControlRecordType.ABORT,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            timestamp=timestamp_ms,
        )
        results = await self._appends.append_to_partitions(
            dict.fromkeys(partitions, batch), -1, MARKER_TIMEOUT_MS, origin_is_client=False
        )
        written = [tp for tp, r in results.items() if r.error == ErrorCode.none]
        if written:
            self._on_completed(marker.producer_id, written, marker.committed)
        return {tp: r.error for tp, r in results.items()}

    async def write(
        self, marker: Marker, partitions: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, ErrorCode]:
        """Writes the marker to each partition's leader: an error code per partition."""
        errors: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in partitions:
            state = self._metadata.partition(tp)
            if state is None:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif state.leader < 0:
                errors[tp] = ErrorCode.leader_not_available
            else:
                by_leader[state.leader].append(tp)
        sends = [
            self.write_local(marker, tps, timestamp_ms)
            if leader == self._node_id
            else self._send(leader, marker, tps)
            for leader, tps in by_leader.items()
        ]
        for result in await asyncio.gather(*sends):
            errors.update(result)
        return errors

    async def _send(
        self, leader: int, marker: Marker, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        client = self._client(leader)
        if client is None:
            return dict.fromkeys(partitions, ErrorCode.leader_not_available)
        topics: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            topics[tp.topic].append(tp.partition)
        request = WriteTxnMarkersRequest(
            markers=(
                WritableTxnMarker(
                    producer_id=ProducerId(marker.producer_id),
                    producer_epoch=i16(marker.producer_epoch),
                    transaction_result=marker.committed,
                    topics=tuple(
                        WritableTxnMarkerTopic(
                            name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps)
                        )
                        for t, ps in topics.items()
                    ),
                    coordinator_epoch=i32(marker.coordinator_epoch),
                ),
            )
        )
        try:
            response = await client.send(request)
        except BrokerConnectionError as exc:
            log.warning("WriteTxnMarkers to broker %d: %s", leader, exc)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        errors = dict.fromkeys(partitions, ErrorCode.unknown_server_error)
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    errors[TopicPartition(topic.name, p.partition_index)] = p.error_code
        return errors

    def _client(self, node_id: int) -> BrokerClient | None:
        client = self._clients.get(node_id)
        if client is not None:
            return client
        for b in self._metadata.brokers():
            if b.node_id == node_id:
                client = self._clients[node_id] = self._inter_broker.client(
                    b,
                    client_id=f"logkeel-txn-markers-{self._node_id}",
                    request_timeout_ms=MARKER_TIMEOUT_MS + 5000,
                    max_response_bytes=_MAX_RESPONSE_BYTES,
                )
                return client
        return None

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
