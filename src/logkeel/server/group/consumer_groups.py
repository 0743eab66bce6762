"""The coordinator's consumer-protocol groups (KIP-848): ConsumerGroupHeartbeat and
ConsumerGroupDescribe on top of the pure ``ConsumerGroup`` state machine, the session timers,
and what they share with classic groups.

Committed offsets stay where classic groups keep theirs (a ``ClassicGroup`` entry holding only
offsets, created with the consumer group), so OffsetFetch, OffsetDelete, retention and their
records in ``__consumer_offsets`` are the same code; OffsetCommit checks the member epoch
instead of the generation.

A group id is one kind at a time; ``group.consumer.migration.policy`` says whether it may turn
into the other (``migration``): a heartbeat to a classic group with members upgrades it, and a
consumer group left with only classic members is downgraded. Classic members of a consumer
group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) are served here; under ``disabled`` a new
classic member is refused (INCONSISTENT_GROUP_PROTOCOL) and a heartbeat to a classic group with
members answered GROUP_ID_NOT_FOUND.

The groups' state is written to ``__consumer_offsets`` in Kafka's record types
(``consumer_records``): after each change, the records that changed since the last write and
tombstones for what went; a heartbeat is answered once they are in the log. The partition's
load replays them, so a restart or a coordinator move keeps the groups (every member gets a
fresh session).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.group.assignors import Assignment
from logkeel.server.group.classic_protocol import parse_subscription
from logkeel.server.group.consumer_group import (
    ClassicJoin,
    ClassicJoinResult,
    ConsumerGroup,
    ConsumerGroupSettings,
    GroupFailure,
    GroupHeartbeat,
    HeartbeatResult,
)
from logkeel.server.group.consumer_records import snapshot
from logkeel.server.group.group_configs import group_timings
from logkeel.server.group.log import CoordinatorRecord
from logkeel.server.group.migration import (
    MigrationRefused,
    from_classic,
    install,
    to_classic,
)
from logkeel.server.group.persistence import metadata_record
from logkeel.server.group.state import ClassicGroup, GroupState
from logkeel.server.group.timers import Timer

__all__ = ["ClassicHooks", "ConsumerGroups", "DescribedConsumerGroup"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClassicHooks:
    """What a conversion needs of the classic side: stop its members' timers (upgrade), take
    members over and rebalance (downgrade), and its group.max.size."""

    detach: Callable[[ClassicGroup], None]
    adopt: Callable[[ClassicGroup, str], None]
    max_classic_size: int


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    group_id: str
    error: ErrorCode
    error_message: str | None = None
    group: ConsumerGroup | None = None


class ConsumerGroups:
    """Every consumer-protocol group of the partitions this coordinator leads."""

    def __init__(
        self,
        groups: dict[str, ConsumerGroup],
        classic_groups: dict[str, ClassicGroup],
        settings: ConsumerGroupSettings,
        timer: Timer,
        check_group: Callable[[str], ErrorCode],
        topics: Callable[[], Mapping[str, int]],
        topic_ids: Callable[[], Mapping[str, uuid.UUID]],
        write: Callable[[str, Sequence[CoordinatorRecord]], Awaitable[ErrorCode]],
        spawn: Callable[[Coroutine[Any, Any, Any]], Any],
        group_configs: Callable[[], Mapping[str, Mapping[str, str]]] = dict,
    ) -> None:
        self.groups = groups
        self._group_configs = group_configs
        self._classic = classic_groups
        self.settings = settings
        self._timer = timer
        self._check_group = check_group
        self._topics = topics
        self._topic_ids = topic_ids
        self._write = write
        self._spawn = spawn
        # What the log holds of each group: the records last written, by key.
        self._written: dict[str, dict[bytes, bytes]] = {}
        self._classic_hooks: ClassicHooks | None = None

    def bind_classic(self, hooks: ClassicHooks) -> None:
        """The classic side of conversions (its timers and rebalance), set by the coordinator
        once both sides exist."""
        self._classic_hooks = hooks

    async def heartbeat(
        self, group_id: str, req: GroupHeartbeat, client_id: str, client_host: str
    ) -> HeartbeatResult:
        code = self._check_group(group_id)
        if code == ErrorCode.none and not group_id:
            code = ErrorCode.invalid_request
        if code != ErrorCode.none:
            message = "GroupId can't be empty." if code == ErrorCode.invalid_request else None
            return HeartbeatResult(code, message)
        classic = self._classic.get(group_id)
        extra: list[CoordinatorRecord] = []
        if classic is not None and classic.members:
            if req.member_epoch != 0:
                # Only a joining member upgrades (a stray heartbeat, say a leave retried after
                # a downgrade, must not convert the group back and forth).
                return HeartbeatResult(
                    ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
                )
            try:
                self._upgrade(classic)
            except MigrationRefused as exc:
                return HeartbeatResult(ErrorCode.group_id_not_found, str(exc))
            extra.append(metadata_record(classic, {}))
        group = self.groups.get(group_id)
        if group is None:
            if req.member_epoch != 0:
                return HeartbeatResult(
                    ErrorCode.unknown_member_id,
                    f"Group {group_id} does not exist: member {req.member_id} must join first.",
                )
            group = ConsumerGroup(group_id, self.settings)
        self._apply_configs(group)
        result = group.heartbeat(
            req,
            self._topics(),
            self._timer.now_ms(),
            client_id=client_id,
            client_host=client_host,
        )
        if group.members and group_id not in self.groups:
            self.groups[group_id] = group
            if classic is None:
                # Where the group's committed offsets live, shared with the classic code.
                self._classic[group_id] = ClassicGroup(group_id, self._timer.now_ms())
            log.info("group %s: created by consumer-protocol member %s", group_id, req.member_id)
        self._schedule(group)
        code = await self._persist(group, extra + self._maybe_downgrade(group))
        if code != ErrorCode.none and result.error == ErrorCode.none:
            return HeartbeatResult(code, f"Writing the group's state failed: {code.name}")
        return result

    def _apply_configs(self, group: ConsumerGroup) -> None:
        """The group's own session timeout and heartbeat interval (its group configs), read
        at each heartbeat so an altered config applies from the members' next heartbeat."""
        overrides = self._group_configs().get(group.group_id, {})
        group.session_timeout_ms, group.heartbeat_interval_ms = group_timings(
            self.settings, overrides
        )

    # -- online migration ----------------------------------------------------------------------

    def _upgrade(self, classic: ClassicGroup) -> None:
        """The classic group becomes a consumer group (raises MigrationRefused); its members
        stay, speaking the classic protocol."""
        hooks = self._classic_hooks
        if hooks is None:
            raise MigrationRefused(f"Group {classic.group_id} is not a consumer group.")
        group = from_classic(classic, self.settings, self._timer.now_ms())
        self._apply_configs(group)
        hooks.detach(classic)
        self.groups[group.group_id] = group
        log.info(
            "group %s: upgraded from a classic group at generation %d with %d members",
            group.group_id,
            group.group_epoch,
            len(group.members),
        )

    def _maybe_downgrade(self, group: ConsumerGroup) -> list[CoordinatorRecord]:
        """A group whose members all speak the classic protocol becomes a classic group if the
        policy allows: returns the classic group's record to write with the tombstones."""
        hooks = self._classic_hooks
        if hooks is None or self.groups.get(group.group_id) is not group:
            return []
        generation = to_classic(group, hooks.max_classic_size)
        classic = self._classic.get(group.group_id)
        if generation is None or classic is None:
            return []
        del self.groups[group.group_id]
        self._timer.cancel(f"consumer-group:{group.group_id}")
        install(classic, generation, self._timer.now_ms())
        record = metadata_record(classic, generation.assignments())
        hooks.adopt(classic, "downgraded from a consumer group: its members rejoin")
        log.info(
            "group %s: downgraded to a classic group at generation %d with %d members",
            group.group_id,
            generation.generation,
            len(generation.members),
        )
        return [record]

    # -- classic members of a consumer group -----------------------------------------------------

    def serves_classic(self, group_id: str) -> bool:
        """Are the classic requests of this group for a consumer group (one with members)?"""
        return self.has_members(group_id) and self._check_group(group_id) == ErrorCode.none

    async def join_classic(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        api_version: int,
    ) -> ClassicJoinResult:
        group = self.groups[group_id]
        known = member_id in group.members or (
            instance_id is not None and instance_id in group.static_members
        )
        if not known and self.settings.migration_policy == "disabled":
            # Kafka (KAFKA-20640): no new classic member in a consumer group that can never
            # be converted back.
            return ClassicJoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if not member_id:
            member_id = f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"
            if instance_id is None and api_version >= 4:
                return ClassicJoinResult(ErrorCode.member_id_required, member_id)
        # The subscription of the protocol it will be answered with: its first one the other
        # classic members support too.
        shared = group.classic_protocol_names(excluding=member_id)
        chosen = next((m for n, m in protocols if shared is None or n in shared), None)
        subscription = parse_subscription(chosen) if chosen is not None else None
        if subscription is None:
            return ClassicJoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        owned: Assignment = subscription.owned
        req = ClassicJoin(
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms,
            session_timeout_ms,
            protocol_type,
            tuple(protocols),
            subscription.topics,
            owned,
            subscription.rack_id,
        )
        result = group.join_classic(req, self._topics(), self._timer.now_ms())
        code = await self._persist_changed(group)
        if code != ErrorCode.none and result.error == ErrorCode.none:
            return ClassicJoinResult(code, member_id)
        return result

    async def _persist_changed(self, group: ConsumerGroup) -> ErrorCode:
        """After a classic member's change: timers, a downgrade if it is due, the records."""
        self._schedule(group)
        return await self._persist(group, self._maybe_downgrade(group))

    def sync_classic(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> tuple[ErrorCode, Assignment]:
        group = self.groups[group_id]
        return group.sync_classic(
            member_id, instance_id, generation, protocol_type, protocol_name, self._timer.now_ms()
        )

    def heartbeat_classic(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> ErrorCode:
        group = self.groups[group_id]
        code = group.heartbeat_classic(member_id, instance_id, generation, self._timer.now_ms())
        self._schedule(group)
        return code

    def leave_classic(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> list[ErrorCode]:
        """LeaveGroup of classic members (answered before the records are written, as the
        classic group's LeaveGroup is)."""
        group = self.groups[group_id]
        topics = self._topics()
        codes = []
        for member_id, instance_id in members:
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
            codes.append(group.leave_classic(member_id, instance_id, topics))
        if any(c == ErrorCode.none for c in codes):
            self._spawn(self._persist_changed(group))
        return codes

    def _changes(self, group: ConsumerGroup) -> list[CoordinatorRecord]:
        """The records that changed since the last write, and tombstones for those gone;
        what is returned counts as written (so concurrent writes never repeat or reorder)."""
        now = snapshot(group, self._topic_ids()) if group.group_id in self.groups else {}
        before = self._written.get(group.group_id, {})
        changes: list[CoordinatorRecord] = [(k, v) for k, v in now.items() if before.get(k) != v]
        changes += [(k, None) for k in before if k not in now]
        if now:
            self._written[group.group_id] = now
        else:
            self._written.pop(group.group_id, None)
        return changes

    async def _persist(
        self, group: ConsumerGroup, extra: Sequence[CoordinatorRecord] = ()
    ) -> ErrorCode:
        """Writes what changed, with ``extra`` (a conversion's classic record) in the same
        append."""
        changes = list(extra) + self._changes(group)
        if not changes:
            return ErrorCode.none
        return await self._write(group.group_id, changes)

    def topic_ids(self) -> Mapping[str, uuid.UUID]:
        return self._topic_ids()

    def loaded(self, group: ConsumerGroup) -> None:
        """A group replayed from the log: it is served from now on, its timers run."""
        self.groups[group.group_id] = group
        self._apply_configs(group)
        # The records do not say which partition counts the target was computed from (Kafka
        # 4.1's MetadataHash is not written): the metadata at load is taken as that baseline,
        # so a topic that grew while no coordinator served the group is noticed at its next
        # metadata change, not at once.
        group.subscribed_partitions = group.subscribed_topics(self._topics())
        self._written[group.group_id] = snapshot(group, self._topic_ids())
        self._schedule(group)
        log.info(
            "group %s: loaded at epoch %d with %d members",
            group.group_id,
            group.group_epoch,
            len(group.members),
        )

    def _schedule(self, group: ConsumerGroup) -> None:
        key = f"consumer-group:{group.group_id}"
        deadline = group.next_deadline()
        if deadline is None:
            self._timer.cancel(key)
            return
        delay = max(0, deadline - self._timer.now_ms())
        self._timer.schedule(key, delay, lambda: self._expire(group.group_id))

    def _expire(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        gone = group.expire(self._timer.now_ms(), self._topics())
        if gone:
            log.info("group %s: members %s expired or fenced", group_id, ", ".join(gone))
            self._spawn(self._persist(group, self._maybe_downgrade(group)))
        if self.groups.get(group_id) is group:
            self._schedule(group)

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def validate_offset_commit(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        api_version: int,
        transactional: bool = False,
    ) -> ErrorCode | None:
        """None if ``group_id`` is not a consumer group with members (the classic rules
        apply), else NONE or the error of Kafka's member-epoch rules."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return None
        try:
            group.validate_offset_commit(member_id, member_epoch, api_version, transactional)
        except GroupFailure as exc:
            return exc.code
        return ErrorCode.none

    def validate_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> ErrorCode:
        """OffsetFetch v9+'s member and epoch, for a consumer group (NONE for others)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none
        try:
            group.validate_offset_fetch(member_id, member_epoch)
        except GroupFailure as exc:
            return exc.code
        return ErrorCode.none

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics the members of a consumer group subscribe to (None: not one)."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return None
        return set(group.subscribed_topics(self._topics()))

    def describe(self, group_id: str) -> DescribedConsumerGroup:
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return DescribedConsumerGroup(group_id, code)
        group = self.groups.get(group_id)
        if group is None:
            classic = self._classic.get(group_id)
            if classic is not None and not classic.is_in(GroupState.DEAD) and classic.members:
                return DescribedConsumerGroup(
                    group_id,
                    ErrorCode.group_id_not_found,
                    f"Group {group_id} is not a consumer group.",
                )
            return DescribedConsumerGroup(
                group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found."
            )
        return DescribedConsumerGroup(group_id, ErrorCode.none, group=group)

    def drop(self, group_id: str) -> None:
        """The partition moved away: the group is served elsewhere now."""
        self._written.pop(group_id, None)
        if self.groups.pop(group_id, None) is not None:
            self._timer.cancel(f"consumer-group:{group_id}")

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of an empty group: tombstones for its records."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none
        del self.groups[group_id]
        self._timer.cancel(f"consumer-group:{group_id}")
        return await self._persist(group)

    def topics_changed(self) -> None:
        """A topic was created, grew or was deleted: the groups subscribed move to a new epoch."""
        topics = self._topics()
        for group in self.groups.values():
            if group.metadata_changed(topics):
                self._spawn(self._persist(group))
                log.info(
                    "group %s: subscribed topics changed, epoch %d",
                    group.group_id,
                    group.group_epoch,
                )
