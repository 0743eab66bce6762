"""The group coordinator: classic consumer groups (the JoinGroup/SyncGroup rebalance protocol) and
committed offsets, kept durably in ``__consumer_offsets``.

It follows Kafka's classic group coordinator:

- A member joining without a member id gets one (from JoinGroup v4 on it must come back with
  it: MEMBER_ID_REQUIRED). A join moves the group to PreparingRebalance; JoinGroups are parked
  until every known member has rejoined (or the rebalance timeout — the largest of the
  members' — passes, and the stragglers are dropped). A new group's first rebalance waits
  ``group.initial.rebalance.delay.ms`` (longer while members keep arriving, up to the rebalance
  timeout) so that a fleet of consumers starting together gets one rebalance, not one each.
- Completing the join phase starts the next generation: the protocol is chosen by vote among
  those all members support, the leader (the first member, or one that rejoined) gets every
  member's metadata, and everyone's SyncGroup waits for the leader's, which carries the
  assignment. The assignment is written to ``__consumer_offsets`` before anyone gets it.
- Sessions: every heartbeat, join, sync or commit restarts a member's session timer; a member
  whose session expires is removed and the group rebalances. Heartbeats during a rebalance
  answer REBALANCE_IN_PROGRESS, with the wrong generation ILLEGAL_GENERATION, from a stranger
  UNKNOWN_MEMBER_ID. Session timeouts outside ``group.min/max.session.timeout.ms`` are
  INVALID_SESSION_TIMEOUT.
- Static members (``group.instance.id``) keep their place across restarts: rejoining without a
  member id replaces the old id (the old one is fenced with FENCED_INSTANCE_ID) without a
  rebalance when nothing about their subscription changed.
- Offsets: a member's commit must carry the current generation (and not arrive mid-rebalance);
  a commit with generation -1 from outside group management is accepted while the group has
  no members (this creates a "simple" group if needed). A commit is answered once its record is
  in the log. OffsetFetch reads the in-memory copy.
- ``offsets.retention.minutes``: offsets of a group that has been empty that long (or, for a
  simple group, not committed for that long; or for a stable consumer group, of topics it no
  longer subscribes to) are deleted with tombstones every
  ``offsets.retention.check.interval.ms``, and an empty group without offsets goes away.

Every state change happens on the event loop thread, so the state needs no locks; only log
reads and writes leave it (``group_log``). At start-up each existing ``__consumer_offsets``
partition is read back in the background; requests for groups in a partition still loading are
answered COORDINATOR_LOAD_IN_PROGRESS, as Kafka does.

Timers go through a ``Timer`` (``LoopTimer`` on asyncio; ``ManualTimer`` lets tests move time
by hand).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.group.log import (
    BrokerOffsetsStore,
    CoordinatorRecord,
    OffsetsTopicStore,
    StoreError,
)
from logkeel.server.group.persistence import metadata_record, replay
from logkeel.server.group.records import (
    OFFSETS_TOPIC,
    OffsetCommitValue,
    group_metadata_record,
    offset_commit_record,
    partition_for,
)
from logkeel.server.group.results import (
    CommitOffset,
    CoordinatorSettings,
    DescribedGroup,
    DescribedMember,
    FetchedOffset,
    ListedGroup,
    store_error_to_response_error,
)
from logkeel.server.group.state import (
    ClassicGroup,
    GroupError,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from logkeel.server.group.timers import LoopTimer, Timer

__all__ = ["GroupCoordinator"]

log = logging.getLogger(__name__)

# Loaded partition states.
_LOADING = "loading"
_LOADED = "loaded"
_FAILED = "failed"


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
    future: asyncio.Future[JoinResult] = field(default=None)  # type: ignore[assignment]


# ---------------------------------------------------------------------------------------------
# The coordinator


class GroupCoordinator:
    """Groups and offsets for every ``__consumer_offsets`` partition this broker leads (all)."""

    def __init__(
        self,
        broker: Any,
        *,
        settings: CoordinatorSettings | None = None,
        store: OffsetsTopicStore | None = None,
        timer: Timer | None = None,
    ) -> None:
        self._broker = broker
        if settings is None:
            settings = (
                CoordinatorSettings.from_broker_config(broker.config)
                if broker is not None
                else CoordinatorSettings()
            )
        self.settings = settings
        self._store: OffsetsTopicStore = store if store is not None else BrokerOffsetsStore(broker)
        self._timer: Timer = timer if timer is not None else LoopTimer()
        self._groups: dict[str, ClassicGroup] = {}
        self._partitions: dict[int, str] = {}  # partition -> _LOADING / _LOADED / _FAILED
        self._num_partitions: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._active = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts loading every existing ``__consumer_offsets`` partition (in the background)."""
        self._active = True
        n = self._store.num_partitions()
        if n is not None:
            self._num_partitions = n
            for p in range(n):
                self._partitions[p] = _LOADING
            for p in range(n):
                self._spawn(self._load_partition(p))
        self._schedule_expiry()
        if self._broker is not None:
            self._loop = asyncio.get_running_loop()
            self._broker.metadata.add_listener(self._on_metadata_change)

    def _on_metadata_change(self, topic: str, state: Any) -> None:
        """Metadata listener (any thread): a deleted topic's committed offsets go too."""
        loop = self._loop
        if state is not None or topic == OFFSETS_TOPIC or loop is None or loop.is_closed():
            return

        def schedule() -> None:
            if self._active:
                self._spawn(self.delete_topic_offsets(topic))

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            schedule()
        else:
            loop.call_soon_threadsafe(schedule)

    async def delete_topic_offsets(self, topic: str) -> int:
        """Writes tombstones for every group's offsets of ``topic``; returns how many."""
        removed = 0
        for group in list(self._groups.values()):
            doomed = [tp for tp in group.offsets if tp[0] == topic]
            if not doomed or self._check_group(group.group_id) != ErrorCode.none:
                continue
            records = [offset_commit_record(group.group_id, t, p, None) for t, p in doomed]
            if await self._write(group.group_id, records) != ErrorCode.none:
                continue
            for tp in doomed:
                group.offsets.pop(tp, None)
            removed += len(doomed)
        if removed:
            log.info("deleted %d committed offsets of deleted topic %s", removed, topic)
        return removed

    async def stop(self) -> None:
        """Answers every parked JoinGroup/SyncGroup with NOT_COORDINATOR and stops the timers."""
        self._active = False
        self._timer.cancel_all()
        for group in self._groups.values():
            for member in list(group.members.values()):
                group.complete_join(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
                group.complete_sync(member, SyncResult(ErrorCode.not_coordinator))
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            # In-flight writes finish (their records are already on their way to the log).
            await asyncio.wait(tasks, timeout=10)
        for t in list(self._tasks):
            t.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group coordinator task failed", exc_info=task.exception())

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        """The groups by id (read-only use: tests, metrics)."""
        return self._groups

    def is_loading(self) -> bool:
        return any(s == _LOADING for s in self._partitions.values())

    async def wait_loaded(self) -> None:
        while self.is_loading():
            await asyncio.sleep(0.01)

    # -- partitions and loading -----------------------------------------------------------------

    def partition_for(self, group_id: str) -> int | None:
        n = self._num_partitions
        return None if n is None else partition_for(group_id, n)

    async def ensure_offsets_topic(self) -> ErrorCode:
        """Creates ``__consumer_offsets`` when first needed (FindCoordinator, first write)."""
        if self._num_partitions is not None:
            return ErrorCode.none
        try:
            n = await self._store.ensure_topic()
        except StoreError as exc:
            return store_error_to_response_error(exc.code)
        if self._num_partitions is None:
            self._num_partitions = n
            for p in range(n):
                # A topic created now holds nothing to load.
                self._partitions.setdefault(p, _LOADED)
        return ErrorCode.none

    def _check_group(self, group_id: str) -> ErrorCode:
        """COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, or NONE."""
        if not self._active:
            return ErrorCode.coordinator_not_available
        p = self.partition_for(group_id)
        if p is None:
            return ErrorCode.none
        state = self._partitions.get(p, _LOADED)
        if state == _LOADING:
            return ErrorCode.coordinator_load_in_progress
        if state == _FAILED:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    async def _load_partition(self, partition: int) -> None:
        started = time.monotonic()
        try:
            records = await self._store.read(partition)
        except StoreError as exc:
            log.error("cannot load __consumer_offsets-%d: %s", partition, exc)
            self._partitions[partition] = _FAILED
            return
        loaded = await replay(self._groups, records, self._timer.now_ms(), partition)
        for group_id in loaded:
            group = self._groups.get(group_id)
            if group is None:
                continue
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)
            if len(group.members) > self.settings.max_group_size:
                self._prepare_rebalance(group, "loaded group is over group.max.size")
        self._partitions[partition] = _LOADED
        if records:
            log.info(
                "loaded __consumer_offsets-%d: %d records, %d groups in %.0f ms",
                partition,
                len(records),
                len(loaded),
                (time.monotonic() - started) * 1000,
            )

    # -- persistence ----------------------------------------------------------------------------

    async def _write(self, group_id: str, records: Sequence[CoordinatorRecord]) -> ErrorCode:
        """Appends records to the group's partition; NONE once they are in the log."""
        code = await self.ensure_offsets_topic()
        if code != ErrorCode.none:
            return code
        p = self.partition_for(group_id)
        assert p is not None
        try:
            await self._store.append(p, records)
        except StoreError as exc:
            log.warning("group %s: writing to __consumer_offsets-%d failed: %s", group_id, p, exc)
            return store_error_to_response_error(exc.code)
        return ErrorCode.none

    async def _write_empty_generation(self, group_id: str, record: CoordinatorRecord) -> None:
        code = await self._write(group_id, [record])
        if code != ErrorCode.none:
            # A lost empty generation is harmless: it had no members to lose.
            log.warning("group %s: could not store its empty generation: %s", group_id, code.name)

    # -- timers ---------------------------------------------------------------------------------

    @staticmethod
    def _heartbeat_key(group_id: str, member_id: str) -> str:
        return f"heartbeat-{group_id}-{member_id}"

    @staticmethod
    def _join_key(group_id: str) -> str:
        return f"join-{group_id}"

    @staticmethod
    def _sync_key(group_id: str) -> str:
        return f"sync-{group_id}"

    def _reschedule_heartbeat(
        self, group: ClassicGroup, member: Member, timeout_ms: int | None = None
    ) -> None:
        group_id, member_id = group.group_id, member.member_id
        self._timer.schedule(
            self._heartbeat_key(group_id, member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_heartbeat(group_id, member_id),
        )

    def _cancel_heartbeat(self, group_id: str, member_id: str) -> None:
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

    # -- JoinGroup ------------------------------------------------------------------------------

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
            self._cancel_heartbeat(group.group_id, req.member_id)
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
        self._reschedule_heartbeat(group, member, self.settings.new_member_join_timeout_ms)
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
        self._cancel_heartbeat(group.group_id, old_id)
        previous_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._reschedule_heartbeat(group, member)
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
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during a sync")
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
                self._cancel_heartbeat(group.group_id, new_id)
                self._reschedule_heartbeat(group, restored)
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

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
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
            self._reschedule_heartbeat(group, member)
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
        self._cancel_heartbeat(group.group_id, member.member_id)
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
        self._prepare_rebalance(group, f"{missing} did not sync in time")

    # -- SyncGroup ------------------------------------------------------------------------------

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
                self._reschedule_heartbeat(group, member)

    # -- Heartbeat ------------------------------------------------------------------------------

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
        self._reschedule_heartbeat(group, group.member(member_id))
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- LeaveGroup -----------------------------------------------------------------------------

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
                self._cancel_heartbeat(group_id, member_id)
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

    # -- offsets --------------------------------------------------------------------------------

    def _validate_offset_commit(
        self, group: ClassicGroup, member_id: str, instance_id: str | None, generation_id: int
    ) -> None:
        if group.is_in(GroupState.DEAD):
            raise GroupError(ErrorCode.coordinator_not_available)
        if generation_id < 0 and group.is_empty:
            return  # a commit from outside group management, while nobody manages the group
        if generation_id >= 0 or member_id or instance_id is not None:
            group.validate_member(member_id, instance_id)
            if generation_id != group.generation_id:
                raise GroupError(ErrorCode.illegal_generation)
        elif not group.is_empty:
            raise GroupError(ErrorCode.unknown_member_id)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            raise GroupError(ErrorCode.rebalance_in_progress)

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[CommitOffset],
        *,
        retention_time_ms: int = -1,
        api_version: int = 9,
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """Returns an error for the whole request (NONE if none) and one per partition."""
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return code, {}
        if group_id is None:
            return ErrorCode.invalid_group_id, {}
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return (
                    ErrorCode.group_id_not_found
                    if api_version >= 9
                    else ErrorCode.illegal_generation
                ), {}
            group = ClassicGroup(group_id, self._timer.now_ms())
        try:
            self._validate_offset_commit(group, member_id, group_instance_id, generation_id)
        except GroupError as exc:
            return exc.code, {}
        if self._groups.get(group_id) is None:
            log.info("group %s: created by a manual offset commit", group_id)
            self._groups[group_id] = group
        if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE) and group.has_member(
            member_id
        ):
            # A commit keeps a classic member's session alive.
            self._reschedule_heartbeat(group, group.member(member_id))
        now = self._timer.now_ms()
        expire = now + retention_time_ms if retention_time_ms >= 0 else -1
        errors: dict[tuple[str, int], ErrorCode] = {}
        records: list[CoordinatorRecord] = []
        values: dict[tuple[str, int], OffsetCommitValue] = {}
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata) > self.settings.offset_metadata_max_bytes:
                errors[(o.topic, o.partition)] = ErrorCode.offset_metadata_too_large
                continue
            value = OffsetCommitValue(o.offset, o.leader_epoch, metadata, now, expire)
            values[(o.topic, o.partition)] = value
            records.append(offset_commit_record(group_id, o.topic, o.partition, value))
        if records:
            code = await self._write(group_id, records)
            current = self._groups.get(group_id)
            if code == ErrorCode.none:
                if current is None or current.is_in(GroupState.DEAD):
                    # Deleted while the write was in flight: the records outlive the deletion
                    # in the log, so they must here too.
                    current = self._groups[group_id] = ClassicGroup(group_id, self._timer.now_ms())
                current.offsets.update(values)
            for tp in values:
                errors[tp] = code
        return ErrorCode.none, errors

    def fetch_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]] | None
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """Committed offsets of the given partitions (-1 where none), or of all when ``topics``
        is None. Returns a group-level error (NONE if none) and the offsets."""
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return code, []
        group = self._groups.get(group_id)
        if group is not None and group.is_in(GroupState.DEAD):
            group = None
        stored = group.offsets if group is not None else {}
        out: list[FetchedOffset] = []
        if topics is None:
            for (topic, partition), v in sorted(stored.items()):
                out.append(FetchedOffset(topic, partition, v.offset, v.leader_epoch, v.metadata))
            return ErrorCode.none, out
        for topic, partitions in topics:
            for partition in partitions:
                v = stored.get((topic, partition))
                if v is None:
                    out.append(FetchedOffset(topic, partition))
                else:
                    out.append(
                        FetchedOffset(topic, partition, v.offset, v.leader_epoch, v.metadata)
                    )
        return ErrorCode.none, out

    async def delete_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return code, {}
        if not group_id:
            return ErrorCode.invalid_group_id, {}
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        if not group.is_empty and group.protocol_type != "consumer":
            return ErrorCode.non_empty_group, {}
        subscribed = group.subscribed_topics() if not group.is_empty else set()
        errors: dict[tuple[str, int], ErrorCode] = {}
        records: list[CoordinatorRecord] = []
        doomed: list[tuple[str, int]] = []
        for topic, partitions in topics:
            for partition in partitions:
                if subscribed is None or topic in subscribed:
                    errors[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                    continue
                errors[(topic, partition)] = ErrorCode.none
                if (topic, partition) in group.offsets:
                    records.append(offset_commit_record(group_id, topic, partition, None))
                    doomed.append((topic, partition))
        if records:
            code = await self._write(group_id, records)
            if code != ErrorCode.none:
                return code, {}
            for tp in doomed:
                group.offsets.pop(tp, None)
        return ErrorCode.none, errors

    # -- ListGroups, DescribeGroups, DeleteGroups -----------------------------------------------

    def list_groups(
        self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[ListedGroup]]:
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        if self.is_loading():
            return ErrorCode.coordinator_load_in_progress, []
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        out = [
            ListedGroup(g.group_id, g.protocol_type or "", str(g.state))
            for g in self._groups.values()
            if not g.is_in(GroupState.DEAD)
            and (not states or str(g.state).lower() in states)
            and (not types or "classic" in types)
        ]
        return ErrorCode.none, out

    def describe_group(self, group_id: str, *, not_found_error: bool = False) -> DescribedGroup:
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return DescribedGroup(group_id, code)
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            if not_found_error:
                return DescribedGroup(
                    group_id,
                    ErrorCode.group_id_not_found,
                    str(GroupState.DEAD),
                    error_message=f"Group {group_id} not found.",
                )
            return DescribedGroup(group_id, ErrorCode.none, str(GroupState.DEAD))
        stable = group.is_in(GroupState.STABLE)
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            group_id,
            ErrorCode.none,
            str(group.state),
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            members,
        )

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        out: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            out[group_id] = await self._delete_group(group_id)
        return out

    async def _delete_group(self, group_id: str) -> ErrorCode:
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return code
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_empty:
            return ErrorCode.non_empty_group
        doomed = list(group.offsets)
        records = [offset_commit_record(group_id, t, p, None) for (t, p) in doomed]
        records.append(group_metadata_record(group_id, None))
        code = await self._write(group_id, records)
        if code != ErrorCode.none:
            return code
        for tp in doomed:
            group.offsets.pop(tp, None)
        # A member may have joined while the tombstones were written: the group then lives on
        # (its next generation is written again), without the deleted offsets.
        if self._groups.get(group_id) is group and group.is_empty:
            self._remove_group(group)
        log.info("group %s: deleted", group_id)
        return ErrorCode.none

    def _remove_group(self, group: ClassicGroup) -> None:
        group.transition_to(GroupState.DEAD, self._timer.now_ms())
        self._timer.cancel(self._join_key(group.group_id))
        self._timer.cancel(self._sync_key(group.group_id))
        self._groups.pop(group.group_id, None)

    # -- offset retention -----------------------------------------------------------------------

    def _schedule_expiry(self) -> None:
        self._timer.schedule(
            "offsets-retention",
            self.settings.offsets_retention_check_interval_ms,
            self._on_expiry_timer,
        )

    def _on_expiry_timer(self) -> None:
        if not self._active:
            return
        self._spawn(self.expire_offsets())
        self._schedule_expiry()

    def _expired_offsets(self, group: ClassicGroup, now: int) -> list[tuple[str, int]]:
        retention = self.settings.offsets_retention_ms

        def past(base: int, v: OffsetCommitValue) -> bool:
            if v.expire_timestamp >= 0:
                return now >= v.expire_timestamp
            return now - base >= retention

        if group.protocol_type is None:
            return [tp for tp, v in group.offsets.items() if past(v.commit_timestamp, v)]
        if group.is_empty:
            return [
                tp
                for tp, v in group.offsets.items()
                if past(
                    group.state_timestamp
                    if group.state_timestamp is not None
                    else v.commit_timestamp,
                    v,
                )
            ]
        if group.is_in(GroupState.STABLE) and group.protocol_type == "consumer":
            subscribed = group.subscribed_topics()
            if subscribed is not None:
                return [
                    tp
                    for tp, v in group.offsets.items()
                    if tp[0] not in subscribed and past(v.commit_timestamp, v)
                ]
        return []

    async def expire_offsets(self) -> int:
        """Deletes offsets past ``offsets.retention.minutes`` and empty groups left without any;
        returns how many offsets went."""
        now = self._timer.now_ms()
        removed = 0
        for group in list(self._groups.values()):
            if self._check_group(group.group_id) != ErrorCode.none:
                continue
            expired = self._expired_offsets(group, now)
            drop_group = group.is_empty and len(expired) == len(group.offsets)
            if not expired and not drop_group:
                continue
            records = [offset_commit_record(group.group_id, t, p, None) for (t, p) in expired]
            if drop_group:
                records.append(group_metadata_record(group.group_id, None))
            code = await self._write(group.group_id, records)
            if code != ErrorCode.none:
                continue
            for tp in expired:
                group.offsets.pop(tp, None)
            removed += len(expired)
            if (
                drop_group
                and group.is_empty
                and not group.offsets
                and self._groups.get(group.group_id) is group
            ):
                self._remove_group(group)
            log.info(
                "group %s: expired %d offsets%s",
                group.group_id,
                len(expired),
                " and removed the empty group" if drop_group else "",
            )
        return removed


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
