"""Kafka's LogValidator checks on Produce, against a real `logkeel serve` process.

Corrupt batches are sent as raw kio-encoded Produce requests (their CRCs valid, so only the
record-level checks can catch them), for every codec and every kind of corruption; each is
refused with Kafka's error (and record_errors where Kafka gives them) and nothing is written.
Good batches go through confluent-kafka for every codec.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode

from logkeel.records.batch import BatchHeader, CompressionType, compute_crc, pack_header
from logkeel.records.builder import build_batch
from logkeel.records.compression import compress
from logkeel.records.recompress import rebuild_batch
from logkeel.records.varint import encode_varint, encode_varlong
from tests.brokerproc import BrokerProcess
from tests.kafka_dirs import TIMESTAMP, kafka_batch, write_meta, write_partition
from tests.server.admin_clients import TIMEOUT, admin, produce, read_partition
from tests.server.test_fetch_api import list_offsets
from tests.server.test_produce_api import RawClient, fetch_records, produce_one

CODECS = list(CompressionType)
VALUES = [b"v0", b"v1", b"v2"]


def record(delta: int, value: bytes, *, headers: bytes = b"\x00", extra_length: int = 0) -> bytes:
    """One v2 record, encoded field by field so that a test can break any one of them."""
    body = (
        b"\x00"
        + encode_varlong(delta)  # timestamp delta
        + encode_varint(delta)
        + encode_varint(1)
        + b"k"
        + encode_varint(len(value))
        + value
        + headers
    )
    return encode_varint(len(body) + extra_length) + body


def section(deltas: tuple[int, ...] = (0, 1, 2)) -> bytes:
    return b"".join(record(d, v) for d, v in zip(deltas, VALUES, strict=True))


def reseal(batch: bytearray) -> bytes:
    """The CRC recomputed, as a client that built the bad batch would have."""
    batch[17:21] = compute_crc(batch, 0, len(batch)).to_bytes(4, "big")
    return bytes(batch)


def good_header(codec: CompressionType = CompressionType.NONE) -> BatchHeader:
    now = int(time.time() * 1000)
    raw = build_batch([(now + i, b"k", v, ()) for i, v in enumerate(VALUES)], compression=codec)
    return BatchHeader.parse(raw)


def with_section(records: bytes, codec: CompressionType, **header: int) -> bytes:
    """A batch of ``codec`` whose (decompressed) records section is ``records``."""
    return bytes(rebuild_batch(good_header(codec)._replace(**header), records, codec))


def with_payload(payload: bytes, codec: CompressionType) -> bytes:
    """A batch marked ``codec`` whose stored records section is ``payload`` as it is."""
    batch = bytearray(rebuild_batch(good_header(), payload, CompressionType.NONE))
    attributes = int.from_bytes(batch[21:23], "big") | int(codec)
    batch[21:23] = attributes.to_bytes(2, "big")
    return reseal(batch)


# name -> (records section, header fields, expected error, index in record_errors or None)
CORRUPTIONS = {
    "count_beyond_the_bytes": (
        section(), {"records_count": 2**31 - 1, "last_offset_delta": 2**31 - 2},
        ErrorCode.corrupt_message, None,
    ),
    "count_below_the_records": (
        section(), {"records_count": 2, "last_offset_delta": 1}, ErrorCode.corrupt_message, None,
    ),
    "records_missing": (section()[: -len(record(2, b"v2"))], {}, ErrorCode.corrupt_message, None),
    "bytes_left_over": (section() + b"\x00\x00", {}, ErrorCode.corrupt_message, None),
    "record_length_past_the_batch": (
        record(0, b"v0") + record(1, b"v1") + record(2, b"v2", extra_length=40), {},
        ErrorCode.corrupt_message, 2,
    ),
    "negative_headers_count": (
        record(0, b"v0") + record(1, b"v1", headers=encode_varint(-5)) + record(2, b"v2"), {},
        ErrorCode.corrupt_message, 1,
    ),
    "overlong_varint": (
        record(0, b"v0") + b"\xff" * 11 + record(2, b"v2"), {}, ErrorCode.corrupt_message, 1,
    ),
    "offset_deltas_out_of_order": (section((1, 0, 2)), {}, ErrorCode.corrupt_message, 1),
    "offset_deltas_with_a_gap": (
        section((0, 1, 3)), {"last_offset_delta": 3}, ErrorCode.invalid_record, None,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("validation")) as b:
        yield b


@pytest.fixture
def client(server: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(server.port) as c:
        yield c


def assert_nothing_written_and_partition_serves(client: RawClient, topic: str) -> None:
    latest = list_offsets(client, 7, topic, -1)
    assert (latest.error_code, latest.offset) == (ErrorCode.none, 0)
    now = int(time.time() * 1000)
    good = build_batch([(now, b"k", b"after", ())], compression=CompressionType.GZIP)
    assert produce_one(client, 9, topic, 0, good).error_code == ErrorCode.none
    assert [r.value for r in fetch_records(client, topic, 0, 0)] == [b"after"]
    assert list_offsets(client, 7, topic, now).offset == 0


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name.lower())
def test_a_payload_that_does_not_decompress_is_corrupt_message(
    client: RawClient, codec: CompressionType
) -> None:
    topic = f"garbage-{codec.name.lower()}"
    bad = with_payload(bytes(range(7, 250, 3)), codec)
    p = produce_one(client, 9, topic, 0, bad)
    assert p.error_code == ErrorCode.corrupt_message
    assert f"corrupt {codec.name.lower()} payload" in p.error_message
    assert_nothing_written_and_partition_serves(client, topic)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corrupt_records_are_refused_for_every_codec(
    client: RawClient, kind: str, codec: CompressionType
) -> None:
    records, header, code, index = CORRUPTIONS[kind]
    topic = f"corrupt-{kind.replace('_', '-')}-{codec.name.lower()}"
    bad = with_section(records, codec, **header)
    p = produce_one(client, 9, topic, 0, bad)
    assert p.error_code == code, p.error_message
    assert p.error_message
    if index is None:
        assert p.record_errors == ()
    else:
        assert [e.batch_index for e in p.record_errors] == [index]
        assert p.record_errors[0].batch_index_error_message
    assert_nothing_written_and_partition_serves(client, topic)


def test_produce_v3_without_record_errors_gets_the_code(client: RawClient) -> None:
    bad = with_section(section((1, 0, 2)), CompressionType.ZSTD)
    assert produce_one(client, 3, "corrupt-v3", 0, bad).error_code == ErrorCode.corrupt_message
    assert_nothing_written_and_partition_serves(client, "corrupt-v3")


def patched(batch: bytes, **fields: int) -> bytes:
    """``batch`` with header fields changed (CRC recomputed)."""
    header = BatchHeader.parse(batch)._replace(**fields)
    out = bytearray(batch)
    out[:61] = pack_header(*header)
    return reseal(out)


def test_batch_level_rules_of_a_client_batch(client: RawClient) -> None:
    now = int(time.time() * 1000)
    plain = build_batch([(now, b"k", b"x", ())])
    idempotent = build_batch(
        [(now, b"k", b"x", ())], producer_id=7, producer_epoch=0, base_sequence=0
    )
    cases = {
        "control": patched(plain, attributes=0x20),
        "base-offset": patched(plain, base_offset=5),
        "no-sequence": patched(idempotent, base_sequence=-1),
        "no-epoch": patched(idempotent, producer_epoch=-1),
        "zero-count": with_section(b"", CompressionType.NONE, records_count=0, last_offset_delta=0),
    }
    for name, bad in cases.items():
        p = produce_one(client, 9, f"batch-rule-{name}", 0, bad)
        assert p.error_code == ErrorCode.invalid_record, (name, p.error_message)
        assert p.record_errors == ()
        assert_nothing_written_and_partition_serves(client, f"batch-rule-{name}")


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=["none", "lz4"])
def test_null_keys_on_a_compacted_topic_name_each_record(
    server: BrokerProcess, client: RawClient, codec: CompressionType
) -> None:
    topic = f"compacted-{codec.name.lower()}"
    client_admin = admin(server.bootstrap)  # kept alive until the future is done
    new = NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})
    [future] = client_admin.create_topics([new]).values()
    future.result(TIMEOUT)
    now = int(time.time() * 1000)
    bad = build_batch(
        [(now, b"a", b"1", ()), (now, None, b"2", ()), (now, None, b"3", ())], compression=codec
    )
    p = produce_one(client, 9, topic, 0, bad)
    assert p.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in p.record_errors] == [1, 2]
    assert "without key" in p.record_errors[0].batch_index_error_message
    assert "2 record(s)" in p.error_message
    assert_nothing_written_and_partition_serves(client, topic)


def test_each_record_timestamp_is_checked(client: RawClient) -> None:
    now = int(time.time() * 1000)
    late = now + 2 * 3600 * 1000  # message.timestamp.after.max.ms: 1 h
    # The batch's own maxTimestamp hides the late record: only the record shows it.
    bad = patched(
        build_batch([(now, b"k", b"a", ()), (now, b"k", b"b", ()), (late, b"k", b"c", ())]),
        max_timestamp=now,
    )
    p = produce_one(client, 9, "late-record", 0, bad)
    assert p.error_code == ErrorCode.invalid_timestamp
    assert [e.batch_index for e in p.record_errors] == [2]
    assert_nothing_written_and_partition_serves(client, "late-record")


def test_a_wrong_max_timestamp_is_corrected_as_kafka_does(client: RawClient) -> None:
    now = int(time.time() * 1000)
    for codec in (CompressionType.NONE, CompressionType.SNAPPY):
        topic = f"max-ts-{codec.name.lower()}"
        raw = build_batch([(now, b"k", b"a", ()), (now + 50, b"k", b"b", ())], compression=codec)
        assert produce_one(client, 9, topic, 0, patched(raw, max_timestamp=now)).error_code == 0
        top = list_offsets(client, 7, topic, -3)
        assert (top.offset, top.timestamp) == (1, now + 50)


# -- good batches from a real client, every codec ---------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_batches_of_every_codec_pass(server: BrokerProcess, codec: str) -> None:
    from confluent_kafka import Producer

    topic = f"good-{codec}"
    values = [f"{codec}-{i}".encode() * (i % 7 + 1) for i in range(300)]
    producer = Producer(
        {
            "bootstrap.servers": server.bootstrap,
            "compression.type": codec,
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    for v in values:
        producer.produce(topic, value=v, key=v[:4] or None, partition=0)
    assert producer.flush(TIMEOUT) == 0
    assert read_partition(server.bootstrap, topic, 0) == (0, values)


# -- a batch an older version wrote, on disk -------------------------------------------------


def segment_files(log_dir: Path, topic: str) -> list[Path]:
    return sorted((log_dir / f"{topic}-0").glob("*.log"))


def consume_through(bootstrap: str, topic: str) -> tuple[list[bytes], list[str]]:
    """What a confluent-kafka consumer reading ``topic``-0 from offset 0 gets within a few
    seconds: the values, and the errors it reports."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "planted", "enable.auto.commit": False}
    )
    values: list[bytes] = []
    errors: list[str] = []
    try:
        consumer.assign([ConfluentTopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not errors:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(str(msg.error()))
            else:
                values.append(msg.value())
    finally:
        consumer.close()
    return values, errors


def test_a_planted_corrupt_batch_fails_only_its_own_reads(tmp_path: Path) -> None:
    """An older version appended a gzip batch whose payload does not decompress (CRC valid):
    reads around it work, reads of it fail clearly, and `logkeel log check` names it."""
    logs = tmp_path / "b" / "logs"
    write_meta(logs, {"planted-0": 9})
    write_partition(logs / "planted-0", [b"a", b"b", b"c"], topic_id=None, per_batch=3)
    bad = bytearray(with_payload(b"not gzip at all, not at all" * 3, CompressionType.GZIP))
    header = BatchHeader.parse(bad)._replace(
        base_offset=3, base_timestamp=TIMESTAMP + 3, max_timestamp=TIMESTAMP + 5
    )
    bad[:61] = pack_header(*header)
    segment = logs / "planted-0" / f"{0:020d}.log"
    with segment.open("ab") as f:
        f.write(reseal(bad))
        f.write(kafka_batch(6, [b"g", b"h", b"i"]))
    (logs / "planted-0" / f"{0:020d}.timeindex").write_bytes(
        (TIMESTAMP + 8).to_bytes(8, "big") + (8).to_bytes(4, "big")
    )
    with (
        BrokerProcess(tmp_path / "b", log_dirs=[logs]) as broker,
        RawClient(broker.port) as client,
    ):
        assert list_offsets(client, 7, "planted", -2).offset == 0
        assert list_offsets(client, 7, "planted", -1).offset == 9
        assert list_offsets(client, 7, "planted", TIMESTAMP + 1).offset == 1
        assert list_offsets(client, 7, "planted", TIMESTAMP + 7).offset == 7
        top = list_offsets(client, 7, "planted", -3)
        assert (top.error_code, top.offset) == (ErrorCode.none, 8)
        # A lookup that lands on the bad batch fails alone, and says why in the broker's log.
        hit = list_offsets(client, 7, "planted", TIMESTAMP + 4)
        assert hit.error_code == ErrorCode.corrupt_message
        assert "offsets 3..5 does not decode" in broker.output()
        assert [r.value for r in fetch_records(client, "planted", 0, 6)] == [b"g", b"h", b"i"]
        # A consumer reading through it gets the records before it, then its client's own
        # clear error for the batch (the broker sends stored bytes as Kafka does).
        seen, errors = consume_through(broker.bootstrap, "planted")
        assert seen[:3] == [b"a", b"b", b"c"] and b"d" not in seen, seen
        assert errors, "the consumer reported nothing about the corrupt batch"
        # New appends after it are checked and served.
        assert produce(broker.bootstrap, "planted", 0, [b"j"]) == ["OK"]
        assert [r.value for r in fetch_records(client, "planted", 0, 9)] == [b"j"]
    size = os.path.getsize(segment)
    check = subprocess.run(
        [sys.executable, "-m", "logkeel", "log", "check", str(logs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 1, check.stdout + check.stderr
    assert "offset 3" in check.stdout and "offsets 3..5 do not decode" in check.stdout
    assert "corrupt gzip payload" in check.stdout
    assert os.path.getsize(segment) == size  # read-only


def test_a_decompression_bomb_is_refused_without_expanding_it(
    server: BrokerProcess, client: RawClient
) -> None:
    """A few KiB of zstd standing for far more than the broker walks in memory (64 MiB):
    MESSAGE_TOO_LARGE, decompression stopped there, and the broker keeps serving."""
    # 32 concatenated frames of 64 MiB of zeros: 2 GiB, more than this check's RSS bound.
    frame = compress(CompressionType.ZSTD, bytes(64 << 20))
    bomb = with_payload(frame * 32, CompressionType.ZSTD)
    assert len(bomb) < 100 * 1024
    p = produce_one(client, 9, "bomb", 0, bomb)
    assert p.error_code == ErrorCode.message_too_large
    assert "decompresses to more than" in p.error_message
    assert_nothing_written_and_partition_serves(client, "bomb")
    status = Path(f"/proc/{server.pid}/status").read_text()
    peak_kib = int(
        next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]
    )
    assert peak_kib < 1024 * 1024, f"broker peak RSS {peak_kib} KiB"
