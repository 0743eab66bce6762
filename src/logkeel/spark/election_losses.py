"""Naming the election behind a truncation: when ``failOnDataLoss`` finds that a partition's log
went back below offsets a query had planned, the records were truncated away, which on a logkeel
cluster happens after an election that let a replica without them lead (an unclean one, or one
the operator forced). The controller records each such election with what the other replicas
held past the new leader's log end (``zk_data.ElectionLoss``); the error names it.

Best effort on the driver: the cluster's ZooKeeper is found through the brokers' own
``zookeeper.connect`` (DescribeConfigs), so plain Kafka clusters and single brokers simply have
nothing to add, and a failure to look never hides the data loss itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable, Mapping

# confluent-kafka exports these without declaring them (no __all__ entry).
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)

from logkeel.cluster.zk_data import ElectionLoss

LOOKUP_TIMEOUT_S = 10.0


def describe(loss: ElectionLoss) -> str:
    when = dt.datetime.fromtimestamp(loss.time_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    start = "its log end (not reported)" if loss.from_offset < 0 else f"offset {loss.from_offset}"
    held = ", ".join(f"broker {r} held {n} more" for r, n in sorted(loss.truncated.items()))
    return (
        f"the controller reported an election at {when} UTC that made broker {loss.leader} "
        f"leader at epoch {loss.leader_epoch} from {start}; the other replicas truncated past it"
        + (f" ({held})" if held else "")
        + (f": {loss.reason}" if loss.reason else "")
    )


def matching_loss(
    losses: Iterable[ElectionLoss], topic: str, partition: int, truncated_to: int
) -> ElectionLoss | None:
    """The latest recorded loss of this partition that can explain a log cut back to
    ``truncated_to`` (one whose new leader started at or below it, or did not say where)."""
    found = None
    for loss in losses:
        if (loss.tp.topic, loss.tp.partition) != (topic, partition):
            continue
        if loss.from_offset <= truncated_to and (found is None or loss.time_ms >= found.time_ms):
            found = loss
    return found


def zookeeper_connect(params: Mapping[str, str]) -> str | None:
    """The cluster's zookeeper.connect, as a broker reports its own config (None: not known)."""
    admin = AdminClient(dict(params))
    brokers = admin.list_topics(timeout=LOOKUP_TIMEOUT_S).brokers
    for broker_id in sorted(brokers):
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        futures = admin.describe_configs([resource], request_timeout=LOOKUP_TIMEOUT_S)
        with contextlib.suppress(Exception):
            entries = futures[resource].result(LOOKUP_TIMEOUT_S)
            entry = entries.get("zookeeper.connect")
            if entry is not None and entry.value:
                return str(entry.value)
    return None


def explain_truncation(
    params: Mapping[str, str], topic: str, partition: int, truncated_to: int
) -> str | None:
    """What the cluster recorded about the election that cut ``topic-partition`` back to
    ``truncated_to``, or None."""
    from logkeel.cluster.zk_client import ZkMetadataClient

    try:
        connect = zookeeper_connect(params)
        if connect is None:
            return None
        client = ZkMetadataClient(connect, session_timeout_ms=10_000)
        client.start()
        try:
            loss = matching_loss(client.election_losses(), topic, partition, truncated_to)
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - only extra detail: the data loss is reported regardless
        return None
    return describe(loss) if loss is not None else None
