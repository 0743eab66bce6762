"""Config APIs: DescribeConfigs (v1-4), AlterConfigs (v0-2), IncrementalAlterConfigs (v0-1).

Topic config overrides live in the metadata store, whose listeners (the replica manager)
reconfigure the partition logs; every per-resource failure is reported in its own entry with
Kafka's error code and a message (INVALID_CONFIG naming every bad key, INVALID_REQUEST for
duplicates, null values and unknown resource types, UNKNOWN_TOPIC_OR_PARTITION).

Broker configs are static in logkeel (server.properties and --override): DescribeConfigs
describes them with their sources and synonyms, marked read-only, and altering one is refused
with INVALID_REQUEST, as Kafka refuses configs it cannot update dynamically. Log levels are
dynamic, as in Kafka: the BROKER_LOGGER resource describes every logger with its level, and
IncrementalAlterConfigs SETs (FATAL, ERROR, WARN, INFO, DEBUG, TRACE) or DELETEs them.

With an authorizer, each resource needs DESCRIBE_CONFIGS (describe) or ALTER_CONFIGS (alter) on
its topic (TOPIC_AUTHORIZATION_FAILED) or group (GROUP_AUTHORIZATION_FAILED), or on the cluster
for broker and logger resources (CLUSTER_AUTHORIZATION_FAILED), as in Kafka. Group configs
(KIP-848's GROUP resource) are ``group_configs``'.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import MetadataError
from logkeel.config import (
    BROKER_CONFIG_DEF,
    TOPIC_CONFIG_DEF,
    ConfigEntry,
    ConfigKey,
    ConfigSource,
    ConfigType,
)
from logkeel.server.api.broker_loggers import (
    SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG,
    apply_logger_changes,
    broker_loggers,
    validate_logger_changes,
)
from logkeel.server.api.config_changes import OP_DELETE, apply_incremental, validate_topic_configs
from logkeel.server.api.config_synonyms import (
    Synonym,
    broker_key_synonyms,
    broker_synonym_names,
    topic_synonyms,
)
from logkeel.server.api.dynamic_broker_configs import alter_dynamic, describe_dynamic, is_dynamic
from logkeel.server.api.group_configs import RESOURCE_GROUP, GroupConfigs
from logkeel.server.api.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from logkeel.server.api.responses import (
    Endpoint,
    EntryError,
    build,
    nested_types,
    register_family,
    response,
)
from logkeel.server.api.topic_admin import TopicAdmin
from logkeel.server.api.topic_refs import check_topic_name, entry_error_for
from logkeel.server.authorization import per_entry
from logkeel.server.handlers import ErrorResponder, Handler, HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.server.topic_configs import TopicConfigs

__all__ = ["CONFIG_VERSIONS", "ConfigAdmin", "ConfigsApi", "register"]

log = logging.getLogger(__name__)

CONFIG_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
}

# ConfigResource.Type ids.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8


class ConfigAdmin(TopicAdmin, Protocol):
    """What the config APIs use besides the broker's configs and metadata store (topic
    overrides): this broker's id and the resolved configs of topics."""

    @property
    def node_id(self) -> int: ...

    @property
    def topic_configs(self) -> TopicConfigs: ...


