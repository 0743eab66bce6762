"""Produce against a real `logkeel serve` process, with requests built byte by byte (kio).

Covers what real clients rarely send: corrupt batches, oversized batches, unknown and invalid
topics or partitions, bad acks, several batches in one partition, idempotent retries and
sequence gaps, every Produce version, and acks=0 failing (the connection closes). Last, with an
in-process broker (to gate its fsyncs): a Produce is answered while a metadata write is stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from logkeel.cluster.metadata import METADATA_FILE
from logkeel.records.builder import build_batch
from logkeel.records.record import decode_records
from logkeel.server.broker import Broker
from logkeel.server.protocol import ApiKey, decode_response, encode_request, request_schema
from tests.brokerproc import BrokerProcess
from tests.server.test_fetch_internals import run_broker

# -- a raw Kafka client: one socket, kio requests, kio responses ---------------------------------


def schema_module(api_key: int, version: int) -> Any:
    schema = request_schema(api_key, version)
    assert schema is not None
    return importlib.import_module(schema.__module__)


def response_module(api_key: int, version: int) -> Any:
    return importlib.import_module(
        schema_module(api_key, version).__name__.replace(".request", ".response")
    )


def ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(timedelta(milliseconds=value))


class RawClient:
    """Sends kio requests over one connection and decodes the answers with kio."""

    def __init__(self, port: int, client_id: str = "raw-test", timeout: float = 15.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.client_id = client_id
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, request: Any) -> int:
        self._corr += 1
        self.sock.sendall(encode_request(request, self._corr, self.client_id))
        return self._corr

    def recv_frame(self) -> bytes | None:
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes | None:
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            out += chunk
        return bytes(out)

    def call(self, request: Any) -> Any:
        corr = self.send(request)
        frame = self.recv_frame()
        assert frame is not None, "the broker closed the connection instead of answering"
        response_type = getattr(
            response_module(request.__api_key__, request.__version__),
            type(request).__name__.replace("Request", "Response"),
        )
        got_corr, body = decode_response(response_type, frame)
        assert got_corr == corr
        return body

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def produce_request(
    version: int,
    topic: str,
    partitions: dict[int, bytes | None],
    *,
    acks: int = 1,
    timeout_ms: int = 5000,
    topic_id: Any = None,
) -> Any:
    mod = schema_module(ApiKey.PRODUCE, version)
    pdata = tuple(mod.PartitionProduceData(index=i, records=r) for i, r in partitions.items())
    if version >= 13:
        tdata = mod.TopicProduceData(topic_id=topic_id, partition_data=pdata)
    else:
        tdata = mod.TopicProduceData(name=topic, partition_data=pdata)
    return mod.ProduceRequest(
        transactional_id=None, acks=acks, timeout=ms(timeout_ms), topic_data=(tdata,)
    )


def fetch_request(
    version: int,
    topic: str,
    partitions: dict[int, int],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 10 * 1024 * 1024,
    isolation_level: int = 0,
    topic_id: Any = None,
    session_id: int = 0,
    session_epoch: int = -1,
) -> Any:
    mod = schema_module(ApiKey.FETCH, version)
    parts = tuple(
        _fill(
            mod.FetchPartition,
            partition=p,
            fetch_offset=o,
            partition_max_bytes=partition_max_bytes,
            current_leader_epoch=-1,
            last_fetched_epoch=-1,
            log_start_offset=-1,
        )
        for p, o in partitions.items()
    )
    if version >= 13:
        ftopic = mod.FetchTopic(topic_id=topic_id, partitions=parts)
    else:
        ftopic = mod.FetchTopic(topic=topic, partitions=parts)
    return _fill(
        mod.FetchRequest,
        replica_id=-1,
        max_wait=ms(max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=(ftopic,),
        forgotten_topics_data=(),
        rack_id="",
    )


def _fill(cls: type, **values: Any) -> Any:
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def batch(values: list[bytes], **opts: Any) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(now, b"k", v, ()) for v in values], **opts)


def metadata_topic_id(client: RawClient, topic: str) -> Any:
    mod = schema_module(ApiKey.METADATA, 12)
    response = client.call(
        mod.MetadataRequest(
            topics=(mod.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
    )
    (t,) = response.topics
    return t.topic_id


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path_factory.mktemp("produce"),
        overrides={"num.partitions": "3", "message.max.bytes": "200000"},
    ) as b:
        yield b


@pytest.fixture
def client(server: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(server.port) as c:
        yield c


def produce_one(
    client: RawClient, version: int, topic: str, partition: int, records: bytes | None, **kw: Any
) -> Any:
    response = client.call(produce_request(version, topic, {partition: records}, **kw))
    (t,) = response.responses
    (p,) = t.partition_responses
    assert p.index == partition
    return p


def fetch_records(client: RawClient, topic: str, partition: int, offset: int) -> list[Any]:
    response = client.call(fetch_request(12, topic, {partition: offset}))
    (t,) = response.responses
    (p,) = t.partitions
    assert p.error_code == ErrorCode.none
    out = []
    data = p.records or b""
    pos = 0
    while pos < len(data):
        header, records = decode_records(data[pos:])
        out.extend(records)
        pos += header.size
    return out


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(3, 14))
def test_every_produce_version_appends_and_reports_offsets(client: RawClient, version: int) -> None:
    topic = f"versions-{version}"
    topic_id = metadata_topic_id(client, topic)  # auto-creates
    first = produce_one(client, version, topic, 1, batch([b"a", b"b"]), topic_id=topic_id)
    second = produce_one(client, version, topic, 1, batch([b"c"]), topic_id=topic_id)
    assert first.error_code == ErrorCode.none
    assert (first.base_offset, second.base_offset) == (0, 2)
    assert first.log_append_time is None  # CreateTime topic: -1 on the wire
    if version >= 5:
        assert second.log_start_offset == 0
    values = [r.value for r in fetch_records(client, topic, 1, 0)]
    assert values == [b"a", b"b", b"c"]


def test_bad_crc_is_corrupt_message_and_the_broker_keeps_serving(client: RawClient) -> None:
    good = batch([b"payload-1", b"payload-2"])
    bad = bytearray(good)
    bad[-3] ^= 0xFF  # inside the records, under the CRC
    p = produce_one(client, 9, "crc", 0, bytes(bad))
    assert p.error_code == ErrorCode.corrupt_message
    # The same connection and the same partition still work, and nothing bad was written.
    p = produce_one(client, 9, "crc", 0, good)
    assert p.error_code == ErrorCode.none and p.base_offset == 0
    assert [r.value for r in fetch_records(client, "crc", 0, 0)] == [b"payload-1", b"payload-2"]


def test_truncated_batch_is_corrupt_message(client: RawClient) -> None:
    good = batch([b"x" * 100])
    p = produce_one(client, 9, "truncated", 0, good[:-10])
    assert p.error_code == ErrorCode.corrupt_message


def test_oversized_batch_is_message_too_large(client: RawClient) -> None:
    p = produce_one(client, 9, "big", 0, batch([b"z" * 300_000]))
    assert p.error_code == ErrorCode.message_too_large
    assert produce_one(client, 9, "big", 0, batch([b"small"])).error_code == ErrorCode.none


def test_unknown_partition_invalid_topic_and_internal_topic(client: RawClient) -> None:
    assert produce_one(client, 9, "parts", 7, batch([b"x"])).error_code == (
        ErrorCode.unknown_topic_or_partition
    )
    assert produce_one(client, 9, "bad/name", 0, batch([b"x"])).error_code == (
        ErrorCode.invalid_topic_exception
    )
    assert produce_one(client, 9, "x" * 250, 0, batch([b"x"])).error_code == (
        ErrorCode.invalid_topic_exception
    )
    for internal in ("__consumer_offsets", "__transaction_state"):
        assert produce_one(client, 9, internal, 0, batch([b"x"])).error_code == (
            ErrorCode.invalid_topic_exception
        )


def test_unknown_topic_id_in_v13(client: RawClient) -> None:
    import uuid

    p = produce_one(client, 13, "", 0, batch([b"x"]), topic_id=uuid.uuid4())
    assert p.error_code == ErrorCode.unknown_topic_id


def test_invalid_acks_and_several_batches_are_rejected(client: RawClient) -> None:
    assert produce_one(client, 9, "acks", 0, batch([b"x"]), acks=2).error_code == (
        ErrorCode.invalid_required_acks
    )
    two = batch([b"a"]) + batch([b"b"])
    assert produce_one(client, 9, "acks", 0, two).error_code == ErrorCode.invalid_record


def test_acks_all_answers_once_the_high_watermark_covers_the_records(client: RawClient) -> None:
    p = produce_one(client, 9, "acks-all", 2, batch([b"1", b"2", b"3"]), acks=-1)
    assert p.error_code == ErrorCode.none and p.base_offset == 0
    response = client.call(fetch_request(12, "acks-all", {2: 0}))
    assert response.responses[0].partitions[0].high_watermark == 3


def test_acks_zero_sends_nothing_and_closes_on_failure(server: BrokerProcess) -> None:
    with RawClient(server.port) as c:
        c.send(produce_request(9, "acks-zero", {0: batch([b"quiet"])}, acks=0))
        # No response to the acks=0 request: the next answer is the fetch's.
        values = [r.value for r in fetch_records(c, "acks-zero", 0, 0)]
        assert values == [b"quiet"]
    with RawClient(server.port) as c:
        c.send(produce_request(9, "acks-zero", {9: batch([b"nowhere"])}, acks=0))
        assert c.is_closed_by_peer()
    with RawClient(server.port) as c:  # and the broker still serves
        assert [r.value for r in fetch_records(c, "acks-zero", 0, 0)] == [b"quiet"]


def init_producer_id(
    client: RawClient,
    version: int = 4,
    transactional_id: str | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
) -> Any:
    mod = schema_module(ApiKey.INIT_PRODUCER_ID, version)
    return client.call(
        _fill(
            mod.InitProducerIdRequest,
            transactional_id=transactional_id,
            transaction_timeout=ms(60000),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            enable2_pc=False,
            keep_prepared_txn=False,
        )
    )


def test_idempotent_retry_returns_the_original_offsets(client: RawClient) -> None:
    r = init_producer_id(client)
    assert r.error_code == ErrorCode.none and r.producer_epoch == 0
    pid = r.producer_id
    first = batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0)
    second = batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=2)
    assert produce_one(client, 9, "idem", 0, first).base_offset == 0
    assert produce_one(client, 9, "idem", 0, second).base_offset == 2
    # A retry of the first batch: success with its original offsets, nothing appended.
    retry = produce_one(client, 9, "idem", 0, first)
    assert retry.error_code == ErrorCode.none and retry.base_offset == 0
    gap = batch([b"d"], producer_id=pid, producer_epoch=0, base_sequence=7)
    assert produce_one(client, 9, "idem", 0, gap).error_code == (
        ErrorCode.out_of_order_sequence_number
    )
    assert [r.value for r in fetch_records(client, "idem", 0, 0)] == [b"a", b"b", b"c"]


def test_producer_ids_are_unique_and_transactional_ids_get_epochs(client: RawClient) -> None:
    ids = {init_producer_id(client, v).producer_id for v in range(0, 6)}
    assert len(ids) == 6
    first = init_producer_id(client, 4, transactional_id="txn-1")
    assert first.error_code == ErrorCode.none and first.producer_id not in ids
    again = init_producer_id(client, 4, transactional_id="txn-1")
    assert (again.producer_id, again.producer_epoch) == (
        first.producer_id,
        first.producer_epoch + 1,
    )


def test_a_new_transactional_id_accepts_any_producer_id_and_epoch(client: RawClient) -> None:
    """@platformatic/kafka's first InitProducerId v5 carries producer id 0 and epoch 0; a state
    that was just created has no incarnation to fence, so Kafka answers with a producer id.
    Once the id has an epoch, a stale one is fenced."""
    first = init_producer_id(client, 5, "txn-fresh", producer_id=0, producer_epoch=0)
    assert first.error_code == ErrorCode.none and first.producer_epoch == 0
    again = init_producer_id(
        client, 5, "txn-fresh", producer_id=first.producer_id, producer_epoch=0
    )
    assert again.error_code == ErrorCode.none and again.producer_epoch == 1
    stale = init_producer_id(
        client, 5, "txn-fresh", producer_id=first.producer_id, producer_epoch=0
    )
    assert stale.error_code == ErrorCode.producer_fenced


def test_pipelined_requests_on_one_connection_append_in_order(client: RawClient) -> None:
    for i in range(50):
        client.send(produce_request(9, "pipelined", {0: batch([str(i).encode()])}))
    offsets = []
    for _ in range(50):
        frame = client.recv_frame()
        assert frame is not None
        from logkeel.server.protocol import decode_response

        _, body = decode_response(response_module(ApiKey.PRODUCE, 9).ProduceResponse, frame)
        offsets.append(body.responses[0].partition_responses[0].base_offset)
    assert offsets == list(range(50))
    assert [r.value for r in fetch_records(client, "pipelined", 0, 0)] == [
        str(i).encode() for i in range(50)
    ]


def test_pipelined_produce_keeps_order_per_partition_and_answers_in_order(
    client: RawClient,
) -> None:
    """Produce requests of one connection overlap (the next starts once the one before has
    handed over its appends): each partition still appends them in request order, an
    idempotent producer's sequences across requests are accepted in order, a request of
    another API waits its turn, and every response comes in request order."""
    pid = init_producer_id(client).producer_id
    sent: list[tuple[int, str]] = []  # correlation id, what was asked
    sequence = {0: 0, 1: 0, 2: 0}
    for i in range(60):
        partition = (i * 7) % 3
        records = batch(
            [f"{partition}-{i}".encode()] * 3,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=sequence[partition],
        )
        sequence[partition] += 3
        acks = -1 if i % 5 == 0 else 1
        sent.append(
            (client.send(produce_request(9, "overlap", {partition: records}, acks=acks)), "p")
        )
        if i % 20 == 10:
            sent.append((client.send(fetch_request(12, "overlap", {0: 0})), "f"))
    from logkeel.server.protocol import decode_response

    produce_type = response_module(ApiKey.PRODUCE, 9).ProduceResponse
    fetch_type = response_module(ApiKey.FETCH, 12).FetchResponse
    bases: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for corr, kind in sent:
        frame = client.recv_frame()
        assert frame is not None
        got, body = decode_response(produce_type if kind == "p" else fetch_type, frame)
        assert got == corr
        if kind == "p":
            (p,) = body.responses[0].partition_responses
            assert p.error_code == ErrorCode.none
            bases[p.index].append(p.base_offset)
    for partition, offsets in bases.items():
        assert offsets == list(range(0, 3 * len(offsets), 3))
        values = [r.value for r in fetch_records(client, "overlap", partition, 0)]
        expected = [f"{partition}-{i}".encode() for i in range(60) if (i * 7) % 3 == partition]
        assert values == [v for v in expected for _ in range(3)]


def test_timestamps_far_in_the_future_are_invalid(client: RawClient) -> None:
    future = int(time.time() * 1000) + 2 * 3600 * 1000  # message.timestamp.after.max.ms: 1 h
    p = produce_one(client, 9, "future", 0, build_batch([(future, None, b"late", ())]))
    assert p.error_code == ErrorCode.invalid_timestamp
    old = 1_000_000_000_000  # 2001: no lower bound by default
    assert produce_one(client, 9, "future", 0, build_batch([(old, None, b"x", ())])).error_code == 0


def test_transactional_records_outside_a_transaction_are_refused(client: RawClient) -> None:
    txn = batch([b"t"], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
    p = produce_one(client, 9, "no-txn", 0, txn)
    assert p.error_code == ErrorCode.invalid_record
    request = produce_request(9, "no-txn", {0: txn})
    request = type(request)(
        transactional_id="my-txn",
        acks=request.acks,
        timeout=request.timeout,
        topic_data=request.topic_data,
    )
    (t,) = client.call(request).responses
    # No transaction of "my-txn" holds the partition (KIP-890's verification).
    assert t.partition_responses[0].error_code == ErrorCode.invalid_txn_state
    # Nothing was written, so read_committed readers are not held back.
    response = client.call(fetch_request(12, "no-txn", {0: 0}, isolation_level=1))
    partition = response.responses[0].partitions[0]
    assert (partition.high_watermark, partition.last_stable_offset) == (0, 0)


# -- the event loop never waits on the metadata store's disk writes ------------------------------


@contextlib.contextmanager
def metadata_fsync_gate() -> Iterator[tuple[threading.Event, threading.Event]]:
    """Makes every fsync of the metadata store's file block until released: a real ``os.fsync``
    wrapped in process (the store writes through ``os.fsync``), recognised by the path its
    descriptor names. Yields (entered, release)."""
    real_fsync = os.fsync
    entered, release = threading.Event(), threading.Event()

    def gated_fsync(fd: int) -> None:
        with contextlib.suppress(OSError):
            if METADATA_FILE in os.readlink(f"/proc/self/fd/{fd}"):
                entered.set()
                release.wait(30)
        real_fsync(fd)

    os.fsync = gated_fsync
    try:
        yield entered, release
    finally:
        release.set()
        os.fsync = real_fsync


def test_a_produce_is_answered_while_create_topics_is_stuck_in_fsync(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        await asyncio.to_thread(broker.metadata.create_topic, "flowing", 1, 1, {})
        bootstrap = f"127.0.0.1:{broker.port}"
        with metadata_fsync_gate() as (entered, release):
            admin = AdminClient({"bootstrap.servers": bootstrap})
            created = admin.create_topics([NewTopic("stuck", 1, 1)], operation_timeout=30)
            assert await asyncio.to_thread(entered.wait, 15), "CreateTopics never reached fsync"

            def produce() -> list[tuple[Any, int]]:
                producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
                delivered: list[tuple[Any, int]] = []
                producer.produce(
                    "flowing", b"v", on_delivery=lambda e, m: delivered.append((e, m.offset()))
                )
                producer.flush(15)
                return delivered

            assert await asyncio.to_thread(produce) == [(None, 0)]
            assert not created["stuck"].done()  # the write really was still in its fsync
            release.set()
            await asyncio.to_thread(created["stuck"].result, 15)
        assert broker.metadata.topic("stuck") is not None

    run_broker(tmp_path, scenario)
