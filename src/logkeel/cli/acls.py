"""`logkeel acls add|list|remove`: the ACLs of a running broker, managed through Kafka's
CreateAcls / DescribeAcls / DeleteAcls (what kafka-acls.sh does). The command talks to a
PLAINTEXT listener, or to a TLS or SASL one with ``--command-config`` (Kafka client
properties); its principal needs ALTER on the cluster (DESCRIBE to list) once an authorizer is
on, e.g. through ``super.users``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

# Version 3 of each ACL API (flexible, Kafka 2.4+).
from kio.schema.create_acls.v3 import request as create_acls
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.describe_acls.v3 import request as describe_acls
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8
from rich.console import Console
from rich.table import Table

from logkeel.cli.broker_requests import (
    bootstrap_option,
    call,
    command_config_option,
    fail,
)
from logkeel.cluster.acls import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = ["acls_group"]

_OPERATIONS = [op.name for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]


def _options(command: Callable[..., None]) -> Callable[..., None]:
    """The resource and binding options add and remove share (kafka-acls.sh's, shortened)."""
    for decorator in reversed([
        click.option("--topic"), click.option("--group"),
        click.option("--transactional-id"),
        click.option("--cluster", is_flag=True, help=f"The cluster resource ({CLUSTER_NAME})."),
        click.option("--prefixed", is_flag=True, help="The name is a prefix (PREFIXED pattern)."),
        click.option("--principal", help="Type:name, e.g. User:alice; User:* for everyone."),
        click.option("--host", help="Client address the ACL applies to (default: any, *)."),
        click.option("--operation", "operations", multiple=True,
                     type=click.Choice(_OPERATIONS, case_sensitive=False), help="Repeatable."),
        click.option("--deny", is_flag=True, help="A DENY binding (default: ALLOW)."),
        bootstrap_option,
        command_config_option,
    ]):  # fmt: skip
        command = decorator(command)
    return command


@click.group("acls")
def acls_group() -> None:
    """ACLs enforced when the broker has authorizer.class.name set."""


def _resource(
    topic: str | None, group: str | None, transactional_id: str | None, cluster: bool, *,
    required: bool,
) -> tuple[ResourceType, str | None]:  # fmt: skip
    chosen = [
        (kind, name)
        for kind, name in (
            (ResourceType.TOPIC, topic),
            (ResourceType.GROUP, group),
            (ResourceType.TRANSACTIONAL_ID, transactional_id),
            (ResourceType.CLUSTER, CLUSTER_NAME if cluster else None),
        )
        if name is not None
    ]
    if len(chosen) > 1:
        fail("acls", "name one resource: --topic, --group, --transactional-id or --cluster")
    if not chosen:
        if required:
            fail("acls", "name a resource: --topic, --group, --transactional-id or --cluster")
        return ResourceType.ANY, None
    return chosen[0]


@acls_group.command("add")
@_options
def add(topic: str | None, group: str | None, transactional_id: str | None, cluster: bool,
        prefixed: bool, principal: str | None, host: str | None, operations: tuple[str, ...],
        deny: bool, bootstrap_server: str) -> None:  # fmt: skip
    """Add ACLs: PRINCIPAL may (or with --deny may not) do each OPERATION on the resource."""
    kind, name = _resource(topic, group, transactional_id, cluster, required=True)
    assert name is not None  # required: a resource was named
    if principal is None or not operations:
        fail("acls", "add needs --principal and at least one --operation")
    creations = tuple(
        create_acls.AclCreation(
            resource_type=i8(kind),
            resource_name=name,
            resource_pattern_type=i8(PatternType.PREFIXED if prefixed else PatternType.LITERAL),
            principal=principal,
            host=host or "*",
            operation=i8(AclOperation[op.upper()]),
            permission_type=i8(AclPermissionType.DENY if deny else AclPermissionType.ALLOW),
        )  # fmt: skip
        for op in operations
    )
    answer = call("acls", bootstrap_server, create_acls.CreateAclsRequest(creations=creations))
    problems = [
        r.error_message or r.error_code.name
        for r in answer.results
        if r.error_code != ErrorCode.none
    ]
    if problems:
        fail("acls", "; ".join(dict.fromkeys(problems)))
    click.echo(f"added {len(creations)} ACL(s)")


@acls_group.command("list")
@_options
def list_acls(topic: str | None, group: str | None, transactional_id: str | None, cluster: bool,
              prefixed: bool, principal: str | None, host: str | None,
              operations: tuple[str, ...], deny: bool, bootstrap_server: str) -> None:  # fmt: skip
    """List ACLs (all, or those that apply to the named resource)."""
    kind, name = _resource(topic, group, transactional_id, cluster, required=False)
    request = describe_acls.DescribeAclsRequest(
        **_filter(kind, name, prefixed, principal, host, None, deny, match=True)
    )
    answer = call("acls", bootstrap_server, request)
    if answer.error_code != ErrorCode.none:
        fail("acls", answer.error_message or answer.error_code.name)
    table = Table("resource", "name", "pattern", "principal", "host", "operation", "permission")
    for resource in answer.resources:
        for acl in resource.acls:
            table.add_row(
                ResourceType(resource.resource_type).name, resource.resource_name,
                PatternType(resource.pattern_type).name, acl.principal, acl.host,
                AclOperation(acl.operation).name, AclPermissionType(acl.permission_type).name,
            )  # fmt: skip
    Console().print(table)


@acls_group.command("remove")
@_options
def remove(topic: str | None, group: str | None, transactional_id: str | None, cluster: bool,
           prefixed: bool, principal: str | None, host: str | None, operations: tuple[str, ...],
           deny: bool, bootstrap_server: str) -> None:  # fmt: skip
    """Remove the ACLs of the named resource (narrowed by the other options)."""
    kind, name = _resource(topic, group, transactional_id, cluster, required=True)
    filters = tuple(
        delete_acls.DeleteAclsFilter(
            **_filter(kind, name, prefixed, principal, host, op, deny, match=False)
        )
        for op in (operations or (None,))
    )
    answer = call("acls", bootstrap_server, delete_acls.DeleteAclsRequest(filters=filters))
    removed = 0
    for result in answer.filter_results:
        if result.error_code != ErrorCode.none:
            fail("acls", result.error_message or result.error_code.name)
        removed += len(result.matching_acls)
    click.echo(f"removed {removed} ACL(s)")


def _filter(kind: ResourceType, name: str | None, prefixed: bool, principal: str | None,
            host: str | None, operation: str | None, deny: bool, *, match: bool) -> dict[str, Any]:  # fmt: skip
    """DescribeAcls/DeleteAcls filter fields; list matches what applies to a named resource."""
    if name is None:
        pattern = PatternType.ANY
    elif prefixed:
        pattern = PatternType.PREFIXED
    else:
        pattern = PatternType.MATCH if match else PatternType.LITERAL
    return {
        "resource_type_filter": i8(kind), "resource_name_filter": name,
        "pattern_type_filter": i8(pattern), "principal_filter": principal, "host_filter": host,
        "operation": i8(AclOperation[operation.upper()] if operation else AclOperation.ANY),
        "permission_type": i8(AclPermissionType.DENY if deny else AclPermissionType.ANY),
    }  # fmt: skip
