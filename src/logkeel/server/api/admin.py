"""Admin APIs: CreateTopics (v2-7), DeleteTopics (v1-6), CreatePartitions (v0-3),
DescribeConfigs (v1-4), AlterConfigs (v0-2), IncrementalAlterConfigs (v0-1) and
DescribeLogDirs (v1-5).

Topic changes go through the metadata store, whose listeners (the replica manager) create,
delete and reconfigure the partition logs; the store persists them, so topics and their config
overrides survive restarts. Every per-topic or per-resource failure is reported in its own
entry with Kafka's error code and a message, as Kafka's controller reports them:
INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG (every bad key is named), UNKNOWN_TOPIC_OR_PARTITION,
UNKNOWN_TOPIC_ID, INVALID_REQUEST for malformed requests (duplicates, null values, unknown
resource types) and TOPIC_DELETION_DISABLED.

Broker configs are static in logkeel (server.properties and --override): DescribeConfigs
describes them with their sources and synonyms, marked read-only, and altering one is refused
with INVALID_REQUEST, as Kafka refuses configs it cannot update dynamically. Log levels are
dynamic, as in Kafka: the BROKER_LOGGER resource describes every logger with its level, and
IncrementalAlterConfigs SETs (FATAL, ERROR, WARN, INFO, DEBUG, TRACE) or DELETEs them.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import MetadataError
from logkeel.config import (
    BROKER_CONFIG_DEF,
    TOPIC_CONFIG_DEF,
    ConfigError,
    ConfigSource,
    ConfigType,
    TopicConfig,
    broker_synonyms,
    validate_topic_overrides,
)
from logkeel.config.types import format_value
from logkeel.server.api.metadata import (
    NO_THROTTLE,
    ZERO_UUID,
    build,
    nested_types,
    topic_id_from_uuid,
    topic_uuid,
)
from logkeel.server.errors import ApiError, error_code_named
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey, response_schema
from logkeel.storage.topic_partition import validate_topic_name

if TYPE_CHECKING:
    from logkeel.cluster.metadata import TopicState
    from logkeel.config import BrokerConfig
    from logkeel.server.broker import Broker

__all__ = [
    "ADMIN_VERSIONS",
    "AdminApi",
    "ConfigsApi",
    "LogDirsApi",
    "apply_incremental",
    "register",
]

log = logging.getLogger(__name__)

ADMIN_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 5),
}

# ConfigResource.Type ids.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# AlterConfigOp.OpType ids.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# Kafka's controller refuses to create more partitions than this in one request
# (ReplicationControlManager's MAX_PARTITIONS_PER_BATCH), so a typo cannot create a million logs.
MAX_PARTITIONS_PER_REQUEST = 10_000


class _Failure(Exception):
    """One entry of a request failed; becomes that entry's error code and message."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        self.code = code
        self.message = message
        super().__init__(message or code.name)


def _from_metadata_error(exc: MetadataError) -> _Failure:
    try:
        code = error_code_named(exc.error_name)
    except ValueError:
        code = ErrorCode.unknown_server_error
    return _Failure(code, str(exc))


def _check_topic_name(name: str | None) -> None:
    problem = validate_topic_name(name or "")
    if problem is not None:
        raise _Failure(ErrorCode.invalid_topic_exception, problem)


# -- topics ---------------------------------------------------------------------------------------


