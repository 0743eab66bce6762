"""confluent-kafka clients configured for the Spark source and sink, and the driver's view of
topics, partitions and offsets.

Nothing here holds Spark state: the driver asks ``KafkaMetadata`` where partitions begin and
end, executors open their own consumer or producer per task (clients cannot be pickled).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from logkeel.cluster.metadata import INTERNAL_TOPICS
from logkeel.spark.options import EARLIEST, LATEST, OptionError, TopicSelection, isolation_level

Partition = tuple[str, int]
METADATA_TIMEOUT_S = 30.0


class DataLossError(RuntimeError):
    """Records the query should read are gone (deleted by retention, or truncated away).

    Raised only with ``failOnDataLoss`` true (the default), as Spark's Kafka source does.
    """

    def __init__(self, message: str) -> None:
        super().__init__(
            f"{message}. Some data may have been lost because they are not available in Kafka "
            "any more; either the data was aged out by Kafka or the topic may have been deleted "
            "before all the data in the topic was processed. If you don't want your streaming "
            'query to fail on such cases, set the source option "failOnDataLoss" to "false".'
        )


def consumer_config(
    params: Mapping[str, str], group_prefix: str | None = None
) -> dict[str, object]:
    """Settings for a consumer that is assigned partitions and never joins a group.

    Its isolation level decides both what the driver plans and what tasks read: under
    read_committed, ListOffsets(latest) answers the last stable offset (so a range never ends
    inside an open transaction) and librdkafka drops aborted records; control records are
    never returned at either level.
    """
    config: dict[str, object] = dict(params)
    config["isolation.level"] = isolation_level(params)
    group = config.get("group.id") or f"{group_prefix or 'spark-kafka-source'}-{uuid.uuid4()}"
    config.update(
        {
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            # A start below the log start is data loss to report, not something to paper over.
            "auto.offset.reset": "error",
        }
    )
    return config


def producer_config(params: Mapping[str, str]) -> dict[str, object]:
    config: dict[str, object] = {
        "enable.idempotence": True,
        # The Java client's partitioner, so keyed records land where Spark's Kafka sink puts them.
        "partitioner": "murmur2_random",
        "linger.ms": 5,
    }
    config.update(params)
    return config


class KafkaMetadata:
    """Partitions and offsets as the cluster reports them now (driver side, lazily connected)."""

    def __init__(self, params: Mapping[str, str]) -> None:
        self._consumer = Consumer(consumer_config(params, "spark-kafka-metadata"))

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, selection: TopicSelection) -> list[Partition]:
        """The selected partitions that exist; ``assign``ed ones are taken as given."""
        if selection.assigned:
            return list(selection.assigned)
        if selection.topics:
            topics = {}
            for topic in selection.topics:
                md = self._consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
                topics.update(md.topics)
        else:
            topics = self._consumer.list_topics(timeout=METADATA_TIMEOUT_S).topics
        found: list[tuple[str, int]] = []
        for name, meta in topics.items():
            if meta.error is not None or not selection.matches(name):
                continue
            # A pattern never matches internal topics (Kafka's exclude.internal.topics=true).
            if selection.pattern is not None and name in INTERNAL_TOPICS:
                continue
            found.extend((name, p) for p in meta.partitions)
        return sorted(found)

    def _list_offsets(self, specs: Iterable[tuple[str, int, int]]) -> dict[Partition, int]:
        """ListOffsets for (topic, partition, timestamp) where -2 is earliest, -1 latest.

        One request per broker for all partitions, instead of one per partition.
        """
        request = [KafkaTP(t, p, ts) for t, p, ts in specs]
        if not request:
            return {}
        result = self._consumer.offsets_for_times(request, timeout=METADATA_TIMEOUT_S)
        out = {}
        for tp in result:
            if tp.error is not None:
                raise KafkaException(tp.error)
            out[(tp.topic, tp.partition)] = tp.offset
        return out

    def earliest(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        return self._list_offsets((t, p, EARLIEST) for t, p in partitions)

    def latest(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        return self._list_offsets((t, p, LATEST) for t, p in partitions)

    def for_times(
        self,
        timestamps: Mapping[Partition, int],
        latest: Mapping[Partition, int],
        *,
        fail_unmatched: bool = False,
    ) -> dict[Partition, int]:
        """The first offset at or after each timestamp. Where no record is that late: the
        latest offset, or with ``fail_unmatched`` an error (Spark's
        ``startingOffsetsByTimestampStrategy`` = ``error``, its default for starting offsets)."""
        found = self._list_offsets((t, p, ts) for (t, p), ts in timestamps.items())
        unmatched = sorted(tp for tp, off in found.items() if off < 0)
        if unmatched and fail_unmatched:
            t, p = unmatched[0]
            raise OptionError(
                f"No offset matched from request of topic-partition {t}-{p} and timestamp "
                f"{timestamps[(t, p)]} ({len(unmatched)} partition(s) in all): no record is that "
                "late. Set the source option 'startingOffsetsByTimestampStrategy' to 'latest' "
                "to start those partitions at their latest offset instead"
            )
        return {tp: (off if off >= 0 else latest[tp]) for tp, off in found.items()}
