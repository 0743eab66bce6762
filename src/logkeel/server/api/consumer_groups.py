"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Translation only: topic ids on the wire to names and back (through the cluster metadata), kio's
classes to ``GroupHeartbeat`` and results to responses; the logic is the coordinator's
(``group/consumer_groups.py`` and the pure ``group/consumer_group.py``). ACLs, Kafka's:
READ on the group to heartbeat, DESCRIBE on the group to describe it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from logkeel.cluster.acls import AclOperation, ResourceType
from logkeel.cluster.metadata import MetadataStore, topic_id_text, topic_uuid
from logkeel.server.api.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
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
from logkeel.server.authorization import READ_GROUP, RequestAuthorizer, gated, per_entry
from logkeel.server.group.consumer_group import ConsumerGroup, GroupHeartbeat, HeartbeatResult
from logkeel.server.group.coordinator import GroupCoordinator
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey

__all__ = ["VERSIONS", "ConsumerGroupApi", "register"]

VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
}

# Without an authorizer Kafka reports every operation a group supports: READ, DELETE, DESCRIBE.
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
# ConsumerGroupDescribe v1's MemberType: a member speaking the classic or the consumer protocol.
_MEMBER_TYPE_CLASSIC, _MEMBER_TYPE_CONSUMER = 0, 1


