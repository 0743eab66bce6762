"""Group membership requests: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

- A member joining without a member id gets one (from JoinGroup v4 on it must come back with
  it: MEMBER_ID_REQUIRED). The assignment the leader sends in its SyncGroup is written to
  ``__consumer_offsets`` before anyone gets it.
- Heartbeats during a rebalance answer REBALANCE_IN_PROGRESS, with the wrong generation
  ILLEGAL_GENERATION, from a stranger UNKNOWN_MEMBER_ID. Session timeouts outside
  ``group.min/max.session.timeout.ms`` are INVALID_SESSION_TIMEOUT.
- Static members (``group.instance.id``) keep their place across restarts: rejoining without a
  member id replaces the old id (the old one is fenced with FENCED_INSTANCE_ID) without a
  rebalance when nothing about their subscription changed.

Each request validates against the group's state and feeds the rebalance (``rebalance``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from logkeel.server.group.log import CoordinatorRecord
from logkeel.server.group.persistence import metadata_record
from logkeel.server.group.rebalance import RebalanceMachine
from logkeel.server.group.state import (
    ClassicGroup,
    GroupError,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)

__all__ = ["GroupMembership"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    api_version: int
    reason: str | None = None
    future: asyncio.Future[JoinResult] = field(default=None)  # type: ignore[arg-type]


class GroupMembership(RebalanceMachine):
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup on top of the rebalance machine."""

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
        api_version: int = 9,
        reason: str | None = None,
    ) -> JoinResult:
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return JoinResult(code, member_id)
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        s = self.settings
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        code = await self.ensure_offsets_topic()
        if code != ErrorCode.none:
            return JoinResult(code, member_id)
        code = self._check_group(group_id)  # the topic may just have been created
        if code != ErrorCode.none:
            return JoinResult(code, member_id)
        req = _JoinRequest(
            group_id,
            member_id,
            group_instance_id,
            protocol_type,
            list(protocols),
            session_timeout_ms,
            rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms,
            client_id,
            client_host,
            api_version,
            reason,
            asyncio.get_running_loop().create_future(),
        )
        self._join(req)
        return await req.future

    def _respond(self, req: _JoinRequest, result: JoinResult) -> None:
        if not req.future.done():
            req.future.set_result(result)

    def _join(self, req: _JoinRequest) -> None:
        unknown = req.member_id == ""
        group = self._groups.get(req.group_id)
        if group is None:
            if not unknown:
                self._respond(req, JoinResult(ErrorCode.unknown_member_id, req.member_id))
                return
            group = self._groups[req.group_id] = ClassicGroup(req.group_id, self._timer.now_ms())
        if not self._accept_joining_member(group, req.member_id):
            group.remove(req.member_id)
            self.cancel_heartbeat(group.group_id, req.member_id)
            self._respond(req, JoinResult(ErrorCode.group_max_size_reached, ""))
        elif unknown:
            self._join_new_member(group, req)
        else:
            self._join_existing_member(group, req)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.settings.max_group_size
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (
                member is not None and member.is_awaiting_join
            ) or group.num_awaiting_join < limit
        return group.has_member(member_id) or len(group.members) < limit

    def _join_new_member(self, group: ClassicGroup, req: _JoinRequest) -> None:
        if group.is_in(GroupState.DEAD):
            self._respond(req, JoinResult(ErrorCode.coordinator_not_available, ""))
            return
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            self._respond(req, JoinResult(ErrorCode.inconsistent_group_protocol, ""))
            return
        new_id = group.generate_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is not None:
                log.info(
                    "group %s: static member %s rejoined without its id; replacing %s with %s",
                    group.group_id,
                    req.group_instance_id,
                    existing,
                    new_id,
                )
                self._replace_static_member(group, req, existing, new_id)
            else:
                self._add_member_and_rebalance(group, req, new_id)
        elif req.api_version >= 4:
            # The member must come back with its id: a client that timed out and retries then
            # reuses its place instead of piling up defunct members.
            group.add_pending_member(new_id)
            self._timer.schedule(
                self._heartbeat_key(group.group_id, new_id),
                req.session_timeout_ms,
                lambda: self._expire_heartbeat(group.group_id, new_id),
            )
            self._respond(req, JoinResult(ErrorCode.member_id_required, new_id))
        else:
            self._add_member_and_rebalance(group, req, new_id)

    def _join_existing_member(self, group: ClassicGroup, req: _JoinRequest) -> None:
        member_id = req.member_id
        if group.is_in(GroupState.DEAD):
            self._respond(req, JoinResult(ErrorCode.coordinator_not_available, member_id))
            return
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            self._respond(req, JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
            return
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                self._respond(req, JoinResult(ErrorCode.unknown_member_id, member_id))
                return
            self._add_member_and_rebalance(group, req, member_id)
            return
        try:
            group.validate_member(member_id, req.group_instance_id)
        except GroupError as exc:
            self._respond(req, JoinResult(exc.code, member_id))
            return
        member = group.member(member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(
                group, member, req, "member rejoined during a rebalance"
            )
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # It missed the JoinGroup answer: give it the same one again.
                self._respond(
                    req, self._current_generation(group, member_id, group.is_leader(member_id))
                )
            else:
                self._update_member_and_rebalance(group, member, req, "member changed its metadata")
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id):
                # The leader rejoins to have assignments recomputed (e.g. topics changed).
                self._update_member_and_rebalance(group, member, req, "leader rejoined")
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, "member changed its metadata")
            else:
                self._respond(req, self._current_generation(group, member_id, False))
        else:
            self._respond(req, JoinResult(ErrorCode.unknown_member_id, member_id))

    def _add_member_and_rebalance(
        self, group: ClassicGroup, req: _JoinRequest, member_id: str
    ) -> None:
        member = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            list(req.protocols),
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state == GroupState.EMPTY:
            group.new_member_added = True
        group.add(member, req.future)
        # A new member cannot heartbeat while its JoinGroup is parked; bound the wait instead.
        self.reschedule_heartbeat(group, member, self.settings.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"new member {member_id} joined (reason: {req.reason or 'not given'})"
        )

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: Member, req: _JoinRequest, why: str
    ) -> None:
        group.update_member(
            member,
            list(req.protocols),
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.future,
        )
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"{why}: {member.member_id} (reason: {req.reason or 'not given'})"
        )

    def _replace_static_member(
        self, group: ClassicGroup, req: _JoinRequest, old_id: str, new_id: str
    ) -> None:
        instance_id = req.group_instance_id
        assert instance_id is not None
        self.cancel_heartbeat(group.group_id, old_id)
        previous_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        self.reschedule_heartbeat(group, member)
        old_protocols = list(member.protocols)
        old_rebalance, old_session = member.rebalance_timeout_ms, member.session_timeout_ms
        group.update_member(
            member,
            list(req.protocols),
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.future,
        )
        if group.is_in(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                # Nothing the assignment depends on changed: persist the new id, no rebalance.
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                record = metadata_record(group, assignment)
                self._spawn(
                    self._finish_static_replacement(
                        group,
                        req,
                        member,
                        old_id,
                        new_id,
                        old_protocols,
                        old_rebalance,
                        old_session,
                        previous_leader,
                        record,
                    )
                )
                return
            self._maybe_prepare_rebalance_or_complete_join(
                group, f"static member {instance_id} rejoined with another protocol"
            )
            return
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old id: assign again.
            self.prepare_rebalance(group, f"static member {instance_id} rejoined during a sync")
            return
        self._maybe_complete_join_phase(group)

    async def _finish_static_replacement(
        self,
        group: ClassicGroup,
        req: _JoinRequest,
        member: Member,
        old_id: str,
        new_id: str,
        old_protocols: list[tuple[str, bytes]],
        old_rebalance: int,
        old_session: int,
        previous_leader: str | None,
        record: CoordinatorRecord,
    ) -> None:
        code = await self._write(group.group_id, [record])
        if code != ErrorCode.none:
            if group.members.get(new_id) is member and req.group_instance_id is not None:
                group.update_member(member, old_protocols, old_rebalance, old_session, None)
                restored = group.replace_static_member(req.group_instance_id, new_id, old_id)
                self.cancel_heartbeat(group.group_id, new_id)
                self.reschedule_heartbeat(group, restored)
            self._respond(
                req,
                JoinResult(
                    code,
                    "",
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    group.leader_id or "",
                ),
            )
            return
        if member.join_future is None:
            return
        is_leader = group.is_leader(new_id)
        if req.api_version >= 9:
            result = self._current_generation(group, new_id, is_leader)
            result.skip_assignment = is_leader
        else:
            # Older clients cannot skip the assignment: they are named the leader they knew
            # (the old id), so a rejoined static leader acts as a follower and just syncs,
            # instead of reassigning a group that has not changed.
            result = self._current_generation(group, new_id, False)
            result.leader = previous_leader or ""
        group.complete_join(member, result)

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Iterable[tuple[str, bytes]],
    ) -> SyncResult:
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return SyncResult(code)
        if not group_id:
            return SyncResult(ErrorCode.invalid_group_id)
        group = self._groups.get(group_id)
        if group is None or group.is_empty:
            return SyncResult(ErrorCode.unknown_member_id)
        if group.is_in(GroupState.DEAD):
            return SyncResult(ErrorCode.coordinator_not_available)
        try:
            group.validate_member(member_id, group_instance_id)
        except GroupError as exc:
            return SyncResult(exc.code)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(
            protocol_name, group.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return SyncResult(ErrorCode.rebalance_in_progress)
        member = group.member(member_id)
        if group.is_in(GroupState.STABLE):
            self._remove_pending_sync_member(group, member_id)
            return SyncResult(
                ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
            )
        # CompletingRebalance: park until the leader's assignment is stored.
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        if member.sync_future is not None:
            group.complete_sync(member, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_future = future
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            assignment = dict(assignments)
            for m in group.members.values():
                assignment.setdefault(m.member_id, b"")
            log.info(
                "group %s: assignment for generation %d received from leader %s",
                group_id,
                group.generation_id,
                member_id,
            )
            record = metadata_record(group, assignment)
            self._spawn(self._store_assignment(group, generation_id, assignment, record))
        return await future

    async def _store_assignment(
        self,
        group: ClassicGroup,
        generation: int,
        assignment: dict[str, bytes],
        record: CoordinatorRecord,
    ) -> None:
        code = await self._write(group.group_id, [record])
        # The group may have moved on while the record was being written: then do nothing.
        if not group.is_in(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation:
            return
        if self._groups.get(group.group_id) is not group:
            return
        if code != ErrorCode.none:
            self._reset_and_propagate_assignment(group, code)
            self._maybe_prepare_rebalance_or_complete_join(
                group, f"storing the assignment failed: {code.name}"
            )
            return
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)
        group.transition_to(GroupState.STABLE, self._timer.now_ms())
        log.info("group %s: stable at generation %d", group.group_id, generation)

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) or (
            group.has_received_sync_from_all()
        ):
            self._timer.cancel(self._sync_key(group.group_id))

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return code
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        try:
            group.validate_member(member_id, group_instance_id)
        except GroupError as exc:
            return exc.code
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self.reschedule_heartbeat(group, group.member(member_id))
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """``members``: (member id, group instance id, reason). Returns the top-level error and
        one (member id, instance id, error) per member."""
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return code, []
        if not group_id:
            return ErrorCode.invalid_group_id, []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id, []
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, []
        results: list[tuple[str, str | None, ErrorCode]] = []
        left: list[str] = []
        for member_id, instance_id, reason in members:
            why = reason or "not given"
            if member_id == "":
                # Removal by group instance id alone (an administrator's request).
                existing = group.static_member_id(instance_id) if instance_id is not None else None
                if existing is None:
                    results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                    continue
                self._drop_member(group, group.member(existing))
                log.info(
                    "group %s: static member %s removed (reason: %s)", group_id, instance_id, why
                )
                left.append(existing)
                results.append((member_id, instance_id, ErrorCode.none))
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self.cancel_heartbeat(group_id, member_id)
                results.append((member_id, instance_id, ErrorCode.none))
            else:
                try:
                    group.validate_member(member_id, instance_id)
                except GroupError as exc:
                    results.append((member_id, instance_id, exc.code))
                    continue
                self._drop_member(group, group.member(member_id))
                log.info("group %s: member %s left (reason: %s)", group_id, member_id, why)
                left.append(member_id)
                results.append((member_id, instance_id, ErrorCode.none))
        if any(err == ErrorCode.none for _, _, err in results):
            reason = f"members left: {', '.join(left)}"
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, reason)
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return ErrorCode.none, results

    def detach_members(self, group: ClassicGroup) -> None:
        """The group became a consumer group: its members' timers stop here (the consumer
        group times them now) and they leave the classic group."""
        for member_id in list(group.members):
            self.cancel_heartbeat(group.group_id, member_id)
        self._timer.cancel(self._join_key(group.group_id))
        self._timer.cancel(self._sync_key(group.group_id))
        group.clear_members(self._timer.now_ms())

    def adopt_members(self, group: ClassicGroup, reason: str) -> None:
        """A consumer group became this classic group, members and all: their sessions run
        here from now on, and a rebalance makes them rejoin through the classic protocol."""
        for member in group.members.values():
            self.reschedule_heartbeat(group, member)
        self.prepare_rebalance(group, reason)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
