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

import base64
import dataclasses
import importlib
import uuid
from datetime import timedelta
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from logkeel.server.errors import ApiError
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey, response_schema
from logkeel.storage.topic_partition import TopicPartition, validate_topic_name

if TYPE_CHECKING:
    from logkeel.cluster.metadata import PartitionState, TopicState
    from logkeel.server.broker import Broker

__all__ = [
    "CLUSTER_OPERATIONS",
    "DESCRIBE_CLUSTER_VERSIONS",
    "INTERNAL_TOPICS",
    "METADATA_VERSIONS",
    "NO_THROTTLE",
    "TOPIC_OPERATIONS",
    "ZERO_UUID",
    "DescribeClusterApi",
    "MetadataApi",
    "build",
    "nested_types",
    "register",
    "topic_id_from_uuid",
    "topic_uuid",
]

METADATA_VERSIONS = (0, 13)
DESCRIBE_CLUSTER_VERSIONS = (0, 2)

NO_THROTTLE = i32Timedelta.parse(timedelta(0))
ZERO_UUID = uuid.UUID(int=0)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# Kafka's AclOperation codes; with no authorizer every supported operation is allowed, and the
# "authorized operations" fields carry them as a bit field (Kafka's Utils.to32BitField).
_READ, _WRITE, _CREATE, _DELETE, _ALTER, _DESCRIBE = 3, 4, 5, 6, 7, 8
_CLUSTER_ACTION, _DESCRIBE_CONFIGS, _ALTER_CONFIGS, _IDEMPOTENT_WRITE = 9, 10, 11, 12
TOPIC_OPERATIONS = sum(
    1 << op
    for op in (
        _READ,
        _WRITE,
        _CREATE,
        _DESCRIBE,
        _DELETE,
        _ALTER,
        _DESCRIBE_CONFIGS,
        _ALTER_CONFIGS,
    )
)
CLUSTER_OPERATIONS = sum(
    1 << op
    for op in (
        _CREATE,
        _CLUSTER_ACTION,
        _DESCRIBE_CONFIGS,
        _ALTER_CONFIGS,
        _IDEMPOTENT_WRITE,
        _ALTER,
        _DESCRIBE,
    )
)
_OPERATIONS_NOT_REQUESTED = -(2**31)  # the schema default: "not asked for"

# DescribeCluster endpoint types (KIP-919): the brokers, or the controllers.
_ENDPOINT_BROKERS = 1
_ENDPOINT_CONTROLLERS = 2


# -- helpers shared by the admin APIs ------------------------------------------------------------


def topic_uuid(topic_id: str) -> uuid.UUID:
    """A topic id in Kafka's base64 text form (what the metadata store keeps) as a UUID."""
    padded = topic_id + "=" * (-len(topic_id) % 4)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(padded))


def topic_id_from_uuid(value: uuid.UUID) -> str:
    """The inverse of ``topic_uuid``."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


@cache
def nested_types(api_key: int, api_version: int) -> ModuleType:
    """kio's response module of an API version, holding its nested entity classes."""
    response_type = response_schema(api_key, api_version)
    assert response_type is not None, "the registry only admits versions kio has"
    return importlib.import_module(response_type.__module__)


