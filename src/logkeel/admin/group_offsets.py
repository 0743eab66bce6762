"""The decisions of ``logkeel groups`` without sockets: each partition's lag, which member a
consumer-protocol assignment gives it, and where ``--reset-offsets`` moves each partition
(kafka-consumer-groups.sh's rules)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.serial import entity_reader

from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "OffsetRow",
    "ResetError",
    "assigned_partitions",
    "offset_rows",
    "reset_offsets",
]

_read_assignment = entity_reader(ConsumerProtocolAssignment)


class ResetError(ValueError):
    """A reset that cannot be computed; the message names the partition."""


@dataclass(frozen=True, slots=True)
class OffsetRow:
    tp: TopicPartition
    current: int | None  # the group's committed offset
    log_end: int | None
    member: str | None  # the member it is assigned to

    @property
    def lag(self) -> int | None:
        if self.current is None or self.log_end is None:
            return None
        return max(self.log_end - self.current, 0)


def assigned_partitions(assignment: bytes) -> list[TopicPartition] | None:
    """The partitions of a ConsumerProtocolAssignment (every version starts with the v0
    layout after its int16 version), or None when the bytes are not one."""
    if len(assignment) < 2:
        return None
    try:
        parsed, _ = _read_assignment(assignment, 2)
    except Exception:  # noqa: BLE001 - kio's native reader has errors of its own for bytes that are not one
        return None
    return [
        TopicPartition(str(t.topic), int(p))
        for t in parsed.assigned_partitions
        for p in t.partitions
    ]


def offset_rows(
    committed: Mapping[TopicPartition, int],
    assignments: Mapping[str, Iterable[TopicPartition]],
    log_ends: Mapping[TopicPartition, int | None],
) -> list[OffsetRow]:
    """One row per partition the group committed for or has assigned, in partition order."""
    owner = {tp: member for member, tps in assignments.items() for tp in tps}
    return [
        OffsetRow(tp, committed.get(tp), log_ends.get(tp), owner.get(tp))
        for tp in sorted(set(committed) | set(owner))
    ]


def reset_offsets(
    strategy: str,
    partitions: Iterable[TopicPartition],
    committed: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int | None],
    latest: Mapping[TopicPartition, int | None],
    *,
    shift: int = 0,
    offset: int = 0,
    by_time: Mapping[TopicPartition, int | None] | None = None,
) -> dict[TopicPartition, int]:
    """The new offset of each partition. ``strategy``: to-earliest, to-latest, to-offset,
    shift-by, to-datetime (the first offset at or after the time; the log end when no record
    is that late). Shifts and explicit offsets are kept within [earliest, latest], as Kafka
    does; a shift needs a committed offset to shift from."""
    plan = {}
    for tp in sorted(partitions):
        low, high = earliest.get(tp), latest.get(tp)
        if low is None or high is None:
            raise ResetError(f"{tp}: its leader gave no log start or end offset")
        if strategy == "to-earliest":
            target = low
        elif strategy == "to-latest":
            target = high
        elif strategy == "to-offset":
            target = offset
        elif strategy == "shift-by":
            if tp not in committed:
                raise ResetError(f"{tp}: the group has no committed offset to shift from")
            target = committed[tp] + shift
        elif strategy == "to-datetime":
            found = (by_time or {}).get(tp)
            target = high if found is None else found
        else:
            raise ResetError(f"unknown reset strategy {strategy!r}")
        plan[tp] = min(max(target, low), high)
    return plan