class ConsumerGroupApi:
    def __init__(
        self,
        metadata: MetadataStore,
        coordinator: GroupCoordinator,
        authorizer: RequestAuthorizer | None = None,
    ) -> None:
        self._metadata = metadata
        self.coordinator = coordinator
        self._authorizer = authorizer

    def _may(self, ctx: RequestContext, op: AclOperation, group_id: str) -> bool:
        return self._authorizer is None or self._authorizer.allowed(
            ctx, op, ResourceType.GROUP, group_id
        )

    # -- topic ids ------------------------------------------------------------------------------

    def _names(self, entries: Iterable[Any] | None) -> dict[str, frozenset[int]] | None:
        """Owned partitions by topic id to names; a topic id unknown here is left out (the
        topic is gone: the member cannot own it any more)."""
        if entries is None:
            return None
        out: dict[str, frozenset[int]] = {}
        for e in entries:
            state = (
                self._metadata.topic_by_id(topic_id_text(e.topic_id))
                if e.topic_id is not None
                else None
            )
            if state is not None:
                out[state.name] = frozenset(int(p) for p in e.partitions)
        return out

    def _ids(self, assignment: Mapping[str, frozenset[int]]) -> list[tuple[uuid.UUID, str, Any]]:
        out = []
        for name in sorted(assignment):
            state = self._metadata.topic(name)
            if state is None or not assignment[name]:
                continue
            parts = tuple(i32(p) for p in sorted(assignment[name]))
            out.append((topic_uuid(state.topic_id), name, parts))
        return out

    def _describable(self, ctx: RequestContext) -> Callable[[str], bool] | None:
        """The member's DESCRIBE check on topics, which its regex resolves through (Kafka)."""
        authorizer = self._authorizer
        if authorizer is None or not authorizer.enabled:
            return None
        return lambda name: authorizer.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    # -- ConsumerGroupHeartbeat -------------------------------------------------------------------

    async def heartbeat(
        self, ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
    ) -> ConsumerGroupHeartbeatResponse:
        if not self._may(ctx, AclOperation.READ, request.group_id):
            return self.heartbeat_error(ctx, request, ErrorCode.group_authorization_failed)
        member_id = request.member_id
        if not member_id and ctx.api_version == 0 and request.member_epoch == 0:
            member_id = str(uuid.uuid4())  # v0: the coordinator names new members
        code = await self.coordinator.ensure_offsets_topic()
        if code != ErrorCode.none:
            return self.heartbeat_error(ctx, request, code)
        names = request.subscribed_topic_names
        rebalance = duration_ms(request.rebalance_timeout)
        req = GroupHeartbeat(
            member_id,
            int(request.member_epoch),
            request.instance_id,
            request.rack_id,
            rebalance,
            None if names is None else tuple(str(n) for n in names),
            getattr(request, "subscribed_topic_regex", None),
            request.server_assignor,
            self._names(request.topic_partitions),
            self._describable(ctx),
        )
        result = await self.coordinator.consumer.heartbeat(
            request.group_id, req, ctx.client_id or "", f"/{ctx.peer[0]}"
        )
        return self._heartbeat_response(ctx, result)

    def _heartbeat_response(self, ctx: RequestContext, result: HeartbeatResult) -> Any:
        assignment = None
        if result.assignment is not None:
            tp_type = nested(ctx, "TopicPartitions")
            assignment = nested(ctx, "Assignment")(
                topic_partitions=tuple(
                    tp_type(topic_id=tid, partitions=parts)
                    for tid, _name, parts in self._ids(result.assignment)
                )
            )
        return response(
            ctx,
            error_code=result.error,
            error_message=result.error_message,
            member_id=result.member_id,
            member_epoch=i32(result.member_epoch),
            heartbeat_interval=i32Timedelta.parse(
                timedelta(milliseconds=result.heartbeat_interval_ms)
            ),
            assignment=assignment,
        )

    def heartbeat_error(
        self, ctx: RequestContext, request: ConsumerGroupHeartbeatRequest, code: ErrorCode
    ) -> ConsumerGroupHeartbeatResponse:
        return self._heartbeat_response(
            ctx, HeartbeatResult(code, None, request.member_id or None, int(request.member_epoch))
        )

    # -- ConsumerGroupDescribe --------------------------------------------------------------------

    async def describe(
        self, ctx: RequestContext, request: ConsumerGroupDescribeRequest
    ) -> ConsumerGroupDescribeResponse:
        operations = (
            _GROUP_OPERATIONS if request.include_authorized_operations else OPERATIONS_NOT_REQUESTED
        )
        out = []
        for group_id in request.group_ids:
            if not self._may(ctx, AclOperation.DESCRIBE, group_id):
                out.append(self._group_error(ctx, group_id, ErrorCode.group_authorization_failed))
                continue
            d = self.coordinator.consumer.describe(group_id)
            if d.group is None:
                out.append(self._group_error(ctx, group_id, d.error, d.error_message))
                continue
            out.append(self._described(ctx, d.group, operations))
        return response(ctx, groups=tuple(out))

    def _assignment(self, ctx: RequestContext, assignment: Mapping[str, frozenset[int]]) -> Any:
        tp_type = nested(ctx, "TopicPartitions")
        return nested(ctx, "Assignment")(
            topic_partitions=tuple(
                tp_type(topic_id=tid, topic_name=name, partitions=parts)
                for tid, name, parts in self._ids(assignment)
            )
        )

    def _described(self, ctx: RequestContext, group: ConsumerGroup, operations: int) -> Any:
        member_type = nested(ctx, "Member")
        members = tuple(
            build(
                member_type,
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=i32(m.member_epoch),
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=self._assignment(ctx, m.assigned),
                target_assignment=self._assignment(ctx, group.target.get(m.member_id, {})),
                member_type=i8(
                    _MEMBER_TYPE_CLASSIC if m.classic is not None else _MEMBER_TYPE_CONSUMER
                ),
            )
            for m in group.members.values()
        )
        return build(
            nested(ctx, "DescribedGroup"),
            error_code=ErrorCode.none,
            error_message=None,
            group_id=group.group_id,
            group_state=str(group.state),
            group_epoch=i32(group.group_epoch),
            assignment_epoch=i32(group.assignment_epoch),
            assignor_name=group.preferred_assignor(),
            members=members,
            authorized_operations=i32(operations),
        )

    @staticmethod
    def _group_error(
        ctx: RequestContext, group_id: str, code: ErrorCode, message: str | None = None
    ) -> Any:
        return build(
            nested(ctx, "DescribedGroup"),
            error_code=code,
            error_message=message,
            group_id=group_id,
            group_state="",
            group_epoch=i32(-1),
            assignment_epoch=i32(-1),
            assignor_name="",
            members=(),
            authorized_operations=i32(OPERATIONS_NOT_REQUESTED),
        )

    def describe_error(
        self, ctx: RequestContext, request: ConsumerGroupDescribeRequest, code: ErrorCode
    ) -> ConsumerGroupDescribeResponse:
        return response(
            ctx, groups=tuple(self._group_error(ctx, g, code) for g in request.group_ids)
        )


def register(
    registry: HandlerRegistry,
    metadata: MetadataStore,
    coordinator: GroupCoordinator,
    authorizer: RequestAuthorizer | None = None,
) -> ConsumerGroupApi:
    api = ConsumerGroupApi(metadata, coordinator, authorizer)
    register_family(
        registry,
        {
            ApiKey.CONSUMER_GROUP_HEARTBEAT: Endpoint(
                *VERSIONS[ApiKey.CONSUMER_GROUP_HEARTBEAT],
                api.heartbeat,
                api.heartbeat_error,
                # A regex subscription resolves only to the topics the member may DESCRIBE.
                gated(READ_GROUP),
            ),
            ApiKey.CONSUMER_GROUP_DESCRIBE: Endpoint(
                *VERSIONS[ApiKey.CONSUMER_GROUP_DESCRIBE],
                api.describe,
                api.describe_error,
                per_entry("DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED)"),
            ),
        },
    )
    return api
