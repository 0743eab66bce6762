"""Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords against a real `logkeel serve`,
with requests built by hand (kio) so every version and corner is reachable."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from logkeel.records.batch import BatchHeader
from logkeel.records.builder import build_batch
from logkeel.records.record import decode_records
from logkeel.server.protocol import ApiKey
from tests.brokerproc import BrokerProcess
from tests.server.test_produce_api import (
    RawClient,
    _fill,
    batch,
    fetch_request,
    metadata_topic_id,
    ms,
    produce_one,
    schema_module,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("fetch"), overrides={"num.partitions": "2"}) as b:
        yield b


@pytest.fixture
def client(server: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(server.port) as c:
        yield c


def one_partition(response: Any) -> Any:
    (t,) = response.responses
    (p,) = t.partitions
    return p


def values_of(records: bytes | None) -> list[bytes | None]:
    out: list[bytes | None] = []
    data = records or b""
    pos = 0
    while pos < len(data):
        header, recs = decode_records(data[pos:])
        out.extend(r.value for r in recs)
        pos += header.size
    return out


@pytest.mark.parametrize("version", range(4, 19))
def test_every_fetch_version_returns_the_stored_batches(client: RawClient, version: int) -> None:
    topic = f"fetch-v{version}"
    topic_id = metadata_topic_id(client, topic)
    sent = [batch([b"a", b"b"]), batch([b"c"]), batch([b"d" * 5000])]
    for b in sent:
        assert produce_one(client, 9, topic, 0, b).error_code == ErrorCode.none
    p = one_partition(client.call(fetch_request(version, topic, {0: 0}, topic_id=topic_id)))
    assert p.error_code == ErrorCode.none
    assert p.high_watermark == 4 and p.last_stable_offset == 4
    # The bytes are the produced batches with the broker's offsets and leader epoch in the
    # header (which lies outside the CRC), byte for byte otherwise.
    data = p.records
    pos, base = 0, 0
    for b in sent:
        header = BatchHeader.parse(data, pos)
        assert header.base_offset == base
        assert data[pos + 12 + 4 : pos + header.size] == b[12 + 4 :]
        pos += header.size
        base = header.next_offset
    assert pos == len(data)
    assert p.aborted_transactions is None  # READ_UNCOMMITTED: null, as Kafka sends
    if version >= 11:
        assert p.preferred_read_replica == -1
    # From the middle: the batch holding offset 2 onwards.
    p = one_partition(client.call(fetch_request(version, topic, {0: 2}, topic_id=topic_id)))
    assert values_of(p.records) == [b"c", b"d" * 5000]


def test_out_of_range_unknown_topics_and_sessions(client: RawClient) -> None:
    produce_one(client, 9, "ranges", 0, batch([b"x"]))
    p = one_partition(client.call(fetch_request(12, "ranges", {0: 5})))
    assert p.error_code == ErrorCode.offset_out_of_range and p.high_watermark == 1
    p = one_partition(client.call(fetch_request(12, "ranges", {0: 1})))
    assert p.error_code == ErrorCode.none and not p.records  # at the end: nothing, no error
    p = one_partition(client.call(fetch_request(12, "no-such-topic", {0: 0})))
    assert p.error_code == ErrorCode.unknown_topic_or_partition
    p = one_partition(client.call(fetch_request(12, "ranges", {9: 0})))
    assert p.error_code == ErrorCode.unknown_topic_or_partition
    p = one_partition(client.call(fetch_request(13, "", {0: 0}, topic_id=uuid.uuid4())))
    assert p.error_code == ErrorCode.unknown_topic_id
    # A full request with epoch 0 opens a session (tests/server/test_fetch_session_wire.py);
    # an incremental fetch of a session that does not exist cannot find it.
    full = client.call(fetch_request(12, "ranges", {0: 0}, session_id=0, session_epoch=0))
    assert full.session_id != 0 and full.error_code == ErrorCode.none
    incremental = client.call(fetch_request(12, "ranges", {0: 0}, session_id=77, session_epoch=3))
    assert incremental.error_code == ErrorCode.fetch_session_id_not_found


def test_long_poll_waits_for_max_wait_and_wakes_on_append(server: BrokerProcess) -> None:
    with RawClient(server.port) as c:
        produce_one(c, 9, "poll", 0, batch([b"first"]))
        started = time.monotonic()
        p = one_partition(c.call(fetch_request(12, "poll", {0: 1}, max_wait_ms=1000)))
        assert time.monotonic() - started >= 0.9
        assert p.error_code == ErrorCode.none and not p.records

        # min.bytes not reached: the fetch waits its max wait, then returns what there is.
        started = time.monotonic()
        p = one_partition(
            c.call(fetch_request(12, "poll", {0: 0}, max_wait_ms=1000, min_bytes=1_000_000))
        )
        assert time.monotonic() - started >= 0.9
        assert values_of(p.records) == [b"first"]

        # An append wakes a waiting fetch long before its deadline.
        def produce_later() -> None:
            time.sleep(0.5)
            with RawClient(server.port) as other:
                produce_one(other, 9, "poll", 0, batch([b"second"]))

        t = threading.Thread(target=produce_later)
        started = time.monotonic()
        t.start()
        p = one_partition(c.call(fetch_request(12, "poll", {0: 1}, max_wait_ms=20_000)))
        elapsed = time.monotonic() - started
        t.join()
        assert values_of(p.records) == [b"second"]
        assert elapsed < 15


def test_max_bytes_limits_and_the_first_batch_always_fits(client: RawClient) -> None:
    for part in (0, 1):
        for i in range(5):
            produce_one(client, 9, "limits", part, batch([bytes([65 + i]) * 1000]))
    mod = schema_module(ApiKey.FETCH, 12)
    parts = tuple(
        mod.FetchPartition(
            partition=i,
            current_leader_epoch=-1,
            fetch_offset=0,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=10,
        )
        for i in (0, 1)
    )
    request = mod.FetchRequest(
        replica_id=-1,
        max_wait=ms(0),
        min_bytes=1,
        max_bytes=10,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(mod.FetchTopic(topic="limits", partitions=parts),),
        forgotten_topics_data=(),
        rack_id="",
    )
    (t,) = client.call(request).responses
    first, second = t.partitions
    # One whole batch for the first partition despite the 10-byte limits; none for the next.
    assert values_of(first.records) == [b"A" * 1000]
    assert not second.records
    # A partition limit of two batches' worth gives two (batches are never split).
    p = one_partition(client.call(fetch_request(12, "limits", {1: 0}, partition_max_bytes=2200)))
    assert values_of(p.records) == [b"A" * 1000, b"B" * 1000]


def list_offsets(
    client: RawClient, version: int, topic: str, timestamp: int, isolation_level: int = 0
) -> Any:
    mod = schema_module(ApiKey.LIST_OFFSETS, version)
    part = _fill(
        mod.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=timestamp
    )
    request = _fill(
        mod.ListOffsetsRequest,
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(mod.ListOffsetsTopic(name=topic, partitions=(part,)),),
        timeout=ms(5000),
    )
    (t,) = client.call(request).topics
    (p,) = t.partitions
    return p


@pytest.mark.parametrize("version", range(1, 12))
def test_list_offsets_every_version(client: RawClient, version: int) -> None:
    topic = f"offsets-v{version}"
    base = 1_700_000_000_000
    stamps = [base, base + 10, base + 50, base + 20]
    for ts in stamps:
        b = build_batch([(ts, None, f"at-{ts}".encode(), ())])
        assert produce_one(client, 9, topic, 0, b).error_code == ErrorCode.none
    assert list_offsets(client, version, topic, -2).offset == 0
    latest = list_offsets(client, version, topic, -1)
    assert (latest.error_code, latest.offset, latest.timestamp) == (ErrorCode.none, 4, -1)
    by_time = list_offsets(client, version, topic, base + 15)
    assert (by_time.offset, by_time.timestamp) == (2, base + 50)
    assert list_offsets(client, version, topic, base + 51).offset == -1
    if version >= 7:
        top = list_offsets(client, version, topic, -3)
        assert (top.offset, top.timestamp) == (2, base + 50)
    if version >= 4:
        assert latest.leader_epoch == 0
    missing = list_offsets(client, version, "offsets-nowhere", -1)
    assert missing.error_code == ErrorCode.unknown_topic_or_partition


def leader_epoch_end(
    client: RawClient, version: int, epoch: int, current: int = -1, topic: str = "epochs"
) -> Any:
    mod = schema_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    part = mod.OffsetForLeaderPartition(
        partition=0, current_leader_epoch=current, leader_epoch=epoch
    )
    request = _fill(
        mod.OffsetForLeaderEpochRequest,
        replica_id=-1,
        topics=(mod.OffsetForLeaderTopic(topic=topic, partitions=(part,)),),
    )
    (t,) = client.call(request).topics
    (p,) = t.partitions
    return p


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch(client: RawClient, version: int) -> None:
    produce_one(client, 9, f"epochs-{version}", 0, batch([b"1", b"2", b"3"]))

    def ask(epoch: int, current: int = -1, topic: str = f"epochs-{version}") -> Any:
        return leader_epoch_end(client, version, epoch, current, topic)

    p = ask(0)
    assert (p.error_code, p.leader_epoch, p.end_offset) == (ErrorCode.none, 0, 3)
    p = ask(4)
    assert (p.leader_epoch, p.end_offset) == (-1, -1)
    assert ask(0, current=3).error_code == ErrorCode.unknown_leader_epoch
    assert ask(0, topic="epochs-none").error_code == ErrorCode.unknown_topic_or_partition


def delete_records(client: RawClient, version: int, topic: str, offset: int) -> Any:
    mod = schema_module(ApiKey.DELETE_RECORDS, version)
    request = mod.DeleteRecordsRequest(
        topics=(
            mod.DeleteRecordsTopic(
                name=topic,
                partitions=(mod.DeleteRecordsPartition(partition_index=0, offset=offset),),
            ),
        ),
        timeout=ms(5000),
    )
    (t,) = client.call(request).topics
    (p,) = t.partitions
    return p


def test_delete_records_moves_the_log_start(client: RawClient) -> None:
    for i in range(6):
        produce_one(client, 9, "trim", 0, batch([str(i).encode()]))
    p = delete_records(client, 0, "trim", 3)
    assert (p.error_code, p.low_watermark) == (ErrorCode.none, 3)
    assert list_offsets(client, 5, "trim", -2).offset == 3
    f = one_partition(client.call(fetch_request(12, "trim", {0: 1})))
    assert f.error_code == ErrorCode.offset_out_of_range and f.log_start_offset == 3
    f = one_partition(client.call(fetch_request(12, "trim", {0: 3})))
    assert values_of(f.records) == [b"3", b"4", b"5"] and f.log_start_offset == 3
    assert delete_records(client, 2, "trim", 99).error_code == ErrorCode.offset_out_of_range
    p = delete_records(client, 1, "trim", -1)  # -1: up to the high watermark
    assert (p.error_code, p.low_watermark) == (ErrorCode.none, 6)
    assert delete_records(client, 2, "trim-none", 0).error_code == (
        ErrorCode.unknown_topic_or_partition
    )
