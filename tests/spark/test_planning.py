"""Offset planning and option parsing on their own (no Spark job, no broker)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logkeel.spark import options as opts
from logkeel.spark.kafka_source import OffsetRange, from_json, rate_limit, split_ranges, to_json
from logkeel.spark.session import JavaMissingError, require_java


def test_split_ranges_leaves_small_ranges_whole_and_cuts_large_ones():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 5, 15), OffsetRange("t", 2, 0, 10)]
    out = split_ranges(ranges, 10)
    assert [r for r in out if r.partition != 0] == ranges[1:]
    big = [r for r in out if r.partition == 0]
    assert len(big) == 8 and [r.size for r in big] == [125] * 8
    assert len(out) == 10


def test_split_ranges_without_min_partitions_drops_only_empty_ranges():
    ranges = [OffsetRange("t", 0, 3, 3), OffsetRange("t", 1, 0, 4)]
    assert split_ranges(ranges, None) == [ranges[1]]
    assert split_ranges(ranges, 1) == [ranges[1]]


@given(
    sizes=st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    min_partitions=st.none() | st.integers(1, 64),
)
def test_split_ranges_covers_every_offset_once(sizes, min_partitions):
    ranges = [OffsetRange("t", p, 100 * p, 100 * p + n) for p, n in enumerate(sizes)]
    out = split_ranges(ranges, min_partitions)
    for r in ranges:
        pieces = sorted((x for x in out if x.partition == r.partition), key=lambda x: x.from_offset)
        covered = [o for x in pieces for o in range(x.from_offset, x.until_offset)]
        assert covered == list(range(r.from_offset, r.until_offset))
        assert all(x.size > 0 for x in pieces)


@given(
    backlog=st.dictionaries(st.integers(0, 5), st.integers(0, 10_000), min_size=1),
    limit=st.integers(1, 5000),
)
def test_rate_limit_admits_about_the_limit_and_starves_no_partition(backlog, limit):
    begin = {("t", p): 1000 for p in backlog}
    latest = {("t", p): 1000 + n for p, n in backlog.items()}
    end = rate_limit(limit, begin, latest)
    admitted = {tp: end[tp] - begin[tp] for tp in latest}
    assert all(0 <= admitted[tp] <= latest[tp] - begin[tp] for tp in latest)
    waiting = [tp for tp in latest if latest[tp] > begin[tp]]
    assert all(admitted[tp] >= 1 for tp in waiting)  # every partition with a backlog moves
    # Rounding up small shares can exceed the limit by at most one record per partition.
    assert sum(admitted.values()) <= limit + len(waiting)
    if sum(latest[tp] - begin[tp] for tp in latest) <= limit:
        assert end == latest


def test_offsets_json_round_trips_in_sparks_shape():
    offsets = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    assert to_json(offsets) == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert from_json(to_json(offsets)) == offsets


def test_topic_selection():
    assert opts.TopicSelection.parse({"subscribe": " a, b ,"}).topics == ("a", "b")
    pattern = opts.TopicSelection.parse({"subscribepattern": "ord.*"})
    assert pattern.matches("orders") and not pattern.matches("my-orders")
    assign = opts.TopicSelection.parse({"assign": '{"a":[1,0],"b":[2]}'})
    assert assign.assigned == (("a", 0), ("a", 1), ("b", 2))
    assert assign.selects("a", 1) and not assign.selects("a", 2)
    everything = opts.TopicSelection.parse({}, required=False)
    assert everything.selects("anything", 9)
    with pytest.raises(opts.OptionError, match="must be specified"):
        opts.TopicSelection.parse({})
    with pytest.raises(opts.OptionError, match="only one"):
        opts.TopicSelection.parse({"subscribe": "a", "subscribepattern": "b"})
    with pytest.raises(opts.OptionError, match="assign"):
        opts.TopicSelection.parse({"assign": '{"a":[true]}'})


def test_offset_specs():
    spec = opts.parse_offsets(
        {"startingoffsets": '{"a":{"0":23,"1":-2}}'}, "startingOffsets", "earliest"
    )
    assert spec.for_partition("a", 0) == 23 and spec.for_partition("a", 1) == opts.EARLIEST
    assert spec.for_partition("a", 9) == opts.EARLIEST  # left out: from the start
    ending = opts.parse_offsets({}, "endingOffsets", "latest", allow_earliest=False)
    assert ending.for_partition("x", 0) == opts.LATEST
    with pytest.raises(opts.OptionError, match="latest"):
        opts.parse_offsets(
            {"startingoffsets": '{"a":{"0":-1}}'}, "startingOffsets", "earliest", allow_latest=False
        )
    with pytest.raises(opts.OptionError, match="negative"):
        opts.parse_offsets({"startingoffsets": '{"a":{"0":-3}}'}, "startingOffsets", "earliest")
    with pytest.raises(opts.OptionError, match="expected"):
        opts.parse_offsets({"startingoffsets": "soon"}, "startingOffsets", "earliest")
    times = opts.parse_timestamps({"startingoffsetsbytimestamp": '{"a":{"0":1000}}'}, "starting")
    assert times.for_partition("a", 0) == 1000 and times.for_partition("a", 1) is None
    single = opts.parse_timestamps(
        {"startingtimestamp": "5", "startingoffsetsbytimestamp": "{}"}, "starting"
    )
    assert single.for_partition("z", 3) == 5


def test_kafka_params_strip_the_prefix_and_refuse_what_spark_refuses():
    params = opts.kafka_params(
        {"kafka.bootstrap.servers": "h:1", "kafka.client.id": "c", "subscribe": "t"}
    )
    assert params == {"bootstrap.servers": "h:1", "client.id": "c"}
    with pytest.raises(opts.OptionError, match="enable.auto.commit"):
        opts.kafka_params({"kafka.enable.auto.commit": "true"})


def test_kafka_client_rack_reaches_the_consumers_of_the_tasks():
    """KIP-392: ``kafka.client.rack`` is passed to the consumers that read the ranges (the
    brokers' replica.selector.class then sends them to their rack's replica), and librdkafka
    takes it: an unknown setting would fail to build the consumer."""
    from confluent_kafka import Consumer

    from logkeel.spark.kafka_client import consumer_config
    from logkeel.spark.kafka_source import _Planner
    from logkeel.spark.schema import kafka_schema

    options = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    planner = _Planner({**options, "kafka.client.rack": "r2"}, kafka_schema(), streaming=False)
    config = consumer_config(dict(planner.settings.params), planner.settings.group_prefix)
    assert config["client.rack"] == "r2"
    Consumer(config).close()
    # Unset: librdkafka's default, no rack (the leader serves every fetch).
    plain = _Planner(options, kafka_schema(), streaming=False)
    assert "client.rack" not in consumer_config(dict(plain.settings.params))


def test_missing_java_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissingError, match="openjdk-17-jre-headless"):
        require_java()


def test_min_offsets_per_trigger_waits_until_enough_records_or_the_delay():
    from logkeel.spark.trigger_limits import MinTrigger

    now = 1_700_000_000_000
    t = MinTrigger(100, max_delay_ms=5000)
    assert not t.skip(0, now)  # a query's first trigger always runs
    assert t.skip(99, now + 1000)  # too few, too soon
    assert not t.skip(100, now + 1500)  # enough: runs, and the delay counts from here
    assert t.skip(10, now + 6000)
    assert not t.skip(10, now + 6500)  # 5 s since the last batch: runs with what there is
    assert t.last_trigger_ms == now + 6500


@pytest.mark.parametrize(
    ("text", "ms"),
    [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("250", 250), ("2 min", 120_000),
     ("1h", 3_600_000), ("1d", 86_400_000)],
)  # fmt: skip
def test_max_trigger_delay_takes_spark_durations(text, ms):
    from logkeel.spark.trigger_limits import duration_ms

    assert duration_ms("maxTriggerDelay", text) == ms


@pytest.mark.parametrize("text", ["", "soon", "5 weeks", "-1s", "1.5s"])
def test_max_trigger_delay_refuses_what_is_not_a_duration(text):
    from logkeel.spark.trigger_limits import duration_ms

    with pytest.raises(opts.OptionError, match="maxTriggerDelay"):
        duration_ms("maxTriggerDelay", text)


JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="{}";'
)


def test_jaas_config_becomes_librdkafka_credentials():
    from logkeel.spark.kafka_credentials import portable

    params = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS.format('p\\"w')}
    out = portable(params)
    assert out == {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": 'p"w'}
    plain = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=a password=b;"
    )
    assert portable({"sasl.jaas.config": plain})["sasl.mechanism"] == "PLAIN"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"sasl.jaas.config": "nonsense"}, "must look like"),
        ({"sasl.jaas.config": JAAS.replace('password="{}"', "")}, "username and a password"),
        ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS}, "does not go with"),
        ({"sasl.password": "x", "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": JAAS},
         "not both"),
        ({"ssl.ca.location": "/nonexistent/ca.pem"}, "cannot read /nonexistent/ca.pem on the driver"),
    ],
)  # fmt: skip
def test_bad_credentials_options_are_refused_without_quoting_the_secret(params, message):
    from logkeel.spark.kafka_credentials import portable

    with pytest.raises(opts.OptionError, match=message) as failure:
        portable({k: v.replace("{}", "s3cret") for k, v in params.items()})
    assert "s3cret" not in str(failure.value)


def test_driver_files_travel_as_their_content(tmp_path):
    from logkeel.spark.kafka_credentials import portable

    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    out = portable({"ssl.ca.location": str(ca), "security.protocol": "SSL"})
    assert out == {"ssl.ca.pem": ca.read_text(), "security.protocol": "SSL"}


def test_settings_reprs_leave_out_the_client_settings():
    from logkeel.spark.kafka_sink import SinkSettings
    from logkeel.spark.kafka_source import ReadSettings

    params = (("sasl.password", "s3cret"),)
    assert "s3cret" not in repr(ReadSettings(params, True, 1000, None))
    assert "s3cret" not in repr(SinkSettings(params, "t", False, False, False))


def _loss(topic, from_offset, time_ms, partition=0):
    from logkeel.cluster.zk_data import ElectionLoss
    from logkeel.storage.topic_partition import TopicPartition

    return ElectionLoss(TopicPartition(topic, partition), 2, 5, from_offset, {1: 7}, "why", time_ms)


def test_the_latest_election_loss_that_explains_a_truncation_is_named():
    from logkeel.spark.election_losses import describe, matching_loss

    losses = [_loss("t", 10, 1000), _loss("t", 30, 2000), _loss("t", 80, 3000), _loss("u", 5, 9)]
    assert matching_loss(losses, "t", 0, 50) == losses[1]  # the one at 80 cut nothing below 50
    assert matching_loss(losses, "t", 0, 5) is None
    assert matching_loss(losses, "t", 1, 50) is None
    text = describe(losses[1])
    assert "broker 2 leader at epoch 5 from offset 30" in text and "broker 1 held 7 more" in text
    assert "from its log end (not reported)" in describe(_loss("t", -1, 0))
