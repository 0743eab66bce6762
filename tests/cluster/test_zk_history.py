"""The controller's history record in ZooKeeper: bounded, appended by compare-and-set, read
back by kind (the pure append without a ZooKeeper; the store against a real one)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_history import (
    HISTORY_KINDS,
    LEADER_ELECTIONS,
    LOG_DIR_EVENTS,
    ControllerHistory,
    appended,
    decode_history,
)
from logkeel.storage.topic_partition import TopicPartition


def test_appended_keeps_the_last_events_oldest_first() -> None:
    data = appended(None, [{"n": i} for i in range(3)], limit=5)
    data = appended(data, [{"n": i} for i in range(3, 8)], limit=5)
    assert [e["n"] for e in decode_history(data)] == [3, 4, 5, 6, 7]


def test_appended_cuts_long_reasons_and_replaces_an_unreadable_record() -> None:
    data = appended(b"not json", [{"reason": "x" * 1000}], limit=10)
    (event,) = decode_history(data)
    assert 0 < len(event["reason"]) < 1000
    with pytest.raises(ValueError, match="not a history record"):
        decode_history(b'{"version":1}')


def test_a_full_record_stays_under_zookeepers_request_limit() -> None:
    event = {"time_ms": 1 << 41, "topic": "t" * 249, "partition": 99_999, "from_leader": 1000,
             "leader": 1001, "leader_epoch": 1 << 30, "election": "designated",
             "reason": "r" * 5000}  # fmt: skip
    assert len(appended(None, [event] * 2000, limit=1000)) < 1_000_000


@pytest.fixture
def client(zk_connect: str) -> Iterator[ZkMetadataClient]:
    c = ZkMetadataClient(zk_connect, session_timeout_ms=6000, connection_timeout_ms=10_000)
    c.start()
    yield c
    c.close()


def test_history_is_recorded_per_kind_and_bounded(client: ZkMetadataClient) -> None:
    history = ControllerHistory(client, limit=4)
    tp = TopicPartition("t", 0)
    for epoch in range(6):
        history.election(tp, 1, 2, epoch, "clean", "leader 1 is not alive")
    history.election(tp, 2, -1, 6, "clean", "no live replica")
    history.step_down(tp, 2, 3, 7, "slow for every in-sync follower")
    history.log_dir(zd.LogDirEvent(3, "/d/one", reason="EIO", time_ms=123))
    history.log_dir(zd.LogDirEvent(3))  # Kafka's form, no dir: not history
    history.flush()
    found = client.history()
    assert set(found) == set(HISTORY_KINDS)
    elections = found["leader_elections"]
    assert [e["leader_epoch"] for e in elections] == [3, 4, 5, 6]
    assert elections[-1]["election"] == "offline"
    (down,) = found["slow_leader_step_downs"]
    assert (down["broker"], down["leader"], down["reason"]) == (
        2,
        3,
        "slow for every in-sync follower",
    )
    assert found["log_dir_events"] == [{"time_ms": 123, "broker": 3, "log_dir": "/d/one",
                                        "event": "LogDirFailure", "reason": "EIO"}]  # fmt: skip
    history.flush()  # nothing pending: nothing written
    assert client.zk.get(LEADER_ELECTIONS)[1].version == 0


def test_concurrent_appends_lose_nothing(client: ZkMetadataClient, zk_connect: str) -> None:
    """Two controllers (one finishing its pass after losing office) appending at once: the
    compare-and-set keeps both's events."""
    other = ZkMetadataClient(zk_connect, session_timeout_ms=6000, connection_timeout_ms=10_000)
    other.start()
    try:

        def write(c: ZkMetadataClient, who: str) -> None:
            for i in range(20):
                c.append_history(LOG_DIR_EVENTS, [{"who": who, "i": i}])

        threads = [
            threading.Thread(target=write, args=(c, w)) for c, w in ((client, "a"), (other, "b"))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        other.close()
    events = json.loads(client.zk.get(LOG_DIR_EVENTS)[0])["events"]
    assert sorted((e["who"], e["i"]) for e in events) == sorted(
        (w, i) for w in "ab" for i in range(20)
    )
