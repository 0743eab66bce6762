"""Replication throttles, pure parts: the throttled-replica lists, the dynamic broker configs'
changes, and the quota's wait (no sockets)."""

from __future__ import annotations

import pytest

from logkeel.cluster.dynamic_broker_configs import altered, check, effective, rate
from logkeel.config.throttled_replicas import ThrottledReplicas, ThrottledReplicasFormat
from logkeel.server.quota_rates import RateWindow
from logkeel.server.replica.replication_quota import ReplicationQuota, ReplicationThrottles

LEADER = "leader.replication.throttled.rate"


def test_throttled_replica_lists_are_kafkas_format() -> None:
    listed = ThrottledReplicas.parse(["0:1", " 1 : 2 "])
    assert listed.covers(0, 1) and listed.covers(1, 2)
    assert not listed.covers(0, 2)
    assert ThrottledReplicas.parse(["*"]).covers(7, 9)
    assert not ThrottledReplicas.parse([]).any
    fmt = ThrottledReplicasFormat()
    assert fmt.check(["0:1"]) is None
    for bad in (["0-1"], ["*", "0:1"], ["a:b"]):
        assert fmt.check(bad) is not None, bad


def test_dynamic_changes_set_delete_and_replace() -> None:
    assert altered({}, [(LEADER, 0, "1000")], incremental=True) == {LEADER: "1000"}
    assert altered({LEADER: "1000"}, [(LEADER, 1, None)], incremental=True) == {}
    # The legacy AlterConfigs replaces the whole set.
    assert altered({LEADER: "1"}, [], incremental=False) == {}
    with pytest.raises(ValueError, match="LONG"):
        altered({}, [(LEADER, 0, "fast")], incremental=True)
    with pytest.raises(ValueError, match="at least 0"):
        altered({}, [(LEADER, 0, "-1")], incremental=True)
    with pytest.raises(ValueError, match="SET and DELETE"):
        altered({}, [(LEADER, 2, "1")], incremental=True)
    assert check("log.retention.ms", "1") is not None
    assert effective({LEADER: "5"}, {LEADER: "9", "x": "1"}) == {LEADER: "5", "x": "1"}
    assert rate({}, LEADER) is None and rate({LEADER: "10"}, LEADER) == 10.0


def test_the_quota_waits_once_over_its_bound_and_not_before() -> None:
    q = ReplicationQuota(RateWindow(samples=2, sample_s=1.0))
    assert q.throttle_ms(0.0) == 0
    q.record(10_000, 0.0)  # unbounded: nothing charged
    assert q.throttle_ms(0.1) == 0
    q.set_bound(1000.0)
    q.record(500, 0.0)
    assert q.throttle_ms(0.5) == 0  # 500 bytes over the 2 s window: within 1000/s
    q.record(5000, 0.6)
    wait = q.throttle_ms(0.7)
    assert 1000 <= wait <= 2000  # 5500 bytes at 1000/s need ~5.5 s, capped at the window
    assert q.throttle_ms(10.0) == 0  # the samples have passed


def test_throttles_follow_the_configs_in_effect() -> None:
    t = ReplicationThrottles()
    t.configure({LEADER: "100", "follower.replication.throttled.rate": "200"})
    assert (t.leader.bound, t.follower.bound) == (100.0, 200.0)
    t.configure({})
    assert (t.leader.bound, t.follower.bound) == (None, None)
