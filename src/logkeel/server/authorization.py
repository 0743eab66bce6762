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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.cluster.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    Authorizer,
    ResourceType,
    parse_super_users,
)
from logkeel.cluster.metadata import MetadataStore
from logkeel.config.broker import BrokerConfig
from logkeel.server.handlers import RequestContext
from logkeel.server.protocol import ApiKey

__all__ = ["REQUEST_CHECKS", "RequestAuthorizer", "exposed_listeners", "refusal"]


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


# -- request-level checks -----------------------------------------------------------------------
# Kafka's checks that cover a whole request, by API: (operation, resource type, the resource's
# name in the request or None for the cluster, the error of a refusal). A refused request is
# answered by its family's error response with that error. Checks per topic or partition
# (Produce, Fetch, Metadata) live in those handlers, where each entry carries its own error.
Check = tuple[AclOperation, ResourceType, Callable[[Any], str | None], ErrorCode]


def _group(request: Any) -> str | None:
    return str(request.group_id)


def _txn(request: Any) -> str | None:
    # AddPartitionsToTxn v0-3 name the field after the versions that have it (v4+ batch ids).
    txn_id = getattr(request, "transactional_id", None)
    if txn_id is None:
        txn_id = getattr(request, "v3_and_below_transactional_id", None)
    return None if txn_id is None else str(txn_id)


def _cluster(_request: Any) -> str | None:
    return CLUSTER_NAME


def _coordinator_key(request: Any) -> str | None:
    keys = getattr(request, "coordinator_keys", None)
    return str(keys[0]) if keys else str(getattr(request, "key", ""))


_READ_GROUP: Check = (
    AclOperation.READ,
    ResourceType.GROUP,
    _group,
    ErrorCode.group_authorization_failed,
)
_WRITE_TXN: Check = (
    AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, _txn,
    ErrorCode.transactional_id_authorization_failed,
)  # fmt: skip
_DESCRIBE_CLUSTER: Check = (
    AclOperation.DESCRIBE,
    ResourceType.CLUSTER,
    _cluster,
    ErrorCode.cluster_authorization_failed,
)
_ALTER_CLUSTER: Check = (
    AclOperation.ALTER,
    ResourceType.CLUSTER,
    _cluster,
    ErrorCode.cluster_authorization_failed,
)

REQUEST_CHECKS: Mapping[int, tuple[Check, ...]] = {
    ApiKey.JOIN_GROUP: (_READ_GROUP,),
    ApiKey.SYNC_GROUP: (_READ_GROUP,),
    ApiKey.HEARTBEAT: (_READ_GROUP,),
    ApiKey.LEAVE_GROUP: (_READ_GROUP,),
    ApiKey.OFFSET_COMMIT: (_READ_GROUP,),
    ApiKey.OFFSET_DELETE: (
        (AclOperation.DELETE, ResourceType.GROUP, _group, ErrorCode.group_authorization_failed),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: (_WRITE_TXN, _READ_GROUP),
    ApiKey.TXN_OFFSET_COMMIT: (_WRITE_TXN, _READ_GROUP),
    ApiKey.END_TXN: (_WRITE_TXN,),
    ApiKey.ADD_PARTITIONS_TO_TXN: (_WRITE_TXN,),
    ApiKey.INIT_PRODUCER_ID: (_WRITE_TXN,),  # no transactional id: see _idempotent_refusal
    ApiKey.DESCRIBE_LOG_DIRS: (_DESCRIBE_CLUSTER,),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (_DESCRIBE_CLUSTER,),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (_ALTER_CLUSTER,),
    ApiKey.ELECT_LEADERS: (_ALTER_CLUSTER,),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (_ALTER_CLUSTER,),
    # Only brokers write transaction markers (a transaction coordinator on another broker).
    ApiKey.WRITE_TXN_MARKERS: (
        (
            AclOperation.CLUSTER_ACTION,
            ResourceType.CLUSTER,
            _cluster,
            ErrorCode.cluster_authorization_failed,
        ),
    ),
}


def refusal(authorizer: RequestAuthorizer, ctx: RequestContext, request: Any) -> ErrorCode | None:
    """The error a request-level check refuses ``request`` with, or None to serve it."""
    if not authorizer.enabled:
        return None
    if ctx.api_key == ApiKey.FIND_COORDINATOR:
        resource = (
            ResourceType.TRANSACTIONAL_ID
            if getattr(request, "key_type", 0) == 1
            else ResourceType.GROUP
        )
        error = (
            ErrorCode.transactional_id_authorization_failed
            if resource is ResourceType.TRANSACTIONAL_ID
            else ErrorCode.group_authorization_failed
        )
        checks: tuple[Check, ...] = ((AclOperation.DESCRIBE, resource, _coordinator_key, error),)
    else:
        checks = REQUEST_CHECKS.get(ctx.api_key, ())
    for operation, resource_type, name_of, error in checks:
        name = name_of(request)
        if name is None:
            if ctx.api_key == ApiKey.INIT_PRODUCER_ID and not authorizer.may_write_idempotently(
                ctx
            ):
                return ErrorCode.cluster_authorization_failed
            continue
        if not authorizer.allowed(ctx, operation, resource_type, name):
            return error
    return None
