"""The console's decisions without sockets: which records a read_committed reader keeps, what
the samplers remember (dead brokers kept, leader changes, rates, lag trend)."""

from __future__ import annotations

import subprocess
import sys

from logkeel.console.actions import (
    TOKEN_HEADER,
    ActionRefused,
    allowed_hosts,
    check_origin,
    parse_action,
)
from logkeel.console.browse import committed_records, shown_bytes
from logkeel.console.history import history_rows
from logkeel.console.samplers import BrokerRoster, LagHistory, LeaderChanges, OffsetRates
from logkeel.records.builder import build_batch, build_control_batch
from logkeel.records.control import ControlRecordType
from logkeel.records.record import iter_batches
from logkeel.storage.topic_partition import TopicPartition


def _log() -> bytes:
    """offsets 0: plain; 1: pid 7 (aborted); 2: pid 8 (committed); 3: abort marker of 7;
    4: pid 7 again (a later, committed transaction); 5: commit of 8; 6: commit of 7."""

    def txn(offset: int, pid: int, value: bytes) -> bytes:
        return build_batch([(0, None, value, ())], base_offset=offset, producer_id=pid,
                           producer_epoch=0, base_sequence=0, is_transactional=True)  # fmt: skip

    def marker(offset: int, pid: int, kind: ControlRecordType) -> bytes:
        return build_control_batch(kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                   timestamp=0, base_offset=offset)  # fmt: skip

    return b"".join([
        build_batch([(0, None, b"plain", ())], base_offset=0),
        txn(1, 7, b"aborted"), txn(2, 8, b"kept-8"),
        marker(3, 7, ControlRecordType.ABORT), txn(4, 7, b"kept-7"),
        marker(5, 8, ControlRecordType.COMMIT), marker(6, 7, ControlRecordType.COMMIT),
    ])  # fmt: skip


def test_read_committed_drops_aborted_transactions_and_markers_only() -> None:
    batches = [(h, rs) for _, h, rs in iter_batches(_log())]
    kept = committed_records(batches, aborted=[(7, 1)])
    assert [(r.offset, r.value) for r in kept] == [(0, b"plain"), (2, b"kept-8"), (4, b"kept-7")]
    # Without the leader's list of aborted transactions nothing but the markers is dropped.
    assert [r.offset for r in committed_records(batches, aborted=[])] == [0, 1, 2, 4]


def test_bytes_are_shown_as_text_when_utf8_and_hex_always() -> None:
    assert shown_bytes(b"caf\xc3\xa9") == {"text": "café", "hex": "636166c3a9", "size": 5}
    assert shown_bytes(b"\xff") == {"text": None, "hex": "ff", "size": 1}
    assert shown_bytes(None) is None


def test_a_broker_that_left_the_metadata_is_kept_and_shown_dead() -> None:
    roster = BrokerRoster()
    b1 = {"id": 1, "host": "h", "port": 1, "log_dirs": [{"log_dir": "/d"}]}
    b2 = {"id": 2, "host": "h", "port": 2, "log_dirs": []}
    roster.observe(1000, [b1, b2])
    shown = roster.observe(2000, [b2])
    assert [(b["id"], b["alive"], b["last_seen_ms"]) for b in shown] == [
        (1, False, 1000), (2, True, 2000)
    ]  # fmt: skip
    assert shown[0]["log_dirs"] == []  # what a dead broker's dirs are is not known
    assert roster.addresses() == ["h:1", "h:2"]
    assert [b["alive"] for b in roster.mark_all_unreachable()] == [False, False]
    assert roster.observe(3000, [b1, b2])[0]["alive"]


def test_leader_changes_are_those_seen_between_two_polls() -> None:
    changes = LeaderChanges(limit=2)
    part = {"topic": "t", "partition": 0, "isr": [1, 2]}
    changes.observe(1, [{**part, "leader": 1, "leader_epoch": 0}])
    changes.observe(2, [{**part, "leader": 1, "leader_epoch": 0}])
    assert list(changes.changes) == []  # the first poll is no election
    changes.observe(3, [{**part, "leader": 2, "leader_epoch": 1}])
    changes.observe(4, [{**part, "leader": -1, "leader_epoch": 2}])
    changes.observe(5, [{**part, "leader": 1, "leader_epoch": 3}])
    assert [(c["time_ms"], c["from_leader"], c["to_leader"]) for c in changes.changes] == [
        (5, -1, 1),
        (4, 2, -1),
    ]  # fmt: skip (newest first, bounded)


def test_rates_per_topic_and_leader_from_sampled_log_end_offsets() -> None:
    rates = OffsetRates(window_ms=10_000)
    rates.add(0, {("a", 0): (0, 1), ("a", 1): (10, 2), ("b", 0): (5, 1)})
    rates.add(2000, {("a", 0): (100, 1), ("a", 1): (10, 2), ("b", 0): (5, 1)})
    rates.add(4000, {("a", 0): (100, 1), ("a", 1): (50, 2)})  # b-0's offset unknown
    series = rates.series()
    assert series["topics"] == {"a": [[2000, 50.0], [4000, 20.0]], "b": [[2000, 0.0]]}
    assert series["brokers"] == {"1": [[2000, 50.0], [4000, 0.0]], "2": [[2000, 0.0], [4000, 20.0]]}
    rates.add(20_000, {("a", 0): (100, 1)})  # the first samples fall out of the window
    assert rates.series()["topics"] == {}


