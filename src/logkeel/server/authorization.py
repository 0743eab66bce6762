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

from collections.abc import Iterable

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

__all__ = ["RequestAuthorizer"]


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

    def allowed_names(
        self,
        ctx: RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
    ) -> set[str]:
        """The ``names`` the request's principal may ``operation``."""
        return {n for n in names if self.allowed(ctx, operation, resource_type, n)}
