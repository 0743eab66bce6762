"""Transactions with real clients against `logkeel serve`: with confluent-kafka (librdkafka),
commit and abort seen by read_committed and read_uncommitted consumers, zombie fencing,
consume-transform-produce with send_offsets_to_transaction, broker restarts (SIGTERM and
kill -9) with a transaction open, and timeout aborts; kafka-python's and aiokafka's
transactional producers (older API versions)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

from tests.brokerproc import BrokerProcess

OVERRIDES = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}
TIMEOUT = 30.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "b", overrides=OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.kill()


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 10_000,
            "message.timeout.ms": 10_000,
            "socket.timeout.ms": 5_000,
            **extra,
        }
    )
    p.init_transactions(TIMEOUT)
    return p


def send(p: Producer, topic: str, values: list[bytes]) -> None:
    for v in values:
        p.produce(topic, v)
    assert p.flush(TIMEOUT) == 0


def consume_all(
    bootstrap: str, topic: str, isolation: str, expected: int, wait: float = 10.0
) -> list[bytes]:
    """The values of ``topic`` from the start, reading until ``expected`` arrive or ``wait``
    passes with nothing new (then what was read)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + wait
    try:
        while time.monotonic() < deadline and len(out) < expected:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(msg.value())
        # Anything beyond the expected count would be a bug: look a little longer for it.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg.value())
    finally:
        c.close()
    return out


def test_commit_and_abort_seen_by_read_committed_and_read_uncommitted(
    broker: BrokerProcess,
) -> None:
    p = txn_producer(broker.bootstrap, "txn-basic")
    p.begin_transaction()
    send(p, "t", [b"c1", b"c2"])
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    send(p, "t", [b"a1", b"a2"])
    p.abort_transaction(TIMEOUT)
    p.begin_transaction()
    send(p, "t", [b"c3"])
    p.commit_transaction(TIMEOUT)

    assert consume_all(broker.bootstrap, "t", "read_committed", 3) == [b"c1", b"c2", b"c3"]
    assert consume_all(broker.bootstrap, "t", "read_uncommitted", 5) == [
        b"c1",
        b"c2",
        b"a1",
        b"a2",
        b"c3",
    ]


def test_open_transaction_holds_back_read_committed_until_commit(broker: BrokerProcess) -> None:
    p = txn_producer(broker.bootstrap, "txn-lso")
    p.begin_transaction()
    send(p, "lso", [b"pending"])
    assert consume_all(broker.bootstrap, "lso", "read_committed", 1, wait=3.0) == []
    assert consume_all(broker.bootstrap, "lso", "read_uncommitted", 1) == [b"pending"]
    p.commit_transaction(TIMEOUT)
    assert consume_all(broker.bootstrap, "lso", "read_committed", 1) == [b"pending"]


def test_second_producer_fences_the_first(broker: BrokerProcess) -> None:
    first = txn_producer(broker.bootstrap, "txn-zombie")
    first.begin_transaction()
    send(first, "z", [b"zombie"])
    # The new incarnation aborts the zombie's open transaction and fences it.
    second = txn_producer(broker.bootstrap, "txn-zombie")
    with pytest.raises(KafkaException) as failure:
        first.commit_transaction(TIMEOUT)
    err = failure.value.args[0]
    assert err.fatal() or err.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), err
    second.begin_transaction()
    send(second, "z", [b"live"])
    second.commit_transaction(TIMEOUT)
    assert consume_all(broker.bootstrap, "z", "read_committed", 1) == [b"live"]
    assert consume_all(broker.bootstrap, "z", "read_uncommitted", 2) == [b"zombie", b"live"]


