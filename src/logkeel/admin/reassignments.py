"""Partition reassignments (KIP-455) asked through AlterPartitionReassignments: `logkeel
reassign` and `logkeel console`'s action."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.admin.session import AdminError, AdminSession, nested
from logkeel.server.protocol import ApiKey, request_schema
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["alter_reassignments"]


def alter_reassignments(
    session: AdminSession, changes: dict[TopicPartition, tuple[int, ...] | None]
) -> dict[TopicPartition, str | None]:
    """AlterPartitionReassignments (to the bootstrap broker, which queues it for the
    controller): per partition, None or the error and its message; a replica list of None
    cancels the partition's reassignment. ``AdminError``: the whole request refused."""
    Request = request_schema(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0)
    assert Request is not None
    Topic, Part = nested(Request, "ReassignableTopic"), nested(Request, "ReassignablePartition")
    by_topic: dict[str, list[Any]] = {}
    for tp, replicas in sorted(changes.items()):
        by_topic.setdefault(tp.topic, []).append(Part(partition_index=tp.partition,
                                                      replicas=replicas))  # fmt: skip
    answer = session.send(
        Request(topics=tuple(Topic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())),
        timeout_ms=90_000,
    )
    if answer.error_code != ErrorCode.none:
        refused = f"{answer.error_code.name.upper()} {answer.error_message or ''}".rstrip()
        raise AdminError(f"AlterPartitionReassignments refused: {refused}")
    out: dict[TopicPartition, str | None] = {}
    for t in answer.responses:
        for p in t.partitions:
            error = None
            if p.error_code != ErrorCode.none:
                error = f"{p.error_code.name.upper()}: {p.error_message or ''}".rstrip(": ")
            out[TopicPartition(str(t.name), int(p.partition_index))] = error
    return out
