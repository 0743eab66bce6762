"""Fetch sessions (KIP-227) with real clients against a real broker: kafka-python's incremental
fetch sessions through a session's life, a group rebalance (forgotten partitions), a broker
restart (the session lost) and an eviction; confluent-kafka and aiokafka (sessionless) still
read everything."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import kafka
import pytest

from tests.brokerproc import BrokerProcess
from tests.server.test_produce_api import RawClient, fetch_request
from tests.waiting import wait_until

PARTITIONS = 24

Read = dict[int, list[bytes]]  # partition -> values, in the order read


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"num.partitions": str(PARTITIONS), "group.initial.rebalance.delay.ms": "0"}
    with BrokerProcess(tmp_path_factory.mktemp("session-clients"), overrides=overrides) as b:
        yield b


def produce(bootstrap: str, topic: str, tag: str, per_partition: int) -> Read:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    sent: Read = defaultdict(list)
    try:
        for i in range(per_partition):
            for p in range(PARTITIONS):
                value = f"{tag}-{p}-{i}".encode()
                producer.send(topic, value=value, partition=p)
                sent[p].append(value)
        producer.flush(30)
    finally:
        producer.close()
    return sent


def read_until(consumer: Any, into: Read, expected: Read, what: str, timeout: float = 30) -> None:
    """Polls ``consumer`` into ``into`` until it holds ``expected`` (per partition, in order)."""

    def done() -> bool:
        for records in consumer.poll(timeout_ms=200).values():
            for r in records:
                into[r.partition].append(r.value)
        return all(into.get(p, []) == v for p, v in expected.items())

    wait_until(done, timeout, what)


def merged(*reads: Read) -> Read:
    out: Read = defaultdict(list)
    for read in reads:
        for p, values in read.items():
            out[p].extend(values)
    return out


def session_of(consumer: kafka.KafkaConsumer) -> tuple[int, int]:
    """(session id, next epoch) of the consumer's fetch session with the one broker."""
    (handler,) = consumer._fetcher._session_handlers.values()
    return handler.next_metadata.session_id, handler.next_metadata.epoch


def kafka_python_consumer(bootstrap: str, **kw: Any) -> kafka.KafkaConsumer:
    settings: dict[str, Any] = {
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 200,
    }
    return kafka.KafkaConsumer(bootstrap_servers=bootstrap, **{**settings, **kw})


def test_kafka_python_reads_many_partitions_through_one_session(server: BrokerProcess) -> None:
    topic = "session-many"
    first = produce(server.bootstrap, topic, "a", 20)
    consumer = kafka_python_consumer(server.bootstrap)
    try:
        consumer.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
        got: Read = defaultdict(list)
        read_until(consumer, got, first, "the first batch of every partition")
        sid, epoch = session_of(consumer)
        assert sid != 0 and epoch >= 1
        # Quiet rounds (incremental, nothing to answer), then writes to a few partitions only:
        # they arrive, the others are left out of the responses, and the session carries on.
        wait_until(lambda: (consumer.poll(timeout_ms=100), session_of(consumer)[1] > epoch + 5)[1],
                   20, "quiet incremental fetches")  # fmt: skip
        later = produce(server.bootstrap, topic, "b", 5)
        read_until(consumer, got, merged(first, later), "the second batch")
        assert session_of(consumer)[0] == sid
        assert session_of(consumer)[1] > epoch + 5
    finally:
        consumer.close()


def test_rebalance_forgets_revoked_partitions(server: BrokerProcess) -> None:
    topic = "session-rebalance"
    before = produce(server.bootstrap, topic, "a", 10)
    one = kafka_python_consumer(server.bootstrap, group_id="g-sessions", enable_auto_commit=True)
    two = None
    try:
        # The group leader assigns from its own metadata: one that does not know the new
        # topic yet assigns nothing ("No partition metadata"), and kafka-python refreshes it
        # only every 5 minutes.
        wait_until(lambda: one.partitions_for_topic(topic), 30, "consumer one knowing the topic")
        one.subscribe([topic])
        got_one: Read = defaultdict(list)
        read_until(one, got_one, before, "consumer one reading every partition")
        handler = next(iter(one._fetcher._session_handlers.values()))
        assert len(handler.session_partitions) == PARTITIONS
        one.commit()

        two = kafka_python_consumer(
            server.bootstrap, group_id="g-sessions", enable_auto_commit=True
        )
        wait_until(lambda: two.partitions_for_topic(topic), 30, "consumer two knowing the topic")
        two.subscribe([topic])
        got_two: Read = defaultdict(list)

        def split() -> bool:
            one.poll(timeout_ms=100)
            two.poll(timeout_ms=100)
            return (
                len(one.assignment()) + len(two.assignment()) == PARTITIONS
                and bool(one.assignment())
                and bool(two.assignment())
            )

        wait_until(split, 60, "the group to split the partitions")
        after = produce(server.bootstrap, topic, "b", 10)
        mine = {tp.partition for tp in one.assignment()}
        theirs = {tp.partition for tp in two.assignment()}
        read_until(one, got_one, {p: before[p] + after[p] for p in mine}, "consumer one's share")
        read_until(two, got_two, {p: after[p] for p in theirs}, "consumer two's share")
        # Consumer one's session dropped the revoked partitions (sent as forgotten), and its
        # session goes on: new records of its partitions keep coming.
        assert {tp.partition for tp in handler.session_partitions} == mine
        assert session_of(one)[0] != 0
        for p in theirs:
            assert got_one[p] == before[p]  # nothing of a revoked partition after it left
    finally:
        one.close()
        if two is not None:
            two.close()


