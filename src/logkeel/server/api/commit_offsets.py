"""The offsets an OffsetCommit or TxnOffsetCommit request asks to commit, and the partitions
refused before the coordinator sees them (shared by api/groups.py and api/transactions.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.group.results import CommitOffset

__all__ = ["commit_offsets_of"]


def commit_offsets_of(
    topics: Any, partition_exists: Callable[[str, int], bool], readable: Callable[[str], bool]
) -> tuple[list[CommitOffset], dict[tuple[str, int], ErrorCode]]:
    """The offsets of an OffsetCommit/TxnOffsetCommit request's topics, TOPIC_AUTHORIZATION_FAILED
    for those of topics the principal may not read (Kafka's check) and UNKNOWN_TOPIC_OR_PARTITION
    for those of partitions that do not exist."""
    offsets: list[CommitOffset] = []
    errors: dict[tuple[str, int], ErrorCode] = {}
    for topic in topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not readable(topic.name):
                errors[tp] = ErrorCode.topic_authorization_failed
                continue
            if not partition_exists(*tp):
                errors[tp] = ErrorCode.unknown_topic_or_partition
                continue
            offsets.append(
                CommitOffset(
                    topic.name,
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata,
                )
            )
    return offsets, errors