class ConfigsApi:
    """DescribeConfigs, AlterConfigs and IncrementalAlterConfigs."""

    def __init__(self, broker: ConfigAdmin) -> None:
        self._broker = broker
        self._groups = GroupConfigs(broker)

    # DescribeConfigs ---------------------------------------------------------------------------

    def _require(self, ctx: RequestContext, operation: AclOperation, resource: Any) -> None:
        """Kafka's checks: the operation on the topic, or on the cluster for a broker's (and
        its loggers') configs."""
        authorizer = self._broker.authorizer
        if resource.resource_type == RESOURCE_TOPIC:
            if not authorizer.allowed(ctx, operation, ResourceType.TOPIC, resource.resource_name):
                raise EntryError(ErrorCode.topic_authorization_failed, "Authorization failed.")
        elif resource.resource_type == RESOURCE_GROUP:
            self._groups.require(ctx, operation, resource.resource_name)
        elif not authorizer.allowed(ctx, operation, ResourceType.CLUSTER):
            raise EntryError(ErrorCode.cluster_authorization_failed, "Authorization failed.")

    async def describe_configs(
        self, ctx: RequestContext, request: DescribeConfigsRequest
    ) -> DescribeConfigsResponse:
        types = nested_types(ApiKey.DESCRIBE_CONFIGS, ctx.api_version)
        synonyms = bool(getattr(request, "include_synonyms", False))
        docs = bool(getattr(request, "include_documentation", False))
        results = []
        for resource in request.resources:
            try:
                self._require(ctx, AclOperation.DESCRIBE_CONFIGS, resource)
                configs = self._describe(types, resource, synonyms, docs)
            except EntryError as exc:
                log.info(
                    "DescribeConfigs %d/%r: %s", resource.resource_type, resource.resource_name, exc
                )
                results.append(self._described(types, resource, exc.code, exc.message, ()))
            else:
                results.append(self._described(types, resource, ErrorCode.none, None, configs))
        return response(
            ctx,
            results=tuple(results),
        )

    def describe_configs_error(
        self, ctx: RequestContext, request: DescribeConfigsRequest, code: ErrorCode
    ) -> DescribeConfigsResponse:
        types = nested_types(ApiKey.DESCRIBE_CONFIGS, ctx.api_version)
        return response(
            ctx,
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
        if resource.resource_type == RESOURCE_GROUP:
            return self._groups.describe(
                types, resource.resource_name, keys, include_synonyms, include_docs
            )
        if resource.resource_type == RESOURCE_BROKER:
            if resource.resource_name:
                self._check_broker_name(resource.resource_name)
            dynamic = describe_dynamic(
                types,
                self._broker.metadata,
                defaults_only=not resource.resource_name,
                keys=keys,
                include_synonyms=include_synonyms,
                include_docs=include_docs,
            )
            if resource.resource_name == "":
                return dynamic  # the cluster-wide dynamic defaults alone, as Kafka
            return dynamic + self._describe_broker(types, keys, include_synonyms, include_docs)
        if resource.resource_type == RESOURCE_BROKER_LOGGER:
            if not resource.resource_name:
                raise EntryError(ErrorCode.invalid_request, "Broker id must not be empty")
            self._check_broker_name(resource.resource_name)
            return tuple(
                build(
                    types.DescribeConfigsResourceResult,
                    name=name,
                    value=level,
                    read_only=False,
                    config_source=SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG,
                    is_sensitive=False,
                    synonyms=(),
                    config_type=int(ConfigType.STRING),
                    documentation=None,
                )
                for name, level in broker_loggers().items()
                if keys is None or name in keys
            )
        raise EntryError(
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
        check_topic_name(name)
        broker = self._broker
        if broker.metadata.topic(name) is None:
            raise EntryError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        topic_config = broker.topic_configs.get(name)
        return tuple(
            self._entry(
                types,
                row,
                TOPIC_CONFIG_DEF[row.name],
                False,
                topic_synonyms(broker.config, topic_config, row.name),
                include_synonyms,
                include_docs,
            )
            for row in topic_config.describe(None if keys is None else list(keys))
        )

    def _describe_broker(
        self, types: Any, keys: Iterable[str] | None, include_synonyms: bool, include_docs: bool
    ) -> tuple[Any, ...]:
        config = self._broker.config
        return tuple(
            self._entry(
                types,
                row,
                BROKER_CONFIG_DEF[row.name],
                row.read_only,
                [s for n in broker_synonym_names(row.name) for s in broker_key_synonyms(config, n)],
                include_synonyms,
                include_docs,
            )
            for row in config.describe(None if keys is None else list(keys))
        )

    @staticmethod
    def _entry(
        types: Any,
        row: ConfigEntry,
        key: ConfigKey,
        read_only: bool,
        synonyms: list[Synonym],
        include_synonyms: bool,
        include_docs: bool,
    ) -> Any:
        """One DescribeConfigs row; its source is that of its first synonym (the one in effect)."""
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        return build(
            types.DescribeConfigsResourceResult,
            name=row.name,
            value=row.value,
            read_only=read_only,
            config_source=int(source),
            is_sensitive=row.is_sensitive,
            synonyms=tuple(
                build(types.DescribeConfigsSynonym, name=n, value=v, source=int(s))
                for n, v, s in (synonyms if include_synonyms else [])
            ),
            config_type=int(key.type),
            documentation=key.doc if include_docs else None,
        )

    def _check_broker_name(self, name: str) -> None:
        try:
            node = int(name)
        except ValueError:
            raise EntryError(
                ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}"
            ) from None
        if node != self._broker.node_id:
            raise EntryError(
                ErrorCode.invalid_request,
                f"Unexpected broker id, expected {self._broker.node_id} or empty string, "
                f"but received {name}",
            )

    # AlterConfigs and IncrementalAlterConfigs --------------------------------------------------

    async def alter_configs(
        self, ctx: RequestContext, request: AlterConfigsRequest
    ) -> AlterConfigsResponse:
        return await self._alter(ctx, request, incremental=False)

    async def incremental_alter_configs(
        self, ctx: RequestContext, request: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse:
        return await self._alter(ctx, request, incremental=True)

    def alter_configs_error(
        self,
        ctx: RequestContext,
        request: AlterConfigsRequest | IncrementalAlterConfigsRequest,
        code: ErrorCode,
    ) -> AlterConfigsResponse | IncrementalAlterConfigsResponse:
        types = nested_types(ctx.api_key, ctx.api_version)
        return response(
            ctx,
            responses=tuple(self._altered(types, r, code, None) for r in request.resources),
        )

    async def _alter(
        self,
        ctx: RequestContext,
        request: AlterConfigsRequest | IncrementalAlterConfigsRequest,
        *,
        incremental: bool,
    ) -> Any:  # the response of the request's API
        types = nested_types(ctx.api_key, ctx.api_version)
        ids = Counter((r.resource_type, r.resource_name) for r in request.resources)
        results = []
        for resource in request.resources:
            try:
                if ids[(resource.resource_type, resource.resource_name)] > 1:
                    raise EntryError(
                        ErrorCode.invalid_request, "Each resource must appear at most once."
                    )
                self._require(ctx, AclOperation.ALTER_CONFIGS, resource)
                await self._alter_one(resource, request.validate_only, incremental)
            except EntryError as exc:
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
        return response(
            ctx,
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
            raise EntryError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        nulls = [
            c.name
            for c in resource.configs
            if c.value is None and not (incremental and c.config_operation == OP_DELETE)
        ]
        if nulls:
            raise EntryError(
                ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}"
            )
        if incremental:
            bad_ops = [
                c.config_operation for c in resource.configs if not 0 <= c.config_operation <= 3
            ]
            if bad_ops:
                raise EntryError(ErrorCode.invalid_request, f"Unknown operations type {bad_ops[0]}")
        if resource.resource_type == RESOURCE_BROKER_LOGGER and incremental:
            self._check_broker_name(resource.resource_name)
            changes = [(c.name, c.config_operation, c.value) for c in resource.configs]
            validate_logger_changes(changes)
            if not validate_only:
                apply_logger_changes(changes)
            return
        if resource.resource_type == RESOURCE_GROUP:
            await self._groups.alter(resource, validate_only, incremental)
            return
        if resource.resource_type == RESOURCE_BROKER:
            if resource.resource_name:
                self._check_broker_name(resource.resource_name)
            static = [n for n in names if not is_dynamic(n)]
            if static:
                raise EntryError(
                    ErrorCode.invalid_request,
                    "Cannot update these configs dynamically: "
                    f"{', '.join(sorted(static))} (logkeel's broker configs are static but for "
                    "the replication throttle rates: set them in server.properties or with "
                    "--override)",
                )
            if names or not incremental:
                await alter_dynamic(
                    self._broker.metadata,
                    resource.resource_name,
                    [
                        (c.name, getattr(c, "config_operation", 0), c.value)
                        for c in resource.configs
                    ],
                    incremental=incremental,
                    validate_only=validate_only,
                )
            return
        if resource.resource_type != RESOURCE_TOPIC:
            raise EntryError(
                ErrorCode.invalid_request, f"Unknown resource type {resource.resource_type}"
            )
        name = resource.resource_name
        check_topic_name(name)
        broker = self._broker
        state = broker.metadata.topic(name)
        if state is None:
            raise EntryError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        if incremental:
            overrides = apply_incremental(
                state.configs,
                ((c.name, c.config_operation, c.value) for c in resource.configs),
                broker.topic_configs.get(name),
            )
        else:
            # The legacy API replaces the topic's whole set of overrides.
            overrides = {c.name: c.value for c in resource.configs}
        validate_topic_configs(broker.config, overrides)
        if validate_only:
            return
        try:
            await asyncio.to_thread(broker.metadata.set_topic_configs, name, overrides)
        except MetadataError as exc:
            raise entry_error_for(exc) from None
        log.info("topic %s configs are now %s", name, overrides or "the broker defaults")


_ALTER_RULE = (
    "ALTER_CONFIGS on each topic (TOPIC_AUTHORIZATION_FAILED) or group "
    "(GROUP_AUTHORIZATION_FAILED), on the cluster for a broker or broker logger "
    "(CLUSTER_AUTHORIZATION_FAILED)"
)
_RULES = {
    ApiKey.DESCRIBE_CONFIGS: (
        "DESCRIBE_CONFIGS on each topic (TOPIC_AUTHORIZATION_FAILED) or group "
        "(GROUP_AUTHORIZATION_FAILED), on the cluster for a broker or broker logger "
        "(CLUSTER_AUTHORIZATION_FAILED)"
    ),
    ApiKey.ALTER_CONFIGS: _ALTER_RULE,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _ALTER_RULE,
}


def register(registry: HandlerRegistry, broker: ConfigAdmin) -> ConfigsApi:
    api = ConfigsApi(broker)
    handlers: dict[ApiKey, tuple[Handler, ErrorResponder]] = {
        ApiKey.DESCRIBE_CONFIGS: (api.describe_configs, api.describe_configs_error),
        ApiKey.ALTER_CONFIGS: (api.alter_configs, api.alter_configs_error),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (api.incremental_alter_configs, api.alter_configs_error),
    }
    register_family(
        registry,
        {
            key: Endpoint(*CONFIG_VERSIONS[key], handle, error, per_entry(_RULES[key]))
            for key, (handle, error) in handlers.items()
        },
    )
    return api
