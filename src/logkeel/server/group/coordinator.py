"""The group coordinator: classic consumer groups (the JoinGroup/SyncGroup rebalance protocol) and
committed offsets, kept durably in ``__consumer_offsets``, following Kafka's classic group
coordinator. It is the front of four parts, each in its own module:

- ``membership`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) on top of ``rebalance`` (the
  rebalance transitions and the session/join/sync timers);
- ``offsets`` (OffsetCommit, OffsetFetch, OffsetDelete, retention);
- ``persistence`` (the records of a group's state, and their replay at load time);
- ``timers`` (``LoopTimer`` on asyncio; ``ManualTimer`` lets tests move time by hand).

This module owns what they share: which ``__consumer_offsets`` partitions are loaded, writing
to them, the groups, ListGroups/DescribeGroups/DeleteGroups, and the lifecycle.

Every state change happens on the event loop thread, so the state needs no locks; only log
reads and writes leave it (``group_log``). The coordinator serves the groups of the
``__consumer_offsets`` partitions this broker leads (all of them on one node), as Kafka does:
a partition is read back in the background when it is led here (at start-up, or when the
replica manager reports that leadership moved here), and its groups are dropped when
leadership moves away. Requests for groups in a partition still loading are answered
COORDINATOR_LOAD_IN_PROGRESS, and for groups of a partition not led here NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import TopicState, topic_uuid
from logkeel.server.coordinator_partitions import CoordinatorPartitions
from logkeel.server.group.classic_protocol import assignment_bytes
from logkeel.server.group.consumer_group import ConsumerGroup
from logkeel.server.group.consumer_groups import ClassicHooks, ConsumerGroups
from logkeel.server.group.consumer_records import replay_consumer_groups
from logkeel.server.group.context import GroupContext
from logkeel.server.group.log import (
    BrokerOffsetsStore,
    CoordinatorRecord,
    OffsetsTopicHost,
    OffsetsTopicStore,
    OpenTxns,
    StoreError,
    TxnProducer,
)
from logkeel.server.group.membership import GroupMembership
from logkeel.server.group.offsets import GroupOffsets
from logkeel.server.group.persistence import replay
from logkeel.server.group.records import (
    OFFSETS_TOPIC,
    group_metadata_record,
    offset_commit_record,
    partition_for,
)
from logkeel.server.group.results import (
    CoordinatorSettings,
    DescribedGroup,
    DescribedMember,
    ListedGroup,
    store_error_to_response_error,
)
from logkeel.server.group.state import ClassicGroup, GroupState, JoinResult, SyncResult
from logkeel.server.group.timers import LoopTimer, Timer
from logkeel.server.group.txn_offsets import GroupTxnOffsets
from logkeel.server.tasks import BackgroundTasks
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["GroupCoordinator"]

_INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state"})

log = logging.getLogger(__name__)


class GroupCoordinator:
    """Groups and offsets for every ``__consumer_offsets`` partition this broker leads."""

    def __init__(
        self,
        broker: OffsetsTopicHost | None,
        *,
        settings: CoordinatorSettings | None = None,
        store: OffsetsTopicStore | None = None,
        timer: Timer | None = None,
        topics: Callable[[], dict[str, int]] | None = None,
        topic_ids: Callable[[], dict[str, uuid.UUID]] | None = None,
        group_configs: Callable[[], Mapping[str, Mapping[str, str]]] | None = None,
    ) -> None:
        self._broker = broker
        if settings is None:
            settings = (
                CoordinatorSettings.from_broker_config(broker.config)
                if broker is not None
                else CoordinatorSettings()
            )
        self.settings = settings
        if store is None:
            assert broker is not None, "without a broker, pass the store"
            store = BrokerOffsetsStore(broker)
        self._store: OffsetsTopicStore = store
        self._timer: Timer = timer if timer is not None else LoopTimer()
        self._groups: dict[str, ClassicGroup] = {}
        self._tasks = BackgroundTasks("group coordinator", log)
        self._partitions = CoordinatorPartitions(
            OFFSETS_TOPIC, store, self._load_partition, self._unload_partition, self._tasks.spawn
        )
        self._active = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer_groups: dict[str, ConsumerGroup] = {}
        self.consumer = ConsumerGroups(
            self._consumer_groups,
            self._groups,
            settings.consumer,
            self._timer,
            self._check_group,
            topics if topics is not None else self._topic_partitions,
            topic_ids if topic_ids is not None else self._topic_uuids,
            self._write,
            self._tasks.spawn,
            group_configs or (broker.metadata.group_configs if broker is not None else dict),
        )
        ctx = GroupContext(
            groups=self._groups,
            timer=self._timer,
            settings=settings,
            check_group=self._check_group,
            ensure_offsets_topic=self.ensure_offsets_topic,
            write=self._write,
            spawn=self._tasks.spawn,
            is_active=lambda: self._active,
            consumer=self.consumer,
        )
        self.membership = GroupMembership(ctx)
        self.consumer.bind_classic(
            ClassicHooks(
                self.membership.detach_members,
                self.membership.adopt_members,
                settings.max_group_size,
            )
        )
        self.offsets = GroupOffsets(ctx, self.membership)
        self.txn_offsets = GroupTxnOffsets(ctx, self.offsets, self.partition_for)
        # The requests, served by the part that owns them.
        self.commit_offsets = self.offsets.commit_offsets
        self.fetch_offsets = self.offsets.fetch_offsets
        self.delete_offsets = self.offsets.delete_offsets
        self.expire_offsets = self.offsets.expire_offsets
        self.txn_commit_offsets = self.txn_offsets.txn_commit_offsets
        self.complete_txn = self.txn_offsets.complete_txn
        self.fetch_stable_offsets = self.txn_offsets.fetch_stable_offsets

    def _topic_partitions(self) -> dict[str, int]:
        """The topics consumer groups may subscribe to, with their partition counts."""
        if self._broker is None:
            return {}
        return {
            name: len(state.partitions)
            for name, state in self._broker.metadata.topics().items()
            if name not in _INTERNAL_TOPICS
        }

    def _topic_uuids(self) -> dict[str, uuid.UUID]:
        if self._broker is None:
            return {}
        return {
            name: topic_uuid(state.topic_id)
            for name, state in self._broker.metadata.topics().items()
        }

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
        """A classic JoinGroup: to a consumer group with members, its member joins as a classic
        member of it (online migration)."""
        if self.consumer.serves_classic(group_id):
            if (
                not self.settings.min_session_timeout_ms
                <= session_timeout_ms
                <= (self.settings.max_session_timeout_ms)
            ):
                return JoinResult(ErrorCode.invalid_session_timeout, member_id)
            joined = await self.consumer.join_classic(
                group_id,
                member_id,
                group_instance_id,
                protocol_type,
                protocols,
                session_timeout_ms,
                rebalance_timeout_ms,
                client_id,
                client_host,
                api_version,
            )
            # No leader: every classic member is a follower that just syncs.
            return JoinResult(
                joined.error,
                joined.member_id,
                joined.generation,
                "consumer" if joined.error == ErrorCode.none else None,
                joined.protocol_name,
            )
        return await self.membership.join_group(
            group_id,
            member_id,
            group_instance_id,
            protocol_type,
            protocols,
            session_timeout_ms,
            rebalance_timeout_ms,
            client_id=client_id,
            client_host=client_host,
            api_version=api_version,
            reason=reason,
        )

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
        if self.consumer.serves_classic(group_id):
            code, assignment = self.consumer.sync_classic(
                group_id, member_id, group_instance_id, generation_id, protocol_type, protocol_name
            )
            if code != ErrorCode.none:
                return SyncResult(code)
            return SyncResult(code, "consumer", protocol_name, assignment_bytes(assignment))
        return await self.membership.sync_group(
            group_id,
            generation_id,
            member_id,
            group_instance_id,
            protocol_type,
            protocol_name,
            assignments,
        )

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if self.consumer.serves_classic(group_id):
            return self.consumer.heartbeat_classic(
                group_id, member_id, group_instance_id, generation_id
            )
        return self.membership.heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        if self.consumer.serves_classic(group_id):
            codes = self.consumer.leave_classic(group_id, [(m, i) for m, i, _ in members])
            return ErrorCode.none, [(m, i, c) for (m, i, _), c in zip(members, codes, strict=True)]
        return self.membership.leave_group(group_id, members)

    async def start(self) -> None:
        """Starts loading every existing ``__consumer_offsets`` partition (in the background)."""
        self._active = True
        self._partitions.start()
        self.offsets.schedule_expiry()
        if self._broker is not None:
            self._loop = asyncio.get_running_loop()
            self._broker.metadata.add_listener(self._on_metadata_change)
            self._broker.replica_manager.add_partition_listener(self._on_partitions_changed)

    def _on_partitions_changed(self, tps: list[TopicPartition]) -> None:
        if self._active:
            self._partitions.partitions_changed(tps)

    def _unload_partition(self, partition: int) -> None:
        """Leadership of the partition moved away: its groups are served elsewhere now, so
        parked joins and syncs are answered NOT_COORDINATOR and the groups dropped."""
        gone = [g for g in self._groups.values() if self.partition_for(g.group_id) == partition]
        for group in gone:
            for member in list(group.members.values()):
                self.membership.cancel_heartbeat(group.group_id, member.member_id)
                group.complete_join(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
                group.complete_sync(member, SyncResult(ErrorCode.not_coordinator))
            self.membership.remove_group(group)
        for group_id in [g for g in self._consumer_groups if self.partition_for(g) == partition]:
            self.consumer.drop(group_id)
        self.txn_offsets.unload_partition(partition)
        log.info("unloaded %s-%d: %d groups", OFFSETS_TOPIC, partition, len(gone))

    def _on_metadata_change(self, topic: str, state: TopicState | None) -> None:
        """Metadata listener (any thread): a deleted topic's committed offsets go too."""
        loop = self._loop
        if topic == OFFSETS_TOPIC or loop is None or loop.is_closed():
            return

        def schedule() -> None:
            if not self._active:
                return
            self.consumer.topics_changed()
            if state is None:
                self._tasks.spawn(self.offsets.delete_topic_offsets(topic))

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            schedule()
        else:
            loop.call_soon_threadsafe(schedule)

    async def stop(self) -> None:
        """Answers every parked JoinGroup/SyncGroup with NOT_COORDINATOR and stops the timers."""
        self._active = False
        self._timer.cancel_all()
        for group in self._groups.values():
            for member in list(group.members.values()):
                group.complete_join(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
                group.complete_sync(member, SyncResult(ErrorCode.not_coordinator))
        # In-flight writes finish (their records are already on their way to the log).
        await self._tasks.finish(10)

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        """The groups by id (read-only use: tests, metrics)."""
        return self._groups

    def is_loading(self) -> bool:
        return self._partitions.is_loading()

    async def wait_loaded(self) -> None:
        while self.is_loading():
            await asyncio.sleep(0.01)

    def partition_for(self, group_id: str) -> int | None:
        n = self._partitions.num_partitions
        return None if n is None else partition_for(group_id, n)

    async def ensure_offsets_topic(self) -> ErrorCode:
        """Creates ``__consumer_offsets`` when first needed (FindCoordinator, first write)."""
        if self._partitions.num_partitions is not None:
            return ErrorCode.none
        existed = self._store.num_partitions() is not None
        self._partitions.creating_topic = True
        try:
            n = await self._store.ensure_topic()
        except StoreError as exc:
            return store_error_to_response_error(exc.code)
        finally:
            self._partitions.creating_topic = False
        self._partitions.created(n, existed)
        return ErrorCode.none

    def _check_group(self, group_id: str) -> ErrorCode:
        """COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, or NONE."""
        if not self._active:
            return ErrorCode.coordinator_not_available
        p = self.partition_for(group_id)
        if p is None:
            return ErrorCode.none
        return self._partitions.check(p)

    async def _load_partition(self, partition: int, current: Callable[[], bool]) -> bool:
        started = time.monotonic()
        try:
            open_txns: OpenTxns = {}
            records = await self._store.read(partition, open_txns)
        except StoreError as exc:
            log.error("cannot load __consumer_offsets-%d: %s", partition, exc)
            return False
        # Replayed aside: the partition may be unloaded while replay yields to the loop.
        replayed: dict[str, ClassicGroup] = {}
        loaded = await replay(replayed, records, self._timer.now_ms(), partition)
        if not current():
            return True
        self._groups.update(replayed)
        names = {v: k for k, v in self.consumer.topic_ids().items()}
        consumer_groups = replay_consumer_groups(
            records, self.settings.consumer, names.get, self._timer.now_ms()
        )
        for group_id, consumer_group in consumer_groups.items():
            if group_id not in self._groups:
                self._groups[group_id] = ClassicGroup(group_id, self._timer.now_ms())
            self.consumer.loaded(consumer_group)
        self.txn_offsets.load_open_txns(open_txns)
        for group_id in loaded:
            group = self._groups.get(group_id)
            if group is None:
                continue
            for member in group.members.values():
                self.membership.reschedule_heartbeat(group, member)
            if len(group.members) > self.settings.max_group_size:
                self.membership.prepare_rebalance(group, "loaded group is over group.max.size")
        if records:
            log.info(
                "loaded __consumer_offsets-%d: %d records, %d groups in %.0f ms",
                partition,
                len(records),
                len(loaded),
                (time.monotonic() - started) * 1000,
            )
        return True

    async def _write(
        self,
        group_id: str,
        records: Sequence[CoordinatorRecord],
        producer: TxnProducer | None = None,
    ) -> ErrorCode:
        """Appends records to the group's partition (transactional for ``producer``); NONE once
        they are in the log."""
        code = await self.ensure_offsets_topic()
        if code != ErrorCode.none:
            return code
        p = self.partition_for(group_id)
        assert p is not None
        try:
            await self._store.append(p, records, producer)
        except StoreError as exc:
            log.warning("group %s: writing to __consumer_offsets-%d failed: %s", group_id, p, exc)
            return store_error_to_response_error(exc.code)
        return ErrorCode.none

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
            and (g.members or g.group_id not in self._consumer_groups)
            and (not states or str(g.state).lower() in states)
            and (not types or "classic" in types)
        ]
        out += [
            ListedGroup(c.group_id, "consumer", str(c.state), "consumer")
            for c in self._consumer_groups.values()
            if not (c.group_id in self._groups and self._groups[c.group_id].members)
            and (not states or str(c.state).lower() in states)
            and (not types or "consumer" in types)
        ]
        return ErrorCode.none, out

    def describe_group(self, group_id: str, *, not_found_error: bool = False) -> DescribedGroup:
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return DescribedGroup(group_id, code)
        group = self._groups.get(group_id)
        if self.consumer.has_members(group_id) or (
            group_id in self._consumer_groups and (group is None or not group.members)
        ):
            # Kafka: DescribeGroups is for classic groups; ConsumerGroupDescribe for these.
            return DescribedGroup(
                group_id,
                ErrorCode.group_id_not_found,
                str(GroupState.DEAD),
                error_message=f"Group {group_id} is not a classic group.",
            )
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
        if not group.is_empty or self.consumer.has_members(group_id):
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
            self.membership.remove_group(group)
        if not self.consumer.has_members(group_id):
            await self.consumer.delete(group_id)
        log.info("group %s: deleted", group_id)
        return ErrorCode.none
