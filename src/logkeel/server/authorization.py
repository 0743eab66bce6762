"""The broker's authorization check, handed to API families as a typed dependency.

``RequestAuthorizer.allowed(ctx, operation, resource_type, name)`` answers for the principal and
host of the request's connection. With ``authorizer.class.name`` empty every request is allowed
(Kafka without an authorizer). Otherwise the decision is ``cluster.acls.Authorizer`` over the
metadata store's current bindings, rebuilt only when the store hands out a new tuple of them —
in a cluster that is ZooKeeper's copy, so an ACL created through one broker applies on all.

Inter-broker requests (follower Fetch, controller traffic) authenticate like clients: in a
cluster with an authorizer the brokers' principal must be in ``super.users`` (or hold
CLUSTER_ACTION on the cluster), as in Kafka.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclOperation,
    Authorizer,
    ResourceType,
    operations_bit_field,
    parse_super_users,
)
from logkeel.cluster.metadata import MetadataStore
from logkeel.config.broker import BrokerConfig
from logkeel.server.handlers import Check, RequestContext, Rule

__all__ = [
    "ALTER_CLUSTER",
    "CLUSTER_ACTION",
    "DELETE_GROUP",
    "DESCRIBE_CLUSTER",
    "IDEMPOTENT_WRITE",
    "READ_GROUP",
    "WRITE_TXN",
    "RequestAuthorizer",
    "anyone",
    "check",
    "exposed_listeners",
    "gated",
    "per_entry",
    "refusal",
]


class RequestAuthorizer:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self.enabled = bool(config.authorizer_class_name)
        self._metadata = metadata
        self._super_users = parse_super_users(config.super_users)
        self._allow_everyone = bool(config.allow_everyone_if_no_acl_found)
        self._bindings: tuple[AclBinding, ...] | None = None
        self._authorizer = Authorizer(())

    def _current(self) -> Authorizer:
        bindings = self._metadata.acl_bindings()
        if bindings is not self._bindings:
            self._authorizer = Authorizer(bindings, self._super_users, self._allow_everyone)
            self._bindings = bindings
        return self._authorizer

    def allowed(
        self,
        ctx: RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str = CLUSTER_NAME,
    ) -> bool:
        if not self.enabled:
            return True
        principal = ctx.session.principal
        return self._current().authorize(principal, ctx.peer[0], operation, resource_type, name)

    def may_create_topic(self, ctx: RequestContext, name: str) -> bool:
        """Kafka's rule for creating (or auto-creating) a topic: CREATE on the cluster or on it."""
        return self.allowed(ctx, AclOperation.CREATE, ResourceType.CLUSTER) or self.allowed(
            ctx, AclOperation.CREATE, ResourceType.TOPIC, name
        )

    def may_write_idempotently(self, ctx: RequestContext) -> bool:
        """An idempotent producer's InitProducerId: IDEMPOTENT_WRITE on the cluster, or (Kafka
        3.0+, KIP-679) WRITE on some topic."""
        if not self.enabled or self.allowed(
            ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER
        ):
            return True
        return self._current().authorize_any(
            ctx.session.principal, ctx.peer[0], AclOperation.WRITE, ResourceType.TOPIC
        )

    def allowed_names(
        self,
        ctx: RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
    ) -> set[str]:
        """The ``names`` the request's principal may ``operation``."""
        return {n for n in names if self.allowed(ctx, operation, resource_type, n)}

    def authorized_operations(
        self, ctx: RequestContext, resource_type: ResourceType, name: str = CLUSTER_NAME
    ) -> int:
        """The operations of ``resource_type`` the principal may perform on ``name``, as
        Kafka's bit field (every supported one without an authorizer)."""
        return operations_bit_field(
            op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if self.allowed(ctx, op, resource_type, name)
        )


