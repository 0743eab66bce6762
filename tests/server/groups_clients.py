"""Consumer-group members of each real client behind one small interface, for the group tests.

Each member subscribes to one topic in one group, with fast group timings (short heartbeats,
no auto-commit) so rebalances settle in well under a second against a broker started with
``group.initial.rebalance.delay.ms=0``. ``poll`` returns (partition, offset, value) tuples.
aiokafka members share one event loop, which every call drives, so heartbeats and rebalances
of all of them progress whenever any of them is polled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import aiokafka
import confluent_kafka
import kafka
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until

Rec = tuple[int, int, bytes]

SESSION_MS = 6000
HEARTBEAT_MS = 300
MAX_POLL_MS = 10_000

logging.getLogger("kafka").setLevel(logging.WARNING)
logging.getLogger("aiokafka").setLevel(logging.WARNING)


class Member(Protocol):
    def poll(self, timeout: float = 0.2) -> list[Rec]: ...

    def assignment(self) -> set[int]: ...

    def commit(self, offsets: dict[int, int] | None = None) -> None: ...

    def committed(self, partitions: Iterable[int]) -> dict[int, int | None]: ...

    def close(self) -> None: ...


class ConfluentMember:
    def __init__(self, bootstrap: str, group: str, topic: str, **extra: Any) -> None:
        self.topic = topic
        self.c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                "max.poll.interval.ms": MAX_POLL_MS,
                "topic.metadata.refresh.interval.ms": 1000,
                **extra,
            }
        )
        self.c.subscribe([topic])

    def poll(self, timeout: float = 0.2) -> list[Rec]:
        out = []
        for m in self.c.consume(num_messages=500, timeout=timeout):
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(m.error())
                continue
            out.append((m.partition(), m.offset(), m.value()))
        return out

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self, offsets: dict[int, int] | None = None) -> None:
        if offsets is None:
            try:
                self.c.commit(asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    raise
            return
        tps = [confluent_kafka.TopicPartition(self.topic, p, o) for p, o in offsets.items()]
        for tp in self.c.commit(offsets=tps, asynchronous=False):
            assert tp.error is None, tp.error

    def committed(self, partitions: Iterable[int]) -> dict[int, int | None]:
        tps = [confluent_kafka.TopicPartition(self.topic, p) for p in partitions]
        return {
            tp.partition: (tp.offset if tp.offset >= 0 else None)
            for tp in self.c.committed(tps, timeout=10)
        }

    def close(self) -> None:
        self.c.close()


class KafkaPythonMember:
    def __init__(self, bootstrap: str, group: str, topic: str, **extra: Any) -> None:
        self.topic = topic
        self.c = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            max_poll_interval_ms=MAX_POLL_MS,
            metadata_max_age_ms=1000,
            **extra,
        )
        # kafka-python 3.0.12 can wedge a leader whose topic metadata arrives while its first
        # JoinGroup is in flight: the rejoin that follows finishes while poll() has timed out,
        # need_rejoin() flips to False, and the SyncGroup result is never applied (no
        # assignment, heartbeats stay disabled). Knowing the partitions before joining avoids
        # that client-side race.
        wait_until(lambda: self.c.partitions_for_topic(topic), 10, f"{topic}'s partitions known")
        self.c.subscribe([topic])

    def poll(self, timeout: float = 0.2) -> list[Rec]:
        batches = self.c.poll(timeout_ms=int(timeout * 1000))
        return [(r.partition, r.offset, r.value) for recs in batches.values() for r in recs]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self, offsets: dict[int, int] | None = None) -> None:
        if offsets is None:
            self.c.commit()
            return
        self.c.commit(
            {
                kafka.TopicPartition(self.topic, p): kafka.OffsetAndMetadata(o, "", -1)
                for p, o in offsets.items()
            }
        )

    def committed(self, partitions: Iterable[int]) -> dict[int, int | None]:
        return {p: self.c.committed(kafka.TopicPartition(self.topic, p)) for p in partitions}

    def close(self) -> None:
        self.c.close()


class AioKafkaMember:
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        if cls._loop is None or cls._loop.is_closed():
            cls._loop = asyncio.new_event_loop()
        return cls._loop

    def __init__(self, bootstrap: str, group: str, topic: str, **extra: Any) -> None:
        self.topic = topic

        async def make() -> aiokafka.AIOKafkaConsumer:
            c = aiokafka.AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
                max_poll_interval_ms=MAX_POLL_MS,
                metadata_max_age_ms=1000,
                **extra,
            )
            await c.start()
            return c

        self.c = self._run(make())

    def _run(self, coro: Any) -> Any:
        return self.loop().run_until_complete(coro)

    def poll(self, timeout: float = 0.2) -> list[Rec]:
        batches = self._run(self.c.getmany(timeout_ms=int(timeout * 1000)))
        return [(r.partition, r.offset, r.value) for recs in batches.values() for r in recs]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self, offsets: dict[int, int] | None = None) -> None:
        if offsets is None:
            self._run(self.c.commit())
            return
        self._run(
            self.c.commit({aiokafka.TopicPartition(self.topic, p): o for p, o in offsets.items()})
        )

    def committed(self, partitions: Iterable[int]) -> dict[int, int | None]:
        return {
            p: self._run(self.c.committed(aiokafka.TopicPartition(self.topic, p)))
            for p in partitions
        }

    def close(self) -> None:
        self._run(self.c.stop())


CLIENTS: dict[str, Callable[..., Member]] = {
    "confluent": ConfluentMember,
    "kafka-python": KafkaPythonMember,
    "aiokafka": AioKafkaMember,
}


def produce(
    bootstrap: str, topic: str, per_partition: int, partitions: int, tag: str
) -> set[bytes]:
    """``per_partition`` records into each partition, acks=all; returns the values."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    values = set()
    for part in range(partitions):
        for i in range(per_partition):
            v = f"{tag}-{part}-{i}".encode()
            values.add(v)
            p.produce(topic, value=v, partition=part)
    assert p.flush(30) == 0
    return values


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def poll_until(
    members: list[Member],
    done: Callable[[], bool],
    sink: list[Rec] | None = None,
    timeout: float = 40.0,
    what: str = "condition",
) -> None:
    """Polls every member in turn (records go to ``sink``) until ``done()``."""
    deadline = time.monotonic() + timeout
    while True:
        for m in members:
            recs = m.poll(0.1)
            if sink is not None:
                sink.extend(recs)
            elif recs:
                raise AssertionError(f"unexpected records while waiting for {what}: {recs[:5]}")
        if done():
            return
        if time.monotonic() > deadline:
            owned = [sorted(m.assignment()) for m in members]
            raise AssertionError(f"timed out waiting for {what}; assignments: {owned}")


def close_all(members: list[Member]) -> None:
    for m in members:
        # aiokafka's stop() can raise the CancelledError of its own fetch task.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            m.close()
