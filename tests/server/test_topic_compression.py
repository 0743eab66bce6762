"""compression.type at topic and broker level (with KIP-390's levels), against a real
`logkeel serve` process: batches written with another codec are recompressed on append, their
offsets, timestamps, producer ids, sequences and transactional bits kept, control batches left
alone; what the files on disk hold is read back from the segments themselves."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from logkeel.records.batch import BatchHeader, CompressionType
from logkeel.records.record import iter_batches
from tests.brokerproc import BrokerProcess
from tests.server.admin_clients import TIMEOUT, admin, read_partition, set_topic_config
from tests.waiting import wait_until

GZIP_HEADER_XFL = 8  # gzip's "extra flags" byte: 4 for zlib's fastest level, 2 for its best


def stored(broker: BrokerProcess, topic: str) -> list[tuple[BatchHeader, list]]:
    """(header, records) of every batch in the segment files of ``topic``-0."""
    out = []
    for path in sorted((broker.log_dirs[0] / f"{topic}-0").glob("*.log")):
        out += [(h, records) for _, h, records in iter_batches(path.read_bytes())]
    return out


def stored_sections(broker: BrokerProcess, topic: str) -> list[bytes]:
    """The records section of every stored batch, as stored (compressed)."""
    data = b"".join(
        p.read_bytes() for p in sorted((broker.log_dirs[0] / f"{topic}-0").glob("*.log"))
    )
    out, pos = [], 0
    while pos < len(data):
        header = BatchHeader.parse(data, pos)
        out.append(data[pos + 61 : pos + header.size])
        pos += header.size
    return out


def create(broker: BrokerProcess, topic: str, **configs: str) -> None:
    client = admin(broker.bootstrap)
    [future] = client.create_topics([NewTopic(topic, 1, 1, config=configs)]).values()
    future.result(TIMEOUT)


def produce_all(broker: BrokerProcess, topic: str, values: list[bytes], **config: object) -> None:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            **config,
        }
    )
    for v in values:
        producer.produce(topic, value=v, key=v[:6], partition=0)
    assert producer.flush(TIMEOUT) == 0


def kafka_python_values(broker: BrokerProcess, topic: str, count: int) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=1000
    )
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(values) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        return values
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("compression")) as b:
        yield b


def test_a_gzip_topic_recompresses_an_uncompressed_producer(broker: BrokerProcess) -> None:
    create(broker, "to-gzip", **{"compression.type": "gzip"})
    values = [f"value-{i}-".encode() * 20 for i in range(500)]
    produce_all(broker, "to-gzip", values, **{"compression.type": "none"})
    assert read_partition(broker.bootstrap, "to-gzip", 0) == (0, values)
    assert kafka_python_values(broker, "to-gzip", len(values)) == values
    batches = stored(broker, "to-gzip")
    assert {h.compression for h, _ in batches} == {CompressionType.GZIP}
    # Offsets, producer id and sequences as the producer's batches had them.
    offset = sequence = 0
    for header, records in batches:
        assert header.producer_id >= 0 and header.producer_epoch >= 0
        assert (header.base_offset, header.base_sequence) == (offset, sequence)
        assert [r.offset for r in records] == list(range(offset, offset + len(records)))
        assert header.max_timestamp == max(r.timestamp for r in records)
        offset += len(records)
        sequence += len(records)
    assert offset == len(values)


def test_incremental_alter_configs_changes_the_codec_of_later_batches(
    broker: BrokerProcess,
) -> None:
    topic = "altered"
    create(broker, topic)
    produce_all(broker, topic, [b"before"] * 10, **{"compression.type": "gzip"})
    client = admin(broker.bootstrap)
    assert set_topic_config(client, topic, "compression.type", "lz4") == "OK"
    assert set_topic_config(client, topic, "compression.type", "brotli") == "INVALID_CONFIG"
    assert set_topic_config(client, topic, "compression.lz4.level", "18") == "INVALID_CONFIG"

    def later_batches_are_lz4() -> bool:
        produce_all(broker, topic, [b"after"], **{"compression.type": "gzip"})
        return stored(broker, topic)[-1][0].compression == CompressionType.LZ4

    wait_until(later_batches_are_lz4, TIMEOUT, "the topic's new codec applied")
    codecs = [h.compression for h, _ in stored(broker, topic)]
    assert codecs[0] == CompressionType.GZIP  # written before: left as it was
    assert codecs[-1] == CompressionType.LZ4
    low, values = read_partition(broker.bootstrap, topic, 0)
    assert values[:10] == [b"before"] * 10 and set(values[10:]) == {b"after"}


def test_transactional_batches_keep_their_bits_and_markers_stay_uncompressed(
    broker: BrokerProcess,
) -> None:
    topic = "txn-zstd"
    create(broker, topic, **{"compression.type": "zstd", "compression.zstd.level": "9"})
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": "compression-txn",
            "compression.type": "snappy",
            "linger.ms": 20,
        }
    )
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    values = [f"txn-{i}".encode() * 10 for i in range(100)]
    for v in values:
        producer.produce(topic, value=v, partition=0)
    producer.commit_transaction(TIMEOUT)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "txn-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == values
    batches = stored(broker, topic)
    data = [h for h, _ in batches if not h.is_control]
    markers = [h for h, _ in batches if h.is_control]
    assert data and all(
        h.compression == CompressionType.ZSTD and h.is_transactional and h.producer_id >= 0
        for h in data
    )
    assert len(markers) == 1 and markers[0].compression == CompressionType.NONE
    assert markers[0].producer_id == data[0].producer_id


def test_broker_default_and_topic_override_and_the_gzip_level(tmp_path: Path) -> None:
    overrides = {"compression.type": "snappy", "compression.gzip.level": "1"}
    with BrokerProcess(tmp_path, overrides=overrides) as b:
        create(b, "by-broker")
        create(b, "plain", **{"compression.type": "uncompressed"})
        create(b, "best-gzip", **{"compression.type": "gzip", "compression.gzip.level": "9"})
        create(b, "fast-gzip", **{"compression.type": "gzip"})
        values = [f"v{i}".encode() * 30 for i in range(50)]
        for topic, codec in (
            ("by-broker", "gzip"),
            ("plain", "lz4"),
            ("best-gzip", "none"),
            ("fast-gzip", "zstd"),
        ):
            produce_all(b, topic, values, **{"compression.type": codec})
            assert read_partition(b.bootstrap, topic, 0) == (0, values)
        assert {h.compression for h, _ in stored(b, "by-broker")} == {CompressionType.SNAPPY}
        assert {h.compression for h, _ in stored(b, "plain")} == {CompressionType.NONE}
        # zlib records its level class in the gzip header: 2 for level 9, 4 for level 1.
        assert {s[GZIP_HEADER_XFL] for s in stored_sections(b, "best-gzip")} == {2}
        assert {s[GZIP_HEADER_XFL] for s in stored_sections(b, "fast-gzip")} == {4}
