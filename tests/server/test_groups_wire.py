"""The group APIs on the wire, version by version, against a real ``logkeel serve``: requests are
built and responses decoded with kio (an independent codec generated from Kafka's schemas)."""

from __future__ import annotations

import importlib
import itertools
import socket
import struct
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64, i64Timedelta

from logkeel.server.protocol import decode_response, encode_request, request_schema, response_schema
from tests.brokerproc import BrokerProcess
from tests.server.groups_clients import create_topic
from tests.waiting import wait_until

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
}
TOPIC = "wire-topic"
_corr = itertools.count(1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("groups-wire"), overrides=OVERRIDES) as b:
        create_topic(b.bootstrap, TOPIC, 3)
        yield b


class Wire:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)

    def _recv(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "broker closed the connection"
            out += chunk
        return out

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        request = req(api_key, version)(**fields)
        corr = next(_corr)
        self.sock.sendall(encode_request(request, corr, "wire-test"))
        (size,) = struct.unpack(">i", self._recv(4))
        got_corr, response = decode_response(response_schema(api_key, version), self._recv(size))
        assert got_corr == corr
        return response

    def close(self) -> None:
        self.sock.close()


def req(api_key: int, version: int, name: str | None = None) -> type[Any]:
    cls = request_schema(api_key, version)
    assert cls is not None
    if name is None:
        return cls
    return getattr(importlib.import_module(cls.__module__), name)  # type: ignore[no-any-return]


def ms(n: int) -> i32Timedelta:
    return i32Timedelta.parse(timedelta(milliseconds=n))


@pytest.fixture
def wire(broker: BrokerProcess) -> Iterator[Wire]:
    w = Wire(broker.port)
    yield w
    w.close()


FIND, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST, COMMIT, FETCH, DELETE, OFFSET_DELETE = (
    10,
    11,
    12,
    13,
    14,
    15,
    16,
    8,
    9,
    42,
    47,
)


def test_find_coordinator_all_versions(wire: Wire, broker: BrokerProcess) -> None:
    r = wire.call(FIND, 0, key="g")
    assert (r.error_code, r.host, r.port) == (ErrorCode.none, "127.0.0.1", broker.port)
    for v in (1, 2, 3):
        r = wire.call(FIND, v, key="g", key_type=0)
        assert r.error_code == ErrorCode.none and r.port == broker.port
        r = wire.call(FIND, v, key="txn", key_type=1)
        assert r.error_code == ErrorCode.none and r.port == broker.port
    for v in (4, 5, 6):
        r = wire.call(FIND, v, key_type=0, coordinator_keys=("a", "b", "c"))
        assert [(c.key, c.error_code, c.port) for c in r.coordinators] == [
            (k, ErrorCode.none, broker.port) for k in "abc"
        ]
    r = wire.call(FIND, 4, key_type=7, coordinator_keys=("x",))
    assert r.coordinators[0].error_code == ErrorCode.invalid_request


def test_join_sync_heartbeat_commit_fetch_leave_v0(wire: Wire) -> None:
    protocol = req(JOIN, 0, "JoinGroupRequestProtocol")(name="range", metadata=b"\x00\x00meta")
    join = wire.call(
        JOIN,
        0,
        group_id="g-v0",
        session_timeout=ms(5000),
        member_id="",
        protocol_type="consumer",
        protocols=(protocol,),
    )
    # Before v4 the member id is assigned on the first join, no second round trip.
    assert join.error_code == ErrorCode.none and join.generation_id == 1
    member = join.member_id
    assert join.leader == member and [m.member_id for m in join.members] == [member]
    assignment = req(SYNC, 0, "SyncGroupRequestAssignment")(member_id=member, assignment=b"A")
    sync = wire.call(
        SYNC, 0, group_id="g-v0", generation_id=i32(1), member_id=member, assignments=(assignment,)
    )
    assert (sync.error_code, sync.assignment) == (ErrorCode.none, b"A")
    assert wire.call(
        HEARTBEAT, 0, group_id="g-v0", generation_id=i32(1), member_id=member
    ).error_code == (ErrorCode.none)
    assert wire.call(
        HEARTBEAT, 0, group_id="g-v0", generation_id=i32(7), member_id=member
    ).error_code == (ErrorCode.illegal_generation)
    part = req(COMMIT, 2, "OffsetCommitRequestPartition")
    topic = req(COMMIT, 2, "OffsetCommitRequestTopic")
    commit = wire.call(
        COMMIT,
        2,
        group_id="g-v0",
        generation_id_or_member_epoch=i32(1),
        member_id=member,
        retention_time=i64Timedelta.parse(timedelta(milliseconds=-1)),
        topics=(
            topic(
                name=TOPIC,
                partitions=(
                    part(partition_index=i32(0), committed_offset=i64(11), committed_metadata="m0"),
                    part(partition_index=i32(9), committed_offset=i64(1), committed_metadata=None),
                ),
            ),
        ),
    )
    assert [(p.partition_index, p.error_code) for p in commit.topics[0].partitions] == [
        (0, ErrorCode.none),
        (9, ErrorCode.unknown_topic_or_partition),
    ]
    ftopic = req(FETCH, 1, "OffsetFetchRequestTopic")
    fetch = wire.call(
        FETCH, 1, group_id="g-v0", topics=(ftopic(name=TOPIC, partition_indexes=(i32(0), i32(1))),)
    )
    assert [
        (p.partition_index, p.committed_offset, p.metadata, p.error_code)
        for p in fetch.topics[0].partitions
    ] == [(0, 11, "m0", ErrorCode.none), (1, -1, "", ErrorCode.none)]
    assert wire.call(LEAVE, 0, group_id="g-v0", member_id=member).error_code == ErrorCode.none
    assert (
        wire.call(LEAVE, 0, group_id="g-v0", member_id=member).error_code
        == ErrorCode.unknown_member_id
    )


def test_join_v5_member_id_required_and_errors(wire: Wire) -> None:
    protocol = req(JOIN, 5, "JoinGroupRequestProtocol")(name="range", metadata=b"m")
    common = dict(protocol_type="consumer", protocols=(protocol,), rebalance_timeout=ms(3000))
    r = wire.call(JOIN, 5, group_id="g-v5", session_timeout=ms(500), member_id="", **common)
    assert r.error_code == ErrorCode.invalid_session_timeout
    r = wire.call(JOIN, 5, group_id="", session_timeout=ms(5000), member_id="", **common)
    assert r.error_code == ErrorCode.invalid_group_id
    r = wire.call(JOIN, 5, group_id="g-v5", session_timeout=ms(5000), member_id="", **common)
    assert r.error_code == ErrorCode.member_id_required and r.member_id.startswith("wire-test-")
    r = wire.call(
        JOIN, 5, group_id="g-v5", session_timeout=ms(5000), member_id=r.member_id, **common
    )
    assert r.error_code == ErrorCode.none and r.generation_id == 1
    member = r.member_id
    mid = req(LEAVE, 3, "MemberIdentity")
    leave = wire.call(
        LEAVE,
        3,
        group_id="g-v5",
        members=(
            mid(member_id=member),
            mid(member_id="nobody"),
        ),
    )
    assert leave.error_code == ErrorCode.none
    assert [(m.member_id, m.error_code) for m in leave.members] == [
        (member, ErrorCode.none),
        ("nobody", ErrorCode.unknown_member_id),
    ]


def test_offset_fetch_v8_many_groups_and_v9(wire: Wire) -> None:
    part = req(COMMIT, 9, "OffsetCommitRequestPartition")
    topic = req(COMMIT, 9, "OffsetCommitRequestTopic")
    for group, offset in (("multi-a", 5), ("multi-b", 6)):
        r = wire.call(
            COMMIT,
            9,
            group_id=group,
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            topics=(
                topic(
                    name=TOPIC,
                    partitions=(
                        part(
                            partition_index=i32(1),
                            committed_offset=i64(offset),
                            committed_leader_epoch=i32(4),
                            committed_metadata="x",
                        ),
                    ),
                ),
            ),
        )
        assert r.topics[0].partitions[0].error_code == ErrorCode.none
    for version in (8, 9):
        g = req(FETCH, version, "OffsetFetchRequestGroup")
        t = req(FETCH, version, "OffsetFetchRequestTopics")
        r = wire.call(
            FETCH,
            version,
            groups=(
                g(group_id="multi-a", topics=None),
                g(group_id="multi-b", topics=(t(name=TOPIC, partition_indexes=(i32(1), i32(2))),)),
                g(group_id="multi-none", topics=None),
            ),
        )
        got = {
            grp.group_id: [
                (t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch)
                for t in grp.topics
                for p in t.partitions
            ]
            for grp in r.groups
        }
        assert got == {
            "multi-a": [(TOPIC, 1, 5, 4)],
            "multi-b": [(TOPIC, 1, 6, 4), (TOPIC, 2, -1, -1)],
            "multi-none": [],
        }
        assert all(grp.error_code == ErrorCode.none for grp in r.groups)


def test_commit_with_generation_to_missing_group(wire: Wire) -> None:
    for version, code in ((8, ErrorCode.illegal_generation), (9, ErrorCode.group_id_not_found)):
        t = req(COMMIT, version, "OffsetCommitRequestTopic")
        p = req(COMMIT, version, "OffsetCommitRequestPartition")
        r = wire.call(
            COMMIT,
            version,
            group_id="no-such-group",
            generation_id_or_member_epoch=i32(3),
            member_id="m",
            topics=(
                t(
                    name=TOPIC,
                    partitions=(
                        p(partition_index=i32(0), committed_offset=i64(1), committed_metadata=""),
                    ),
                ),
            ),
        )
        assert r.topics[0].partitions[0].error_code == code


def test_describe_list_delete_versions(wire: Wire) -> None:
    part = req(COMMIT, 9, "OffsetCommitRequestPartition")
    topic = req(COMMIT, 9, "OffsetCommitRequestTopic")
    wire.call(
        COMMIT,
        9,
        group_id="described",
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        topics=(
            topic(
                name=TOPIC,
                partitions=(
                    part(partition_index=i32(0), committed_offset=i64(1), committed_metadata=""),
                ),
            ),
        ),
    )
    r = wire.call(DESCRIBE, 0, groups=("described", "ghost"))
    assert [(g.group_id, g.error_code, g.group_state) for g in r.groups] == [
        ("described", ErrorCode.none, "Empty"),
        ("ghost", ErrorCode.none, "Dead"),
    ]
    r = wire.call(DESCRIBE, 6, groups=("ghost",), include_authorized_operations=True)
    assert r.groups[0].error_code == ErrorCode.group_id_not_found
    r = wire.call(DESCRIBE, 5, groups=("described",), include_authorized_operations=True)
    assert r.groups[0].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
    r = wire.call(DESCRIBE, 5, groups=("described",), include_authorized_operations=False)
    assert r.groups[0].authorized_operations == -(2**31)

    r = wire.call(LIST, 0)
    assert r.error_code == ErrorCode.none and "described" in {g.group_id for g in r.groups}
    r = wire.call(LIST, 4, states_filter=("empty",))
    assert {g.group_state for g in r.groups} == {"Empty"} and "described" in {
        g.group_id for g in r.groups
    }
    r = wire.call(LIST, 5, types_filter=("classic",))
    assert all(g.group_type == "classic" for g in r.groups) and r.groups
    assert wire.call(LIST, 5, types_filter=("consumer",)).groups == ()

    r = wire.call(DELETE, 0, groups_names=("described", "ghost"))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("described", ErrorCode.none),
        ("ghost", ErrorCode.group_id_not_found),
    ]
    r = wire.call(DELETE, 2, groups_names=("described",))
    assert r.results[0].error_code == ErrorCode.group_id_not_found