def committed_offset(
    bootstrap: str,
    group: str,
    topic: str,
    isolation: str = "read_uncommitted",
    timeout: float = TIMEOUT,
) -> int:
    """The group's committed offset; a read_committed consumer asks for stable offsets only
    (KIP-447), which waits while a transaction holds offsets of the partition pending."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": isolation})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=timeout)
        return int(tp.offset)
    finally:
        c.close()


def test_consume_transform_produce_offsets_visible_only_after_commit(
    broker: BrokerProcess,
) -> None:
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        plain.produce("in", f"m{i}".encode())
    assert plain.flush(TIMEOUT) == 0

    group = "ctp"
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.subscribe(["in"])
    p = txn_producer(broker.bootstrap, "txn-ctp")
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 3 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        assert len(got) == 3
        p.begin_transaction()
        send(p, "out", [v.upper() for v in got])
        p.send_offsets_to_transaction(
            [TopicPartition("in", 0, 3)], c.consumer_group_metadata(), TIMEOUT
        )
        # Pending: not visible before the commit, and not stable.
        assert committed_offset(broker.bootstrap, group, "in") < 0
        with pytest.raises(KafkaException):
            committed_offset(broker.bootstrap, group, "in", "read_committed", timeout=2.0)
        p.commit_transaction(TIMEOUT)
        assert committed_offset(broker.bootstrap, group, "in") == 3
        assert committed_offset(broker.bootstrap, group, "in", "read_committed") == 3

        # An aborted transaction's offsets never become visible.
        p.begin_transaction()
        send(p, "out", [b"DISCARDED"])
        p.send_offsets_to_transaction(
            [TopicPartition("in", 0, 6)], c.consumer_group_metadata(), TIMEOUT
        )
        p.abort_transaction(TIMEOUT)
        assert committed_offset(broker.bootstrap, group, "in") == 3
    finally:
        c.close()
    assert consume_all(broker.bootstrap, "out", "read_committed", 3) == [b"M0", b"M1", b"M2"]
    # The committed offsets survive a restart; the aborted ones stay invisible.
    assert broker.stop() == 0
    broker.start()
    assert committed_offset(broker.bootstrap, group, "in") == 3


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_restart_with_an_open_transaction_aborts_it(broker: BrokerProcess, how: str) -> None:
    p = txn_producer(broker.bootstrap, "txn-restart")
    p.begin_transaction()
    send(p, "r", [b"committed"])
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    send(p, "r", [b"open-1", b"open-2"])
    if how == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()
    broker.start()
    # The application restarts: a new producer with the same id aborts what was left open.
    again = txn_producer(broker.bootstrap, "txn-restart")
    again.begin_transaction()
    send(again, "r", [b"after"])
    again.commit_transaction(TIMEOUT)
    assert consume_all(broker.bootstrap, "r", "read_committed", 2) == [b"committed", b"after"]
    assert consume_all(broker.bootstrap, "r", "read_uncommitted", 4) == [
        b"committed",
        b"open-1",
        b"open-2",
        b"after",
    ]


def test_transaction_past_its_timeout_is_aborted(broker: BrokerProcess) -> None:
    p = txn_producer(
        broker.bootstrap,
        "txn-timeout",
        **{
            "transaction.timeout.ms": 2_000,
            "socket.timeout.ms": 1_000,
            "message.timeout.ms": 2_000,
        },
    )
    p.begin_transaction()
    send(p, "to", [b"abandoned"])
    # Nobody ends it: the coordinator aborts it, and read_committed readers move past it.
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("to", b"plain")
    assert plain.flush(TIMEOUT) == 0
    assert consume_all(broker.bootstrap, "to", "read_committed", 1, wait=15.0) == [b"plain"]


def test_kafka_python_transactional_producer(broker: BrokerProcess) -> None:
    p = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        transactional_id="txn-kafka-python",
        request_timeout_ms=10_000,
    )
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("kp", b"kp-aborted")
        p.abort_transaction()
        p.begin_transaction()
        p.send("kp", b"kp-committed")
        p.commit_transaction()
    finally:
        p.close(timeout=5)
    assert consume_all(broker.bootstrap, "kp", "read_committed", 1) == [b"kp-committed"]


def test_aiokafka_transactional_producer(broker: BrokerProcess) -> None:
    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-aiokafka")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait("ak", b"ak-committed")
            await p.begin_transaction()
            await p.send_and_wait("ak", b"ak-aborted")
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    assert consume_all(broker.bootstrap, "ak", "read_committed", 1) == [b"ak-committed"]


def test_aiokafka_send_offsets_to_a_group_with_a_live_member(broker: BrokerProcess) -> None:
    """aiokafka's send_offsets_to_transaction sends TxnOffsetCommit without member id and with
    generation -1 (the older versions carry neither); Kafka accepts that while the group has an
    active member, and so must logkeel (it answered UNKNOWN_MEMBER_ID)."""
    from aiokafka import AIOKafkaConsumer

    plain = Producer({"bootstrap.servers": broker.bootstrap})
    send(plain, "ak-in", [b"x0", b"x1"])
    group = f"ak-group-{uuid.uuid4().hex[:6]}"

    async def run() -> None:
        c = AIOKafkaConsumer(
            "ak-in",
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-ak-offs")
        await p.start()
        try:
            got = []
            while len(got) < 2:
                batch = await c.getmany(timeout_ms=1000)
                got.extend(m for msgs in batch.values() for m in msgs)
            assert c.assignment(), "the consumer is a live member of the group"
            from aiokafka.structs import TopicPartition as AkTp

            async with p.transaction():
                await p.send_and_wait("ak-out", b"done")
                await p.send_offsets_to_transaction({AkTp("ak-in", 0): 2}, group)
        finally:
            await p.stop()
            await c.stop()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    assert committed_offset(broker.bootstrap, group, "ak-in") == 2
    assert consume_all(broker.bootstrap, "ak-out", "read_committed", 1) == [b"done"]
