"""DescribeTopicPartitions (75, v0): Metadata's topics, a page at a time (KIP-966).

Topics are answered in name order, from the request's ``cursor`` (topic name and first
partition) on, until ``response_partition_limit`` partitions (at most
``max.request.partition.size.limit``, at least 1) are in the answer; ``next_cursor`` then names
where the next page starts. An empty topic list means every topic the principal may describe
(the others hidden); a named topic the principal may not describe gets
TOPIC_AUTHORIZATION_FAILED, an unknown one UNKNOWN_TOPIC_OR_PARTITION. A cursor naming a topic
that is not in a non-empty request is INVALID_REQUEST, as in Kafka.

KIP-966's eligible leader replicas need the controller's ELR election, which logkeel does not
have: ``eligible_leader_replicas`` and ``last_known_elr`` are always empty, which is what a
Kafka controller without ``eligible.leader.replicas.enable`` reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import INTERNAL_TOPICS, TopicState, topic_uuid
from logkeel.server.api.messages import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from logkeel.server.api.metadata import ClusterView, partition_view
from logkeel.server.api.responses import nested, response
from logkeel.server.api.topic_refs import ZERO_UUID
from logkeel.server.authorization import per_entry
from logkeel.server.errors import ApiError
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey

__all__ = ["DescribeTopicPartitionsApi", "Page", "paginate", "register"]

VERSIONS = (0, 0)

_RULE = per_entry(
    "DESCRIBE on each topic (named: TOPIC_AUTHORIZATION_FAILED, listing all: hidden); "
    "authorized operations from the principal's ACLs"
)


@dataclass(frozen=True, slots=True)
class Page:
    """One answer's share: (topic, first partition, end partition) slices, and where the next
    page starts (None: this is the last)."""

    slices: tuple[tuple[str, int, int], ...]
    next_cursor: tuple[str, int] | None


def paginate(
    partition_counts: list[tuple[str, int]], start: tuple[str, int] | None, limit: int
) -> Page:
    """Kafka's paging over ``partition_counts`` ((topic, partitions), in name order): from
    ``start`` (topic, partition) on, at most ``limit`` partitions. A topic with no partitions
    left to give (or none at all) still gets its entry while room remains."""
    slices: list[tuple[str, int, int]] = []
    room = limit
    for i, (name, count) in enumerate(partition_counts):
        if start is not None and name < start[0]:
            continue
        first = start[1] if start is not None and name == start[0] else 0
        first = min(max(first, 0), count)  # a cursor past the last partition: none left
        if room <= 0:
            return Page(tuple(slices), (name, first))
        end = min(count, first + room)
        slices.append((name, first, end))
        room -= end - first
        if end < count:
            return Page(tuple(slices), (name, end))
        if room <= 0 and i + 1 < len(partition_counts):
            return Page(tuple(slices), (partition_counts[i + 1][0], 0))
    return Page(tuple(slices), None)


class DescribeTopicPartitionsApi:
    def __init__(self, broker: ClusterView) -> None:
        self._broker = broker

    async def handle(
        self, ctx: RequestContext, request: DescribeTopicPartitionsRequest
    ) -> DescribeTopicPartitionsResponse:
        broker = self._broker
        authorizer = broker.authorizer
        named = [t.name for t in request.topics]
        fetch_all = not named
        cursor = request.cursor
        if cursor is not None and not fetch_all and cursor.topic_name not in named:
            raise ApiError(
                ErrorCode.invalid_request,
                f"the cursor's topic {cursor.topic_name} is not among the requested topics",
            )
        start = None if cursor is None else (str(cursor.topic_name), int(cursor.partition_index))
        limit = max(
            min(
                broker.config.max_request_partition_size_limit,
                int(request.response_partition_limit),
            ),
            1,
        )
        topics = broker.metadata.topics()
        errors: list[Any] = []
        known: dict[str, TopicState] = {}
        names = sorted(topics) if fetch_all else sorted(set(named))
        for name in names:
            if start is not None and name < start[0]:
                continue
            if not authorizer.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                if not fetch_all:
                    errors.append(self._failed(ctx, name, ErrorCode.topic_authorization_failed))
                continue
            state = topics.get(name)
            if state is None:
                errors.append(self._failed(ctx, name, ErrorCode.unknown_topic_or_partition))
            else:
                known[name] = state
        page = paginate([(n, len(s.partitions)) for n, s in known.items()], start, limit)
        described = [self._topic(ctx, known[name], first, end) for name, first, end in page.slices]
        next_cursor = None
        if page.next_cursor is not None:
            next_cursor = nested(ctx, "Cursor")(
                topic_name=page.next_cursor[0], partition_index=page.next_cursor[1]
            )
        return response(ctx, topics=tuple(described + errors), next_cursor=next_cursor)

    def error_response(
        self, ctx: RequestContext, request: DescribeTopicPartitionsRequest, code: ErrorCode
    ) -> DescribeTopicPartitionsResponse:
        return response(
            ctx,
            topics=tuple(self._failed(ctx, t.name, code) for t in request.topics),
            next_cursor=None,
        )

    @staticmethod
    def _failed(ctx: RequestContext, name: str, code: ErrorCode) -> Any:
        return nested(ctx, "DescribeTopicPartitionsResponseTopic")(
            error_code=code,
            name=name,
            topic_id=ZERO_UUID,
            is_internal=name in INTERNAL_TOPICS,
            partitions=(),
        )

    def _topic(self, ctx: RequestContext, state: TopicState, first: int, end: int) -> Any:
        partition_type = nested(ctx, "DescribeTopicPartitionsResponsePartition")
        partitions = []
        for index in range(first, end):
            p = state.partitions.get(index)
            if p is None:
                continue
            view = partition_view(self._broker, p)
            partitions.append(
                partition_type(
                    error_code=view.error_code,
                    partition_index=index,
                    leader_id=view.leader,
                    leader_epoch=p.leader_epoch,
                    replica_nodes=tuple(p.replicas),
                    isr_nodes=view.isr,
                    eligible_leader_replicas=(),
                    last_known_elr=(),
                    offline_replicas=view.offline,
                )
            )
        return nested(ctx, "DescribeTopicPartitionsResponseTopic")(
            error_code=ErrorCode.none,
            name=state.name,
            topic_id=topic_uuid(state.topic_id),
            is_internal=state.internal,
            partitions=tuple(partitions),
            topic_authorized_operations=self._broker.authorizer.authorized_operations(
                ctx, ResourceType.TOPIC, state.name
            ),
        )


def register(registry: HandlerRegistry, broker: ClusterView) -> DescribeTopicPartitionsApi:
    api = DescribeTopicPartitionsApi(broker)
    registry.register(
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
        *VERSIONS,
        api.handle,
        rule=_RULE,
        error_response=api.error_response,
    )
    return api
