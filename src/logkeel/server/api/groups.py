"""Consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.

This module only translates between kio's request/response classes (every version, each with
its own fields) and the ``GroupCoordinator``, which holds the logic. Responses are built with
``responses.build``, which drops the fields a version does not have, so one code path serves every
version. A group's coordinator is the leader of its ``__consumer_offsets`` partition, as in
Kafka: FindCoordinator names that broker (creating the topic on first use), so a single node is
the coordinator of every group. ACLs (``RULES``), Kafka's: FindCoordinator needs DESCRIBE on
each key's group or transactional id; the member APIs and OffsetCommit READ on the group (the
gate), OffsetCommit READ on each topic too; OffsetFetch and DescribeGroups DESCRIBE on the group
(and OffsetFetch on each topic), DeleteGroups DELETE, OffsetDelete DELETE on the group and READ
on each topic; ListGroups shows only the groups the principal may describe unless it may
describe the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i32, i64

from logkeel.cluster.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bit_field,
)
from logkeel.cluster.metadata import MetadataStore
from logkeel.server.api.commit_offsets import commit_offsets_of
from logkeel.server.api.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from logkeel.server.api.responses import (
    OPERATIONS_NOT_REQUESTED,
    Endpoint,
    build,
    duration_ms,
    nested,
    register_family,
    response,
)
from logkeel.server.authorization import (
    DELETE_GROUP,
    READ_GROUP,
    RequestAuthorizer,
    gated,
    per_entry,
)
from logkeel.server.group.coordinator import GroupCoordinator
from logkeel.server.group.records import OFFSETS_TOPIC
from logkeel.server.group.results import FetchedOffset
from logkeel.server.handlers import ErrorResponder, Handler, HandlerRegistry, RequestContext, Rule
from logkeel.server.protocol import ApiKey
from logkeel.server.txn.coordinator import TransactionCoordinator
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["VERSIONS", "CoordinatorHost", "GroupApi", "register"]

# Versions served, per API (kio has schemas for all of them).
VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
}

# Without an authorizer, Kafka reports every operation a group supports: READ (3), DELETE (6),
# DESCRIBE (8).
_GROUP_OPERATIONS = operations_bit_field(SUPPORTED_OPERATIONS[ResourceType.GROUP])
_TOPIC_READ = "READ on each topic (TOPIC_AUTHORIZATION_FAILED)"
_DESCRIBE_GROUP = "DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED)"
RULES: dict[ApiKey, Rule] = {
    ApiKey.FIND_COORDINATOR: per_entry(
        "DESCRIBE on each key's group (GROUP_AUTHORIZATION_FAILED) or transactional id "
        "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)"
    ),
    ApiKey.JOIN_GROUP: gated(READ_GROUP),
    ApiKey.SYNC_GROUP: gated(READ_GROUP),
    ApiKey.HEARTBEAT: gated(READ_GROUP),
    ApiKey.LEAVE_GROUP: gated(READ_GROUP),
    ApiKey.OFFSET_COMMIT: gated(READ_GROUP, per_entry=_TOPIC_READ),
    ApiKey.OFFSET_FETCH: per_entry(
        f"{_DESCRIBE_GROUP}; DESCRIBE on each topic (TOPIC_AUTHORIZATION_FAILED, hidden when "
        "all the group's offsets are asked)"
    ),
    ApiKey.DESCRIBE_GROUPS: per_entry(_DESCRIBE_GROUP),
    ApiKey.LIST_GROUPS: per_entry(
        "every group with DESCRIBE on the cluster, else only the groups with DESCRIBE on them"
    ),
    ApiKey.DELETE_GROUPS: per_entry("DELETE on each group (GROUP_AUTHORIZATION_FAILED)"),
    ApiKey.OFFSET_DELETE: gated(DELETE_GROUP, per_entry=_TOPIC_READ),
}
_COORDINATOR_KEY_GROUP = 0
_DESCRIBE = AclOperation.DESCRIBE
_COORDINATOR_KEY_TRANSACTION = 1
_COORDINATOR_KEY_SHARE = 2


class CoordinatorHost(Protocol):
    """What FindCoordinator needs of the broker: its id and address, and who leads each
    ``__consumer_offsets`` partition."""

    @property
    def node_id(self) -> int: ...

    def advertised_for(self, listener_name: str) -> tuple[str, int]: ...

    @property
    def metadata(self) -> MetadataStore: ...


class GroupApi:
    def __init__(
        self,
        host: CoordinatorHost,
        coordinator: GroupCoordinator,
        txn_coordinator: TransactionCoordinator | None = None,
        authorizer: RequestAuthorizer | None = None,
    ) -> None:
        self._broker = host
        self.coordinator = coordinator
        self.txn_coordinator = txn_coordinator
        self._authorizer = authorizer

    def _may(self, ctx: RequestContext, op: AclOperation, kind: ResourceType, name: str) -> bool:
        """Kafka's per-entry checks (the request-level ones are the gate's)."""
        return self._authorizer is None or self._authorizer.allowed(ctx, op, kind, name)

    # -- FindCoordinator ------------------------------------------------------------------------

    async def find_coordinator(
        self, ctx: RequestContext, request: FindCoordinatorRequest
    ) -> FindCoordinatorResponse:
        key_type = getattr(request, "key_type", _COORDINATOR_KEY_GROUP)  # v1+
        if not hasattr(request, "coordinator_keys"):  # v0-3: one key
            code, node_id, host, port = await self._coordinator_for(ctx, key_type, request.key)
            return response(
                ctx,
                error_code=code,
                error_message=None if code == ErrorCode.none else code.name.upper(),
                node_id=BrokerId(node_id),
                host=host,
                port=i32(port),
            )
        coordinators = []
        entry = nested(ctx, "Coordinator")
        for key in request.coordinator_keys:
            code, node_id, host, port = await self._coordinator_for(ctx, key_type, key)
            coordinators.append(
                entry(
                    key=key,
                    node_id=BrokerId(node_id),
                    host=host,
                    port=i32(port),
                    error_code=code,
                    error_message=None if code == ErrorCode.none else code.name.upper(),
                )
            )
        return response(ctx, coordinators=tuple(coordinators))

    def _leader_of(self, tp: TopicPartition, listener: str) -> tuple[ErrorCode, int, str, int]:
        """The leader of ``tp`` as the coordinator of its keys; COORDINATOR_NOT_AVAILABLE while
        it has none (or its broker is not known yet)."""
        state = self._broker.metadata.partition(tp)
        if state is None or state.leader < 0:
            return ErrorCode.coordinator_not_available, -1, "", -1
        if state.leader == self._broker.node_id:
            host, port = self._broker.advertised_for(listener)
            return ErrorCode.none, self._broker.node_id, host, port
        for b in self._broker.metadata.brokers():
            if b.node_id == state.leader:
                return ErrorCode.none, b.node_id, b.host, b.port
        return ErrorCode.coordinator_not_available, -1, "", -1

    async def _coordinator_for(
        self, ctx: RequestContext, key_type: int, key: str
    ) -> tuple[ErrorCode, int, str, int]:
        none = (-1, "", -1)
        if key_type == _COORDINATOR_KEY_GROUP and not self._may(
            ctx, _DESCRIBE, ResourceType.GROUP, key
        ):
            return (ErrorCode.group_authorization_failed, *none)
        if key_type == _COORDINATOR_KEY_TRANSACTION and not self._may(
            ctx, _DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
        ):
            return (ErrorCode.transactional_id_authorization_failed, *none)
        if key_type == _COORDINATOR_KEY_GROUP:
            code = await self.coordinator.ensure_offsets_topic()
            if code != ErrorCode.none:
                return (code, *none)
            partition = self.coordinator.partition_for(key)
            return self._leader_of(TopicPartition(OFFSETS_TOPIC, partition or 0), ctx.listener)
        if key_type == _COORDINATOR_KEY_TRANSACTION:
            if self.txn_coordinator is None:
                return (ErrorCode.coordinator_not_available, *none)
            code = await self.txn_coordinator.ensure_state_topic()
            if code != ErrorCode.none:
                return (code, *none)
            return self._leader_of(self.txn_coordinator.state_partition(key), ctx.listener)
        if key_type == _COORDINATOR_KEY_SHARE and ctx.api_version >= 6:
            return (ErrorCode.invalid_request, *none)
        return (ErrorCode.invalid_request, *none)

    def find_coordinator_error(
        self, ctx: RequestContext, request: FindCoordinatorRequest, code: ErrorCode
    ) -> FindCoordinatorResponse:
        if not hasattr(request, "coordinator_keys"):
            return response(
                ctx,
                error_code=code,
                error_message=None,
                node_id=BrokerId(-1),
                host="",
                port=i32(-1),
            )
        entry = nested(ctx, "Coordinator")
        return response(
            ctx,
            coordinators=tuple(
                entry(
                    key=k,
                    node_id=BrokerId(-1),
                    host="",
                    port=i32(-1),
                    error_code=code,
                    error_message=None,
                )
                for k in request.coordinator_keys
            ),
        )

    # -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------

    async def join_group(self, ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
        rebalance = getattr(request, "rebalance_timeout", None)
        result = await self.coordinator.join_group(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            request.protocol_type,
            [(p.name, p.metadata) for p in request.protocols],
            duration_ms(request.session_timeout),
            -1 if rebalance is None else duration_ms(rebalance),
            client_id=ctx.client_id,
            client_host=f"/{ctx.peer[0]}",
            api_version=ctx.api_version,
            reason=getattr(request, "reason", None),
        )
        member_type = nested(ctx, "JoinGroupResponseMember")
        members = tuple(
            build(member_type, member_id=m, group_instance_id=i, metadata=md)
            for m, i, md in result.members
        )
        return response(
            ctx,
            error_code=result.error,
            generation_id=i32(result.generation_id),
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name
            if ctx.api_version >= 7
            else result.protocol_name or "",
            leader=result.leader,
            skip_assignment=result.skip_assignment,
            member_id=result.member_id,
            members=members,
        )

    def join_group_error(
        self, ctx: RequestContext, request: JoinGroupRequest, code: ErrorCode
    ) -> JoinGroupResponse:
        return response(
            ctx,
            error_code=code,
            generation_id=i32(-1),
            protocol_type=None,
            protocol_name=None if ctx.api_version >= 7 else "",
            leader="",
            member_id=request.member_id,
            members=(),
        )

    async def sync_group(self, ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
        result = await self.coordinator.sync_group(
            request.group_id,
            request.generation_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            getattr(request, "protocol_type", None),
            getattr(request, "protocol_name", None),
            [(a.member_id, a.assignment) for a in request.assignments],
        )
        return response(
            ctx,
            error_code=result.error,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            assignment=result.assignment,
        )

    def sync_group_error(
        self, ctx: RequestContext, request: SyncGroupRequest, code: ErrorCode
    ) -> SyncGroupResponse:
        return response(ctx, error_code=code, assignment=b"")

    async def heartbeat(self, ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
        code = self.coordinator.heartbeat(
            request.group_id,
            request.generation_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
        )
        return response(ctx, error_code=code)

    def simple_error(
        self, ctx: RequestContext, request: HeartbeatRequest, code: ErrorCode
    ) -> HeartbeatResponse:
        return response(ctx, error_code=code)

    async def leave_group(
        self, ctx: RequestContext, request: LeaveGroupRequest
    ) -> LeaveGroupResponse:
        members: list[tuple[str, str | None, str | None]]
        if not hasattr(request, "members"):  # v0-2: the sender alone
            members = [(request.member_id, None, None)]
        else:
            members = [
                (m.member_id, m.group_instance_id, getattr(m, "reason", None))
                for m in request.members
            ]
        code, results = self.coordinator.leave_group(request.group_id, members)
        if ctx.api_version < 3:
            if code == ErrorCode.none and results:
                code = results[0][2]
            return response(ctx, error_code=code)
        member_type = nested(ctx, "MemberResponse")
        return response(
            ctx,
            error_code=code,
            members=tuple(
                member_type(member_id=m, group_instance_id=i, error_code=e) for m, i, e in results
            ),
        )

    def leave_group_error(
        self, ctx: RequestContext, request: LeaveGroupRequest, code: ErrorCode
    ) -> LeaveGroupResponse:
        return response(ctx, error_code=code, members=())

    # -- OffsetCommit / OffsetFetch / OffsetDelete -----------------------------------------------

    def _partition_exists(self, topic: str, partition: int) -> bool:
        return self._broker.metadata.partition(TopicPartition(topic, partition)) is not None

    async def offset_commit(
        self, ctx: RequestContext, request: OffsetCommitRequest
    ) -> OffsetCommitResponse:
        offsets, errors = commit_offsets_of(
            request.topics, self._partition_exists,
            lambda topic: self._may(ctx, AclOperation.READ, ResourceType.TOPIC, topic),
        )  # fmt: skip
        retention = getattr(request, "retention_time", None)
        code, per_partition = await self.coordinator.commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch,
            request.member_id,
            getattr(request, "group_instance_id", None),
            offsets,
            retention_time_ms=-1 if retention is None else duration_ms(retention),
            api_version=ctx.api_version,
        )
        for o in offsets:
            errors[(o.topic, o.partition)] = (
                code
                if code != ErrorCode.none
                else per_partition.get((o.topic, o.partition), ErrorCode.none)
            )
        return self._commit_response(ctx, request, lambda tp: errors[tp])

    def _commit_response(
        self,
        ctx: RequestContext,
        request: OffsetCommitRequest,
        error_of: Callable[[tuple[str, int]], ErrorCode],
    ) -> OffsetCommitResponse:
        topic_type = nested(ctx, "OffsetCommitResponseTopic")
        partition_type = nested(ctx, "OffsetCommitResponsePartition")
        topics = tuple(
            topic_type(
                name=t.name,
                partitions=tuple(
                    partition_type(
                        partition_index=p.partition_index,
                        error_code=error_of((t.name, p.partition_index)),
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        )
        return response(ctx, topics=topics)

    def offset_commit_error(
        self, ctx: RequestContext, request: OffsetCommitRequest, code: ErrorCode
    ) -> OffsetCommitResponse:
        return self._commit_response(ctx, request, lambda tp: code)

    async def offset_fetch(
        self, ctx: RequestContext, request: OffsetFetchRequest
    ) -> OffsetFetchResponse:
        if hasattr(request, "groups"):  # v8+: many groups
            group_type = nested(ctx, "OffsetFetchResponseGroup")
            groups = []
            for g in request.groups:
                topics = (
                    None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
                )
                code = self.coordinator.consumer.validate_offset_fetch(
                    g.group_id, getattr(g, "member_id", None), getattr(g, "member_epoch", -1)
                )
                if code == ErrorCode.none:
                    code, topic_entries = self._fetch_group(ctx, request, g.group_id, topics)
                else:
                    topic_entries = ()
                groups.append(
                    group_type(group_id=g.group_id, topics=topic_entries, error_code=code)
                )
            return response(ctx, groups=tuple(groups))
        topics = (
            None
            if request.topics is None
            else [(t.name, t.partition_indexes) for t in request.topics]
        )
        code, topic_entries = self._fetch_group(ctx, request, request.group_id, topics)
        return response(ctx, topics=topic_entries, error_code=code)

    def _fetch_group(
        self,
        ctx: RequestContext,
        request: OffsetFetchRequest,
        group_id: str,
        topics: list[tuple[str, Any]] | None,
    ) -> tuple[ErrorCode, tuple[Any, ...]]:
        if ctx.api_version >= 8:
            topic_type = nested(ctx, "OffsetFetchResponseTopics")
            partition_type = nested(ctx, "OffsetFetchResponsePartitions")
        else:
            topic_type = nested(ctx, "OffsetFetchResponseTopic")
            partition_type = nested(ctx, "OffsetFetchResponsePartition")
        fetched: list[FetchedOffset]
        if not self._may(ctx, _DESCRIBE, ResourceType.GROUP, group_id):
            code, fetched = ErrorCode.group_authorization_failed, []
        elif getattr(request, "require_stable", False):
            code, fetched = self.coordinator.fetch_stable_offsets(group_id, topics)
        else:
            code, fetched = self.coordinator.fetch_offsets(group_id, topics)
        if code != ErrorCode.none:
            if ctx.api_version >= 2 or topics is None:
                return code, ()
            # v1 has no group-level error: every partition carries it.
            return ErrorCode.none, tuple(
                topic_type(
                    name=name,
                    partitions=tuple(
                        build(
                            partition_type,
                            partition_index=i32(p),
                            committed_offset=i64(-1),
                            committed_leader_epoch=i32(-1),
                            metadata="",
                            error_code=code,
                        )
                        for p in parts
                    ),
                )
                for name, parts in topics
            )
        by_topic: dict[str, list[Any]] = {}
        for f in fetched:
            offset, error = f.offset, f.error
            if not self._may(ctx, _DESCRIBE, ResourceType.TOPIC, f.topic):
                if topics is None:
                    continue  # all of the group's offsets: only the topics it may see
                offset, error = -1, ErrorCode.topic_authorization_failed
            by_topic.setdefault(f.topic, []).append(
                build(
                    partition_type,
                    partition_index=i32(f.partition),
                    committed_offset=i64(offset),
                    committed_leader_epoch=i32(f.leader_epoch),
                    metadata=f.metadata,
                    error_code=error,
                )
            )
        return ErrorCode.none, tuple(
            topic_type(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
        )

    def offset_fetch_error(
        self, ctx: RequestContext, request: OffsetFetchRequest, code: ErrorCode
    ) -> OffsetFetchResponse:
        if hasattr(request, "groups"):
            group_type = nested(ctx, "OffsetFetchResponseGroup")
            return response(
                ctx,
                groups=tuple(
                    group_type(group_id=g.group_id, topics=(), error_code=code)
                    for g in request.groups
                ),
            )
        return response(ctx, topics=(), error_code=code)

    async def offset_delete(
        self, ctx: RequestContext, request: OffsetDeleteRequest
    ) -> OffsetDeleteResponse:
        readable = {
            t.name
            for t in request.topics
            if self._may(ctx, AclOperation.READ, ResourceType.TOPIC, t.name)
        }
        topics = [
            (t.name, [p.partition_index for p in t.partitions])
            for t in request.topics
            if t.name in readable
        ]
        code, errors = await self.coordinator.delete_offsets(request.group_id, topics)
        if code != ErrorCode.none:
            return self.offset_delete_error(ctx, request, code)
        topic_type = nested(ctx, "OffsetDeleteResponseTopic")
        partition_type = nested(ctx, "OffsetDeleteResponsePartition")
        out = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                err = errors.get((t.name, p.partition_index), ErrorCode.none)
                if t.name not in readable:
                    err = ErrorCode.topic_authorization_failed
                elif err == ErrorCode.none and not self._partition_exists(
                    t.name, p.partition_index
                ):
                    err = ErrorCode.unknown_topic_or_partition
                parts.append(partition_type(partition_index=p.partition_index, error_code=err))
            out.append(topic_type(name=t.name, partitions=tuple(parts)))
        return response(ctx, error_code=ErrorCode.none, topics=tuple(out))

    def offset_delete_error(
        self, ctx: RequestContext, request: OffsetDeleteRequest, code: ErrorCode
    ) -> OffsetDeleteResponse:
        return response(ctx, error_code=code, topics=())

    # -- ListGroups / DescribeGroups / DeleteGroups ----------------------------------------------

    async def list_groups(
        self, ctx: RequestContext, request: ListGroupsRequest
    ) -> ListGroupsResponse:
        code, groups = self.coordinator.list_groups(
            getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
        )
        if not self._may(ctx, _DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            groups = [
                g for g in groups if self._may(ctx, _DESCRIBE, ResourceType.GROUP, g.group_id)
            ]
        entry = nested(ctx, "ListedGroup")
        return response(
            ctx,
            error_code=code,
            groups=tuple(
                build(
                    entry,
                    group_id=g.group_id,
                    protocol_type=g.protocol_type,
                    group_state=g.state,
                    group_type=g.group_type,
                )
                for g in groups
            ),
        )

    def list_groups_error(
        self, ctx: RequestContext, request: ListGroupsRequest, code: ErrorCode
    ) -> ListGroupsResponse:
        return response(ctx, error_code=code, groups=())

    async def describe_groups(
        self, ctx: RequestContext, request: DescribeGroupsRequest
    ) -> DescribeGroupsResponse:
        group_type = nested(ctx, "DescribedGroup")
        member_type = nested(ctx, "DescribedGroupMember")
        include_operations = getattr(request, "include_authorized_operations", False)
        out = []
        for group_id in request.groups:
            if not self._may(ctx, _DESCRIBE, ResourceType.GROUP, group_id):
                out.append(self._group_error(ctx, group_id, ErrorCode.group_authorization_failed))
                continue
            d = self.coordinator.describe_group(group_id, not_found_error=ctx.api_version >= 6)
            out.append(
                build(
                    group_type,
                    error_code=d.error,
                    error_message=d.error_message,
                    group_id=group_id,
                    group_state=d.state,
                    protocol_type=d.protocol_type,
                    protocol_data=d.protocol_data,
                    members=tuple(
                        build(
                            member_type,
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in d.members
                    ),
                    authorized_operations=i32(
                        self._group_operations(ctx, group_id)
                        if include_operations
                        else OPERATIONS_NOT_REQUESTED
                    ),
                )
            )
        return response(ctx, groups=tuple(out))

    def _group_operations(self, ctx: RequestContext, group_id: str) -> int:
        if self._authorizer is None:
            return _GROUP_OPERATIONS
        return self._authorizer.authorized_operations(ctx, ResourceType.GROUP, group_id)

    def describe_groups_error(
        self, ctx: RequestContext, request: DescribeGroupsRequest, code: ErrorCode
    ) -> DescribeGroupsResponse:
        return response(ctx, groups=tuple(self._group_error(ctx, g, code) for g in request.groups))

    @staticmethod
    def _group_error(ctx: RequestContext, group_id: str, code: ErrorCode) -> Any:
        return build(
            nested(ctx, "DescribedGroup"),
            error_code=code,
            group_id=group_id,
            group_state="",
            protocol_type="",
            protocol_data="",
            members=(),
            authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
        )

    async def delete_groups(
        self, ctx: RequestContext, request: DeleteGroupsRequest
    ) -> DeleteGroupsResponse:
        names = list(dict.fromkeys(request.groups_names))
        allowed = [g for g in names if self._may(ctx, AclOperation.DELETE, ResourceType.GROUP, g)]
        results = await self.coordinator.delete_groups(allowed) if allowed else {}
        entry = nested(ctx, "DeletableGroupResult")
        return response(
            ctx,
            results=tuple(
                entry(group_id=g, error_code=results.get(g, ErrorCode.group_authorization_failed))
                for g in names
            ),
        )

    def delete_groups_error(
        self, ctx: RequestContext, request: DeleteGroupsRequest, code: ErrorCode
    ) -> DeleteGroupsResponse:
        entry = nested(ctx, "DeletableGroupResult")
        return response(
            ctx,
            results=tuple(
                entry(group_id=g, error_code=code) for g in dict.fromkeys(request.groups_names)
            ),
        )


def register(
    registry: HandlerRegistry,
    host: CoordinatorHost,
    coordinator: GroupCoordinator,
    txn_coordinator: TransactionCoordinator | None = None,
    authorizer: RequestAuthorizer | None = None,
) -> GroupApi:
    api = GroupApi(host, coordinator, txn_coordinator, authorizer)
    table: dict[ApiKey, tuple[Handler, ErrorResponder]] = {
        ApiKey.FIND_COORDINATOR: (api.find_coordinator, api.find_coordinator_error),
        ApiKey.JOIN_GROUP: (api.join_group, api.join_group_error),
        ApiKey.SYNC_GROUP: (api.sync_group, api.sync_group_error),
        ApiKey.HEARTBEAT: (api.heartbeat, api.simple_error),
        ApiKey.LEAVE_GROUP: (api.leave_group, api.leave_group_error),
        ApiKey.OFFSET_COMMIT: (api.offset_commit, api.offset_commit_error),
        ApiKey.OFFSET_FETCH: (api.offset_fetch, api.offset_fetch_error),
        ApiKey.DESCRIBE_GROUPS: (api.describe_groups, api.describe_groups_error),
        ApiKey.LIST_GROUPS: (api.list_groups, api.list_groups_error),
        ApiKey.DELETE_GROUPS: (api.delete_groups, api.delete_groups_error),
        ApiKey.OFFSET_DELETE: (api.offset_delete, api.offset_delete_error),
    }
    register_family(
        registry,
        {
            key: Endpoint(*VERSIONS[key], handle, error, RULES[key])
            for key, (handle, error) in table.items()
        },
    )
    return api
