"""Transactional offset commits (TxnOffsetCommit): offsets that become visible on commit.

A transactional producer's commit is written at once, as a transactional batch of its producer
id and epoch in the group's ``__consumer_offsets`` partition, and held pending here; OffsetFetch
does not see it. When the transaction coordinator has written the transaction's marker to that
partition it calls ``complete_txn``: a commit applies the pending offsets, an abort drops them.
At load time the partition's reader resolves transactions by their markers, and hands back
those still open, which become pending again (see ``read_partition_records``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode

from logkeel.server.group.context import CoordinatorPart, GroupContext
from logkeel.server.group.log import OpenTxns
from logkeel.server.group.offsets import GroupOffsets
from logkeel.server.group.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    decode_offset_commit_value,
    offset_commit_record,
)
from logkeel.server.group.results import CommitOffset, FetchedOffset
from logkeel.server.group.state import ClassicGroup, GroupError

__all__ = ["GroupTxnOffsets"]

log = logging.getLogger(__name__)

# producer id -> group id -> (topic, partition) -> offset
_Pending = dict[int, dict[str, dict[tuple[str, int], OffsetCommitValue]]]


class GroupTxnOffsets(CoordinatorPart):
    def __init__(
        self,
        ctx: GroupContext,
        offsets: GroupOffsets,
        partition_for: Callable[[str], int | None],
    ) -> None:
        super().__init__(ctx)
        self._offsets = offsets
        self._partition_for = partition_for
        self._pending: _Pending = {}

    def fetch_stable_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]] | None
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """OffsetFetch with ``require_stable`` (KIP-447): a partition with an offset pending in
        an open transaction answers UNSTABLE_OFFSET_COMMIT (the client retries), so a consumer
        taking over never resumes before offsets that are about to be committed."""
        code, fetched = self._offsets.fetch_offsets(group_id, topics)
        unstable = {tp for groups in self._pending.values() for tp in groups.get(group_id, {})}
        if code != ErrorCode.none or not unstable:
            return code, fetched
        return code, [
            FetchedOffset(f.topic, f.partition, error=ErrorCode.unstable_offset_commit)
            if (f.topic, f.partition) in unstable
            else f
            for f in fetched
        ]

    async def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[CommitOffset],
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """Returns an error for the whole request (NONE if none) and one per partition."""
        code = self._check_group(group_id)
        if code != ErrorCode.none:
            return code, {}
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return ErrorCode.illegal_generation, {}
        else:
            try:
                self._offsets.validate_offset_commit(
                    group, member_id, group_instance_id, generation_id, transactional=True
                )
            except GroupError as exc:
                return exc.code, {}
        values, errors = self._offsets.commit_values(offsets, self._timer.now_ms(), -1)
        if values:
            records = [offset_commit_record(group_id, t, p, v) for (t, p), v in values.items()]
            code = await self._write(group_id, records, (producer_id, producer_epoch))
            if code == ErrorCode.none:
                self._pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(values)
            for tp in values:
                errors[tp] = code
        return ErrorCode.none, errors

    def complete_txn(self, producer_id: int, partition: int, committed: bool) -> None:
        """The marker of ``producer_id``'s transaction is in ``__consumer_offsets-partition``."""
        groups = self._pending.get(producer_id)
        if not groups:
            return
        for group_id in [g for g in groups if self._partition_for(g) == partition]:
            values = groups.pop(group_id)
            if not committed:
                continue
            group = self._groups.get(group_id)
            if group is None:
                group = self._groups[group_id] = ClassicGroup(group_id, self._timer.now_ms())
            group.offsets.update(values)
            log.info(
                "group %s: %d offsets of producer %d's transaction committed",
                group_id,
                len(values),
                producer_id,
            )
        if not groups:
            del self._pending[producer_id]

    def unload_partition(self, partition: int) -> None:
        """Forgets the pending offsets of the groups of a partition no longer led here (they
        come back from its log when it is loaded again)."""
        for producer_id, groups in list(self._pending.items()):
            for group_id in [g for g in groups if self._partition_for(g) == partition]:
                del groups[group_id]
            if not groups:
                del self._pending[producer_id]

    def load_open_txns(self, open_txns: OpenTxns) -> None:
        """Makes the offsets of transactions left open in a loaded partition pending again."""
        for producer_id, records in open_txns.items():
            for key, value in records:
                try:
                    k = decode_key(key)
                    if not isinstance(k, OffsetCommitKey) or value is None:
                        continue
                    v = decode_offset_commit_value(value)
                except (RecordFormatError, ValueError) as exc:
                    log.warning("skipping a bad transactional offset record: %s", exc)
                    continue
                by_group = self._pending.setdefault(producer_id, {})
                by_group.setdefault(k.group, {})[(k.topic, k.partition)] = v
