"""Client quotas: Kafka's precedence, filters and rate arithmetic as pure functions (no sockets,
a fake clock), then a real broker process: `logkeel quotas` (AlterClientQuotas,
DescribeClientQuotas) and confluent-kafka producers and consumers throttled to their quotas."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import confluent_kafka
import pytest
from click.testing import CliRunner
from kio.schema.alter_client_quotas.v1 import request as alter
from kio.schema.describe_client_quotas.v1 import request as describe
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import f64

from logkeel.cli.broker_requests import Admin, send
from logkeel.cli.main import cli
from logkeel.cluster.client_quotas import (
    FilterComponent,
    QuotaEntity,
    QuotaError,
    apply_changes,
    check_filter,
    entity_key,
    matches,
    parse_entity_key,
    resolve,
)
from logkeel.server.quota_rates import QuotaRates, RateWindow
from logkeel.server.request_time import Timed, with_throttle
from logkeel.testing.rate_clients import Producing
from tests.waiting import wait_until

from ..brokerproc import BrokerProcess

# -- precedence -----------------------------------------------------------------------------------

LEVELS = [
    "users/alice/clients/app",
    "users/alice/clients/<default>",
    "users/alice",
    "users/<default>/clients/app",
    "users/<default>/clients/<default>",
    "users/<default>",
    "clients/app",
    "clients/<default>",
]


def test_the_first_of_kafkas_eight_levels_that_sets_the_quota_applies() -> None:
    quotas = {key: {"producer_byte_rate": float(i + 1)} for i, key in enumerate(LEVELS)}
    for i, key in enumerate(LEVELS):
        found = resolve(quotas, "producer_byte_rate", "alice", "app")
        assert found is not None and (found.entity, found.bound) == (key, i + 1)
        del quotas[key]
    assert resolve(quotas, "producer_byte_rate", "alice", "app") is None


def test_each_quota_key_is_resolved_on_its_own_and_others_fall_to_the_defaults() -> None:
    quotas = {
        "users/alice": {"producer_byte_rate": 100.0},
        "clients/<default>": {"consumer_byte_rate": 50.0, "producer_byte_rate": 7.0},
    }
    produce = resolve(quotas, "producer_byte_rate", "alice", "app")
    fetch = resolve(quotas, "consumer_byte_rate", "alice", "app")
    assert produce is not None and produce.entity == "users/alice"
    assert fetch is not None and fetch.entity == "clients/<default>"
    # bob has no user quota: the client default applies to him.
    bob = resolve(quotas, "producer_byte_rate", "bob", "app")
    assert bob is not None and bob.bound == 7.0


def test_the_level_decides_who_shares_a_rate() -> None:
    # A user's quota is shared by all their clients; a default client quota is each client's.
    user = {"users/alice": {"producer_byte_rate": 1.0}}
    assert resolve(user, "producer_byte_rate", "alice", "a").rate_key == ("alice", "")  # type: ignore[union-attr]
    assert resolve(user, "producer_byte_rate", "alice", "b").rate_key == ("alice", "")  # type: ignore[union-attr]
    default_client = {"clients/<default>": {"producer_byte_rate": 1.0}}
    a = resolve(default_client, "producer_byte_rate", "alice", "a")
    b = resolve(default_client, "producer_byte_rate", "alice", "b")
    assert a is not None and b is not None and a.rate_key != b.rate_key
    per_user_default = {"users/<default>": {"producer_byte_rate": 1.0}}
    assert resolve(per_user_default, "producer_byte_rate", "bob", "x").rate_key == ("bob", "")  # type: ignore[union-attr]


def test_entity_keys_keep_names_with_slashes_apart_from_the_default() -> None:
    for entity in (
        QuotaEntity("a/b", "c%2F", True, True),
        QuotaEntity("<default>", None, True, True),
        QuotaEntity(None, None, False, True),
    ):
        assert parse_entity_key(entity_key(entity)) == entity
    assert entity_key(QuotaEntity("<default>", None, True)) != entity_key(
        QuotaEntity(None, None, True)
    )


def test_bad_entities_keys_and_values_are_refused() -> None:
    with pytest.raises(QuotaError, match="Duplicate"):
        QuotaEntity.of([("user", "a"), ("user", "b")])
    with pytest.raises(QuotaError, match="Unsupported"):
        QuotaEntity.of([("ip", "1.2.3.4")])
    with pytest.raises(QuotaError, match="empty"):
        QuotaEntity.of([])
    with pytest.raises(QuotaError, match="Invalid configuration key"):
        apply_changes({}, [("producer_byte_rat", 1.0)])
    with pytest.raises(QuotaError, match="whole number"):
        apply_changes({}, [("producer_byte_rate", 1.5)])
    with pytest.raises(QuotaError, match="positive"):
        apply_changes({}, [("request_percentage", 0.0)])
    assert apply_changes({"consumer_byte_rate": 5.0}, [("consumer_byte_rate", None)]) == {}
    assert apply_changes({}, [("request_percentage", 12.5)]) == {"request_percentage": 12.5}


def test_describe_filters_match_exact_default_and_any_strictly_or_not() -> None:
    alice_app = QuotaEntity("alice", "app", True, True)
    alice = QuotaEntity("alice", None, True, False)
    default_user = QuotaEntity(None, None, True, False)
    clients = QuotaEntity(None, "app", False, True)
    exact = [FilterComponent("user", 0, "alice")]
    assert matches(alice, exact, strict=True) and matches(alice_app, exact, strict=False)
    assert not matches(alice_app, exact, strict=True)
    assert not matches(clients, exact, strict=False)
    default = [FilterComponent("user", 1)]
    assert matches(default_user, default, True) and not matches(alice, default, True)
    any_user = [FilterComponent("user", 2)]
    assert matches(alice, any_user, True) and matches(default_user, any_user, True)
    assert matches(clients, [], strict=False) and not matches(clients, [], strict=True)
    with pytest.raises(QuotaError, match="Duplicate"):
        check_filter([FilterComponent("user", 2), FilterComponent("user", 1)])
    with pytest.raises(QuotaError):
        check_filter([FilterComponent("user", 0, None)])


# -- rates ------------------------------------------------------------------------------------------


def test_a_first_burst_is_measured_over_the_whole_window_then_throttled_back_to_the_bound() -> None:
    rates = QuotaRates(RateWindow(samples=11, sample_s=1.0))
    key = ("u", "c")
    # 10 s of quota at once passes: the rate counts the window as full (Kafka's windowSize).
    assert rates.record(key, 1000.0, bound=100.0, now=0.0) == 0
    # Over: throttled until 1100 B is 100 B/s of the time really past (11 s), not of the
    # padded window (Kafka's formula would let it send again after 1 s).
    throttle = rates.record(key, 100.0, bound=100.0, now=5.0)
    assert throttle == pytest.approx(6000, abs=1)
    # The throttle never exceeds the whole window.
    assert rates.record(key, 1e9, bound=100.0, now=0.6) == 11_000
    # Samples older than the window are forgotten: the rate falls to nothing.
    assert rates.measure(key, now=30.0) == 0.0
    assert rates.record(key, 100.0, bound=100.0, now=30.0) == 0


def test_steady_sends_below_the_bound_are_never_throttled_and_twice_it_are() -> None:
    rates = QuotaRates(RateWindow())
    throttled = [rates.record(("a", ""), 90.0, 1000.0, now=t / 10) for t in range(300)]
    assert not any(throttled)  # 900 B/s
    over = [rates.record(("b", ""), 200.0, 1000.0, now=t / 10) for t in range(300)]
    assert over[-1] > 0
    rates.unrecord(("b", ""), 1e9, now=30.0)
    assert rates.measure(("b", ""), now=30.0) < 0  # taken back (a throttled fetch's bytes)


# -- a real broker ----------------------------------------------------------------------------------


def _quotas(*args: str) -> Any:
    result = CliRunner().invoke(cli, ["quotas", *args], catch_exceptions=False)
    return result


def test_the_quotas_command_sets_describes_and_deletes_them(broker: BrokerProcess) -> None:
    bs = ["--bootstrap-server", broker.bootstrap]
    done = _quotas(*bs, "--alter", "--entity-type", "users", "--entity-name", "alice",
                   "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")  # fmt: skip
    assert done.exit_code == 0, done.output
    done = _quotas(*bs, "--alter", "--user", "alice", "--client-defaults",
                   "--add-config", "request_percentage=25.5")  # fmt: skip
    assert done.exit_code == 0, done.output
    done = _quotas(*bs, "--alter", "--entity-type", "clients", "--entity-default",
                   "--add-config", "producer_byte_rate=4096")  # fmt: skip
    assert done.exit_code == 0, done.output
    described = json.loads(_quotas(*bs, "--describe", "--json").output)
    assert {json.dumps(d["entity"], sort_keys=True): d["quotas"] for d in described} == {
        '{"user": "alice"}': {"consumer_byte_rate": 2048, "producer_byte_rate": 1024},
        '{"client-id": null, "user": "alice"}': {"request_percentage": 25.5},
        '{"client-id": null}': {"producer_byte_rate": 4096},
    }
    # --entity-type users --entity-name alice: exactly that entity (strict).
    only = json.loads(_quotas(*bs, "--describe", "--entity-type", "users",
                              "--entity-name", "alice", "--json").output)  # fmt: skip
    assert [d["entity"] for d in only] == [{"user": "alice"}]
    table = _quotas(*bs, "--describe").output
    assert "user-principal 'alice'" in table and "producer_byte_rate=1024" in table
    done = _quotas(*bs, "--alter", "--entity-type", "users", "--entity-name", "alice",
                   "--delete-config", "producer_byte_rate,consumer_byte_rate")  # fmt: skip
    assert done.exit_code == 0, done.output
    users = json.loads(_quotas(*bs, "--describe", "--entity-type", "users", "--json").output)
    assert [d["entity"] for d in users] == []  # strict: alice's client default is user+client
    bad = _quotas(*bs, "--alter", "--user", "bob", "--add-config", "producer_byte_rate=1.5")
    assert bad.exit_code == 1 and "INVALID_REQUEST" in bad.output and "whole number" in bad.output


def test_alter_client_quotas_checks_every_entry_and_validate_only_changes_nothing(
    broker: BrokerProcess,
) -> None:
    def entry(user: str | None, key: str, value: float) -> Any:
        return alter.EntryData(
            entity=(alter.EntityData(entity_type="user", entity_name=user),),
            ops=(alter.OpData(key=key, value=f64(value), remove=False),),
        )

    request = alter.AlterClientQuotasRequest(
        entries=(entry("carol", "producer_byte_rate", 10.0), entry("dan", "no_such_quota", 1.0)),
        validate_only=True,
    )
    answer = send(broker.bootstrap, request, client_id="test")
    assert [e.error_code for e in answer.entries] == [ErrorCode.none, ErrorCode.invalid_request]
    twice = describe.ComponentData(entity_type="user", match_type=2, match=None)
    refused = send(
        broker.bootstrap,
        describe.DescribeClientQuotasRequest(components=(twice, twice), strict=False),
        client_id="test",
    )
    assert refused.error_code == ErrorCode.invalid_request and refused.entries is None
    described = json.loads(
        _quotas("--bootstrap-server", broker.bootstrap, "--describe", "--json").output
    )
    assert described == []


# -- throttling real clients --------------------------------------------------------------------------

QUOTA = 256 * 1024  # bytes per second
MEASURED_S = 11.0  # one window of quota.window.num x quota.window.size.seconds (11 x 1 s)


def test_a_producer_is_held_to_its_quota_while_another_client_keeps_its_speed(
    broker: BrokerProcess,
) -> None:
    bs = ["--bootstrap-server", broker.bootstrap]
    done = _quotas(*bs, "--alter", "--entity-type", "clients", "--entity-name", "slow",
                   "--add-config", f"producer_byte_rate={QUOTA}")  # fmt: skip
    assert done.exit_code == 0, done.output
    slow = Producing(broker.bootstrap, "slow", "quota-produce")
    fast = Producing(broker.bootstrap, "fast", "quota-produce")
    for p in (slow, fast):
        p.thread.start()
    try:
        time.sleep(MEASURED_S + 0.5)  # the measurement itself: two producers for one window
    finally:
        for p in (slow, fast):
            p.stop.set()
        for p in (slow, fast):
            p.thread.join(30)
    rate = slow.bytes_by(MEASURED_S) / MEASURED_S
    assert abs(rate - QUOTA) <= 0.1 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA}"
    assert slow.throttles and max(slow.throttles) > 0
    assert not any(fast.throttles)
    fast_rate = fast.bytes_by(MEASURED_S) / MEASURED_S
    assert fast_rate > 3 * QUOTA, f"the unthrottled producer made {fast_rate:.0f} B/s"


def test_an_acks_0_producer_is_muted_to_its_quota(broker: BrokerProcess) -> None:
    done = _quotas("--bootstrap-server", broker.bootstrap, "--alter", "--client", "blind",
                   "--add-config", f"producer_byte_rate={QUOTA}")  # fmt: skip
    assert done.exit_code == 0, done.output
    blind = Producing(broker.bootstrap, "blind", "quota-acks0", acks=0)
    reader = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"})
    blind.thread.start()
    try:
        time.sleep(MEASURED_S)  # the measurement itself: what the broker appended in one window
        _, appended = reader.get_watermark_offsets(
            confluent_kafka.TopicPartition("quota-acks0", 0), timeout=10
        )
    finally:
        blind.stop.set()
        blind.thread.join(30)
        reader.close()
    # No response tells it, yet the connection is muted: the log grows at the quota.
    rate = 1024 * appended / MEASURED_S
    assert abs(rate - QUOTA) <= 0.1 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA}"


def test_a_consumer_is_held_to_its_fetch_quota(broker: BrokerProcess) -> None:
    total = int(QUOTA * MEASURED_S * 2)
    # Small batches: a fetch returns at least one whole batch, so they are its granularity.
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 16384}
    )
    value = b"y" * 1024
    for _ in range(total // 1024):
        while True:
            try:
                producer.produce("quota-fetch", value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    done = _quotas("--bootstrap-server", broker.bootstrap, "--alter", "--user-defaults",
                   "--client", "reader", "--add-config", f"consumer_byte_rate={QUOTA}")  # fmt: skip
    assert done.exit_code == 0, done.output
    throttles: list[int] = []
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "client.id": "reader", "group.id": "quota-reader",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "max.partition.fetch.bytes": 65536,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })  # fmt: skip
    consumer.subscribe(["quota-fetch"])
    received: list[float] = []
    started: float | None = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            now = time.monotonic()
            if started is None:
                started = now  # the group is joined: the measurement starts at the first record
            if now > started + MEASURED_S:
                break
            received.append(now)
    finally:
        consumer.close()
    assert started is not None, "the consumer received nothing"
    rate = 1024 * len(received) / MEASURED_S
    assert abs(rate - QUOTA) <= 0.1 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA}"
    assert throttles and max(throttles) > 0


# -- request time -----------------------------------------------------------------------------------


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_handler_is_charged_for_its_steps_not_its_waits() -> None:
    async def handler() -> str:
        _busy(0.05)
        await asyncio.sleep(0.3)  # parked: a long poll, an append on an IO thread
        _busy(0.05)
        return "done"

    async def failing() -> None:
        _busy(0.02)
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def main() -> None:
        timed = Timed(handler())
        assert await timed == "done"
        assert 0.09 <= timed.spent_s < 0.2
        broken = Timed(failing())
        with pytest.raises(ValueError, match="boom"):
            await broken
        assert broken.spent_s >= 0.02

        async def wait_long() -> None:
            await Timed(asyncio.sleep(10))

        parked = asyncio.ensure_future(wait_long())
        await asyncio.sleep(0.01)
        parked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parked

    asyncio.run(main())


def test_a_throttle_is_written_into_a_response_only_when_longer() -> None:
    from kio.schema.api_versions.v3.response import ApiVersionsResponse
    from kio.static.primitive import i32Timedelta

    plain = ApiVersionsResponse(
        error_code=ErrorCode.none, api_keys=(), throttle_time=i32Timedelta.parse(timedelta(0)),
        supported_features=(), finalized_features_epoch=-1, finalized_features=(),
        zk_migration_ready=False,
    )  # fmt: skip
    throttled = with_throttle(plain, 250)
    assert throttled.throttle_time == timedelta(milliseconds=250)
    assert with_throttle(throttled, 100) is throttled


METADATA = MetadataRequest(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


def first_throttle(busy: Admin, idle: Admin, timeout: float = 60.0) -> timedelta:
    """Metadata requests from ``busy`` and ``idle`` in turn until ``busy`` is throttled (``idle``
    never may be); the throttle time."""

    def throttled() -> timedelta:
        throttle = busy.send(METADATA).throttle_time
        assert idle.send(METADATA).throttle_time == timedelta(0)
        return throttle

    return wait_until(throttled, timeout, "the busy client throttled", interval=0)


def test_a_client_over_its_request_percentage_is_throttled_and_muted(broker: BrokerProcess) -> None:
    done = _quotas("--bootstrap-server", broker.bootstrap, "--alter", "--client", "busy",
                   "--add-config", "request_percentage=0.5")  # fmt: skip
    assert done.exit_code == 0, done.output
    # 0.5% of one second is 5 ms of handler time per second: Metadata in a loop costs more.
    with (
        Admin(broker.bootstrap, client_id="busy") as busy,
        Admin(broker.bootstrap, client_id="idle") as idle,
    ):
        throttle = first_throttle(busy, idle)
        # The connection reads nothing more until the throttle time is over (KIP-219).
        started = time.monotonic()
        busy.send(METADATA)
        assert time.monotonic() - started >= throttle.total_seconds() * 0.9
