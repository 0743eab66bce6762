"""The consumer embedded protocol of classic groups, as a consumer-protocol group reads and
writes it for the classic members it hosts (KIP-848's online migration): a JoinGroup's
ConsumerProtocolSubscription (topics, owned partitions, rack) and the ConsumerProtocolAssignment
a SyncGroup answers with.

Every version of both starts with an int16 version and then the fields of that version, each
version extending the one before, so a version newer than kio knows is read with the newest
layout it knows (what Kafka's ConsumerProtocol does).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from logkeel.server.group.assignors import Assignment

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ClassicSubscription",
    "assignment_bytes",
    "parse_assignment",
    "parse_subscription",
]

CONSUMER_PROTOCOL_TYPE = "consumer"

_SUBSCRIPTION_READERS: tuple[Any, ...] = tuple(
    entity_reader(m.ConsumerProtocolSubscription)
    for m in (subscription_v0, subscription_v1, subscription_v2, subscription_v3)
)
_read_assignment = entity_reader(assignment_v0.ConsumerProtocolAssignment)
_write_assignment = entity_writer(assignment_v0.ConsumerProtocolAssignment)
_VERSION = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class ClassicSubscription:
    topics: tuple[str, ...]
    # What the member still owns as it joins: empty for an eager member (it revoked everything
    # before joining) and for version 0, which has no such field.
    owned: Assignment
    rack_id: str | None


def _version(data: bytes) -> int | None:
    if len(data) < 2:
        return None
    version: int = _VERSION.unpack_from(data)[0]
    return version if version >= 0 else None


def parse_subscription(data: bytes) -> ClassicSubscription | None:
    """The subscription in a JoinGroup protocol's metadata, or None if it is not one."""
    version = _version(data)
    if version is None:
        return None
    reader = _SUBSCRIPTION_READERS[min(version, len(_SUBSCRIPTION_READERS) - 1)]
    try:
        parsed, _ = reader(data, 2)
    except Exception:  # noqa: BLE001 - kio's native reader raises errors of its own on bad bytes
        return None
    owned: dict[str, frozenset[int]] = {}
    for tp in getattr(parsed, "owned_partitions", ()):
        owned[str(tp.topic)] = owned.get(str(tp.topic), frozenset()) | {
            int(p) for p in tp.partitions
        }
    return ClassicSubscription(
        tuple(str(t) for t in parsed.topics), owned, getattr(parsed, "rack_id", None)
    )


def parse_assignment(data: bytes) -> tuple[Assignment, bytes | None] | None:
    """The partitions and user data of a ConsumerProtocolAssignment; None if it is not one.
    Empty bytes (a member that was never assigned) are an empty assignment."""
    if not data:
        return {}, None
    if _version(data) is None:
        return None
    try:
        parsed, _ = _read_assignment(data, 2)
    except Exception:  # noqa: BLE001 - as above
        return None
    out: dict[str, frozenset[int]] = {}
    for tp in parsed.assigned_partitions:
        out[str(tp.topic)] = out.get(str(tp.topic), frozenset()) | {int(p) for p in tp.partitions}
    return out, parsed.user_data


def assignment_bytes(assignment: Assignment) -> bytes:
    """A ConsumerProtocolAssignment v0 (every client reads it) of these partitions."""
    value = assignment_v0.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            assignment_v0.TopicPartition(
                topic=TopicName(t), partitions=tuple(i32(p) for p in sorted(ps))
            )
            for t, ps in sorted(assignment.items())
            if ps
        ),
        user_data=None,
    )
    buf = BytesIO()
    buf.write(_VERSION.pack(0))
    _write_assignment(buf, value)
    return buf.getvalue()
