"""Topic admin APIs: CreateTopics (v2-7), DeleteTopics (v1-6), CreatePartitions (v0-3).

Topic changes go through the metadata store, whose listeners (the replica manager) create and
delete the partition logs; the store persists them, so topics survive restarts. Every per-topic
failure is reported in its own entry with Kafka's error code and a message, as Kafka's
controller reports them: INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG (every bad key is named),
UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, INVALID_REQUEST for malformed requests
(duplicates, null values) and TOPIC_DELETION_DISABLED. The broker's own topics are refused
(``topic_refs``): INVALID_REQUEST to create one, TOPIC_AUTHORIZATION_FAILED to delete or resize
one.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import (
    MetadataError,
    MetadataStore,
    TopicState,
    topic_id_text,
    topic_uuid,
)
from logkeel.config import BrokerConfig, TopicConfig
from logkeel.server.api.config_changes import validate_topic_configs
from logkeel.server.api.config_synonyms import topic_source
from logkeel.server.api.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from logkeel.server.api.responses import (
    Endpoint,
    EntryError,
    build,
    nested_types,
    register_family,
    response,
)
from logkeel.server.api.topic_refs import (
    ZERO_UUID,
    check_topic_name,
    entry_error_for,
    refuse_internal_change,
    refuse_internal_creation,
)
from logkeel.server.authorization import RequestAuthorizer, per_entry
from logkeel.server.errors import ApiError
from logkeel.server.handlers import ErrorResponder, Handler, HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey

__all__ = ["TOPIC_ADMIN_VERSIONS", "TopicAdmin", "TopicsApi", "register"]

log = logging.getLogger(__name__)

TOPIC_ADMIN_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_PARTITIONS: (0, 3),
}

# Kafka's controller refuses to create more partitions than this in one request
# (ReplicationControlManager's MAX_PARTITIONS_PER_BATCH), so a typo cannot create a million logs.
MAX_PARTITIONS_PER_REQUEST = 10_000


_DENIED = ErrorCode.topic_authorization_failed


class TopicAdmin(Protocol):
    """What the topic admin APIs use: the broker's configs and its metadata store."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def metadata(self) -> MetadataStore: ...

    @property
    def authorizer(self) -> RequestAuthorizer: ...


