"""DescribeProducers (61, v0): the idempotent and transactional producers a partition leader
knows (its producer state), for ``kafka-transactions.sh describe-producers`` and the admin
clients' ``describeProducers``. Each partition needs READ on its topic
(TOPIC_AUTHORIZATION_FAILED); one this broker does not lead answers NOT_LEADER_OR_FOLLOWER, one
of no known topic UNKNOWN_TOPIC_OR_PARTITION, an offline one KAFKA_STORAGE_ERROR, as Kafka's
replica manager does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import MetadataStore
from logkeel.server.api.messages import DescribeProducersRequest, DescribeProducersResponse
from logkeel.server.api.responses import nested, response
from logkeel.server.authorization import RequestAuthorizer, per_entry
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.replica.partition import Partition
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ActiveProducer", "DescribeProducersApi", "active_producers", "register"]

_RULE = per_entry("READ on each partition's topic (TOPIC_AUTHORIZATION_FAILED)")


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction


def active_producers(p: Partition) -> list[ActiveProducer] | None:
    """The partition's producer state, read under its log's lock (on the IO threads); None if
    its log is gone."""
    plog = p.log
    if plog is None:
        return None
    with plog.lock:
        entries = list(plog.producer_state.active_producers.values())
        return [
            ActiveProducer(
                e.producer_id,
                e.producer_epoch,
                e.last_seq,
                e.last_timestamp,
                e.coordinator_epoch,
                -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
            )
            for e in entries
        ]


class Replicas(Protocol):
    def partition(self, tp: TopicPartition) -> Partition | None: ...

    async def run_in_io(self, fn: Any, *args: Any) -> Any: ...


class DescribeProducersApi:
    def __init__(
        self, replicas: Replicas, metadata: MetadataStore, authorizer: RequestAuthorizer
    ) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._authorizer = authorizer

    async def handle(
        self, ctx: RequestContext, request: DescribeProducersRequest
    ) -> DescribeProducersResponse:
        topics = []
        for topic in request.topics:
            readable = self._authorizer.allowed(
                ctx, AclOperation.READ, ResourceType.TOPIC, topic.name
            )
            partitions = []
            for index in topic.partition_indexes:
                if not readable:
                    partitions.append(
                        self._partition(ctx, index, ErrorCode.topic_authorization_failed)
                    )
                else:
                    partitions.append(await self._describe(ctx, TopicPartition(topic.name, index)))
            topics.append(
                nested(ctx, "TopicResponse")(name=topic.name, partitions=tuple(partitions))
            )
        return response(ctx, topics=tuple(topics))

    async def _describe(self, ctx: RequestContext, tp: TopicPartition) -> Any:
        p = self._replicas.partition(tp)
        if p is None:
            state = self._metadata.topic(tp.topic)
            known = state is not None and tp.partition in state.partitions
            code = (
                ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition
            )
            return self._partition(ctx, tp.partition, code)
        if (refused := p.state_error()) is not None:
            return self._partition(ctx, tp.partition, refused)
        found = await self._replicas.run_in_io(active_producers, p)
        if found is None:
            return self._partition(ctx, tp.partition, ErrorCode.not_leader_or_follower)
        state_type = nested(ctx, "ProducerState")
        producers = tuple(
            state_type(
                producer_id=a.producer_id,
                producer_epoch=a.producer_epoch,
                last_sequence=a.last_sequence,
                last_timestamp=a.last_timestamp,
                coordinator_epoch=a.coordinator_epoch,
                current_txn_start_offset=a.current_txn_start_offset,
            )
            for a in sorted(found, key=lambda a: a.producer_id)
        )
        return self._partition(ctx, tp.partition, ErrorCode.none, producers)

    @staticmethod
    def _partition(
        ctx: RequestContext, index: int, code: ErrorCode, producers: tuple[Any, ...] = ()
    ) -> Any:
        return nested(ctx, "PartitionResponse")(
            partition_index=index, error_code=code, error_message=None, active_producers=producers
        )

    def error_response(
        self, ctx: RequestContext, request: DescribeProducersRequest, code: ErrorCode
    ) -> DescribeProducersResponse:
        return response(
            ctx,
            topics=tuple(
                nested(ctx, "TopicResponse")(
                    name=t.name,
                    partitions=tuple(self._partition(ctx, i, code) for i in t.partition_indexes),
                )
                for t in request.topics
            ),
        )


def register(
    registry: HandlerRegistry,
    replicas: Replicas,
    metadata: MetadataStore,
    authorizer: RequestAuthorizer,
) -> DescribeProducersApi:
    api = DescribeProducersApi(replicas, metadata, authorizer)
    registry.register(
        ApiKey.DESCRIBE_PRODUCERS, 0, 0, api.handle, rule=_RULE, error_response=api.error_response
    )
    return api
