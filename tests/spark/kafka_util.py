"""Talking to the test broker with plain confluent-kafka clients (independent of the Spark code)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until

BASE_TS = 1_700_000_000_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(
    bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None
) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    for f in futures.values():
        f.result(30)

    # Wait until metadata shows every partition with a leader.
    def led() -> bool:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        return bool(
            md
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        )

    wait_until(led, 30, f"every partition of {name} led", interval=0.1)
    return name


def message(i: int) -> dict:
    """The i-th test record: key, value, timestamp and (for odd i) headers derived from i."""
    return {
        "key": b"k%d" % i if i % 5 else None,
        "value": b"value-%d" % i,
        "timestamp": BASE_TS + i,
        "headers": [("i", str(i).encode()), ("odd", None)] if i % 2 else None,
    }


def produce(
    bootstrap: str, topic: str, start: int, count: int, partitions: int
) -> dict[tuple[int, int], int]:
    """Produces messages start..start+count-1, message i to partition i % partitions; returns
    {(partition, offset): i} from the delivery reports."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    where: dict[tuple[int, int], int] = {}
    errors = []

    def report(err, msg, i):
        if err is not None:
            errors.append(err)
        else:
            where[(msg.partition(), msg.offset())] = i

    for i in range(start, start + count):
        m = message(i)
        kwargs = {"headers": m["headers"]} if m["headers"] else {}
        p.produce(
            topic,
            m["value"],
            m["key"],
            i % partitions,
            lambda e, msg, i=i: report(e, msg, i),
            timestamp=m["timestamp"],
            **kwargs,
        )
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    return where


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list:
    """Every message of ``topic`` by a plain consumer, in (partition, offset) order."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("check"),
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof, deadline = [], set(), time.monotonic() + timeout
    while len(eof) < partitions and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    continue
                raise RuntimeError(m.error())
            eof.discard(m.partition())
            out.append(m)
    c.close()
    return sorted(out, key=lambda m: (m.partition(), m.offset()))