def test_broker_restart_loses_the_session_and_the_consumer_recovers(tmp_path: Path) -> None:
    overrides = {"num.partitions": str(PARTITIONS)}
    with BrokerProcess(tmp_path, overrides=overrides) as broker:
        topic = "session-restart"
        first = produce(broker.bootstrap, topic, "a", 5)
        consumer = kafka_python_consumer(
            broker.bootstrap, reconnect_backoff_ms=50, reconnect_backoff_max_ms=500
        )
        try:
            consumer.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
            got: Read = defaultdict(list)
            read_until(consumer, got, first, "records before the restart")
            old_session = session_of(consumer)[0]
            assert old_session != 0
            broker.restart()
            later = produce(broker.bootstrap, topic, "b", 5)
            read_until(consumer, got, merged(first, later), "records after the restart", 60)
            # The old session died with the process; the consumer opened a new one.
            wait_until(lambda: (consumer.poll(timeout_ms=100), session_of(consumer)[0])[1] not in (0, old_session),
                       30, "a new session after the restart")  # fmt: skip
        finally:
            consumer.close()


def test_an_evicted_consumer_session_falls_back_to_full_fetches(tmp_path: Path) -> None:
    overrides = {"num.partitions": "4", "max.incremental.fetch.session.cache.slots": "1"}
    with BrokerProcess(tmp_path, overrides=overrides) as broker:
        topic = "session-evicted"
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)
        producer.send(topic, b"one", partition=0).get(30)
        consumer = kafka_python_consumer(broker.bootstrap)
        try:
            consumer.assign([kafka.TopicPartition(topic, p) for p in range(4)])
            got: Read = defaultdict(list)
            read_until(consumer, got, {0: [b"one"]}, "the first record")
            assert session_of(consumer)[0] != 0
            # A follower's session (replica id >= 0) takes the only slot: follower sessions
            # evict consumer sessions, however young.
            with RawClient(broker.port) as raw:
                request = fetch_request(12, topic, {0: 0}, session_id=0, session_epoch=0)
                follower = raw.call(_as_replica(request, 5))
                assert follower.session_id != 0
            # The consumer's next incremental fetch finds no session; it falls back to full
            # fetches, answered sessionless while the follower holds the slot, and reads on.
            producer.send(topic, b"two", partition=3).get(30)
            read_until(consumer, got, {0: [b"one"], 3: [b"two"]}, "a record after the eviction")
            wait_until(lambda: (consumer.poll(timeout_ms=100), session_of(consumer)[0] == 0)[1],
                       20, "the consumer to fetch sessionless")  # fmt: skip
        finally:
            consumer.close()
            producer.close()


def _as_replica(request: Any, replica_id: int) -> Any:
    import dataclasses

    return dataclasses.replace(request, replica_id=replica_id)


def test_sessionless_clients_read_every_partition(server: BrokerProcess) -> None:
    topic = "session-less"
    sent = produce(server.bootstrap, topic, "a", 10)
    expected = sum(len(v) for v in sent.values())

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    got: Read = defaultdict(list)
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

        def confluent_done() -> bool:
            for m in consumer.consume(num_messages=500, timeout=0.2):
                assert m.error() is None, m.error()
                got[m.partition()].append(m.value())
            return sum(len(v) for v in got.values()) >= expected

        wait_until(confluent_done, 30, "confluent-kafka reading every partition")
    finally:
        consumer.close()
    assert dict(got) == dict(sent)

    async def aiokafka_read() -> Read:
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False)
        await c.start()
        out: Read = defaultdict(list)
        try:
            c.assign([aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
            await c.seek_to_beginning()
            deadline = time.monotonic() + 30
            while sum(len(v) for v in out.values()) < expected and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=200)).values():
                    for r in records:
                        out[r.partition].append(r.value)
        finally:
            await c.stop()
        return out

    assert dict(asyncio.run(aiokafka_read())) == dict(sent)