def test_offset_delete(wire: Wire) -> None:
    part = req(COMMIT, 9, "OffsetCommitRequestPartition")
    topic = req(COMMIT, 9, "OffsetCommitRequestTopic")
    wire.call(
        COMMIT,
        9,
        group_id="od",
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        topics=(
            topic(
                name=TOPIC,
                partitions=tuple(
                    part(partition_index=i32(p), committed_offset=i64(7), committed_metadata="")
                    for p in (0, 1)
                ),
            ),
        ),
    )
    dp = req(OFFSET_DELETE, 0, "OffsetDeleteRequestPartition")
    dt = req(OFFSET_DELETE, 0, "OffsetDeleteRequestTopic")
    r = wire.call(
        OFFSET_DELETE,
        0,
        group_id="od",
        topics=(
            dt(name=TOPIC, partitions=(dp(partition_index=i32(0)),)),
            dt(name="no-such-topic", partitions=(dp(partition_index=i32(0)),)),
        ),
    )
    assert r.error_code == ErrorCode.none
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics
    ] == [
        (TOPIC, [(0, ErrorCode.none)]),
        ("no-such-topic", [(0, ErrorCode.unknown_topic_or_partition)]),
    ]
    g = req(FETCH, 8, "OffsetFetchRequestGroup")
    r = wire.call(FETCH, 8, groups=(g(group_id="od", topics=None),))
    assert [
        (p.partition_index, p.committed_offset) for t in r.groups[0].topics for p in t.partitions
    ] == [(1, 7)]
    r = wire.call(OFFSET_DELETE, 0, group_id="od-missing", topics=())
    assert r.error_code == ErrorCode.group_id_not_found


def test_deleting_a_topic_deletes_its_committed_offsets(wire: Wire, broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "doomed", 2)
    part = req(COMMIT, 9, "OffsetCommitRequestPartition")
    topic = req(COMMIT, 9, "OffsetCommitRequestTopic")
    wire.call(
        COMMIT,
        9,
        group_id="keeps",
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        topics=tuple(
            topic(
                name=name,
                partitions=(
                    part(partition_index=i32(0), committed_offset=i64(3), committed_metadata=""),
                ),
            )
            for name in ("doomed", TOPIC)
        ),
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(30)
    g = req(FETCH, 8, "OffsetFetchRequestGroup")

    def committed_topics() -> list[str]:
        r = wire.call(FETCH, 8, groups=(g(group_id="keeps", topics=None),))
        return [t.name for t in r.groups[0].topics]

    wait_until(lambda: committed_topics() == [TOPIC], 10, "the deleted topic's offsets gone")
