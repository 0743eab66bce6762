"""Real Kafka clients against a real `logkeel serve`: confluent-kafka (librdkafka),
kafka-python, aiokafka and kcat each produce and consume keys, headers, timestamps, every
compression codec, 1 MiB messages, with acks 0, 1 and all, and idempotently.

Every producer's topic is also read back by every other client, so the bytes one client
writes are the bytes every other client understands.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import aiokafka
import confluent_kafka
import kafka
import pytest

from tests.brokerproc import BrokerProcess

CLIENTS = ("confluent", "kafka-python", "aiokafka", "kcat")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BIG = 1024 * 1024  # a 1 MiB value
MAX_MESSAGE = 2_000_000


@dataclass(frozen=True)
class Msg:
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None  # ms; None: the client's clock


@dataclass(frozen=True)
class Got:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def sample(n: int, tag: str, *, with_timestamps: bool = True) -> list[Msg]:
    base = 1_700_000_000_000
    return [
        Msg(
            key=None if i % 5 == 4 else f"key-{tag}-{i}".encode(),
            value=f"value-{tag}-{i}-".encode() * (1 + i % 7),
            headers=(("source", tag.encode()), ("index", str(i).encode())),
            timestamp=base + i * 1000 if with_timestamps else None,
        )
        for i in range(n)
    ]


# -- producers -----------------------------------------------------------------------------------


def produce(
    client: str,
    bootstrap: str,
    topic: str,
    messages: list[Msg],
    *,
    codec: str = "none",
    acks: str = "all",
    idempotent: bool = False,
) -> list[int]:
    """Produces ``messages`` in order; returns the offsets the broker acknowledged (acks=0:
    none are known)."""
    if client == "confluent":
        return _produce_confluent(bootstrap, topic, messages, codec, acks, idempotent)
    if client == "kafka-python":
        return _produce_kafka_python(bootstrap, topic, messages, codec, acks, idempotent)
    if client == "aiokafka":
        return asyncio.run(_produce_aiokafka(bootstrap, topic, messages, codec, acks, idempotent))
    if client == "kcat":
        _produce_kcat(bootstrap, topic, messages, codec, acks)
        return []
    raise ValueError(client)


def _produce_confluent(
    bootstrap: str, topic: str, messages: list[Msg], codec: str, acks: str, idempotent: bool
) -> list[int]:
    conf = {
        "bootstrap.servers": bootstrap,
        "compression.codec": codec,
        "acks": acks,
        "linger.ms": 5,
        "message.max.bytes": MAX_MESSAGE,
        "enable.idempotence": idempotent,
    }
    producer = confluent_kafka.Producer(conf)
    offsets: list[int] = []
    errors: list[object] = []

    def delivered(err: object, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for m in messages:
        kwargs = {"timestamp": m.timestamp} if m.timestamp is not None else {}
        producer.produce(
            topic,
            value=m.value,
            key=m.key,
            headers=list(m.headers),
            on_delivery=delivered,
            **kwargs,
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return offsets


def _kafka_python_acks(acks: str) -> int | str:
    return "all" if acks == "all" else int(acks)


def _produce_kafka_python(
    bootstrap: str, topic: str, messages: list[Msg], codec: str, acks: str, idempotent: bool
) -> list[int]:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks=_kafka_python_acks(acks),
        linger_ms=5,
        max_request_size=MAX_MESSAGE,
        enable_idempotence=idempotent,
    )
    try:
        futures = [
            producer.send(
                topic, value=m.value, key=m.key, headers=list(m.headers), timestamp_ms=m.timestamp
            )
            for m in messages
        ]
        producer.flush(30)
        return [f.get(timeout=30).offset for f in futures] if acks != "0" else []
    finally:
        producer.close(10)


async def _produce_aiokafka(
    bootstrap: str, topic: str, messages: list[Msg], codec: str, acks: str, idempotent: bool
) -> list[int]:
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks=_kafka_python_acks(acks),
        linger_ms=5,
        max_request_size=MAX_MESSAGE,
        enable_idempotence=idempotent,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, value=m.value, key=m.key, headers=list(m.headers), timestamp_ms=m.timestamp
            )
            for m in messages
        ]
        results = [await f for f in futures]
        return [r.offset for r in results] if acks != "0" else []
    finally:
        await producer.stop()


def _produce_kcat(bootstrap: str, topic: str, messages: list[Msg], codec: str, acks: str) -> None:
    # kcat takes one set of headers for a run and no timestamps: group by headers.
    groups: list[tuple[tuple[tuple[str, bytes], ...], list[Msg]]] = []
    for m in messages:
        assert m.timestamp is None, "kcat cannot set timestamps"
        if groups and groups[-1][0] == m.headers:
            groups[-1][1].append(m)
        else:
            groups.append((m.headers, [m]))
    for headers, group in groups:
        args = [
            "kcat",
            "-P",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-z",
            codec,
            "-K",
            "\t",
            "-X",
            f"request.required.acks={acks}",
            "-X",
            f"message.max.bytes={MAX_MESSAGE}",
        ]
        for name, value in headers:
            args += ["-H", f"{name}={value.decode()}"]
        lines = b"".join((m.key or b"") + b"\t" + m.value + b"\n" for m in group)
        assert all(m.key is not None for m in group), "kcat -K cannot send a null key"
        done = subprocess.run(args, input=lines, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()


# -- consumers -----------------------------------------------------------------------------------


def consume(
    client: str, bootstrap: str, topics: dict[str, int], timeout: float = 30.0
) -> list[Got]:
    """Reads ``topics`` (name -> expected count, partition 0, from offset 0) by assignment."""
    if client == "confluent":
        return _consume_confluent(bootstrap, topics, timeout)
    if client == "kafka-python":
        return _consume_kafka_python(bootstrap, topics, timeout)
    if client == "aiokafka":
        return asyncio.run(_consume_aiokafka(bootstrap, topics, timeout))
    if client == "kcat":
        return [g for t in topics for g in _consume_kcat(bootstrap, t, timeout)]
    raise ValueError(client)


def _consume_confluent(bootstrap: str, topics: dict[str, int], timeout: float) -> list[Got]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused-assign-only",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "max.partition.fetch.bytes": MAX_MESSAGE,
            "receive.message.max.bytes": 100 * 1024 * 1024,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(t, 0, 0) for t in topics])
    out: list[Got] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < sum(topics.values()) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(
                Got(
                    m.topic(),
                    m.partition(),
                    m.offset(),
                    m.key(),
                    m.value(),
                    tuple(m.headers() or ()),
                    m.timestamp()[1],
                )
            )
    finally:
        consumer.close()
    return out


def _consume_kafka_python(bootstrap: str, topics: dict[str, int], timeout: float) -> list[Got]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=MAX_MESSAGE,
        fetch_max_bytes=50 * 1024 * 1024,
    )
    tps = [kafka.TopicPartition(t, 0) for t in topics]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    out: list[Got] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < sum(topics.values()) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    out.append(
                        Got(
                            r.topic,
                            r.partition,
                            r.offset,
                            r.key,
                            r.value,
                            tuple(r.headers or ()),
                            r.timestamp,
                        )
                    )
    finally:
        consumer.close()
    return out


async def _consume_aiokafka(bootstrap: str, topics: dict[str, int], timeout: float) -> list[Got]:
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=MAX_MESSAGE,
        fetch_max_bytes=50 * 1024 * 1024,
    )
    await consumer.start()
    tps = [aiokafka.TopicPartition(t, 0) for t in topics]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    out: list[Got] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < sum(topics.values()) and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    out.append(
                        Got(
                            r.topic,
                            r.partition,
                            r.offset,
                            r.key,
                            r.value,
                            tuple(r.headers or ()),
                            r.timestamp,
                        )
                    )
    finally:
        await consumer.stop()
    return out


def _consume_kcat(bootstrap: str, topic: str, timeout: float) -> list[Got]:
    done = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-J",
            "-X",
            f"fetch.message.max.bytes={MAX_MESSAGE}",
            "-X",
            "receive.message.max.bytes=100000000",
        ],
        capture_output=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr.decode()
    out = []
    for line in done.stdout.splitlines():
        doc = json.loads(line)
        raw_headers = doc.get("headers") or []
        headers = tuple(
            (raw_headers[i], raw_headers[i + 1].encode()) for i in range(0, len(raw_headers), 2)
        )
        key = doc.get("key")
        out.append(
            Got(
                doc["topic"],
                doc["partition"],
                doc["offset"],
                None if key is None else key.encode(),
                doc["payload"].encode(),
                headers,
                doc["ts"],
            )
        )
    return out


def check(got: list[Got], topic: str, sent: list[Msg], *, kcat_sent: bool = False) -> None:
    """``got`` holds exactly ``sent`` for ``topic``, in order, at offsets 0..n-1."""
    mine = [g for g in got if g.topic == topic]
    assert [g.offset for g in mine] == list(range(len(sent))), [g.offset for g in mine][:20]
    for g, m in zip(mine, sent, strict=True):
        assert g.value == m.value
        assert g.key == m.key
        assert g.headers == m.headers
        if m.timestamp is not None:
            assert g.timestamp == m.timestamp
        else:
            assert abs(g.timestamp - time.time() * 1000) < 600_000


# -- the matrix ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path_factory.mktemp("clients"),
        overrides={
            "message.max.bytes": str(MAX_MESSAGE),
            "num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
    ) as b:
        yield b


PRODUCED: dict[str, list[Msg]] = {}


def _messages_for(client: str, codec: str) -> list[Msg]:
    tag = f"{client}-{codec}"
    if client == "kcat":
        # kcat: non-null keys, one header set per run, the client's timestamps.
        return [
            Msg(
                f"k{i}".encode(), f"kcat-{codec}-{i}".encode() * (1 + i % 5), (("source", b"kcat"),)
            )
            for i in range(30)
        ]
    return sample(30, tag)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_produce_and_consume(server: BrokerProcess, client: str, codec: str) -> None:
    topic = f"matrix-{client}-{codec}"
    sent = _messages_for(client, codec)
    offsets = produce(client, server.bootstrap, topic, sent, codec=codec)
    if offsets:
        assert sorted(offsets) == list(range(len(sent)))
    check(consume(client, server.bootstrap, {topic: len(sent)}), topic, sent)
    PRODUCED[topic] = sent


@pytest.mark.parametrize("client", CLIENTS)
def test_every_client_reads_what_every_other_client_wrote(
    server: BrokerProcess, client: str
) -> None:
    topics = {f"matrix-{p}-{c}": 30 for p in CLIENTS for c in CODECS}
    missing = [t for t in topics if t not in PRODUCED]
    for t in missing:  # run alone: produce what the matrix would have
        p, c = t.split("-", 1)[1].rsplit("-", 1)
        PRODUCED[t] = _messages_for(p, c)
        produce(p, server.bootstrap, t, PRODUCED[t], codec=c)
    got = consume(client, server.bootstrap, topics, timeout=60)
    for topic in topics:
        check(got, topic, PRODUCED[topic])


@pytest.mark.parametrize("client", CLIENTS)
def test_one_mebibyte_messages(server: BrokerProcess, client: str) -> None:
    topic = f"big-{client}"
    sent = [
        Msg(
            b"big-1",
            bytes([i % 251 for i in range(BIG)]) if client != "kcat" else b"x" * BIG,
            (("size", b"1MiB"),),
        ),
        Msg(b"big-2", b"y" * BIG, (("size", b"1MiB"),)),
        Msg(b"small", b"after the big ones", (("size", b"1MiB"),)),
    ]
    produce(client, server.bootstrap, topic, sent, codec="lz4" if client != "kcat" else "none")
    check(consume(client, server.bootstrap, {topic: 3}), topic, sent)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("client", CLIENTS)
def test_acks(server: BrokerProcess, client: str, acks: str) -> None:
    topic = f"acks-{acks}-{client}"
    sent = [Msg(f"k{i}".encode(), f"acks={acks} #{i}".encode()) for i in range(20)]
    offsets = produce(client, server.bootstrap, topic, sent, acks=acks)
    if acks != "0" and client != "kcat":
        assert offsets == list(range(20))
    got = consume("confluent", server.bootstrap, {topic: 20})
    check(got, topic, sent)


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_idempotent_producer_writes_each_message_once_in_order(
    server: BrokerProcess, client: str
) -> None:
    topic = f"idempotent-{client}"
    sent = [Msg(None, f"once-{i}".encode()) for i in range(2000)]
    offsets = produce(client, server.bootstrap, topic, sent, idempotent=True, codec="zstd")
    assert offsets == list(range(2000))
    got = consume(client, server.bootstrap, {topic: 2000})
    check(got, topic, sent)


def test_kcat_round_trips_awkward_text(server: BrokerProcess) -> None:
    """kcat's JSON output escapes payloads; a round trip of awkward text still matches."""
    topic = "kcat-text"
    sent = [Msg(b"quote", 'a "quoted" \\ back\\slash, ünïcödé'.encode(), (("h", b"v"),))]
    produce("kcat", server.bootstrap, topic, sent)
    check(consume("kcat", server.bootstrap, {topic: 1}), topic, sent)
