"""CreateAcls, DescribeAcls and DeleteAcls: Kafka's admin clients manage the ACL bindings kept
in the metadata store (``cluster.acls``).

As in Kafka, creating and deleting needs ALTER on the cluster and describing needs DESCRIBE on
it; without an authorizer the APIs answer SECURITY_DISABLED. Writes go to the store in one
metadata write, off the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from logkeel.cluster.acls import (
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from logkeel.cluster.metadata import MetadataError, MetadataStore
from logkeel.server.api.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from logkeel.server.api.responses import Endpoint, nested, register_family, response
from logkeel.server.authorization import (
    ALTER_CLUSTER,
    DESCRIBE_CLUSTER,
    RequestAuthorizer,
    gated,
)
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey

__all__ = ["AclsApi", "register"]

_DISABLED = "No Authorizer is configured on the broker (authorizer.class.name)"


def _binding(c: Any) -> AclBinding:
    """An AclCreation of CreateAcls as a binding; AclError for a code Kafka does not define."""
    try:
        return AclBinding(
            ResourceType(c.resource_type), c.resource_name, PatternType(c.resource_pattern_type),
            c.principal, c.host, AclOperation(c.operation), AclPermissionType(c.permission_type),
        )  # fmt: skip
    except ValueError as exc:
        raise AclError(f"invalid ACL: {exc}") from exc


def _filter(f: Any) -> AclBindingFilter:
    try:
        return AclBindingFilter(
            ResourceType(f.resource_type_filter), f.resource_name_filter,
            PatternType(f.pattern_type_filter), f.principal_filter, f.host_filter,
            AclOperation(f.operation), AclPermissionType(f.permission_type),
        )  # fmt: skip
    except ValueError as exc:
        raise AclError(f"invalid ACL filter: {exc}") from exc


class AclsApi:
    def __init__(self, metadata: MetadataStore, authorizer: RequestAuthorizer) -> None:
        self._metadata = metadata
        self._authorizer = authorizer

    def _refusal(self) -> tuple[ErrorCode, str] | None:
        """SECURITY_DISABLED without an authorizer; DESCRIBE/ALTER on the cluster is the
        gate's (the rules at ``register``)."""
        if not self._authorizer.enabled:
            return ErrorCode.security_disabled, _DISABLED
        return None

    async def create(self, ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
        Result = nested(ctx, "AclCreationResult")
        refusal = self._refusal()
        results: list[tuple[ErrorCode, str | None]] = []
        valid: list[AclBinding] = []
        for creation in request.creations:
            if refusal is not None:
                results.append(refusal)
                continue
            try:
                binding = _binding(creation)
                binding.validate()
            except AclError as exc:
                results.append((ErrorCode.invalid_request, str(exc)))
                continue
            valid.append(binding)
            results.append((ErrorCode.none, None))
        if valid:
            try:
                await asyncio.to_thread(self._metadata.alter_acls, valid, ())
            except MetadataError as exc:
                failed = ErrorCode[exc.error_name.lower()], str(exc)
                results = [failed if code is ErrorCode.none else (code, m) for code, m in results]
        return response(
            ctx, results=tuple(Result(error_code=c, error_message=m) for c, m in results)
        )

    async def describe(
        self, ctx: RequestContext, request: DescribeAclsRequest
    ) -> DescribeAclsResponse:
        Resource, Description = nested(ctx, "DescribeAclsResource"), nested(ctx, "AclDescription")
        refusal = self._refusal()
        if refusal is not None:
            return response(ctx, error_code=refusal[0], error_message=refusal[1], resources=())
        try:
            wanted = _filter(request)
            wanted.validate()
        except AclError as exc:
            return response(ctx, error_code=ErrorCode.invalid_request, error_message=str(exc),
                            resources=())  # fmt: skip
        grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
        for b in self._metadata.acl_bindings():
            if wanted.matches(b):
                grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
        resources = tuple(
            Resource(
                resource_type=i8(rtype),
                resource_name=name,
                pattern_type=i8(ptype),
                acls=tuple(
                    Description(
                        principal=b.principal,
                        host=b.host,
                        operation=i8(b.operation),
                        permission_type=i8(b.permission),
                    )
                    for b in bindings
                ),
            )  # fmt: skip
            for (rtype, name, ptype), bindings in grouped.items()
        )
        return response(ctx, error_code=ErrorCode.none, error_message=None, resources=resources)

    async def delete(self, ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
        Result, Matching = (
            nested(ctx, "DeleteAclsFilterResult"),
            nested(ctx, "DeleteAclsMatchingAcl"),
        )
        refusal = self._refusal()
        if refusal is not None:
            return response(ctx, filter_results=tuple(
                Result(error_code=refusal[0], error_message=refusal[1], matching_acls=())
                for _ in request.filters
            ))  # fmt: skip
        current = self._metadata.acl_bindings()
        outcomes: list[tuple[ErrorCode, str | None, list[AclBinding]]] = []
        for f in request.filters:
            try:
                wanted = _filter(f)
                wanted.validate()
            except AclError as exc:
                outcomes.append((ErrorCode.invalid_request, str(exc), []))
                continue
            outcomes.append((ErrorCode.none, None, [b for b in current if wanted.matches(b)]))
        doomed = [b for _, _, matched in outcomes for b in matched]
        if doomed:
            try:
                await asyncio.to_thread(self._metadata.alter_acls, (), doomed)
            except MetadataError as exc:
                code = ErrorCode[exc.error_name.lower()]
                outcomes = [
                    (code, str(exc), []) if c is ErrorCode.none else (c, m, [])
                    for c, m, _ in outcomes
                ]
        return response(ctx, filter_results=tuple(
            Result(error_code=code, error_message=message, matching_acls=tuple(
                Matching(
                    error_code=ErrorCode.none, error_message=None, resource_type=i8(b.resource_type),
                    resource_name=b.resource_name, pattern_type=i8(b.pattern_type),
                    principal=b.principal, host=b.host, operation=i8(b.operation),
                    permission_type=i8(b.permission),
                )
                for b in matched
            ))
            for code, message, matched in outcomes
        ))  # fmt: skip

    def create_error(
        self, ctx: RequestContext, request: CreateAclsRequest, code: ErrorCode
    ) -> CreateAclsResponse:
        Result = nested(ctx, "AclCreationResult")
        return response(ctx, results=tuple(
            Result(error_code=code, error_message=None) for _ in request.creations
        ))  # fmt: skip

    def describe_error(
        self, ctx: RequestContext, request: DescribeAclsRequest, code: ErrorCode
    ) -> DescribeAclsResponse:
        return response(ctx, error_code=code, error_message=None, resources=())

    def delete_error(
        self, ctx: RequestContext, request: DeleteAclsRequest, code: ErrorCode
    ) -> DeleteAclsResponse:
        Result = nested(ctx, "DeleteAclsFilterResult")
        return response(ctx, filter_results=tuple(
            Result(error_code=code, error_message=None, matching_acls=()) for _ in request.filters
        ))  # fmt: skip


def register(
    registry: HandlerRegistry, metadata: MetadataStore, authorizer: RequestAuthorizer
) -> None:
    api = AclsApi(metadata, authorizer)
    register_family(registry, {
        ApiKey.DESCRIBE_ACLS: Endpoint(1, 3, api.describe, api.describe_error, gated(DESCRIBE_CLUSTER)),
        ApiKey.CREATE_ACLS: Endpoint(1, 3, api.create, api.create_error, gated(ALTER_CLUSTER)),
        ApiKey.DELETE_ACLS: Endpoint(1, 3, api.delete, api.delete_error, gated(ALTER_CLUSTER)),
    })  # fmt: skip