class TopicsApi:
    """CreateTopics, DeleteTopics and CreatePartitions."""

    def __init__(self, broker: TopicAdmin) -> None:
        self._broker = broker

    def _require(self, ctx: RequestContext, operation: AclOperation, topic: str) -> None:
        if not self._broker.authorizer.allowed(ctx, operation, ResourceType.TOPIC, topic):
            raise EntryError(_DENIED, "Authorization failed.")

    # CreateTopics ------------------------------------------------------------------------------

    async def create_topics(
        self, ctx: RequestContext, request: CreateTopicsRequest
    ) -> CreateTopicsResponse:
        types = nested_types(ApiKey.CREATE_TOPICS, ctx.api_version)
        counts = Counter(t.name for t in request.topics)
        results = []
        for topic in request.topics:
            if counts[topic.name] > 1:
                results.append(
                    self._created(
                        types,
                        topic.name,
                        None,
                        EntryError(ErrorCode.invalid_request, "Duplicate topic name."),
                    )
                )
                continue
            try:
                if not self._broker.authorizer.may_create_topic(ctx, topic.name):
                    raise EntryError(_DENIED, "Authorization failed.")
                state = await self._create_topic(topic, request.validate_only)
            except EntryError as exc:
                log.info("CreateTopics %s: %s", topic.name, exc)
                results.append(self._created(types, topic.name, None, exc))
            else:
                results.append(self._created(types, topic.name, state, None))
        return response(
            ctx,
            topics=tuple(results),
        )

    def create_topics_error(
        self, ctx: RequestContext, request: CreateTopicsRequest, code: ErrorCode
    ) -> CreateTopicsResponse:
        types = nested_types(ApiKey.CREATE_TOPICS, ctx.api_version)
        return response(
            ctx,
            topics=tuple(
                self._created(types, t.name, None, EntryError(code)) for t in request.topics
            ),
        )

    async def _create_topic(self, topic: Any, validate_only: bool) -> TopicState:
        broker = self._broker
        name = topic.name
        check_topic_name(name)
        refuse_internal_creation(name)
        if broker.metadata.topic(name) is not None:
            raise EntryError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        partitions, replication = self._layout(topic)
        overrides = self._creation_configs(topic.configs)
        try:
            return await asyncio.to_thread(
                broker.metadata.create_topic,
                name,
                partitions,
                replication,
                overrides,
                validate_only=validate_only,
                assignment=(
                    {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
                    if topic.assignments
                    else None
                ),
            )
        except MetadataError as exc:
            raise entry_error_for(exc) from None

    def _layout(self, topic: Any) -> tuple[int, int]:
        """(partitions, replication factor) from the counts or the manual assignment."""
        config = self._broker.config
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise EntryError(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            indexes = sorted(a.partition_index for a in topic.assignments)
            if indexes != list(range(len(indexes))):
                raise EntryError(
                    ErrorCode.invalid_replica_assignment,
                    "Partitions must be numbered consecutively from 0, got "
                    f"{', '.join(map(str, indexes))}.",
                )
            for assignment in topic.assignments:
                self._check_replicas(assignment.broker_ids, assignment.partition_index)
            sizes = {len(a.broker_ids) for a in topic.assignments}
            if len(sizes) != 1:
                raise EntryError(
                    ErrorCode.invalid_replica_assignment,
                    "All partitions must have the same number of replicas.",
                )
            partitions, replication = len(indexes), sizes.pop()
        else:
            partitions = topic.num_partitions
            replication = topic.replication_factor
            if partitions == -1:
                partitions = config.num_partitions
            if replication == -1:
                replication = config.default_replication_factor
            if partitions < 1:
                raise EntryError(
                    ErrorCode.invalid_partitions,
                    f"Number of partitions was set to an invalid non-positive value: {partitions}.",
                )
            if replication < 1:
                raise EntryError(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
        if partitions > MAX_PARTITIONS_PER_REQUEST:
            raise EntryError(
                ErrorCode.policy_violation,
                f"Excessively large number of partitions per request: {partitions} "
                f"(at most {MAX_PARTITIONS_PER_REQUEST}).",
            )
        return partitions, replication

    def _check_replicas(self, broker_ids: Iterable[int], partition: int) -> None:
        ids = list(broker_ids)
        known = {b.node_id for b in self._broker.metadata.brokers()}
        if not ids:
            raise EntryError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment of partition {partition} is empty.",
            )
        if len(set(ids)) != len(ids):
            raise EntryError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment of partition {partition} includes a "
                "duplicate broker id.",
            )
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise EntryError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment of partition {partition} includes broker(s) "
                f"{', '.join(map(str, unknown))}, which are not registered.",
            )

    def _creation_configs(self, configs: Iterable[Any]) -> dict[str, str]:
        overrides: dict[str, str] = {}
        nulls = []
        for entry in configs:
            if entry.value is None:
                nulls.append(entry.name)
            else:
                overrides[entry.name] = entry.value
        if nulls:
            raise EntryError(
                ErrorCode.invalid_config,
                f"Null value not supported for topic configs: {', '.join(nulls)}",
            )
        validate_topic_configs(self._broker.config, overrides)
        return overrides

    def _created(
        self, types: Any, name: str, state: TopicState | None, failure: EntryError | None
    ) -> Any:
        if failure is not None or state is None:
            code = failure.code if failure else ErrorCode.unknown_server_error
            return build(
                types.CreatableTopicResult,
                name=name,
                topic_id=ZERO_UUID,
                error_code=code,
                error_message=failure.message if failure else None,
                topic_config_error_code=0,
                num_partitions=-1,
                replication_factor=-1,
                configs=(),
            )
        configs: tuple[Any, ...] = ()
        config_type = getattr(types, "CreatableTopicConfigs", None)  # v5+
        if config_type is not None:
            topic_config = TopicConfig.from_broker(self._broker.config, state.configs)
            configs = tuple(
                build(
                    config_type,
                    name=row.name,
                    value=row.value,
                    read_only=row.read_only,
                    config_source=topic_source(self._broker.config, topic_config, row.name),
                    is_sensitive=row.is_sensitive,
                )
                for row in topic_config.describe()
            )
        first = next(iter(state.partitions.values()), None)
        return build(
            types.CreatableTopicResult,
            name=name,
            topic_id=topic_uuid(state.topic_id),
            error_code=ErrorCode.none,
            error_message=None,
            topic_config_error_code=0,
            num_partitions=len(state.partitions),
            replication_factor=len(first.replicas) if first else -1,
            configs=configs,
        )

    # DeleteTopics ------------------------------------------------------------------------------

    async def delete_topics(
        self, ctx: RequestContext, request: DeleteTopicsRequest
    ) -> DeleteTopicsResponse:
        version = ctx.api_version
        broker = self._broker
        if not broker.config.delete_topic_enable:
            raise ApiError(
                ErrorCode.topic_deletion_disabled if version >= 3 else ErrorCode.invalid_request,
                "Topic deletion is disabled.",
            )
        types = nested_types(ApiKey.DELETE_TOPICS, version)
        wanted: list[tuple[str | None, uuid.UUID | None]]
        if hasattr(request, "topics"):  # v6+: names or ids
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        name_counts = Counter(n for n, i in wanted if n is not None and _no_id(i))
        id_counts = Counter(i for n, i in wanted if n is None and i is not None and not _no_id(i))
        results = []
        for name, topic_id in wanted:
            try:
                state = await self._delete_one(ctx, name, topic_id, name_counts, id_counts)
            except EntryError as exc:
                log.info("DeleteTopics %s: %s", name or topic_id, exc)
                results.append(self._deleted(types, name, topic_id, exc.code, exc.message))
            else:
                results.append(
                    self._deleted(
                        types, state.name, topic_uuid(state.topic_id), ErrorCode.none, None
                    )
                )
        return response(
            ctx,
            responses=tuple(results),
        )

    def delete_topics_error(
        self, ctx: RequestContext, request: DeleteTopicsRequest, code: ErrorCode
    ) -> DeleteTopicsResponse:
        types = nested_types(ApiKey.DELETE_TOPICS, ctx.api_version)
        wanted: list[tuple[str | None, uuid.UUID | None]]
        if hasattr(request, "topics"):
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        return response(
            ctx,
            responses=tuple(self._deleted(types, n, i, code, None) for n, i in wanted),
        )

    async def _delete_one(
        self,
        ctx: RequestContext,
        name: str | None,
        topic_id: uuid.UUID | None,
        name_counts: Counter[str],
        id_counts: Counter[uuid.UUID],
    ) -> TopicState:
        metadata = self._broker.metadata
        if name is None and _no_id(topic_id):
            raise EntryError(ErrorCode.invalid_request, "Neither topic name nor id were specified.")
        if name is not None and not _no_id(topic_id):
            raise EntryError(
                ErrorCode.invalid_request, "You may not specify both topic name and topic id."
            )
        if name is not None:
            if name_counts[name] > 1:
                raise EntryError(ErrorCode.invalid_request, "Duplicate topic name.")
            state = metadata.topic(name)
            if state is None:
                raise EntryError(
                    ErrorCode.unknown_topic_or_partition,
                    "This server does not host this topic-partition.",
                )
        else:
            assert topic_id is not None
            if id_counts[topic_id] > 1:
                raise EntryError(ErrorCode.invalid_request, "Duplicate topic id.")
            state = metadata.topic_by_id(topic_id_text(topic_id))
            if state is None:
                raise EntryError(
                    ErrorCode.unknown_topic_id, "This server does not host this topic ID."
                )
        self._require(ctx, AclOperation.DELETE, state.name)
        refuse_internal_change(state.name, "delete")
        try:
            deleted = await asyncio.to_thread(metadata.delete_topic, state.name)
        except MetadataError as exc:
            raise entry_error_for(exc) from None
        log.info("deleted topic %s", deleted.name)
        return deleted

    @staticmethod
    def _deleted(
        types: Any,
        name: str | None,
        topic_id: uuid.UUID | None,
        code: ErrorCode,
        message: str | None,
    ) -> Any:
        return build(
            types.DeletableTopicResult,
            name=name,
            topic_id=topic_id or ZERO_UUID,
            error_code=code,
            error_message=message,
        )

    # CreatePartitions --------------------------------------------------------------------------

    async def create_partitions(
        self, ctx: RequestContext, request: CreatePartitionsRequest
    ) -> CreatePartitionsResponse:
        types = nested_types(ApiKey.CREATE_PARTITIONS, ctx.api_version)
        counts = Counter(t.name for t in request.topics)
        results = []
        for topic in request.topics:
            try:
                if counts[topic.name] > 1:
                    raise EntryError(ErrorCode.invalid_request, "Duplicate topic in request.")
                self._require(ctx, AclOperation.ALTER, topic.name)
                await self._add_partitions(topic, request.validate_only)
            except EntryError as exc:
                log.info("CreatePartitions %s: %s", topic.name, exc)
                results.append(self._partitions_result(types, topic.name, exc.code, exc.message))
            else:
                results.append(self._partitions_result(types, topic.name, ErrorCode.none, None))
        return response(
            ctx,
            results=tuple(results),
        )

    def create_partitions_error(
        self, ctx: RequestContext, request: CreatePartitionsRequest, code: ErrorCode
    ) -> CreatePartitionsResponse:
        types = nested_types(ApiKey.CREATE_PARTITIONS, ctx.api_version)
        return response(
            ctx,
            results=tuple(
                self._partitions_result(types, t.name, code, None) for t in request.topics
            ),
        )

    async def _add_partitions(self, topic: Any, validate_only: bool) -> None:
        metadata = self._broker.metadata
        state = metadata.topic(topic.name)
        if state is None:
            raise EntryError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        refuse_internal_change(topic.name, "add partitions to")
        current = len(state.partitions)
        if topic.count < current:
            raise EntryError(
                ErrorCode.invalid_partitions,
                f"Topic currently has {current} partitions, which is higher than the requested "
                f"{topic.count}.",
            )
        if topic.count == current:
            raise EntryError(
                ErrorCode.invalid_partitions, f"Topic already has {current} partitions."
            )
        added = topic.count - current
        if added > MAX_PARTITIONS_PER_REQUEST:
            raise EntryError(
                ErrorCode.policy_violation,
                f"Excessively large number of partitions per request: {added}.",
            )
        if topic.assignments is not None:
            if len(topic.assignments) != added:
                raise EntryError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(topic.assignments)} assignment(s) were specified.",
                )
            existing_rf = len(next(iter(state.partitions.values())).replicas)
            for i, assignment in enumerate(topic.assignments):
                self._check_replicas(assignment.broker_ids, current + i)
                if len(assignment.broker_ids) != existing_rf:
                    raise EntryError(
                        ErrorCode.invalid_replica_assignment,
                        f"The manual partition assignment of partition {current + i} has "
                        f"{len(assignment.broker_ids)} replicas; the topic's replication factor "
                        f"is {existing_rf}.",
                    )
        try:
            await asyncio.to_thread(
                metadata.create_partitions,
                topic.name,
                topic.count,
                validate_only=validate_only,
                assignment=(
                    {current + i: tuple(a.broker_ids) for i, a in enumerate(topic.assignments)}
                    if topic.assignments is not None
                    else None
                ),
            )
        except MetadataError as exc:
            raise entry_error_for(exc) from None
        if not validate_only:
            log.info("topic %s now has %d partitions", topic.name, topic.count)

    @staticmethod
    def _partitions_result(types: Any, name: str, code: ErrorCode, message: str | None) -> Any:
        return build(
            types.CreatePartitionsTopicResult, name=name, error_code=code, error_message=message
        )


def _no_id(topic_id: uuid.UUID | None) -> bool:
    return topic_id is None or topic_id == ZERO_UUID


# -- configs --------------------------------------------------------------------------------------


def register(registry: HandlerRegistry, broker: TopicAdmin) -> TopicsApi:
    api = TopicsApi(broker)
    handlers: dict[ApiKey, tuple[Handler, ErrorResponder, str]] = {
        ApiKey.CREATE_TOPICS: (
            api.create_topics, api.create_topics_error,
            "CREATE on the cluster or on each topic (TOPIC_AUTHORIZATION_FAILED)",
        ),
        ApiKey.DELETE_TOPICS: (
            api.delete_topics, api.delete_topics_error,
            "DELETE on each topic (TOPIC_AUTHORIZATION_FAILED)",
        ),
        ApiKey.CREATE_PARTITIONS: (
            api.create_partitions, api.create_partitions_error,
            "ALTER on each topic (TOPIC_AUTHORIZATION_FAILED)",
        ),
    }  # fmt: skip
    register_family(
        registry,
        {
            key: Endpoint(*TOPIC_ADMIN_VERSIONS[key], handle, error, per_entry(rule))
            for key, (handle, error, rule) in handlers.items()
        },
    )
    return api