def exposed_listeners(config: BrokerConfig) -> list[str]:
    """PLAINTEXT listeners reachable from other machines while no authorizer is set: anyone
    there may read, write and delete every topic (the broker warns at start-up)."""
    if config.authorizer_class_name:
        return []
    return [
        listener.connection_string
        for listener in config.listeners
        if config.security_protocol(listener.name) == "PLAINTEXT"
        and not _is_loopback(listener.host)
    ]


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False  # the wildcard address: every interface
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it resolves to some interface


# -- rules ----------------------------------------------------------------------------------------
# Every API is registered with one of these (``handlers.Rule``): the whole-request checks Kafka
# makes before serving it, run by the gate (``refusal``) and answered through the API's error
# response; the checks its handler makes per topic, group, ... (in words); or why anyone may call
# it.


def check(
    operation: AclOperation,
    resource_type: ResourceType,
    error: ErrorCode,
    name_of: Callable[[Any], str | None] | None = None,
    named: str = "",
) -> Check:
    """Refuses with ``error`` unless ``operation`` is allowed on the resource ``name_of(request)``
    (the cluster when ``name_of`` is None); a None name means the check does not apply."""

    def refuse(
        permissions: RequestAuthorizer, ctx: RequestContext, request: Any
    ) -> ErrorCode | None:
        name = CLUSTER_NAME if name_of is None else name_of(request)
        if name is None or permissions.allowed(ctx, operation, resource_type, name):
            return None
        return error

    where = "the cluster" if name_of is None else f"the {named or resource_type.name.lower()}"
    return Check(f"{operation.name} on {where} ({error.name.upper()})", refuse)


def gated(*checks: Check, per_entry: str = "") -> Rule:
    return Rule(checks=checks, per_entry=per_entry)


def per_entry(what: str) -> Rule:
    return Rule(per_entry=what)


def anyone(why: str, per_entry: str = "") -> Rule:
    """Anyone may call the API (``why``); ``per_entry``: what it shows only to some."""
    return Rule(per_entry=per_entry, anyone=why)


def _group(request: Any) -> str | None:
    return str(request.group_id)


def _txn(request: Any) -> str | None:
    # AddPartitionsToTxn v0-3 name the field after the versions that have it (v4+ batch ids).
    txn_id = getattr(request, "transactional_id", None)
    if txn_id is None:
        txn_id = getattr(request, "v3_and_below_transactional_id", None)
    return None if txn_id is None else str(txn_id)


def _idempotent(
    permissions: RequestAuthorizer, ctx: RequestContext, request: Any
) -> ErrorCode | None:
    if getattr(request, "transactional_id", None) is not None:
        return None  # the transactional id's check applies instead
    if permissions.may_write_idempotently(ctx):
        return None
    return ErrorCode.cluster_authorization_failed


DELETE_GROUP = check(
    AclOperation.DELETE, ResourceType.GROUP, ErrorCode.group_authorization_failed, _group
)
READ_GROUP = check(
    AclOperation.READ, ResourceType.GROUP, ErrorCode.group_authorization_failed, _group
)
WRITE_TXN = check(
    AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
    ErrorCode.transactional_id_authorization_failed, _txn, "transactional id",
)  # fmt: skip
IDEMPOTENT_WRITE = Check(
    "without a transactional id: IDEMPOTENT_WRITE on the cluster or WRITE on some topic "
    "(CLUSTER_AUTHORIZATION_FAILED)",
    _idempotent,
)
DESCRIBE_CLUSTER = check(
    AclOperation.DESCRIBE, ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed
)
ALTER_CLUSTER = check(
    AclOperation.ALTER, ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed
)
CLUSTER_ACTION = check(
    AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed
)


def refusal(
    authorizer: RequestAuthorizer, ctx: RequestContext, request: Any, rule: Rule
) -> ErrorCode | None:
    """The error the whole-request checks of ``rule`` refuse ``request`` with, or None to serve
    it (always None without an authorizer)."""
    if not authorizer.enabled:
        return None
    for c in rule.checks:
        code = c.refuse(authorizer, ctx, request)
        if code is not None:
            return code
    return None
