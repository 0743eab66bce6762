"""Metadata (v0-13) and DescribeCluster (v0-2): who the brokers are and where partitions live.

Partition state comes from the metadata store; a partition whose log is offline on this broker
(failed log dir, or a log that could not be loaded) is reported the way Kafka's controller
would after a single-replica partition lost its only replica: no leader
(LEADER_NOT_AVAILABLE, leader -1) and this broker in ``offline_replicas``. A client with stale
metadata that still sends it requests gets KAFKA_STORAGE_ERROR from the replica manager.

Unknown topics named in a request are auto-created when both the request
(``allow_auto_topic_creation``, v4+) and the broker (``auto.create.topics.enable``) allow it;
creation here is synchronous, so the first answer already carries the new topic (Kafka's would
say LEADER_NOT_AVAILABLE until the controller caught up). Illegal names get
INVALID_TOPIC_EXCEPTION, other unknown topics UNKNOWN_TOPIC_OR_PARTITION, unknown topic ids
(v12+) UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import (
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bit_field,
)
from logkeel.cluster.metadata import (
    INTERNAL_TOPICS,
    MetadataStore,
    PartitionState,
    TopicState,
    topic_id_text,
    topic_uuid,
)
from logkeel.config import BrokerConfig
from logkeel.server.api.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
)
from logkeel.server.api.responses import (
    OPERATIONS_NOT_REQUESTED,
    build,
    nested_types,
    response,
)
from logkeel.server.api.topic_refs import ZERO_UUID
from logkeel.server.authorization import RequestAuthorizer, anyone
from logkeel.server.errors import ApiError
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition, validate_topic_name

__all__ = [
    "CLUSTER_OPERATIONS",
    "DESCRIBE_CLUSTER_VERSIONS",
    "METADATA_VERSIONS",
    "TOPIC_OPERATIONS",
    "ClusterView",
    "DescribeClusterApi",
    "MetadataApi",
    "PartitionView",
    "partition_view",
    "register",
]

METADATA_VERSIONS = (0, 13)
DESCRIBE_CLUSTER_VERSIONS = (0, 2)


# With no authorizer every supported operation is allowed; the "authorized operations" fields
# carry them as Kafka's bit field.
TOPIC_OPERATIONS = operations_bit_field(SUPPORTED_OPERATIONS[ResourceType.TOPIC])
CLUSTER_OPERATIONS = operations_bit_field(SUPPORTED_OPERATIONS[ResourceType.CLUSTER])

# DescribeCluster endpoint types (KIP-919): the brokers, or the controllers.
_ENDPOINT_BROKERS = 1
_ENDPOINT_CONTROLLERS = 2


_DENIED = ErrorCode.topic_authorization_failed

# Kafka serves both to anyone: clients bootstrap with them. What they reveal beyond the brokers
# and the cluster id is checked per topic / against the cluster.
_METADATA_RULE = anyone(
    "the brokers and the cluster id, which every client bootstraps from",
    (
        "a topic only with DESCRIBE on it (named: TOPIC_AUTHORIZATION_FAILED, listing all: "
        "hidden); auto-created only with CREATE on the cluster or the topic (else "
        "TOPIC_AUTHORIZATION_FAILED); authorized operations from the principal's ACLs"
    ),
)
_DESCRIBE_CLUSTER_RULE = anyone(
    "the brokers and the cluster id, as Metadata",
    "authorized operations only with DESCRIBE on the cluster (else 0)",
)


class ClusterView(Protocol):
    """What Metadata and DescribeCluster use: this broker's identity and address, the metadata
    store, which partitions are offline here, and topic auto-creation."""

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    def advertised_for(self, listener_name: str) -> tuple[str, int]: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def metadata(self) -> MetadataStore: ...

    @property
    def log_manager(self) -> LogManager: ...

    def ensure_topic(self, name: str) -> Awaitable[TopicState | None]: ...

    @property
    def authorizer(self) -> RequestAuthorizer: ...


def cluster_operations(authorizer: RequestAuthorizer, ctx: RequestContext) -> int:
    """The cluster's "authorized operations" of Metadata and DescribeCluster: 0 without
    DESCRIBE on the cluster, as in Kafka, else the operations the principal has there."""
    if not authorizer.allowed(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return 0
    return authorizer.authorized_operations(ctx, ResourceType.CLUSTER)


def _endpoints(
    cluster: ClusterView, listener: str, *, advertised: bool = True
) -> list[tuple[int, str, int, str | None]]:
    """(node id, host, port, rack) of every broker, at its endpoint of the listener the
    client came in on (its TLS or SASL port, as Kafka does). This broker answers with its own
    (an ephemeral port (0) is only known once bound); a broker that registered one address
    only (a single node's store) is shown there. ``advertised`` (Metadata): a broker just gone
    is listed while it is still shown as a leader (`MetadataStore.advertised_brokers`); not
    to DescribeCluster, which admin tools ask for the live brokers."""
    out = []
    store = cluster.metadata
    for info in store.advertised_brokers() if advertised else store.brokers():
        if info.node_id == cluster.node_id:
            host, port = cluster.advertised_for(listener)
            out.append((info.node_id, host, port, cluster.config.broker_rack))
        else:
            host, port = info.endpoint(listener) or (info.host, info.port)
            out.append((info.node_id, host, port, info.rack))
    return out


# -- Metadata ------------------------------------------------------------------------------------


class MetadataApi:
    def __init__(self, broker: ClusterView) -> None:
        self._broker = broker

    async def handle(self, ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
        version = ctx.api_version
        types = nested_types(ApiKey.METADATA, version)
        broker = self._broker
        all_topics = request.topics is None or (version == 0 and not request.topics)
        topics: list[Any] = []
        state: TopicState | None
        if all_topics:
            for state in sorted(broker.metadata.topics().values(), key=lambda t: t.name):
                if self._describable(ctx, state.name):  # the others are hidden, as in Kafka
                    topics.append(self._topic(ctx, types, state, request))
        else:
            by_id: list[uuid.UUID] = []
            names: list[str] = []
            for entry in request.topics or ():
                topic_id = getattr(entry, "topic_id", None)
                has_id = topic_id is not None and topic_id != ZERO_UUID
                if version < 12 and (entry.name is None or has_id):
                    raise ApiError(
                        ErrorCode.invalid_request,
                        f"topic ids are not supported in Metadata v{version} requests",
                    )
                if has_id and topic_id is not None:
                    by_id.append(topic_id)
                elif entry.name is None:
                    raise ApiError(ErrorCode.invalid_request, "a topic needs a name or an id")
                else:
                    names.append(entry.name)
            auto_create = getattr(request, "allow_auto_topic_creation", True)
            for topic_id in dict.fromkeys(by_id):
                state = broker.metadata.topic_by_id(topic_id_text(topic_id))
                if state is None:
                    topics.append(self._missing(types, ErrorCode.unknown_topic_id, None, topic_id))
                elif not self._describable(ctx, state.name):
                    topics.append(self._missing(types, _DENIED, None, topic_id))
                else:
                    topics.append(self._topic(ctx, types, state, request))
            for name in dict.fromkeys(names):
                topics.append(await self._named_topic(ctx, types, name, auto_create, request))
        include_cluster_ops = getattr(request, "include_cluster_authorized_operations", False)
        return response(
            ctx,
            brokers=self._brokers(types, ctx.listener),
            cluster_id=broker.cluster_id,
            controller_id=broker.metadata.controller_id,
            topics=tuple(topics),
            cluster_authorized_operations=(
                cluster_operations(broker.authorizer, ctx)
                if include_cluster_ops
                else OPERATIONS_NOT_REQUESTED
            ),
            error_code=ErrorCode.none,
        )

    def error_response(
        self, ctx: RequestContext, request: MetadataRequest, code: ErrorCode
    ) -> MetadataResponse:
        """Every requested topic carries ``code`` (Kafka's MetadataRequest.getErrorResponse)."""
        types = nested_types(ApiKey.METADATA, ctx.api_version)
        # A null name (refused in v10-11 requests, where the response's name is not nullable)
        # is answered as an empty one: the error response must not fail on what was wrong.
        name_nullable = ctx.api_version >= 12
        topics = tuple(
            self._missing(
                types,
                code,
                t.name if t.name is not None or name_nullable else "",
                getattr(t, "topic_id", None) or ZERO_UUID,
            )
            for t in (request.topics or ())
        )
        return response(
            ctx,
            brokers=(),
            cluster_id=self._broker.cluster_id,
            controller_id=-1,
            topics=topics,
            cluster_authorized_operations=OPERATIONS_NOT_REQUESTED,
            error_code=ErrorCode.none,
        )

    def _describable(self, ctx: RequestContext, name: str) -> bool:
        return self._broker.authorizer.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    async def _named_topic(
        self,
        ctx: RequestContext,
        types: ModuleType,
        name: str,
        auto_create: bool,
        request: MetadataRequest,
    ) -> Any:
        broker = self._broker
        if not self._describable(ctx, name):
            return self._missing(types, _DENIED, name, ZERO_UUID)
        state = broker.metadata.topic(name)
        if state is None and validate_topic_name(name) is not None:
            return self._missing(types, ErrorCode.invalid_topic_exception, name, ZERO_UUID)
        if state is None and auto_create and broker.config.auto_create_topics_enable:
            # Kafka: a topic the principal may see but not create is refused, not "unknown".
            if not broker.authorizer.may_create_topic(ctx, name):
                return self._missing(types, _DENIED, name, ZERO_UUID)
            state = await broker.ensure_topic(name)
        if state is None:
            return self._missing(types, ErrorCode.unknown_topic_or_partition, name, ZERO_UUID)
        return self._topic(ctx, types, state, request)

    def _brokers(self, types: ModuleType, listener: str) -> tuple[Any, ...]:
        return tuple(
            build(types.MetadataResponseBroker, node_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in _endpoints(self._broker, listener)
        )

    def _missing(
        self, types: ModuleType, code: ErrorCode, name: str | None, topic_id: uuid.UUID | None
    ) -> Any:
        return build(
            types.MetadataResponseTopic,
            error_code=code,
            name=name,
            topic_id=topic_id or ZERO_UUID,
            is_internal=name in INTERNAL_TOPICS,
            partitions=(),
            topic_authorized_operations=OPERATIONS_NOT_REQUESTED,
        )

    def _topic(
        self, ctx: RequestContext, types: ModuleType, state: TopicState, request: MetadataRequest
    ) -> Any:
        include_ops = getattr(request, "include_topic_authorized_operations", False)
        return build(
            types.MetadataResponseTopic,
            error_code=ErrorCode.none,
            name=state.name,
            topic_id=topic_uuid(state.topic_id),
            is_internal=state.internal,
            partitions=tuple(
                self._partition(types, p)
                for _, p in sorted(state.partitions.items(), key=lambda item: item[0])
            ),
            topic_authorized_operations=(
                self._broker.authorizer.authorized_operations(ctx, ResourceType.TOPIC, state.name)
                if include_ops
                else OPERATIONS_NOT_REQUESTED
            ),
        )

    def _partition(self, types: ModuleType, p: PartitionState) -> Any:
        view = partition_view(self._broker, p)
        return build(
            types.MetadataResponsePartition,
            error_code=view.error_code,
            partition_index=p.partition,
            leader_id=view.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=tuple(p.replicas),
            isr_nodes=view.isr,
            offline_replicas=view.offline,
        )


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition as Metadata and DescribeTopicPartitions show it: with this broker's own
    offline logs counted, an offline leader is no leader (LEADER_NOT_AVAILABLE)."""

    error_code: ErrorCode
    leader: int
    isr: tuple[int, ...]
    offline: tuple[int, ...]


def partition_view(broker: ClusterView, p: PartitionState) -> PartitionView:
    offline = list(p.offline_replicas)
    tp = TopicPartition(p.topic, p.partition)
    if tp in broker.log_manager.offline_partitions and broker.node_id not in offline:
        offline.append(broker.node_id)
    leader = -1 if p.leader in offline else p.leader
    code = ErrorCode.leader_not_available if leader < 0 else ErrorCode.none
    isr = tuple(r for r in p.isr if r not in offline)
    return PartitionView(code, leader, isr, tuple(offline))


# -- DescribeCluster ------------------------------------------------------------------------------


class DescribeClusterApi:
    def __init__(self, broker: ClusterView) -> None:
        self._broker = broker

    async def handle(
        self, ctx: RequestContext, request: DescribeClusterRequest
    ) -> DescribeClusterResponse:
        endpoint_type = getattr(request, "endpoint_type", _ENDPOINT_BROKERS)
        if endpoint_type == _ENDPOINT_CONTROLLERS:
            # A broker describes brokers; controllers are asked directly (KIP-919).
            return self._response(
                ctx,
                ErrorCode.mismatched_endpoint_type,
                "The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
                "of type CONTROLLER",
                request,
            )
        if endpoint_type != _ENDPOINT_BROKERS:
            return self._response(
                ctx,
                ErrorCode.unsupported_endpoint_type,
                f"Unsupported endpoint type {endpoint_type}",
                request,
            )
        return self._response(ctx, ErrorCode.none, None, request)

    def error_response(
        self, ctx: RequestContext, request: DescribeClusterRequest, code: ErrorCode
    ) -> DescribeClusterResponse:
        return self._response(ctx, code, None, request)

    def _response(
        self,
        ctx: RequestContext,
        code: ErrorCode,
        message: str | None,
        request: DescribeClusterRequest,
    ) -> DescribeClusterResponse:
        broker = self._broker
        types = nested_types(ApiKey.DESCRIBE_CLUSTER, ctx.api_version)
        brokers: tuple[Any, ...] = ()
        if code == ErrorCode.none:
            brokers = tuple(
                build(
                    types.DescribeClusterBroker,
                    broker_id=node_id,
                    host=host,
                    port=port,
                    rack=rack,
                    is_fenced=False,
                )
                for node_id, host, port, rack in _endpoints(broker, ctx.listener, advertised=False)
            )
        include_ops = code == ErrorCode.none and getattr(
            request, "include_cluster_authorized_operations", False
        )
        return response(
            ctx,
            error_code=code,
            error_message=message,
            endpoint_type=_ENDPOINT_BROKERS,
            cluster_id=broker.cluster_id if code == ErrorCode.none else "",
            controller_id=broker.metadata.controller_id if code == ErrorCode.none else -1,
            brokers=brokers,
            cluster_authorized_operations=(
                cluster_operations(broker.authorizer, ctx)
                if include_ops
                else OPERATIONS_NOT_REQUESTED
            ),
        )


def register(registry: HandlerRegistry, broker: ClusterView) -> None:
    metadata = MetadataApi(broker)
    registry.register(
        ApiKey.METADATA,
        *METADATA_VERSIONS,
        metadata.handle,
        rule=_METADATA_RULE,
        error_response=metadata.error_response,
    )
    cluster = DescribeClusterApi(broker)
    registry.register(
        ApiKey.DESCRIBE_CLUSTER,
        *DESCRIBE_CLUSTER_VERSIONS,
        cluster.handle,
        rule=_DESCRIBE_CLUSTER_RULE,
        error_response=cluster.error_response,
    )
