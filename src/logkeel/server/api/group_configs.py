"""The GROUP config resource (type 32, KIP-848) of DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs: a consumer group's ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms``, kept in the metadata store (every broker sees them, so a
group keeps its configs when its coordinator moves) and checked by ``group/group_configs``
(INVALID_CONFIG outside the broker's ``group.consumer.min/max.*`` bounds). A group needs no
members to have configs, as in Kafka. ACLs, Kafka's: DESCRIBE_CONFIGS or ALTER_CONFIGS on the
group (GROUP_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import MetadataError
from logkeel.config import ConfigSource, ConfigType
from logkeel.server.api.config_synonyms import broker_key_synonyms
from logkeel.server.api.responses import EntryError, build
from logkeel.server.api.topic_admin import TopicAdmin
from logkeel.server.api.topic_refs import entry_error_for
from logkeel.server.group.group_configs import (
    DOCS,
    GroupConfigError,
    apply_group_config_ops,
    describe_group_configs,
    validate_group_configs,
)
from logkeel.server.group.results import CoordinatorSettings
from logkeel.server.handlers import RequestContext

__all__ = ["RESOURCE_GROUP", "GroupConfigs"]

log = logging.getLogger(__name__)

RESOURCE_GROUP = 32
# DescribeConfigs' config_source of a group's own config (Kafka's GROUP_CONFIG).
SOURCE_GROUP_CONFIG = 8


class GroupConfigs:
    def __init__(self, broker: TopicAdmin) -> None:
        self._broker = broker
        self._settings = CoordinatorSettings.from_broker_config(broker.config).consumer

    def require(self, ctx: RequestContext, operation: AclOperation, group_id: str) -> None:
        if not self._broker.authorizer.allowed(ctx, operation, ResourceType.GROUP, group_id):
            raise EntryError(ErrorCode.group_authorization_failed, "Authorization failed.")

    @staticmethod
    def _check_name(group_id: str) -> None:
        if not group_id:
            raise EntryError(ErrorCode.invalid_request, "Group name must not be empty.")

    def describe(
        self,
        types: Any,
        group_id: str,
        keys: Iterable[str] | None,
        include_synonyms: bool,
        include_docs: bool,
    ) -> tuple[Any, ...]:
        self._check_name(group_id)
        overrides = self._broker.metadata.group_configs().get(group_id, {})
        out = []
        for row in describe_group_configs(self._settings, overrides, keys):
            synonyms: list[tuple[str, str | None, int]] = [
                (n, v, int(src))
                for n, v, src in broker_key_synonyms(self._broker.config, row.broker_key)
            ]
            if row.overridden:
                synonyms.insert(0, (row.name, row.value, SOURCE_GROUP_CONFIG))
            source = synonyms[0][2] if synonyms else int(ConfigSource.DEFAULT_CONFIG)
            out.append(
                build(
                    types.DescribeConfigsResourceResult,
                    name=row.name,
                    value=row.value,
                    read_only=False,
                    config_source=source,
                    is_sensitive=False,
                    synonyms=tuple(
                        build(types.DescribeConfigsSynonym, name=n, value=v, source=s)
                        for n, v, s in (synonyms if include_synonyms else [])
                    ),
                    config_type=int(ConfigType.INT),
                    documentation=DOCS[row.name] if include_docs else None,
                )
            )
        return tuple(out)

    async def alter(self, resource: Any, validate_only: bool, incremental: bool) -> None:
        group_id = resource.resource_name
        self._check_name(group_id)
        current = self._broker.metadata.group_configs().get(group_id, {})
        try:
            if incremental:
                overrides = apply_group_config_ops(
                    current, ((c.name, c.config_operation, c.value) for c in resource.configs)
                )
            else:
                overrides = {c.name: c.value for c in resource.configs}
            validate_group_configs(self._settings, overrides)
        except GroupConfigError as exc:
            raise EntryError(ErrorCode.invalid_config, str(exc)) from None
        if validate_only:
            return
        try:
            await asyncio.to_thread(
                self._broker.metadata.alter_group_configs, {group_id: overrides}
            )
        except MetadataError as exc:
            raise entry_error_for(exc) from None
        log.info("group %s configs are now %s", group_id, overrides or "the broker's")
