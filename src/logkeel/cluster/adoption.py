"""Which partition logs found on disk, unknown to the metadata, a single node adopts as topics.

A log dir written by Apache Kafka (or metadata lost beside intact logs) holds partition dirs
no topic in logkeel's metadata names. A single node adopts them: each topic is registered with
the partitions its dirs show, its topic id from `partition.metadata` (a new one if none), and
default configs. A cluster leaves them alone and reports them, as Kafka treats stray logs:
there the controller's metadata is the truth and a stray log may be a deleted replica.

``plan_adoption`` is the decision, pure; ``stray_logs`` gathers its input from the loaded logs.

- Partition numbers are kept: a topic with dirs 0, 1 and 3 gets 4 partitions, partition 2
  new and empty (its data is not in these log dirs: another broker's replica, or a disk not
  listed in log.dirs). Numbering is what keyed producers and committed offsets rely on, so
  the dirs present are never renumbered; a log dir that is offline at start-up keeps the
  missing partition offline instead (the partition table's rule for a log not found).
- Never adopted: a topic whose deletion is pending or was done (by name, and by topic id
  when the dir names one: a leftover of a deleted topic is never served again), a name Kafka
  refuses or that collides with a topic ('.' vs '_'), a topic whose dirs disagree on the topic
  id, an id that another topic holds, Kafka's own `__cluster_metadata` (the KRaft metadata log,
  not a topic), and partitions of a topic the metadata has (left alone and reported).
- Coordinators' topics (`__consumer_offsets`, `__transaction_state`) are adopted with the
  count the dirs show when the dirs are 0..N-1 without a gap: the group and transaction
  coordinators hash ids over the topic's partition count (the existing topic's count wins
  over offsets.topic.num.partitions, as in Kafka), so the count must be the one the data was
  written with. With a gap the true count is unknown (the highest partitions may be on
  another broker), and a wrong count would route groups to partitions that do not hold their
  offsets: such a topic is not adopted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from logkeel.storage.topic_partition import TopicPartition, partition_dirs_fit, validate_topic_name

# Kafka's KRaft metadata log: never a topic.
KRAFT_METADATA_TOPIC = "__cluster_metadata"


@dataclass(frozen=True, slots=True)
class Adoption:
    topic: str
    partitions: int
    topic_id: str
    id_from_disk: bool  # False: no `partition.metadata` named one, a new id was made
    present: tuple[int, ...]
    missing: tuple[int, ...]  # numbers below the highest present with no dir here
    internal: bool

    def describe(self) -> str:
        source = "from partition.metadata" if self.id_from_disk else "new, none on disk"
        gaps = (
            f"; partitions {list(self.missing)} have no log here and start empty"
            if self.missing
            else ""
        )
        return (
            f"adopted topic {self.topic!r} from its logs: {self.partitions} partition(s) "
            f"{list(self.present)}, topic id {self.topic_id} ({source}){gaps}"
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    topic: str
    partitions: tuple[int, ...]
    reason: str

    def describe(self) -> str:
        return f"not adopting the logs of {self.topic!r} (partitions {list(self.partitions)}): {self.reason}"


def plan_adoption(
    strays: Mapping[TopicPartition, str | None],
    *,
    known: Mapping[str, str],
    pending_deletions: Iterable[str],
    deleted: Mapping[str, str],
    coordinator_topics: Iterable[str],
    new_id: Callable[[], str],
) -> tuple[list[Adoption], list[Refusal]]:
    """``strays``: partition -> topic id from its `partition.metadata` (None: none) of every
    loaded or unloadable partition dir; ``known``: the metadata's topics (name -> topic id);
    ``deleted``: topics whose deletion was done (name -> topic id)."""
    by_topic: dict[str, dict[int, str | None]] = {}
    for tp, topic_id in strays.items():
        by_topic.setdefault(tp.topic, {})[tp.partition] = topic_id
    pending = set(pending_deletions)
    coordinators = set(coordinator_topics)
    known_ids = {topic_id: name for name, topic_id in known.items()}
    adoptions: list[Adoption] = []
    refusals: list[Refusal] = []
    for topic in sorted(by_topic):
        parts = by_topic[topic]
        present = tuple(sorted(parts))

        def refuse(reason: str, topic: str = topic, present: tuple[int, ...] = present) -> None:
            refusals.append(Refusal(topic, present, reason))

        ids = {i for i in parts.values() if i is not None}
        count = present[-1] + 1
        missing = tuple(sorted(set(range(count)) - set(present)))
        if topic in known:
            refuse("the topic exists with other partitions; these logs are left alone")
        elif topic == KRAFT_METADATA_TOPIC:
            refuse("Kafka's KRaft metadata log, not a topic")
        elif topic in pending:
            refuse("its deletion is pending")
        elif topic in deleted and (not ids or deleted[topic] in ids):
            refuse("the topic was deleted; its leftover logs are never served again")
        elif validate_topic_name(topic) is not None:
            refuse(str(validate_topic_name(topic)))
        elif partition_dirs_fit(topic, count):
            refuse(str(partition_dirs_fit(topic, count)))
        elif len(ids) > 1:
            refuse(f"its partition dirs name different topic ids {sorted(ids)}")
        elif ids and next(iter(ids)) in known_ids:
            refuse(f"its topic id belongs to topic {known_ids[next(iter(ids))]!r}")
        elif (other := colliding_topic(topic, known)) is not None:
            refuse(
                f"collides with topic {other!r} ('.' and '_' are interchangeable in metric names)"
            )
        elif topic in coordinators and missing:
            refuse(
                f"partitions {list(missing)} are missing, so the partition count the "
                "coordinator hashes ids over is unknown"
            )
        else:
            topic_id = next(iter(ids)) if ids else new_id()
            known_ids[topic_id] = topic
            adoptions.append(
                Adoption(topic, count, topic_id, bool(ids), present, missing, topic in coordinators)
            )
    return adoptions, refusals


def colliding_topic(name: str, topics: Iterable[str]) -> str | None:
    """The topic among ``topics`` whose name differs from ``name`` only by '.' against '_'
    (Kafka refuses such pairs: they collide in metric names)."""
    key = name.replace(".", "_")
    return next((t for t in topics if t != name and t.replace(".", "_") == key), None)