class AdminApi:
    """CreateTopics, DeleteTopics and CreatePartitions."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    # CreateTopics ------------------------------------------------------------------------------

    async def create_topics(self, ctx: RequestContext, request: Any) -> Any:
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
                        _Failure(ErrorCode.invalid_request, "Duplicate topic name."),
                    )
                )
                continue
            try:
                state = await self._create_topic(topic, request.validate_only)
            except _Failure as exc:
                log.info("CreateTopics %s: %s", topic.name, exc)
                results.append(self._created(types, topic.name, None, exc))
            else:
                results.append(self._created(types, topic.name, state, None))
        return build(
            response_schema(ApiKey.CREATE_TOPICS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            topics=tuple(results),
        )

    def create_topics_error(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        types = nested_types(ApiKey.CREATE_TOPICS, ctx.api_version)
        return build(
            response_schema(ApiKey.CREATE_TOPICS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            topics=tuple(
                self._created(types, t.name, None, _Failure(code)) for t in request.topics
            ),
        )

    async def _create_topic(self, topic: Any, validate_only: bool) -> TopicState:
        broker = self._broker
        name = topic.name
        _check_topic_name(name)
        if broker.metadata.topic(name) is not None:
            raise _Failure(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
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
            )
        except MetadataError as exc:
            raise _from_metadata_error(exc) from None

    def _layout(self, topic: Any) -> tuple[int, int]:
        """(partitions, replication factor) from the counts or the manual assignment."""
        config = self._broker.config
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise _Failure(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            indexes = sorted(a.partition_index for a in topic.assignments)
            if indexes != list(range(len(indexes))):
                raise _Failure(
                    ErrorCode.invalid_replica_assignment,
                    "Partitions must be numbered consecutively from 0, got "
                    f"{', '.join(map(str, indexes))}.",
                )
            for assignment in topic.assignments:
                self._check_replicas(assignment.broker_ids, assignment.partition_index)
            sizes = {len(a.broker_ids) for a in topic.assignments}
            if len(sizes) != 1:
                raise _Failure(
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
                raise _Failure(
                    ErrorCode.invalid_partitions,
                    f"Number of partitions was set to an invalid non-positive value: {partitions}.",
                )
            if replication < 1:
                raise _Failure(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
        if partitions > MAX_PARTITIONS_PER_REQUEST:
            raise _Failure(
                ErrorCode.policy_violation,
                f"Excessively large number of partitions per request: {partitions} "
                f"(at most {MAX_PARTITIONS_PER_REQUEST}).",
            )
        return partitions, replication

    def _check_replicas(self, broker_ids: Iterable[int], partition: int) -> None:
        ids = list(broker_ids)
        known = {b.node_id for b in self._broker.metadata.brokers()}
        if not ids:
            raise _Failure(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment of partition {partition} is empty.",
            )
        if len(set(ids)) != len(ids):
            raise _Failure(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment of partition {partition} includes a "
                "duplicate broker id.",
            )
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise _Failure(
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
            raise _Failure(
                ErrorCode.invalid_config,
                f"Null value not supported for topic configs: {', '.join(nulls)}",
            )
        _validate_topic_configs(self._broker.config, overrides)
        return overrides

    def _created(
        self, types: Any, name: str, state: TopicState | None, failure: _Failure | None
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
                    config_source=_topic_source(self._broker.config, topic_config, row.name),
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

    async def delete_topics(self, ctx: RequestContext, request: Any) -> Any:
        version = ctx.api_version
        broker = self._broker
        if not broker.config.delete_topic_enable:
            raise ApiError(
                ErrorCode.topic_deletion_disabled if version >= 3 else ErrorCode.invalid_request,
                "Topic deletion is disabled.",
            )
        types = nested_types(ApiKey.DELETE_TOPICS, version)
        wanted: list[tuple[str | None, uuid.UUID | None]]
        if version >= 6:
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        name_counts = Counter(n for n, i in wanted if n is not None and _no_id(i))
        id_counts = Counter(i for n, i in wanted if n is None and not _no_id(i))
        results = []
        for name, topic_id in wanted:
            try:
                state = await self._delete_one(name, topic_id, name_counts, id_counts)
            except _Failure as exc:
                log.info("DeleteTopics %s: %s", name or topic_id, exc)
                results.append(self._deleted(types, name, topic_id, exc.code, exc.message))
            else:
                results.append(
                    self._deleted(
                        types, state.name, topic_uuid(state.topic_id), ErrorCode.none, None
                    )
                )
        return build(
            response_schema(ApiKey.DELETE_TOPICS, version),
            throttle_time=NO_THROTTLE,
            responses=tuple(results),
        )

    def delete_topics_error(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        types = nested_types(ApiKey.DELETE_TOPICS, ctx.api_version)
        if ctx.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        return build(
            response_schema(ApiKey.DELETE_TOPICS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            responses=tuple(self._deleted(types, n, i, code, None) for n, i in wanted),
        )

    async def _delete_one(
        self,
        name: str | None,
        topic_id: uuid.UUID | None,
        name_counts: Counter[str],
        id_counts: Counter[uuid.UUID],
    ) -> TopicState:
        metadata = self._broker.metadata
        if name is None and _no_id(topic_id):
            raise _Failure(ErrorCode.invalid_request, "Neither topic name nor id were specified.")
        if name is not None and not _no_id(topic_id):
            raise _Failure(
                ErrorCode.invalid_request, "You may not specify both topic name and topic id."
            )
        if name is not None:
            if name_counts[name] > 1:
                raise _Failure(ErrorCode.invalid_request, "Duplicate topic name.")
            state = metadata.topic(name)
            if state is None:
                raise _Failure(
                    ErrorCode.unknown_topic_or_partition,
                    "This server does not host this topic-partition.",
                )
        else:
            assert topic_id is not None
            if id_counts[topic_id] > 1:
                raise _Failure(ErrorCode.invalid_request, "Duplicate topic id.")
            state = metadata.topic_by_id(topic_id_from_uuid(topic_id))
            if state is None:
                raise _Failure(
                    ErrorCode.unknown_topic_id, "This server does not host this topic ID."
                )
        try:
            deleted = await asyncio.to_thread(metadata.delete_topic, state.name)
        except MetadataError as exc:
            raise _from_metadata_error(exc) from None
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

    async def create_partitions(self, ctx: RequestContext, request: Any) -> Any:
        types = nested_types(ApiKey.CREATE_PARTITIONS, ctx.api_version)
        counts = Counter(t.name for t in request.topics)
        results = []
        for topic in request.topics:
            try:
                if counts[topic.name] > 1:
                    raise _Failure(ErrorCode.invalid_request, "Duplicate topic in request.")
                await self._add_partitions(topic, request.validate_only)
            except _Failure as exc:
                log.info("CreatePartitions %s: %s", topic.name, exc)
                results.append(self._partitions_result(types, topic.name, exc.code, exc.message))
            else:
                results.append(self._partitions_result(types, topic.name, ErrorCode.none, None))
        return build(
            response_schema(ApiKey.CREATE_PARTITIONS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            results=tuple(results),
        )

    def create_partitions_error(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        types = nested_types(ApiKey.CREATE_PARTITIONS, ctx.api_version)
        return build(
            response_schema(ApiKey.CREATE_PARTITIONS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            results=tuple(
                self._partitions_result(types, t.name, code, None) for t in request.topics
            ),
        )

    async def _add_partitions(self, topic: Any, validate_only: bool) -> None:
        metadata = self._broker.metadata
        state = metadata.topic(topic.name)
        if state is None:
            raise _Failure(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        current = len(state.partitions)
        if topic.count < current:
            raise _Failure(
                ErrorCode.invalid_partitions,
                f"Topic currently has {current} partitions, which is higher than the requested "
                f"{topic.count}.",
            )
        if topic.count == current:
            raise _Failure(ErrorCode.invalid_partitions, f"Topic already has {current} partitions.")
        added = topic.count - current
        if added > MAX_PARTITIONS_PER_REQUEST:
            raise _Failure(
                ErrorCode.policy_violation,
                f"Excessively large number of partitions per request: {added}.",
            )
        if topic.assignments is not None:
            if len(topic.assignments) != added:
                raise _Failure(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(topic.assignments)} assignment(s) were specified.",
                )
            existing_rf = len(next(iter(state.partitions.values())).replicas)
            for i, assignment in enumerate(topic.assignments):
                self._check_replicas(assignment.broker_ids, current + i)
                if len(assignment.broker_ids) != existing_rf:
                    raise _Failure(
                        ErrorCode.invalid_replica_assignment,
                        f"The manual partition assignment of partition {current + i} has "
                        f"{len(assignment.broker_ids)} replicas; the topic's replication factor "
                        f"is {existing_rf}.",
                    )
        try:
            await asyncio.to_thread(
                metadata.create_partitions, topic.name, topic.count, validate_only=validate_only
            )
        except MetadataError as exc:
            raise _from_metadata_error(exc) from None
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


def _validate_topic_configs(broker_config: BrokerConfig, overrides: Mapping[str, str]) -> None:
    """INVALID_CONFIG naming every unknown key and bad value, including clashes with the
    broker's defaults (a topic's resolved config must be valid, not only its overrides)."""
    try:
        validate_topic_overrides(overrides)
        TopicConfig.from_broker(broker_config, overrides)
    except ConfigError as exc:
        raise _Failure(ErrorCode.invalid_config, str(exc)) from None


def _topic_synonyms(
    broker_config: BrokerConfig, topic_config: TopicConfig, name: str
) -> list[tuple[str, str | None, ConfigSource]]:
    """Kafka's synonym list of a topic config: the topic override, then for each broker key
    that defaults it (highest priority first) its static value if set and its default."""
    key = TOPIC_CONFIG_DEF[name]
    out: list[tuple[str, str | None, ConfigSource]] = []
    if name in topic_config.overrides:
        out.append(
            (name, format_value(key.type, topic_config.get(name)), ConfigSource.TOPIC_CONFIG)
        )
    for broker_name in broker_synonyms(name):
        out.extend(_broker_key_synonyms(broker_config, broker_name))
    return out


def _broker_key_synonyms(
    broker_config: BrokerConfig, name: str
) -> list[tuple[str, str | None, ConfigSource]]:
    key = BROKER_CONFIG_DEF[name]
    sensitive = key.type is ConfigType.PASSWORD
    out: list[tuple[str, str | None, ConfigSource]] = []
    if broker_config.is_set(name):
        value = None if sensitive else format_value(key.type, broker_config.get(name))
        out.append((name, value, ConfigSource.STATIC_BROKER_CONFIG))
    if key.default is not None:
        value = None if sensitive else format_value(key.type, key.default)
        out.append((name, value, ConfigSource.DEFAULT_CONFIG))
    return out


def _broker_synonym_names(name: str) -> tuple[str, ...]:
    """Broker keys that stand for one setting (``log.roll.ms`` and ``log.roll.hours``)."""
    topic = BROKER_CONFIG_DEF[name].topic
    if topic is None:
        return (name,)
    group = TOPIC_CONFIG_DEF[topic].synonyms  # (broker key, scale to the topic's unit)
    names = tuple(n for n, _ in group)
    # Kafka treats keys that are one setting in different units (log.roll.ms/hours) as
    # synonyms of each other; a fallback key (log.flush.scheduler.interval.ms behind
    # log.flush.interval.ms) is a synonym only of the key it stands in for.
    if name == names[0] or any(scale != 1 for _, scale in group):
        return names
    return (name,)


def _topic_source(broker_config: BrokerConfig, topic_config: TopicConfig, name: str) -> int:
    synonyms = _topic_synonyms(broker_config, topic_config, name)
    return int(synonyms[0][2]) if synonyms else int(ConfigSource.DEFAULT_CONFIG)


def apply_incremental(
    current: Mapping[str, str],
    operations: Iterable[tuple[str, int, str | None]],
    effective: TopicConfig,
) -> dict[str, str]:
    """New topic overrides from ``current`` after IncrementalAlterConfigs ``operations``
    (name, op, value): SET, DELETE, APPEND and SUBTRACT (the last two on LIST configs, starting
    from the effective value, default included, as Kafka does)."""
    result = dict(current)
    for name, op, value in operations:
        if op == OP_SET:
            assert value is not None
            result[name] = value
        elif op == OP_DELETE:
            result.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            key = TOPIC_CONFIG_DEF.get(name)
            verb = "APPEND" if op == OP_APPEND else "SUBTRACT"
            if key is None:
                raise _Failure(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
            if key.type is not ConfigType.LIST:
                raise _Failure(
                    ErrorCode.invalid_config,
                    f"Can't {verb} to key {name} because its type is not LIST.",
                )
            if name in result:
                items = [i for i in result[name].split(",") if i]
            else:
                items = list(effective.get(name) or [])
            for item in (value or "").split(","):
                if op == OP_APPEND and item not in items:
                    items.append(item)
                elif op == OP_SUBTRACT and item in items:
                    items.remove(item)
            result[name] = ",".join(items)
        else:
            raise _Failure(ErrorCode.invalid_request, f"Unknown operations type {op}")
    return result


# -- broker loggers (ConfigResource type BROKER_LOGGER) -------------------------------------------

_SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG = 6
ROOT_LOGGER = "root"
# Kafka's log4j level names and the Python levels that stand for them.
LOG_LEVELS: dict[str, int] = {
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": 5,
}


def _level_name(level: int) -> str:
    """The Kafka name of the most verbose Kafka level that ``level`` still lets through."""
    for name, value in sorted(LOG_LEVELS.items(), key=lambda item: -item[1]):
        if level >= value:
            return name
    return "TRACE"


def broker_loggers() -> dict[str, str]:
    """Every logger that exists, with its effective level in Kafka's names; ``root`` first."""
    out = {ROOT_LOGGER: _level_name(logging.getLogger().getEffectiveLevel())}
    for name, logger in sorted(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            out[name] = _level_name(logger.getEffectiveLevel())
    return out


def _logger(name: str) -> logging.Logger | None:
    if name == ROOT_LOGGER:
        return logging.getLogger()
    found = logging.root.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def validate_logger_changes(changes: Iterable[tuple[str, int, str | None]]) -> None:
    """Kafka's rules for changing log levels at run time (RuntimeLoggerManager)."""
    for name, op, value in changes:
        if op in (OP_APPEND, OP_SUBTRACT):
            verb = "APPEND" if op == OP_APPEND else "SUBTRACT"
            raise _Failure(
                ErrorCode.invalid_request,
                f"{verb} operation is not allowed for the BROKER_LOGGER resource",
            )
        if _logger(name) is None:
            raise _Failure(ErrorCode.invalid_config, f"Logger {name} does not exist!")
        if op == OP_SET and value not in LOG_LEVELS:
            raise _Failure(
                ErrorCode.invalid_config,
                f"Cannot set the log level of {name} to {value} as it is not a supported log "
                f"level. Valid log levels are {', '.join(LOG_LEVELS)}",
            )
        if op == OP_DELETE and name == ROOT_LOGGER:
            raise _Failure(
                ErrorCode.invalid_request,
                f"Removing the log level of the {ROOT_LOGGER} logger is not allowed",
            )


def apply_logger_changes(changes: Iterable[tuple[str, int, str | None]]) -> None:
    for name, op, value in changes:
        logger = _logger(name)
        assert logger is not None, "validated first"
        if op == OP_SET:
            assert value is not None
            logger.setLevel(LOG_LEVELS[value])
            log.warning("Updated the log level of %s to %s", name, value)
        else:  # DELETE: inherit from the parent again
            logger.setLevel(logging.NOTSET)
            log.warning("Unset the log level of %s", name)


class ConfigsApi:
    """DescribeConfigs, AlterConfigs and IncrementalAlterConfigs."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    # DescribeConfigs ---------------------------------------------------------------------------

    async def describe_configs(self, ctx: RequestContext, request: Any) -> Any:
        types = nested_types(ApiKey.DESCRIBE_CONFIGS, ctx.api_version)
        synonyms = bool(getattr(request, "include_synonyms", False))
        docs = bool(getattr(request, "include_documentation", False))
        results = []
        for resource in request.resources:
            try:
                configs = self._describe(types, resource, synonyms, docs)
            except _Failure as exc:
                log.info(
                    "DescribeConfigs %d/%r: %s", resource.resource_type, resource.resource_name, exc
                )
                results.append(self._described(types, resource, exc.code, exc.message, ()))
            else:
                results.append(self._described(types, resource, ErrorCode.none, None, configs))
        return build(
            response_schema(ApiKey.DESCRIBE_CONFIGS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            results=tuple(results),
        )

    def describe_configs_error(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        types = nested_types(ApiKey.DESCRIBE_CONFIGS, ctx.api_version)
        return build(
            response_schema(ApiKey.DESCRIBE_CONFIGS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            results=tuple(self._described(types, r, code, None, ()) for r in request.resources),
        )

    @staticmethod
    def _described(
        types: Any, resource: Any, code: ErrorCode, message: str | None, configs: tuple[Any, ...]
    ) -> Any:
        return build(
            types.DescribeConfigsResult,
            error_code=code,
            error_message=message,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=configs,
        )

    def _describe(
        self, types: Any, resource: Any, include_synonyms: bool, include_docs: bool
    ) -> tuple[Any, ...]:
        keys = resource.configuration_keys or None  # null or empty: all, as in Kafka
        if resource.resource_type == RESOURCE_TOPIC:
            return self._describe_topic(
                types, resource.resource_name, keys, include_synonyms, include_docs
            )
        if resource.resource_type == RESOURCE_BROKER:
            if resource.resource_name == "":
                # The cluster-wide dynamic defaults: logkeel has none.
                return ()
            self._check_broker_name(resource.resource_name)
            return self._describe_broker(types, keys, include_synonyms, include_docs)
        if resource.resource_type == RESOURCE_BROKER_LOGGER:
            if not resource.resource_name:
                raise _Failure(ErrorCode.invalid_request, "Broker id must not be empty")
            self._check_broker_name(resource.resource_name)
            return tuple(
                build(
                    types.DescribeConfigsResourceResult,
                    name=name,
                    value=level,
                    read_only=False,
                    config_source=_SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG,
                    is_sensitive=False,
                    synonyms=(),
                    config_type=int(ConfigType.STRING),
                    documentation=None,
                )
                for name, level in broker_loggers().items()
                if keys is None or name in keys
            )
        raise _Failure(
            ErrorCode.invalid_request, f"Unsupported resource type: {resource.resource_type}"
        )

    def _describe_topic(
        self,
        types: Any,
        name: str,
        keys: Iterable[str] | None,
        include_synonyms: bool,
        include_docs: bool,
    ) -> tuple[Any, ...]:
        _check_topic_name(name)
        broker = self._broker
        if broker.metadata.topic(name) is None:
            raise _Failure(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        topic_config = broker.topic_config(name)
        rows = []
        for row in topic_config.describe(None if keys is None else list(keys)):
            synonyms = _topic_synonyms(broker.config, topic_config, row.name)
            key = TOPIC_CONFIG_DEF[row.name]
            rows.append(
                self._entry(
                    types,
                    row.name,
                    row.value,
                    False,
                    synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG,
                    row.is_sensitive,
                    synonyms if include_synonyms else [],
                    key.type,
                    key.doc if include_docs else None,
                )
            )
        return tuple(rows)

    def _describe_broker(
        self, types: Any, keys: Iterable[str] | None, include_synonyms: bool, include_docs: bool
    ) -> tuple[Any, ...]:
        config = self._broker.config
        rows = []
        for row in config.describe(None if keys is None else list(keys)):
            synonyms = [
                s for n in _broker_synonym_names(row.name) for s in _broker_key_synonyms(config, n)
            ]
            key = BROKER_CONFIG_DEF[row.name]
            rows.append(
                self._entry(
                    types,
                    row.name,
                    row.value,
                    row.read_only,
                    synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG,
                    row.is_sensitive,
                    synonyms if include_synonyms else [],
                    key.type,
                    key.doc if include_docs else None,
                )
            )
        return tuple(rows)

    @staticmethod
    def _entry(
        types: Any,
        name: str,
        value: str | None,
        read_only: bool,
        source: ConfigSource,
        sensitive: bool,
        synonyms: list[tuple[str, str | None, ConfigSource]],
        config_type: ConfigType,
        documentation: str | None,
    ) -> Any:
        return build(
            types.DescribeConfigsResourceResult,
            name=name,
            value=value,
            read_only=read_only,
            config_source=int(source),
            is_sensitive=sensitive,
            synonyms=tuple(
                build(types.DescribeConfigsSynonym, name=n, value=v, source=int(s))
                for n, v, s in synonyms
            ),
            config_type=int(config_type),
            documentation=documentation,
        )

    def _check_broker_name(self, name: str) -> None:
        try:
            node = int(name)
        except ValueError:
            raise _Failure(
                ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}"
            ) from None
        if node != self._broker.node_id:
            raise _Failure(
                ErrorCode.invalid_request,
                f"Unexpected broker id, expected {self._broker.node_id} or empty string, "
                f"but received {name}",
            )

    # AlterConfigs and IncrementalAlterConfigs --------------------------------------------------

    async def alter_configs(self, ctx: RequestContext, request: Any) -> Any:
        return await self._alter(ctx, request, incremental=False)

    async def incremental_alter_configs(self, ctx: RequestContext, request: Any) -> Any:
        return await self._alter(ctx, request, incremental=True)

    def alter_configs_error(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        types = nested_types(ctx.api_key, ctx.api_version)
        return build(
            response_schema(ctx.api_key, ctx.api_version),
            throttle_time=NO_THROTTLE,
            responses=tuple(self._altered(types, r, code, None) for r in request.resources),
        )

    async def _alter(self, ctx: RequestContext, request: Any, *, incremental: bool) -> Any:
        types = nested_types(ctx.api_key, ctx.api_version)
        ids = Counter((r.resource_type, r.resource_name) for r in request.resources)
        results = []
        for resource in request.resources:
            try:
                if ids[(resource.resource_type, resource.resource_name)] > 1:
                    raise _Failure(
                        ErrorCode.invalid_request, "Each resource must appear at most once."
                    )
                await self._alter_one(resource, request.validate_only, incremental)
            except _Failure as exc:
                log.info(
                    "%s %d/%r: %s",
                    ctx.api_name,
                    resource.resource_type,
                    resource.resource_name,
                    exc,
                )
                results.append(self._altered(types, resource, exc.code, exc.message))
            else:
                results.append(self._altered(types, resource, ErrorCode.none, None))
        return build(
            response_schema(ctx.api_key, ctx.api_version),
            throttle_time=NO_THROTTLE,
            responses=tuple(results),
        )

    @staticmethod
    def _altered(types: Any, resource: Any, code: ErrorCode, message: str | None) -> Any:
        return build(
            types.AlterConfigsResourceResponse,
            error_code=code,
            error_message=message,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
        )

    async def _alter_one(self, resource: Any, validate_only: bool, incremental: bool) -> None:
        names = [c.name for c in resource.configs]
        if len(set(names)) != len(names):
            raise _Failure(ErrorCode.invalid_request, "Error due to duplicate config keys")
        nulls = [
            c.name
            for c in resource.configs
            if c.value is None and not (incremental and c.config_operation == OP_DELETE)
        ]
        if nulls:
            raise _Failure(
                ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}"
            )
        if incremental:
            bad_ops = [
                c.config_operation for c in resource.configs if not 0 <= c.config_operation <= 3
            ]
            if bad_ops:
                raise _Failure(ErrorCode.invalid_request, f"Unknown operations type {bad_ops[0]}")
        if resource.resource_type == RESOURCE_BROKER_LOGGER and incremental:
            self._check_broker_name(resource.resource_name)
            changes = [(c.name, c.config_operation, c.value) for c in resource.configs]
            validate_logger_changes(changes)
            if not validate_only:
                apply_logger_changes(changes)
            return
        if resource.resource_type == RESOURCE_BROKER:
            if resource.resource_name:
                self._check_broker_name(resource.resource_name)
            if names:
                raise _Failure(
                    ErrorCode.invalid_request,
                    "Cannot update these configs dynamically: "
                    f"{', '.join(sorted(names))} (logkeel's broker configs are static: set them "
                    "in server.properties or with --override)",
                )
            return
        if resource.resource_type != RESOURCE_TOPIC:
            raise _Failure(
                ErrorCode.invalid_request, f"Unknown resource type {resource.resource_type}"
            )
        name = resource.resource_name
        _check_topic_name(name)
        broker = self._broker
        state = broker.metadata.topic(name)
        if state is None:
            raise _Failure(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        if incremental:
            overrides = apply_incremental(
                state.configs,
                ((c.name, c.config_operation, c.value) for c in resource.configs),
                broker.topic_config(name),
            )
        else:
            # The legacy API replaces the topic's whole set of overrides.
            overrides = {c.name: c.value for c in resource.configs}
        _validate_topic_configs(broker.config, overrides)
        if validate_only:
            return
        try:
            await asyncio.to_thread(broker.metadata.set_topic_configs, name, overrides)
        except MetadataError as exc:
            raise _from_metadata_error(exc) from None
        log.info("topic %s configs are now %s", name, overrides or "the broker defaults")


# -- log dirs ------------------------------------------------------------------------------------


class LogDirsApi:
    """DescribeLogDirs: each log dir, its partitions' sizes and lags; offline dirs say so."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    async def describe_log_dirs(self, ctx: RequestContext, request: Any) -> Any:
        wanted: dict[str, set[int]] | None = None
        if request.topics is not None:
            wanted = {}
            for t in request.topics:
                wanted.setdefault(t.topic, set()).update(t.partitions)
        results = await asyncio.to_thread(self._collect, ctx.api_version, wanted)
        return build(
            response_schema(ApiKey.DESCRIBE_LOG_DIRS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            results=results,
        )

    def describe_log_dirs_error(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        return build(
            response_schema(ApiKey.DESCRIBE_LOG_DIRS, ctx.api_version),
            throttle_time=NO_THROTTLE,
            error_code=code,
            results=(),
        )

    def _collect(self, version: int, wanted: dict[str, set[int]] | None) -> tuple[Any, ...]:
        """Runs in a thread: sizes come from file metadata."""
        types = nested_types(ApiKey.DESCRIBE_LOG_DIRS, version)
        lm = self._broker.log_manager
        by_dir: dict[str, dict[str, list[Any]]] = {str(d.path): {} for d in lm.dirs}
        for tp, plog in list(lm.logs.items()):
            if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
                continue
            d = lm.dir_of(tp)
            if d is None or not d.online:
                continue
            try:
                size = plog.size_in_bytes
            except Exception as exc:  # noqa: BLE001 - a failing partition must not fail the rest
                log.warning("DescribeLogDirs: cannot size %s: %s", tp, exc)
                continue
            by_dir[str(d.path)].setdefault(tp.topic, []).append(
                build(
                    types.DescribeLogDirsPartition,
                    partition_index=tp.partition,
                    partition_size=size,
                    offset_lag=max(0, plog.log_end_offset - plog.high_watermark),
                    is_future_key=False,
                )
            )
        results = []
        for d in lm.dirs:
            path = str(d.path)
            total = usable = -1
            if d.online:
                try:
                    usage = shutil.disk_usage(path)
                    total, usable = usage.total, usage.free
                except OSError:
                    pass
                topics = tuple(
                    build(
                        types.DescribeLogDirsTopic,
                        name=topic,
                        partitions=tuple(sorted(parts, key=lambda p: p.partition_index)),
                    )
                    for topic, parts in sorted(by_dir[path].items())
                )
                code = ErrorCode.none
            else:
                topics = ()
                code = ErrorCode.kafka_storage_error
            results.append(
                build(
                    types.DescribeLogDirsResult,
                    error_code=code,
                    log_dir=path,
                    topics=topics,
                    total_bytes=total,
                    usable_bytes=usable,
                    is_cordoned=False,
                )
            )
        return tuple(results)


def register(registry: HandlerRegistry, broker: Broker) -> None:
    admin = AdminApi(broker)
    configs = ConfigsApi(broker)
    log_dirs = LogDirsApi(broker)
    handlers = {
        ApiKey.CREATE_TOPICS: (admin.create_topics, admin.create_topics_error),
        ApiKey.DELETE_TOPICS: (admin.delete_topics, admin.delete_topics_error),
        ApiKey.CREATE_PARTITIONS: (admin.create_partitions, admin.create_partitions_error),
        ApiKey.DESCRIBE_CONFIGS: (configs.describe_configs, configs.describe_configs_error),
        ApiKey.ALTER_CONFIGS: (configs.alter_configs, configs.alter_configs_error),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (
            configs.incremental_alter_configs,
            configs.alter_configs_error,
        ),
        ApiKey.DESCRIBE_LOG_DIRS: (log_dirs.describe_log_dirs, log_dirs.describe_log_dirs_error),
    }
    for api_key, (handle, error_response) in handlers.items():
        low, high = ADMIN_VERSIONS[api_key]
        registry.register(api_key, low, high, handle, error_response=error_response)
