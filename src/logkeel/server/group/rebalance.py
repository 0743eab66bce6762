"""The rebalance of a classic group, driven by membership changes and timers.

Following Kafka's classic group coordinator: a join moves the group to PreparingRebalance;
JoinGroups are parked until every known member has rejoined (or the rebalance timeout — the
largest of the members' — passes, and the stragglers are dropped). A new group's first
rebalance waits ``group.initial.rebalance.delay.ms`` (longer while members keep arriving, up to
the rebalance timeout) so that a fleet of consumers starting together gets one rebalance, not
one each. Completing the join phase starts the next generation: the protocol is chosen by vote
among those all members support, the leader gets every member's metadata, and members that do
not send SyncGroup within the rebalance timeout are dropped.

Sessions: every heartbeat, join, sync or commit restarts a member's session timer
(``reschedule_heartbeat``); a member whose session expires is removed and the group
rebalances. All timers are keyed one-shot timers on the context's ``Timer``.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from logkeel.server.group.context import CoordinatorPart
from logkeel.server.group.log import CoordinatorRecord
from logkeel.server.group.persistence import metadata_record
from logkeel.server.group.state import ClassicGroup, GroupState, JoinResult, Member, SyncResult

__all__ = ["RebalanceMachine"]

log = logging.getLogger(__name__)


class RebalanceMachine(CoordinatorPart):
    """Rebalance transitions and the session, join and sync timers of every group."""

    @staticmethod
    def _heartbeat_key(group_id: str, member_id: str) -> str:
        return f"heartbeat-{group_id}-{member_id}"

    @staticmethod
    def _join_key(group_id: str) -> str:
        return f"join-{group_id}"

    @staticmethod
    def _sync_key(group_id: str) -> str:
        return f"sync-{group_id}"

    def reschedule_heartbeat(
        self, group: ClassicGroup, member: Member, timeout_ms: int | None = None
    ) -> None:
        group_id, member_id = group.group_id, member.member_id
        self._timer.schedule(
            self._heartbeat_key(group_id, member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_heartbeat(group_id, member_id),
        )

    def cancel_heartbeat(self, group_id: str, member_id: str) -> None:
        self._timer.cancel(self._heartbeat_key(group_id, member_id))

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return
        if group.is_pending_member(member_id):
            log.info("group %s: pending member %s expired before rejoining", group_id, member_id)
            group.remove(member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s's session expired; removing it", group_id, member_id)
        self._remove_member_and_update(group, member, f"session of {member_id} expired")

    def _current_generation(
        self, group: ClassicGroup, member_id: str, with_members: bool
    ) -> JoinResult:
        return JoinResult(
            ErrorCode.none,
            member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            group.current_member_metadata() if with_members else [],
        )

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        initial = group.is_in(GroupState.EMPTY)
        if initial:
            delay = self.settings.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group_id = group.group_id
            self._timer.schedule(
                self._join_key(group_id),
                delay,
                lambda: self._try_complete_initial_rebalance(group_id, delay, remaining),
            )
        group.transition_to(GroupState.PREPARING_REBALANCE, self._timer.now_ms())
        log.info(
            "group %s: preparing to rebalance (generation %d): %s",
            group.group_id,
            group.generation_id,
            reason,
        )
        if not initial:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self._complete_join(group)
        else:
            group_id = group.group_id
            self._timer.schedule(
                self._join_key(group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join_by_id(group_id),
            )

    def _try_complete_initial_rebalance(self, group_id: str, delay: int, remaining: int) -> None:
        group = self._groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            new_delay = min(self.settings.initial_rebalance_delay_ms, remaining)
            new_remaining = max(remaining - delay, 0)
            self._timer.schedule(
                self._join_key(group_id),
                new_delay,
                lambda: self._try_complete_initial_rebalance(group_id, new_delay, new_remaining),
            )
        else:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.previous_state == GroupState.EMPTY:
            return  # the initial rebalance completes on its timer
        if group.has_all_members_joined():
            self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self._groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        group_id = group.group_id
        self._timer.cancel(self._join_key(group_id))
        stragglers = [m for m in group.not_yet_rejoined() if not m.is_static]
        for member in stragglers:
            self._drop_member(group, member)
        if stragglers:
            log.info(
                "group %s: removed members that did not rejoin in time: %s",
                group_id,
                [m.member_id for m in stragglers],
            )
        if group.is_in(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout, sessions will expire meanwhile.
            self._timer.schedule(
                self._join_key(group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join_by_id(group_id),
            )
            return
        group.init_next_generation(self._timer.now_ms())
        if group.is_in(GroupState.EMPTY):
            log.info("group %s: generation %d is empty", group_id, group.generation_id)
            self._spawn(self._write_empty_generation(group_id, metadata_record(group, {})))
            return
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for member in list(group.members.values()):
            result = self._current_generation(
                group, member.member_id, group.is_leader(member.member_id)
            )
            group.complete_join(member, result)
            self.reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        self._timer.schedule(
            self._sync_key(group_id),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(group_id, generation),
        )

    def _drop_member(self, group: ClassicGroup, member: Member) -> None:
        """Removes a member for good: its timer stops and anything it waits on is answered."""
        self.cancel_heartbeat(group.group_id, member.member_id)
        group.complete_join(member, JoinResult(ErrorCode.unknown_member_id, ""))
        group.complete_sync(member, SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    def _remove_member_and_update(self, group: ClassicGroup, member: Member, reason: str) -> None:
        self._drop_member(group, member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self._timer.cancel(self._sync_key(group.group_id))

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self._groups.get(group_id)
        if group is None or group.generation_id != generation:
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if group.has_received_sync_from_all():
            return
        missing = list(group.pending_sync_members)
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._drop_member(group, member)
        log.info("group %s: removed members that never sent SyncGroup: %s", group_id, missing)
        self.prepare_rebalance(group, f"{missing} did not sync in time")

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error == ErrorCode.none
        for member in list(group.members.values()):
            result = SyncResult(
                error,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                member.assignment,
            )
            if group.complete_sync(member, result):
                # Its session was on hold while it waited; it starts again now.
                self.reschedule_heartbeat(group, member)

    async def _write_empty_generation(self, group_id: str, record: CoordinatorRecord) -> None:
        code = await self._write(group_id, [record])
        if code != ErrorCode.none:
            # A lost empty generation is harmless: it had no members to lose.
            log.warning("group %s: could not store its empty generation: %s", group_id, code.name)

    def remove_group(self, group: ClassicGroup) -> None:
        group.transition_to(GroupState.DEAD, self._timer.now_ms())
        self._timer.cancel(self._join_key(group.group_id))
        self._timer.cancel(self._sync_key(group.group_id))
        self._groups.pop(group.group_id, None)
