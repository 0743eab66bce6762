"""Fetch sessions (KIP-227) on the wire, with hand-built requests against a real broker: the
lifecycle, the error codes and what an incremental response carries."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from logkeel.server.protocol import ApiKey
from tests.brokerproc import BrokerProcess
from tests.server.test_produce_api import (
    RawClient,
    batch,
    fetch_request,
    metadata_topic_id,
    produce_one,
    schema_module,
)
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("sessions"), overrides={"num.partitions": "3"}) as b:
        yield b


@pytest.fixture
def client(server: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(server.port) as c:
        yield c


def answered(response: Any) -> dict[int, Any]:
    """Partition index -> partition data, for a response of one topic (or none)."""
    return {int(p.partition_index): p for t in response.responses for p in t.partitions}


def with_forgotten(request: Any, version: int, topic: Any, partitions: list[int]) -> Any:
    mod = schema_module(ApiKey.FETCH, version)
    key = {"topic_id": topic} if version >= 13 else {"topic": topic}
    forgotten = (mod.ForgottenTopic(partitions=tuple(partitions), **key),)
    return dataclasses.replace(request, forgotten_topics_data=forgotten)


@pytest.mark.parametrize("version", [7, 12, 13, 18])
def test_session_lifecycle(client: RawClient, version: int) -> None:
    topic = f"lifecycle-v{version}"
    topic_id = metadata_topic_id(client, topic)
    key = topic_id if version >= 13 else topic
    for p in range(3):
        produce_one(client, 9, topic, p, batch([b"old"]))

    def fetch(offsets: dict[int, int], sid: int, epoch: int, **kw: Any) -> Any:
        request = fetch_request(
            version, topic, offsets, topic_id=topic_id, session_id=sid, session_epoch=epoch, **kw
        )
        return request

    full = client.call(fetch({0: 1, 1: 1, 2: 1}, 0, 0))
    sid = full.session_id
    assert full.error_code == ErrorCode.none and sid != 0
    assert set(answered(full)) == {0, 1, 2}

    # Nothing changed: an incremental fetch naming no partition answers none.
    quiet = client.call(fetch({}, sid, 1))
    assert (quiet.error_code, quiet.session_id, answered(quiet)) == (ErrorCode.none, sid, {})

    # New records on partition 1 only: the long poll over the whole session wakes on them, and
    # only partition 1 is answered (its high watermark moved and it carries records).
    produce_one(client, 9, topic, 1, batch([b"new"]))
    changed = answered(client.call(fetch({}, sid, 2, max_wait_ms=2000)))
    assert set(changed) == {1}
    assert changed[1].high_watermark == 2 and changed[1].records

    # The fetcher moves partition 1 on (an update) and forgets partition 2.
    request = with_forgotten(fetch({1: 2}, sid, 3), version, key, [2])
    assert answered(client.call(request)) == {}
    produce_one(client, 9, topic, 2, batch([b"forgotten"]))
    produce_one(client, 9, topic, 0, batch([b"kept"]))
    after = answered(client.call(fetch({}, sid, 4, max_wait_ms=2000)))
    assert set(after) == {0}  # partition 2 is no longer in the session

    # A replayed epoch, and an epoch from the future, are refused; the session survives.
    for epoch in (4, 9):
        wrong = client.call(fetch({}, sid, epoch))
        assert wrong.error_code == ErrorCode.invalid_fetch_session_epoch
        assert wrong.responses == ()
    assert client.call(fetch({}, sid, 5)).error_code == ErrorCode.none

    # The final epoch closes it and fetches sessionless; then the id is unknown.
    final = client.call(fetch({0: 0}, sid, -1))
    assert final.session_id == 0 and set(answered(final)) == {0}
    gone = client.call(fetch({}, sid, 6))
    assert (gone.error_code, gone.session_id) == (ErrorCode.fetch_session_id_not_found, 0)


def test_a_new_full_request_replaces_the_named_session(client: RawClient) -> None:
    produce_one(client, 9, "replace", 0, batch([b"x"]))
    first = client.call(fetch_request(12, "replace", {0: 0}, session_id=0, session_epoch=0))
    second = client.call(
        fetch_request(12, "replace", {0: 0}, session_id=first.session_id, session_epoch=0)
    )
    assert second.session_id not in (0, first.session_id)
    old = client.call(
        fetch_request(12, "replace", {}, session_id=first.session_id, session_epoch=1)
    )
    assert old.error_code == ErrorCode.fetch_session_id_not_found


def test_topic_ids_in_a_session(client: RawClient) -> None:
    topic_id = metadata_topic_id(client, "by-id")
    produce_one(client, 9, "by-id", 0, batch([b"x"]))
    full = client.call(
        fetch_request(13, "", {0: 1}, topic_id=topic_id, session_id=0, session_epoch=0)
    )
    sid = full.session_id
    assert sid != 0
    # A topic id nobody knows added to the session: UNKNOWN_TOPIC_ID, in every response (an
    # error is always answered), until the fetcher forgets it.
    ghost = uuid.uuid4()
    for epoch in (1, 2):
        offsets = {0: 0} if epoch == 1 else {}
        response = client.call(
            fetch_request(13, "", offsets, topic_id=ghost, session_id=sid, session_epoch=epoch)
        )
        (topic,) = response.responses
        assert topic.topic_id == ghost
        assert [p.error_code for p in topic.partitions] == [ErrorCode.unknown_topic_id]
    request = with_forgotten(
        fetch_request(13, "", {}, topic_id=topic_id, session_id=sid, session_epoch=3),
        13,
        ghost,
        [0],
    )
    assert client.call(request).responses == ()
    # A session made with topic ids cannot go on by names (Fetch v12), nor the other way.
    mixed = client.call(fetch_request(12, "by-id", {}, session_id=sid, session_epoch=4))
    assert mixed.error_code == ErrorCode.fetch_session_topic_id_error


def test_forgetting_every_partition_ends_the_session(client: RawClient) -> None:
    produce_one(client, 9, "all-gone", 0, batch([b"x"]))
    sid = client.call(
        fetch_request(12, "all-gone", {0: 1}, session_id=0, session_epoch=0)
    ).session_id
    request = with_forgotten(
        fetch_request(12, "all-gone", {}, session_id=sid, session_epoch=1), 12, "all-gone", [0]
    )
    response = client.call(request)
    assert (response.error_code, response.session_id) == (ErrorCode.none, 0)
    again = client.call(fetch_request(12, "all-gone", {}, session_id=sid, session_epoch=2))
    assert again.error_code == ErrorCode.fetch_session_id_not_found


def test_zero_slots_declines_every_session(tmp_path: Any) -> None:
    overrides = {"max.incremental.fetch.session.cache.slots": "0"}
    with BrokerProcess(tmp_path, overrides=overrides) as b, RawClient(b.port) as c:
        produce_one(c, 9, "off", 0, batch([b"x"]))
        full = c.call(fetch_request(12, "off", {0: 0}, session_id=0, session_epoch=0))
        assert (full.error_code, full.session_id) == (ErrorCode.none, 0)
        assert answered(full)[0].records


def test_a_deleted_topic_in_a_session_answers_unknown_topic_id(
    server: BrokerProcess, client: RawClient
) -> None:
    topic_id = metadata_topic_id(client, "doomed")
    produce_one(client, 9, "doomed", 0, batch([b"x"]))
    sid = client.call(
        fetch_request(13, "", {0: 1}, topic_id=topic_id, session_id=0, session_epoch=0)
    ).session_id
    assert sid != 0
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(30)
    epoch = iter(range(1, 1000))

    def errors() -> list[ErrorCode]:
        request = fetch_request(
            13, "", {}, topic_id=topic_id, session_id=sid, session_epoch=next(epoch)
        )
        return [p.error_code for t in client.call(request).responses for p in t.partitions]

    # The session still holds the partition; its topic id is no longer known.
    assert wait_until(lambda: errors() == [ErrorCode.unknown_topic_id], 30, "UNKNOWN_TOPIC_ID")
