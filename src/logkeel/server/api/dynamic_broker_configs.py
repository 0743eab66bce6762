"""The dynamic broker configs' part of DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs (BROKER resources): the replication throttle rates
(`cluster.dynamic_broker_configs`), written to ZooKeeper for a broker (its id) or the whole
cluster (the empty name, Kafka's <default>). Every other broker config stays static."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.dynamic_broker_configs import (
    DEFAULT_ENTITY,
    DYNAMIC_BROKER_CONFIGS,
    altered,
)
from logkeel.cluster.metadata import MetadataError, MetadataStore
from logkeel.config.types import ConfigSource, ConfigType
from logkeel.server.api.responses import EntryError, build
from logkeel.server.api.topic_refs import entry_error_for

__all__ = ["alter_dynamic", "describe_dynamic", "is_dynamic"]


def is_dynamic(name: str) -> bool:
    return name in DYNAMIC_BROKER_CONFIGS


async def alter_dynamic(
    metadata: MetadataStore,
    resource_name: str,
    changes: list[tuple[str, int, str | None]],
    *,
    incremental: bool,
    validate_only: bool,
) -> None:
    """Applies ``changes`` (name, operation, value) to the broker's (or, for an empty name,
    the cluster-wide) dynamic configs; raises EntryError with Kafka's code and message."""
    entity = resource_name or DEFAULT_ENTITY
    own, default = metadata.dynamic_broker_configs()
    current = own if resource_name else default
    try:
        new = altered(current, changes, incremental)
    except ValueError as exc:
        raise EntryError(ErrorCode.invalid_config, str(exc)) from None
    if validate_only or new == current:
        return  # nothing to write (a single node, which keeps none, accepts that too)

    def change(current: dict[str, str]) -> dict[str, str]:
        return altered(current, changes, incremental)

    try:
        await asyncio.to_thread(metadata.alter_dynamic_broker_configs, entity, change)
    except MetadataError as exc:
        raise entry_error_for(exc) from None


def describe_dynamic(
    types: Any,
    metadata: MetadataStore,
    *,
    defaults_only: bool,
    keys: Iterable[str] | None,
    include_synonyms: bool,
    include_docs: bool,
) -> tuple[Any, ...]:
    """The rows of the dynamic configs that are set: the broker's own (over the defaults), or
    the cluster-wide defaults alone (``defaults_only``: the empty resource name)."""
    own, default = metadata.dynamic_broker_configs()
    wanted = set(keys) if keys is not None else None
    rows = []
    for name, doc in DYNAMIC_BROKER_CONFIGS.items():
        if wanted is not None and name not in wanted:
            continue
        synonyms = []
        if not defaults_only and name in own:
            synonyms.append((name, own[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
        if name in default:
            synonyms.append((name, default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        if not synonyms:
            continue
        rows.append(
            build(
                types.DescribeConfigsResourceResult,
                name=name,
                value=synonyms[0][1],
                read_only=False,
                config_source=int(synonyms[0][2]),
                is_sensitive=False,
                synonyms=tuple(
                    build(types.DescribeConfigsSynonym, name=n, value=v, source=int(s))
                    for n, v, s in (synonyms if include_synonyms else [])
                ),
                config_type=int(ConfigType.LONG),
                documentation=doc if include_docs else None,
            )
        )
    return tuple(rows)