def test_lag_trend_keeps_the_last_points() -> None:
    lags = LagHistory(points=2)
    for t, lag in ((1, 5), (2, 3), (3, 0)):
        lags.add(t, {"g": lag})
    assert lags.trend("g") == [[2, 3], [3, 0]]
    assert lags.trend("unknown") == []


def test_the_history_is_one_list_newest_first_each_row_saying_what_and_why() -> None:
    rows = history_rows({
        "leader_elections": [
            {"time_ms": 10, "topic": "t", "partition": 0, "from_leader": 1, "leader": 2,
             "leader_epoch": 5, "election": "clean", "reason": "leader 1 is not alive"},
            {"time_ms": 40, "topic": "t", "partition": 1, "from_leader": 3, "leader": -1,
             "leader_epoch": 9, "election": "offline", "reason": "no live replica"},
        ],
        "slow_leader_step_downs": [
            {"time_ms": 20, "topic": "t", "partition": 0, "broker": 2, "leader": 3,
             "leader_epoch": 6, "reason": "slow for every in-sync follower"},
        ],
        "log_dir_events": [
            {"time_ms": 30, "broker": 2, "log_dir": "/d/a", "event": "LogDirFailure",
             "reason": "EIO"},
            {"time_ms": 35, "broker": 2, "log_dir": "/d/a", "event": "LogDirOnline",
             "reason": "back online"},
        ],
    })  # fmt: skip
    assert [(r["time_ms"], r["kind"], r["broker"], r["subject"]) for r in rows] == [
        (40, "offline election", 3, "t-1"),
        (35, "log dir back online", 2, "/d/a"),
        (30, "log dir failed", 2, "/d/a"),
        (20, "slow leader stepped down", 2, "t-0"),
        (10, "clean election", 1, "t-0"),
    ]
    assert rows[0]["change"] == "leader 3 -> none (offline), epoch 9"
    assert rows[3]["change"] == "leader 2 -> 3, epoch 6"
    assert rows[3]["reason"] == "slow for every in-sync follower"
    assert history_rows({}) == []
    assert len(history_rows({"leader_elections": [{"time_ms": i} for i in range(9)]}, limit=4)) == 4


def test_each_action_is_parsed_and_must_repeat_its_subject() -> None:
    dir_online = parse_action("log-dir-online", {"broker": "2", "log_dir": "/d/a",
                                                 "confirm": "2:/d/a"})  # fmt: skip
    assert (dir_online.broker, dir_online.log_dir, dir_online.subject) == (2, "/d/a", "2:/d/a")
    moved = parse_action("reassignment", {"topic": "t", "partition": 3, "replicas": "3, 1,2",
                                          "confirm": "t-3"})  # fmt: skip
    assert (moved.tp, moved.replicas) == (TopicPartition("t", 3), (3, 1, 2))
    designated = parse_action("designated-election", {"topic": "t", "partition": 0,
                                                      "replica": 4, "force": True,
                                                      "confirm": "t-0"})  # fmt: skip
    assert (designated.replica, designated.force) == (4, True)
    for kind, body, status, says in [
        ("reboot", {}, 404, "no action"),
        ("reassignment", [], 400, "JSON object"),
        ("reassignment", {"topic": "t", "partition": 0, "replicas": "1,1", "confirm": "t-0"},
         400, "replicas"),
        ("reassignment", {"topic": "t", "partition": 0, "replicas": [], "confirm": "t-0"},
         400, "replicas"),
        ("designated-election", {"topic": "t", "partition": 0, "confirm": "t-0"}, 400,
         "replica"),
        ("log-dir-online", {"broker": "x", "log_dir": "/d"}, 400, "broker"),
        ("log-dir-online", {"broker": 1, "log_dir": ""}, 400, "log_dir"),
        ("preferred-election", {"topic": "t", "partition": 0, "confirm": "t-1"}, 400,
         "confirm='t-0'"),
    ]:  # fmt: skip
        try:
            parse_action(kind, body)
        except ActionRefused as exc:
            assert exc.status == status and says in str(exc), (kind, body, str(exc))
        else:
            raise AssertionError(f"{kind} {body} was accepted")


def test_only_the_pages_own_request_may_act() -> None:
    hosts = allowed_hosts("127.0.0.1", 8080)
    assert hosts == {"127.0.0.1:8080", "localhost:8080", "[::1]:8080"}
    assert allowed_hosts("0.0.0.0", 8080) is None
    assert allowed_hosts("console.example", 80) == {"console.example:80"}
    good = {TOKEN_HEADER: "tok", "host": "localhost:8080", "origin": "http://localhost:8080"}
    assert check_origin(good, "tok", hosts) is None
    assert "token" in str(check_origin({**good, TOKEN_HEADER: "x"}, "tok", hosts))
    # A DNS-rebound name: Origin and Host agree, but it is not the console's address.
    rebound = {**good, "host": "evil.example:8080", "origin": "http://evil.example:8080"}
    assert "Host" in str(check_origin(rebound, "tok", hosts))
    assert check_origin(rebound, "tok", None) is None  # listening everywhere: the token decides
    assert "Origin" in str(check_origin({**good, "origin": "http://localhost:9999"}, "tok", hosts))
    no_origin = {k: v for k, v in good.items() if k != "origin"}
    assert "Origin" in str(check_origin(no_origin, "tok", hosts))


def test_the_console_does_not_depend_on_the_cli() -> None:
    """Its requests come from admin/, below both: no CLI module (whose helpers end the process)
    is loaded with the console's app."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, logkeel.console.app; "
         "print(sorted(m for m in sys.modules if m.startswith('logkeel.cli')))"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    assert loaded == "[]"
