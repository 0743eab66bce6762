"""KIP-848 group configs (the GROUP config resource, type 32): the checks without sockets, then
kafka-python's admin client against a `logkeel serve` process: set, described with their
sources, refused outside the broker's bounds (INVALID_CONFIG), kept across a restart, and in
effect: a member that stops heartbeating is removed after the group's session timeout, not the
broker's, and heartbeats are told the group's interval."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import kafka.admin as kp
import pytest
from kio.schema.errors import ErrorCode

from logkeel.server.group.consumer_group import ConsumerGroupSettings
from logkeel.server.group.group_configs import (
    GroupConfigError,
    apply_group_config_ops,
    group_timings,
    validate_group_configs,
)
from logkeel.server.protocol import ApiKey
from tests.brokerproc import BrokerProcess
from tests.server.groups_clients import create_topic
from tests.server.test_security import _call
from tests.waiting import wait_until

SETTINGS = ConsumerGroupSettings(
    session_timeout_ms=30_000,
    heartbeat_interval_ms=1000,
    session_timeout_bounds_ms=(3000, 60_000),
    heartbeat_interval_bounds_ms=(200, 5000),
)
SESSION, INTERVAL = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


def test_group_config_checks() -> None:
    validate_group_configs(SETTINGS, {SESSION: "3000", INTERVAL: "200"})
    for overrides, message in [
        ({SESSION: "2999"}, "greater than or equal to group.consumer.min.session.timeout.ms"),
        ({SESSION: "60001"}, "less than or equal to group.consumer.max.session.timeout.ms"),
        ({INTERVAL: "5001"}, "less than or equal to group.consumer.max.heartbeat.interval.ms"),
        ({SESSION: "4000", INTERVAL: "4000"}, "must be less than consumer.session.timeout.ms"),
        ({SESSION: "soon"}, "Not a number of type INT"),
        ({"share.session.timeout.ms": "5000"}, "Unknown group config name"),
    ]:
        with pytest.raises(GroupConfigError, match=message):
            validate_group_configs(SETTINGS, overrides)
    assert apply_group_config_ops(
        {SESSION: "5000"}, [(INTERVAL, 0, "300"), (SESSION, 1, None)]
    ) == {INTERVAL: "300"}
    with pytest.raises(GroupConfigError, match="not LIST"):
        apply_group_config_ops({}, [(SESSION, 2, "1")])
    assert group_timings(SETTINGS, {}) == (30_000, 1000)
    assert group_timings(SETTINGS, {SESSION: "5000", INTERVAL: "300"}) == (5000, 300)
    # An override the bounds no longer admit falls back to the broker's value.
    assert group_timings(SETTINGS, {SESSION: "100"}) == (30_000, 1000)


OVERRIDES = {
    "group.consumer.min.session.timeout.ms": "3000",
    "group.consumer.session.timeout.ms": "30000",
    "group.consumer.min.heartbeat.interval.ms": "200",
    "group.consumer.heartbeat.interval.ms": "1000",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "broker", overrides=OVERRIDES) as b:
        yield b


def admin(broker: BrokerProcess) -> kp.KafkaAdminClient:
    return kp.KafkaAdminClient(bootstrap_servers=broker.bootstrap)


def alter(client: kp.KafkaAdminClient, group: str, configs: dict[str, str]) -> str:
    """kafka-python's answer for the group: "OK" or the error it names."""
    resource = kp.ConfigResource(kp.ConfigResourceType.GROUP, group, configs=configs)
    answer = client.alter_configs([resource], incremental=True, raise_on_unknown=False)
    return str(answer["group"][group])


def described(client: kp.KafkaAdminClient, group: str) -> dict[str, tuple[str, str]]:
    """Each config's (value, source) as kafka-python names them."""
    resource = kp.ConfigResource(kp.ConfigResourceType.GROUP, group)
    configs = client.describe_configs([resource], config_filter="all")["group"][group]
    return {name: (c["value"], c["config_source"]) for name, c in configs.items()}


class RawMember:
    """A consumer-protocol member that heartbeats only when told to."""

    def __init__(self, port: int, group: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.group, self.member_id = group, str(uuid.uuid4())

    def join(self) -> Any:
        r = _call(
            self.sock,
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=0,
            rebalance_timeout=timedelta(seconds=30),
            subscribed_topic_names=("t",),
            topic_partitions=(),
        )
        assert r.error_code == ErrorCode.none, r
        return r


def members(port: int, group: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        r = _call(
            s,
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            1,
            group_ids=(group,),
            include_authorized_operations=False,
        )
    g = r.groups[0]
    return len(g.members) if g.error_code == ErrorCode.none else 0


def test_group_configs_set_described_refused_kept_and_in_effect(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t", 1)
    client = admin(broker)
    try:
        static = "STATIC_BROKER_CONFIG"
        assert described(client, "g") == {SESSION: ("30000", static), INTERVAL: ("1000", static)}
        assert alter(client, "g", {SESSION: "3000", INTERVAL: "300"}) == "OK"
        own = "DYNAMIC_GROUP_CONFIG"
        assert described(client, "g") == {SESSION: ("3000", own), INTERVAL: ("300", own)}
        refused = alter(client, "g", {SESSION: "2000"})
        assert "InvalidConfigurationError" in refused and "group.consumer.min" in refused
        assert "Unknown group config" in alter(client, "g", {"share.record.lock.duration.ms": "1"})
        assert described(client, "g")[SESSION] == ("3000", own)
    finally:
        client.close()
    broker.restart()
    client = admin(broker)
    try:
        own = "DYNAMIC_GROUP_CONFIG"
        assert described(client, "g") == {SESSION: ("3000", own), INTERVAL: ("300", own)}
    finally:
        client.close()
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    member = RawMember(port, "g")
    joined = member.join()
    assert joined.heartbeat_interval == timedelta(milliseconds=300)
    started = time.monotonic()
    # It never heartbeats again: gone after the group's 3 s, long before the broker's 30 s.
    wait_until(lambda: members(port, "g") == 0, 20, "the silent member removed")
    assert time.monotonic() - started < 15
    member.sock.close()
