"""DescribeClientQuotas and AlterClientQuotas (KIP-546): the quotas set on users, client ids
or both, read with Kafka's filters and changed per entity. Kept in the metadata store, so every
broker of a cluster enforces what any of them was told (``server/quotas.py``).

Entities, keys and values are checked by ``cluster.client_quotas``; an entry refused there
answers INVALID_REQUEST and changes nothing. The valid entries are written in one metadata
write, off the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import f64

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.client_quotas import (
    FilterComponent,
    QuotaEntity,
    QuotaError,
    apply_changes,
    check_filter,
    entity_key,
    matches,
    parse_entity_key,
)
from logkeel.cluster.metadata import MetadataError, MetadataStore
from logkeel.server.api.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from logkeel.server.api.responses import nested, response
from logkeel.server.authorization import check, gated
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey

__all__ = ["ClientQuotasApi", "register"]

DESCRIBE_CONFIGS_CLUSTER = check(
    AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed
)
ALTER_CONFIGS_CLUSTER = check(
    AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed
)


class ClientQuotasApi:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    async def describe(
        self, ctx: RequestContext, request: DescribeClientQuotasRequest
    ) -> DescribeClientQuotasResponse:
        Entry, Entity, Value = (
            nested(ctx, "EntryData"),
            nested(ctx, "EntityData"),
            nested(ctx, "ValueData"),
        )
        try:
            components = check_filter(
                FilterComponent(c.entity_type, int(c.match_type), c.match)
                for c in request.components
            )
        except QuotaError as exc:
            return response(
                ctx, error_code=ErrorCode.invalid_request, error_message=str(exc), entries=None
            )
        entries = []
        for key, values in sorted(self._metadata.client_quotas().items()):
            entity = parse_entity_key(key)
            if not values or not matches(entity, components, bool(request.strict)):
                continue
            entries.append(
                Entry(
                    entity=tuple(
                        Entity(entity_type=t, entity_name=n) for t, n in entity.components()
                    ),
                    values=tuple(
                        Value(key=k, value=f64(float(v))) for k, v in sorted(values.items())
                    ),
                )
            )
        return response(ctx, error_code=ErrorCode.none, error_message=None, entries=tuple(entries))

    async def alter(
        self, ctx: RequestContext, request: AlterClientQuotasRequest
    ) -> AlterClientQuotasResponse:
        Entry = nested(ctx, "EntryData")
        current = self._metadata.client_quotas()
        changes: dict[str, dict[str, float]] = {}
        outcomes: list[tuple[Any, ErrorCode, str | None, str | None]] = []
        for entry in request.entries:
            try:
                entity = QuotaEntity.of((e.entity_type, e.entity_name) for e in entry.entity)
                key = entity_key(entity)
                if key in changes:
                    raise QuotaError(f"Entity {key} is altered twice in one request")
                ops = [(op.key, None if op.remove else float(op.value)) for op in entry.ops]
                changes[key] = apply_changes(current.get(key, {}), ops)
                outcomes.append((entry, ErrorCode.none, None, key))
            except QuotaError as exc:
                outcomes.append((entry, ErrorCode.invalid_request, str(exc), None))
        failure: str | None = None
        if changes and not request.validate_only:
            try:
                await asyncio.to_thread(self._metadata.alter_client_quotas, changes)
            except MetadataError as exc:
                failure = str(exc)
        results = []
        for entry, code, message, altered in outcomes:
            if failure is not None and altered is not None:
                code, message = ErrorCode.unknown_server_error, failure
            results.append(Entry(error_code=code, error_message=message, entity=_echo(ctx, entry)))
        return response(ctx, entries=tuple(results))

    def describe_error(
        self, ctx: RequestContext, request: DescribeClientQuotasRequest, code: ErrorCode
    ) -> DescribeClientQuotasResponse:
        return response(ctx, error_code=code, error_message=None, entries=None)

    def alter_error(
        self, ctx: RequestContext, request: AlterClientQuotasRequest, code: ErrorCode
    ) -> AlterClientQuotasResponse:
        Entry = nested(ctx, "EntryData")
        return response(
            ctx,
            entries=tuple(
                Entry(error_code=code, error_message=None, entity=_echo(ctx, entry))
                for entry in request.entries
            ),
        )


def _echo(ctx: RequestContext, entry: Any) -> tuple[Any, ...]:
    """An AlterClientQuotas entry's entity as the response names it back."""
    Entity = nested(ctx, "EntityData")
    return tuple(Entity(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity)


def register(registry: HandlerRegistry, metadata: MetadataStore) -> None:
    api = ClientQuotasApi(metadata)
    registry.register(
        ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, api.describe,
        rule=gated(DESCRIBE_CONFIGS_CLUSTER), error_response=api.describe_error,
    )  # fmt: skip
    registry.register(
        ApiKey.ALTER_CLIENT_QUOTAS, 0, 1, api.alter,
        rule=gated(ALTER_CONFIGS_CLUSTER), error_response=api.alter_error,
    )  # fmt: skip
