"""Kafka's ACL authorizer semantics as pure functions: ACL bindings, binding filters (for
DescribeAcls/DeleteAcls) and the allow/deny decision, with no sockets and no store.

An ACL binding is metadata: the metadata store (embedded or ZooKeeper) keeps the bindings as
``AclBinding.to_json()`` documents so that every broker of a cluster decides alike. The decision
follows Kafka's AclAuthorizer/StandardAuthorizer:

- a super user is allowed everything;
- the ACLs that apply to a resource are the LITERAL ones naming it, the LITERAL ``*`` wildcard of
  its type, and the PREFIXED ones whose name starts its name;
- a matching DENY (for the operation itself or ALL) wins over any ALLOW;
- with no ACL at all on the resource, ``allow.everyone.if.no.acl.found`` decides;
- otherwise an ALLOW is needed, for the operation, ALL, or an operation implying it
  (READ/WRITE/DELETE/ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS).
  Implication applies to ALLOW only: a DENY of READ does not deny DESCRIBE.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED_OPERATIONS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "changed_bindings",
    "decode_bindings",
    "encode_bindings",
    "operations_bit_field",
    "AclBinding",
    "AclBindingFilter",
    "AclError",
    "AclOperation",
    "AclPermissionType",
    "Authorizer",
    "PatternType",
    "ResourceType",
    "parse_super_users",
]

# Kafka's wire codes (org.apache.kafka.common.acl / resource).


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"

# The resource types an ACL may name (Kafka refuses ACLs on the others from CreateAcls).
_BINDABLE = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)
# The operations each resource type supports (Kafka's AclEntry.supportedOperations): what an
# "authorized operations" bit field of Metadata, DescribeCluster and DescribeGroups may hold.
SUPPORTED_OPERATIONS: Mapping[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
}  # fmt: skip


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit ``code`` set for each operation (codes stay below 31)."""
    return sum(1 << int(op) for op in set(operations))


