"""What the admin commands and the console ask about partitions, through an `AdminSession`:
every topic's partitions as the bootstrap broker's Metadata gives them, and offsets from each partition's
leader (ListOffsets: earliest, latest, or the first at or after a timestamp)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.admin.session import AdminSession, nested
from logkeel.server.network.client import BrokerConnectionError
from logkeel.server.protocol import ApiKey, request_schema
from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "PartitionInfo",
    "TopicInfo",
    "list_offsets",
    "topics",
]

# ListOffsets' special timestamps.
LATEST = -1
EARLIEST = -2


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int  # -1: none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: str | None  # Kafka's error name for this partition (LEADER_NOT_AVAILABLE, ...)

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    def unavailable(self, live: set[int]) -> bool:
        """No leader, or a leader the cluster does not list as alive (kafka-topics' test)."""
        return self.leader < 0 or self.leader not in live

    def states(self, live: set[int], min_isr: int | None) -> set[str]:
        """What kafka-topics' describe filters call this partition: unavailable,
        under-replicated, under-min-isr, at-min-isr (none: healthy)."""
        found = set()
        if self.unavailable(live):
            found.add("unavailable")
        if self.under_replicated:
            found.add("under-replicated")
        if min_isr is not None and len(self.isr) < min_isr:
            found.add("under-min-isr")
        if min_isr is not None and len(self.isr) == min_isr:
            found.add("at-min-isr")
        return found

    def as_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "offline_replicas": list(self.offline_replicas),
        }


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: tuple[PartitionInfo, ...]


def topics(admin: AdminSession, names: tuple[str, ...] | None = None) -> dict[str, TopicInfo]:
    """Topics by name (``names``: only those; None: every topic); a name the cluster does not
    know is left out."""
    answer = admin.metadata(names)
    found = {}
    for t in answer.topics:
        if t.error_code == ErrorCode.unknown_topic_or_partition or t.name is None:
            continue
        parts = tuple(
            PartitionInfo(
                partition=int(p.partition_index),
                leader=int(p.leader_id),
                leader_epoch=int(p.leader_epoch),
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
                offline_replicas=tuple(int(r) for r in p.offline_replicas),
                error=None if p.error_code == ErrorCode.none else p.error_code.name.upper(),
            )
            for p in sorted(t.partitions, key=lambda p: p.partition_index)
        )
        topic_id = None if t.topic_id is None or t.topic_id.int == 0 else t.topic_id
        found[str(t.name)] = TopicInfo(str(t.name), topic_id, bool(t.is_internal), parts)
    return found


def list_offsets(
    admin: AdminSession, leaders: dict[TopicPartition, int], timestamp: int
) -> dict[TopicPartition, int | None]:
    """Each partition's offset for ``timestamp`` (LATEST, EARLIEST or milliseconds: the first
    offset whose record is at or after it), asked of its leader; None where there is no live
    leader or it gave none (no record that late, or an error such as a leader that moved)."""
    by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
    for tp, leader in leaders.items():
        by_leader[leader].append(tp)
    Request = request_schema(ApiKey.LIST_OFFSETS, 7)
    assert Request is not None
    Topic, Partition = nested(Request, "ListOffsetsTopic"), nested(Request, "ListOffsetsPartition")
    result: dict[TopicPartition, int | None] = dict.fromkeys(leaders)
    live = admin.brokers()
    for leader, tps in sorted(by_leader.items()):
        if leader not in live:  # none, or one the cluster lists as dead (a failover under way)
            continue
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        request = Request(
            replica_id=-1,
            isolation_level=0,
            topics=tuple(
                Topic(name=name, partitions=tuple(
                    Partition(partition_index=p, timestamp=timestamp) for p in sorted(ps)
                ))
                for name, ps in sorted(by_topic.items())
            ),
        )  # fmt: skip
        try:
            answer = admin.send_to_node(leader, request, missing_ok=True)
        except BrokerConnectionError:
            continue  # a leader going down: its partitions' offsets stay unknown
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.none and int(p.offset) >= 0:
                    result[TopicPartition(str(t.name), int(p.partition_index))] = int(p.offset)
    return result
