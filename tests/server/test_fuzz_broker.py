"""A seeded fuzz run against a real `logkeel serve` process (issue 27.5): valid requests of
every API the broker advertises, mutated (bit flips, truncations, wrong sizes and versions,
huge array counts, nulls, garbage tagged fields), and Produce requests carrying corrupt
batches of every codec; bounded to about a minute. Afterwards the broker log holds no
traceback and no ERROR line, every corrupt batch was refused, and the records written before
the run read back intact. The frames sent per API are printed (pytest -s)."""

from __future__ import annotations

import collections
import contextlib
import random
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import confluent_kafka
import pytest
from kio.schema.produce.v9 import request as produce
from kio.static.primitive import Records

from logkeel.records.batch import CompressionType, compute_crc
from logkeel.records.builder import HEADER_SIZE, build_batch
from logkeel.server.protocol import (
    ApiKey,
    api_name,
    decode_response,
    encode_request,
    request_schema,
    response_schema,
)
from logkeel.testing.broker_process import LogkeelBroker

from .admin_clients import read_partition
from .conftest import connect, recv_frame
from .fuzzing import build, mutate

SEED = 20261126
SECONDS = 45.0  # of fuzzing; the whole module takes about a minute
CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]
KEPT = 300  # records written before the fuzzing and read back after it
_CRC_AT = 17  # the CRC field of a batch; the CRC covers the bytes from 21
_COUNT_AT = HEADER_SIZE - 4


@dataclass
class FuzzRun:
    broker: LogkeelBroker
    frames: collections.Counter[str] = field(default_factory=collections.Counter)
    corrupt_acks: list[str] = field(default_factory=list)
    corrupt_sent: int = 0
    log: str = ""
    kept_topic: str = ""
    kept: list[bytes] = field(default_factory=list)


def advertised(port: int) -> dict[int, tuple[int, int]]:
    schema = request_schema(ApiKey.API_VERSIONS, 3)
    assert schema is not None
    request = schema(client_software_name="fuzz", client_software_version="1")
    with connect(port) as sock:
        sock.sendall(encode_request(request, 1, "fuzz"))
        frame = recv_frame(sock)
    assert frame is not None
    _, answer = decode_response(response_schema(ApiKey.API_VERSIONS, 3), frame)
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}


def reseal(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, _CRC_AT, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def corrupt_batches(rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """Batches with a correct CRC and a bad inside: garbage compressed payloads of every
    codec, and record counts that lie."""
    records = [(1_700_000_000_000 + i, None, rng.randbytes(40), ()) for i in range(10)]
    for codec in CODECS:
        batch = bytearray(build_batch(records, compression=codec))
        batch[HEADER_SIZE:] = rng.randbytes(len(batch) - HEADER_SIZE)
        yield f"garbage {codec.name.lower()} payload", reseal(batch)
    for codec in [CompressionType.NONE, *CODECS]:
        batch = bytearray(build_batch(records, compression=codec))
        struct.pack_into(">i", batch, _COUNT_AT, rng.choice([2**31 - 1, 11, 0, -1]))
        yield f"wrong record count ({codec.name.lower()})", reseal(batch)


def produce_frame(topic: str, batch: bytes, correlation_id: int) -> bytes:
    request = produce.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=timedelta(seconds=10),
        topic_data=(
            produce.TopicProduceData(
                name=topic,
                partition_data=(produce.PartitionProduceData(index=0, records=Records(batch)),),
            ),
        ),
    )
    return encode_request(request, correlation_id, "fuzz-corrupt")


def send_and_drain(port: int, payload: bytes, timeout: float = 5.0) -> None:
    with connect(port) as sock:
        with contextlib.suppress(OSError):  # the broker may hang up mid-send
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        sock.settimeout(timeout)
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass


def write_kept(bootstrap: str, topic: str, rng: random.Random) -> list[bytes]:
    values = [rng.randbytes(rng.randint(1, 300)) for _ in range(KEPT)]
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0
    return values


def read_back(bootstrap: str, topic: str) -> list[bytes]:
    start, values = read_partition(bootstrap, topic, 0)
    assert start == 0
    return values


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzRun]:
    rng = random.Random(SEED)
    work = tmp_path_factory.mktemp("fuzz-broker")
    with LogkeelBroker(work, verbose=True).start() as broker:
        result = FuzzRun(broker, kept_topic=f"fuzz-kept-{uuid.uuid4().hex[:6]}")
        result.kept = write_kept(broker.bootstrap, result.kept_topic, rng)
        versions = advertised(broker.port)
        corpus: list[tuple[str, bytes]] = []
        for key, (low, high) in sorted(versions.items()):
            for version in range(low, high + 1):
                schema = request_schema(key, version)
                if schema is None:
                    continue
                for _ in range(2):
                    frame = encode_request(build(schema, rng), rng.randrange(2**31), "fuzz")
                    corpus.append((api_name(key), frame))
        corrupt_topic = f"fuzz-corrupt-{uuid.uuid4().hex[:6]}"
        for i, (what, batch) in enumerate(corrupt_batches(rng)):
            with connect(broker.port) as sock:
                sock.sendall(produce_frame(corrupt_topic, batch, i))
                sock.settimeout(15)
                frame = recv_frame(sock)
            result.corrupt_sent += 1
            result.frames["Produce (corrupt batch)"] += 1
            if frame is None:
                continue  # closed: not acknowledged
            _, answer = decode_response(response_schema(ApiKey.PRODUCE, 9), frame)
            codes = [p.error_code for t in answer.responses for p in t.partition_responses]
            if any(code == 0 for code in codes):
                result.corrupt_acks.append(what)
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            burst = []
            for _ in range(rng.choice([1, 1, 1, 2, 4])):
                name, frame = rng.choice(corpus)
                if rng.random() < 0.85:
                    frame = mutate(frame, rng)
                result.frames[name] += 1
                burst.append(frame)
            send_and_drain(broker.port, b"".join(burst))
        got = read_back(broker.bootstrap, result.kept_topic)
        assert broker.alive()
        result.log = broker.output(10**9)
        print("\nfuzz frames per API:", dict(sorted(result.frames.items())))
        print(f"total {sum(result.frames.values())} frames, {len(versions)} APIs")
        assert got == result.kept, f"{len(got)} of {KEPT} records read back, or changed"
        yield result


def test_every_advertised_api_was_fuzzed(run: FuzzRun) -> None:
    fuzzed = {name for name in run.frames if not name.startswith("Produce (")}
    assert fuzzed == {api_name(k) for k in advertised(run.broker.port)}
    assert min(run.frames[name] for name in fuzzed) >= 5, run.frames


def test_the_log_holds_no_traceback_and_no_error(run: FuzzRun) -> None:
    bad = [
        line
        for line in run.log.splitlines()
        if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback")
    ]
    assert not bad, "\n".join(bad[:20])


def test_the_log_is_valid_utf8_one_event_per_line(run: FuzzRun) -> None:
    raw = run.broker.log_path.read_bytes()
    raw.decode("utf-8")  # strict
    for line in raw.decode().splitlines():
        assert line[:4].isdigit() or line.startswith((" ", "Traceback", "\t")), line


def test_no_corrupt_batch_is_acknowledged(run: FuzzRun) -> None:
    assert run.corrupt_sent == 2 * len(CODECS) + 1
    assert run.corrupt_acks == [], run.corrupt_acks


def test_data_written_before_reads_back_intact(run: FuzzRun) -> None:
    # Checked in the fixture right after the fuzzing (the fixture fails otherwise); again now.
    assert read_back(run.broker.bootstrap, run.kept_topic) == run.kept