@cache
def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type[Any], **values: Any) -> Any:
    """``cls(**values)`` keeping only the fields this version of ``cls`` has.

    One code path can then serve every version: newer fields are simply dropped for older
    versions, and a field missing from ``values`` is a bug that kio reports at construction.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


# -- Metadata ------------------------------------------------------------------------------------


class MetadataApi:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        version = ctx.api_version
        types = nested_types(ApiKey.METADATA, version)
        broker = self._broker
        all_topics = request.topics is None or (version == 0 and not request.topics)
        topics: list[Any] = []
        if all_topics:
            for state in sorted(broker.metadata.topics().values(), key=lambda t: t.name):
                topics.append(self._topic(types, state, request))
        else:
            by_id: list[uuid.UUID] = []
            names: list[str] = []
            for entry in request.topics:
                topic_id = getattr(entry, "topic_id", None)
                has_id = topic_id is not None and topic_id != ZERO_UUID
                if version < 12 and (entry.name is None or has_id):
                    raise ApiError(
                        ErrorCode.invalid_request,
                        f"topic ids are not supported in Metadata v{version} requests",
                    )
                if has_id:
                    by_id.append(topic_id)
                elif entry.name is None:
                    raise ApiError(ErrorCode.invalid_request, "a topic needs a name or an id")
                else:
                    names.append(entry.name)
            auto_create = getattr(request, "allow_auto_topic_creation", True)
            for topic_id in dict.fromkeys(by_id):
                state = broker.metadata.topic_by_id(topic_id_from_uuid(topic_id))
                if state is None:
                    topics.append(self._missing(types, ErrorCode.unknown_topic_id, None, topic_id))
                else:
                    topics.append(self._topic(types, state, request))
            for name in dict.fromkeys(names):
                topics.append(await self._named_topic(types, name, auto_create, request))
        include_cluster_ops = getattr(request, "include_cluster_authorized_operations", False)
        return build(
            response_schema(ApiKey.METADATA, version),
            throttle_time=NO_THROTTLE,
            brokers=self._brokers(types),
            cluster_id=broker.cluster_id,
            controller_id=broker.metadata.controller_id,
            topics=tuple(topics),
            cluster_authorized_operations=(
                CLUSTER_OPERATIONS if include_cluster_ops else _OPERATIONS_NOT_REQUESTED
            ),
            error_code=ErrorCode.none,
        )

    def error_response(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        """Every requested topic carries ``code`` (Kafka's MetadataRequest.getErrorResponse)."""
        types = nested_types(ApiKey.METADATA, ctx.api_version)
        topics = tuple(
            self._missing(types, code, t.name, getattr(t, "topic_id", None) or ZERO_UUID)
            for t in (request.topics or ())
        )
        return build(
            response_schema(ApiKey.METADATA, ctx.api_version),
            throttle_time=NO_THROTTLE,
            brokers=(),
            cluster_id=self._broker.cluster_id,
            controller_id=-1,
            topics=topics,
            cluster_authorized_operations=_OPERATIONS_NOT_REQUESTED,
            error_code=ErrorCode.none,
        )

    async def _named_topic(
        self, types: ModuleType, name: str, auto_create: bool, request: Any
    ) -> Any:
        broker = self._broker
        state = broker.metadata.topic(name)
        if state is None and validate_topic_name(name) is not None:
            return self._missing(types, ErrorCode.invalid_topic_exception, name, ZERO_UUID)
        if state is None and auto_create:
            state = await broker.ensure_topic(name)
        if state is None:
            return self._missing(types, ErrorCode.unknown_topic_or_partition, name, ZERO_UUID)
        return self._topic(types, state, request)

    def _brokers(self, types: ModuleType) -> tuple[Any, ...]:
        broker = self._broker
        out = []
        for info in broker.metadata.brokers():
            host, port, rack = info.host, info.port, info.rack
            if info.node_id == broker.node_id:
                # The store was given the configured address; an ephemeral port (0) is only
                # known once the listener is bound.
                host, port = broker.advertised
                rack = broker.config.broker_rack
            out.append(
                build(
                    types.MetadataResponseBroker,
                    node_id=info.node_id,
                    host=host,
                    port=port,
                    rack=rack,
                )
            )
        return tuple(out)

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
            topic_authorized_operations=_OPERATIONS_NOT_REQUESTED,
        )

    def _topic(self, types: ModuleType, state: TopicState, request: Any) -> Any:
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
                TOPIC_OPERATIONS if include_ops else _OPERATIONS_NOT_REQUESTED
            ),
        )

    def _partition(self, types: ModuleType, p: PartitionState) -> Any:
        broker = self._broker
        offline = list(p.offline_replicas)
        leader = p.leader
        code = ErrorCode.none
        tp = TopicPartition(p.topic, p.partition)
        if tp in broker.log_manager.offline_partitions and broker.node_id not in offline:
            offline.append(broker.node_id)
        if leader in offline:
            leader = -1
        if leader < 0:
            code = ErrorCode.leader_not_available
        return build(
            types.MetadataResponsePartition,
            error_code=code,
            partition_index=p.partition,
            leader_id=leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=tuple(p.replicas),
            isr_nodes=tuple(r for r in p.isr if r not in offline),
            offline_replicas=tuple(offline),
        )


# -- DescribeCluster ------------------------------------------------------------------------------


class DescribeClusterApi:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
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

    def error_response(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        return self._response(ctx, code, None, request)

    def _response(
        self, ctx: RequestContext, code: ErrorCode, message: str | None, request: Any
    ) -> Any:
        broker = self._broker
        types = nested_types(ApiKey.DESCRIBE_CLUSTER, ctx.api_version)
        brokers: tuple[Any, ...] = ()
        if code == ErrorCode.none:
            entries = []
            for info in broker.metadata.brokers():
                host, port, rack = info.host, info.port, info.rack
                if info.node_id == broker.node_id:
                    host, port = broker.advertised
                    rack = broker.config.broker_rack
                entries.append(
                    build(
                        types.DescribeClusterBroker,
                        broker_id=info.node_id,
                        host=host,
                        port=port,
                        rack=rack,
                        is_fenced=False,
                    )
                )
            brokers = tuple(entries)
        include_ops = code == ErrorCode.none and getattr(
            request, "include_cluster_authorized_operations", False
        )
        return build(
            response_schema(ApiKey.DESCRIBE_CLUSTER, ctx.api_version),
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            endpoint_type=_ENDPOINT_BROKERS,
            cluster_id=broker.cluster_id if code == ErrorCode.none else "",
            controller_id=broker.metadata.controller_id if code == ErrorCode.none else -1,
            brokers=brokers,
            cluster_authorized_operations=(
                CLUSTER_OPERATIONS if include_ops else _OPERATIONS_NOT_REQUESTED
            ),
        )


def register(registry: HandlerRegistry, broker: Broker) -> None:
    metadata = MetadataApi(broker)
    registry.register(
        ApiKey.METADATA, *METADATA_VERSIONS, metadata.handle, error_response=metadata.error_response
    )
    cluster = DescribeClusterApi(broker)
    registry.register(
        ApiKey.DESCRIBE_CLUSTER,
        *DESCRIBE_CLUSTER_VERSIONS,
        cluster.handle,
        error_response=cluster.error_response,
    )