# Operations an ALLOW of the key grants besides itself.
_IMPLIED_BY: Mapping[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


class AclError(ValueError):
    """A binding or filter that Kafka would refuse; ``error_name`` is Kafka's error for it."""

    def __init__(self, message: str, error_name: str = "INVALID_REQUEST") -> None:
        super().__init__(message)
        self.error_name = error_name


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def validate(self) -> None:
        """Refuse what Kafka's CreateAcls refuses: unknown or ANY values, an unbindable type,
        a principal not of the ``Type:name`` form, a cluster resource not named kafka-cluster."""
        if self.resource_type not in _BINDABLE:
            raise AclError(f"ACLs cannot name resource type {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(
                f"an ACL's pattern type must be LITERAL or PREFIXED, not {self.pattern_type.name}"
            )
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise AclError(f"an ACL cannot grant operation {self.operation.name}")
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise AclError(f"an ACL's permission must be ALLOW or DENY, not {self.permission.name}")
        if not self.resource_name:
            raise AclError("an ACL's resource name must not be empty")
        if self.resource_type is ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        kind, _, name = self.principal.partition(":")
        if not kind or not name:
            raise AclError(f"principal {self.principal!r} is not of the form Type:name")
        if not self.host:
            raise AclError("an ACL's host must not be empty (use * for any host)")

    def to_json(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type.name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> AclBinding:
        return cls(
            ResourceType[doc["resource_type"]],
            doc["resource_name"],
            PatternType[doc["pattern_type"]],
            doc["principal"],
            doc["host"],
            AclOperation[doc["operation"]],
            AclPermissionType[doc["permission"]],
        )

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's resource pattern covers the named resource."""
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls/DeleteAcls filter; None for a name, principal or host matches any."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> None:
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value == 0:
                raise AclError(f"a filter cannot match UNKNOWN {type(value).__name__}")

    def matches(self, binding: AclBinding) -> bool:
        if (
            self.resource_type is not ResourceType.ANY
            and binding.resource_type is not self.resource_type
        ):
            return False
        if not self._matches_pattern(binding):
            return False
        if self.principal is not None and binding.principal != self.principal:
            return False
        if self.host is not None and binding.host != self.host:
            return False
        if self.operation is not AclOperation.ANY and binding.operation is not self.operation:
            return False
        return self.permission is AclPermissionType.ANY or binding.permission is self.permission

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.pattern_type is PatternType.MATCH:
            # MATCH: every binding that would apply to the named resource.
            if self.resource_name is None:
                return True
            return binding.applies_to(binding.resource_type, self.resource_name)
        if (
            self.pattern_type is not PatternType.ANY
            and binding.pattern_type is not self.pattern_type
        ):
            return False
        return self.resource_name is None or binding.resource_name == self.resource_name


def changed_bindings(
    current: Iterable[AclBinding], add: Iterable[AclBinding], remove: Iterable[AclBinding]
) -> tuple[AclBinding, ...]:
    """``current`` less ``remove`` plus ``add``, in order, each binding once."""
    gone = set(remove)
    return tuple(dict.fromkeys([*(b for b in current if b not in gone), *add]))


def encode_bindings(bindings: Iterable[AclBinding]) -> bytes:
    return json.dumps({"version": 1, "acls": [b.to_json() for b in bindings]}).encode()


def decode_bindings(data: bytes | None) -> tuple[AclBinding, ...]:
    if not data:
        return ()
    return tuple(AclBinding.from_json(doc) for doc in json.loads(data)["acls"])


def parse_super_users(value: str) -> frozenset[str]:
    """Kafka's ``super.users``: principals separated by semicolons (``User:a;User:b``)."""
    return frozenset(part.strip() for part in value.split(";") if part.strip())


class Authorizer:
    """The decision over one snapshot of bindings; rebuilt when the stored bindings change."""

    def __init__(
        self,
        bindings: Iterable[AclBinding],
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        for binding in bindings:
            self._by_type.setdefault(binding.resource_type, []).append(binding)
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        applicable = [
            b
            for b in self._by_type.get(resource_type, ())
            if b.applies_to(resource_type, resource_name)
        ]
        if not applicable:
            return self.allow_everyone_if_no_acl_found
        mine = [b for b in applicable if _matches_identity(b, principal, host)]
        if any(
            b.permission is AclPermissionType.DENY and b.operation in (operation, AclOperation.ALL)
            for b in mine
        ):
            return False
        granting = {operation, AclOperation.ALL} | _IMPLIED_BY.get(operation, frozenset())
        return any(
            b.permission is AclPermissionType.ALLOW and b.operation in granting for b in mine
        )

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type may be ``operation``'d (Kafka's
        authorizeByResourceType): a DENY of the wildcard resource refuses the whole type; else
        some ALLOW must name a resource that no DENY covers (a literal name denied literally or
        by a denied prefix, an allowed prefix that a denied prefix contains)."""
        if principal in self.super_users:
            return True
        granting = (operation, AclOperation.ALL)
        mine = [
            b
            for b in self._by_type.get(resource_type, ())
            if b.operation in granting and _matches_identity(b, principal, host)
        ]
        deny_literals: set[str] = set()
        deny_prefixes: set[str] = set()
        allow_literals: set[str] = set()
        allow_prefixes: set[str] = set()
        for b in mine:
            literal = b.pattern_type is PatternType.LITERAL
            if b.permission is AclPermissionType.DENY:
                if literal and b.resource_name == WILDCARD:
                    return False
                (deny_literals if literal else deny_prefixes).add(b.resource_name)
            elif b.permission is AclPermissionType.ALLOW:
                if literal and b.resource_name == WILDCARD:
                    return True
                (allow_literals if literal else allow_prefixes).add(b.resource_name)

        def prefix_denied(name: str) -> bool:
            return any(name[:i] in deny_prefixes for i in range(1, len(name) + 1))

        if any(not prefix_denied(p) for p in allow_prefixes):
            return True
        return any(n not in deny_literals and not prefix_denied(n) for n in allow_literals)


def _matches_identity(binding: AclBinding, principal: str, host: str) -> bool:
    return binding.principal in (principal, WILDCARD_PRINCIPAL) and binding.host in (host, WILDCARD)
