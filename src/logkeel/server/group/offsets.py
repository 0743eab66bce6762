"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, and expiry.

- A member's commit must carry the current generation (and not arrive mid-rebalance); a commit
  with generation -1 from outside group management is accepted while the group has no members
  (this creates a "simple" group if needed). A commit is answered once its record is in the
  log. OffsetFetch reads the in-memory copy.
- ``offsets.retention.minutes``: offsets of a group that has been empty that long (or, for a
  simple group, not committed for that long; or for a stable consumer group, of topics it no
  longer subscribes to) are deleted with tombstones every
  ``offsets.retention.check.interval.ms``, and an empty group without offsets goes away.
- A deleted topic's offsets are deleted from every group.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from logkeel.server.group.context import CoordinatorPart, GroupContext
from logkeel.server.group.log import CoordinatorRecord
from logkeel.server.group.membership import GroupMembership
from logkeel.server.group.records import (
    OffsetCommitValue,
    group_metadata_record,
    offset_commit_record,
)
from logkeel.server.group.results import CommitOffset, FetchedOffset
from logkeel.server.group.state import ClassicGroup, GroupError, GroupState

__all__ = ["GroupOffsets"]

log = logging.getLogger(__name__)


class GroupOffsets(CoordinatorPart):
    """The groups' committed offsets, their commits, fetches, deletions and expiry."""

    def __init__(self, ctx: GroupContext, membership: GroupMembership) -> None:
        super().__init__(ctx)
        # Commits keep members' sessions alive; expiry removes empty groups.
        self._membership = membership

    def validate_offset_commit(
        self,
        group: ClassicGroup,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        transactional: bool = False,
        api_version: int = 9,
    ) -> None:
        """Kafka's rules for OffsetCommit and, with ``transactional``, TxnOffsetCommit: the
        latter's older versions carry no member id or generation, so a transactional commit
        without them is accepted while the group has members (the transaction coordinator,
        not group membership, fences zombies there), and it is not refused mid-rebalance."""
        if group.is_in(GroupState.DEAD):
            raise GroupError(ErrorCode.coordinator_not_available)
        if self._consumer is not None and not group.members:
            # A consumer-protocol group: the member epoch stands for the generation.
            code = self._consumer.validate_offset_commit(
                group.group_id, member_id, generation_id, api_version, transactional
            )
            if code == ErrorCode.none:
                return
            if code is not None:
                raise GroupError(code)
        if generation_id < 0 and group.is_empty:
            return  # a commit from outside group management, while nobody manages the group
        if generation_id >= 0 or member_id or instance_id is not None:
            group.validate_member(member_id, instance_id)
            if generation_id != group.generation_id:
                raise GroupError(ErrorCode.illegal_generation)
        elif not transactional and not group.is_empty:
            raise GroupError(ErrorCode.unknown_member_id)
        if not transactional and group.is_in(GroupState.COMPLETING_REBALANCE):
            raise GroupError(ErrorCode.rebalance_in_progress)

    def commit_values(
        self, offsets: Sequence[CommitOffset], now: int, expire: int
    ) -> tuple[dict[tuple[str, int], OffsetCommitValue], dict[tuple[str, int], ErrorCode]]:
        """The values to store for ``offsets``, and the errors of those refused."""
        errors: dict[tuple[str, int], ErrorCode] = {}
        values: dict[tuple[str, int], OffsetCommitValue] = {}
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata) > self.settings.offset_metadata_max_bytes:
                errors[(o.topic, o.partition)] = ErrorCode.offset_metadata_too_large
                continue
            values[(o.topic, o.partition)] = OffsetCommitValue(
                o.offset, o.leader_epoch, metadata, now, expire
            )
        return values, errors

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
            self.validate_offset_commit(
                group, member_id, group_instance_id, generation_id, api_version=api_version
            )
        except GroupError as exc:
            return exc.code, {}
        if self._groups.get(group_id) is None:
            log.info("group %s: created by a manual offset commit", group_id)
            self._groups[group_id] = group
        if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE) and group.has_member(
            member_id
        ):
            # A commit keeps a classic member's session alive.
            self._membership.reschedule_heartbeat(group, group.member(member_id))
        now = self._timer.now_ms()
        expire = now + retention_time_ms if retention_time_ms >= 0 else -1
        values, errors = self.commit_values(offsets, now, expire)
        records = [offset_commit_record(group_id, t, p, v) for (t, p), v in values.items()]
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
                found = stored.get((topic, partition))
                if found is None:
                    out.append(FetchedOffset(topic, partition))
                else:
                    out.append(
                        FetchedOffset(
                            topic, partition, found.offset, found.leader_epoch, found.metadata
                        )
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
        if self._consumer is not None and group.is_empty:
            subscribed = self._consumer.subscribed_topics(group_id) or set()
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

    def schedule_expiry(self) -> None:
        self._timer.schedule(
            "offsets-retention",
            self.settings.offsets_retention_check_interval_ms,
            self._on_expiry_timer,
        )

    def _on_expiry_timer(self) -> None:
        if not self._is_active():
            return
        self._spawn(self.expire_offsets())
        self.schedule_expiry()

    def _expired_offsets(self, group: ClassicGroup, now: int) -> list[tuple[str, int]]:
        retention = self.settings.offsets_retention_ms

        def past(base: int, v: OffsetCommitValue) -> bool:
            if v.expire_timestamp >= 0:
                return now >= v.expire_timestamp
            return now - base >= retention

        if self._consumer is not None and self._consumer.has_members(group.group_id):
            return []  # a consumer-protocol group in use keeps its offsets
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
                self._membership.remove_group(group)
            log.info(
                "group %s: expired %d offsets%s",
                group.group_id,
                len(expired),
                " and removed the empty group" if drop_group else "",
            )
        return removed
