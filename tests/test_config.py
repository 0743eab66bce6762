"""Broker and topic configs: Kafka's defaults, precedence rules, .properties parsing, validation."""

from __future__ import annotations

import logging
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.config import (
    BROKER_CONFIG_DEF,
    LONG_MAX,
    TOPIC_CONFIG_DEF,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    Listener,
    TopicConfig,
    broker_synonyms,
    config_reference,
    load_properties,
    parse_listener,
    parse_properties,
    validate_topic_overrides,
)
from logkeel.config.properties import escape_property
from logkeel.config.types import parse_value

HOUR_MS = 3_600_000


def write(tmp_path: Path, text: str, name: str = "server.properties") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---- defaults ---------------------------------------------------------------------------------

# Apache Kafka's documented defaults (4.0 where it changed them: KIP-1030).
KAFKA_DEFAULTS = {
    "message.max.bytes": 1048588,
    "socket.request.max.bytes": 104857600,
    "log.segment.bytes": 1073741824,
    "log.roll.hours": 168,
    "log.roll.ms": None,
    "log.index.size.max.bytes": 10485760,
    "log.index.interval.bytes": 4096,
    "log.retention.hours": 168,
    "log.retention.minutes": None,
    "log.retention.ms": None,
    "log.retention.bytes": -1,
    "log.retention.check.interval.ms": 300000,
    "log.segment.delete.delay.ms": 60000,
    "log.flush.interval.messages": 2**63 - 1,
    "log.flush.interval.ms": None,
    "log.flush.scheduler.interval.ms": 2**63 - 1,
    "log.flush.offset.checkpoint.interval.ms": 60000,
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.before.max.ms": 2**63 - 1,
    "log.message.timestamp.after.max.ms": 3600000,
    "compression.type": "producer",
    "log.cleanup.policy": ["delete"],
    "num.recovery.threads.per.data.dir": 2,
    "num.partitions": 1,
    "default.replication.factor": 1,
    "auto.create.topics.enable": True,
    "delete.topic.enable": True,
    "min.insync.replicas": 1,
    "unclean.leader.election.enable": False,
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.max.bytes": 1048576,
    "fetch.max.bytes": 57671680,
    "offsets.topic.num.partitions": 50,
    "offsets.retention.minutes": 10080,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "advertised.listeners": None,
    "log.dirs": None,
}


@pytest.mark.parametrize(("name", "expected"), sorted(KAFKA_DEFAULTS.items()))
def test_defaults_match_kafka(name: str, expected: object) -> None:
    cfg = BrokerConfig()
    assert cfg.get(name) == expected
    assert BROKER_CONFIG_DEF[name].default == expected


def test_logkeel_deviations_and_new_settings_have_documented_defaults() -> None:
    cfg = BrokerConfig()
    assert cfg.node_id == 0 and cfg.broker_id == 0
    assert cfg.log_dirs == ["./logkeel-data"]
    assert cfg.listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert cfg.advertised_listeners == cfg.listeners
    assert cfg.offsets_topic_replication_factor == 1
    assert cfg.producer_state_snapshot_interval_ms == 30000
    assert cfg.log_startup_validation == "lazy"
    assert cfg.log_startup_validation_rate_bytes_per_sec == 50 * 1024 * 1024
    assert cfg.log_recovery_checkpoint_interval_ms == 30000
    for name in ("node.id", "log.dir", "listeners", "offsets.topic.replication.factor"):
        assert "logkeel:" in BROKER_CONFIG_DEF[name].doc
    for name in (
        "producer.state.snapshot.interval.ms",
        "log.startup.validation",
        "log.startup.validation.rate.bytes.per.sec",
        "log.recovery.checkpoint.interval.ms",
    ):
        assert BROKER_CONFIG_DEF[name].doc.startswith("logkeel")


def test_every_default_is_valid_and_survives_its_string_form() -> None:
    broker = BrokerConfig()
    rows = {row.name: row.value for row in broker.describe()}
    rows.update({row.name: row.value for row in TopicConfig.from_broker(broker).describe()})
    for definition in (BROKER_CONFIG_DEF, TOPIC_CONFIG_DEF):
        for key in definition.values():
            assert key.doc, key.name
            if key.default is None:
                assert rows[key.name] is None, key.name
                continue
            if key.validator is not None:
                assert key.validator.check(key.default) is None, key.name
            assert key.parse(rows[key.name]) == key.default, key.name


def test_topic_defaults_match_kafka_topic_defaults() -> None:
    topic = TopicConfig.from_broker(BrokerConfig())
    expected = {
        "segment.bytes": 1073741824,
        "segment.ms": 604800000,
        "segment.index.bytes": 10485760,
        "index.interval.bytes": 4096,
        "retention.ms": 604800000,
        "retention.bytes": -1,
        "flush.messages": LONG_MAX,
        "flush.ms": LONG_MAX,
        "max.message.bytes": 1048588,
        "message.timestamp.type": "CreateTime",
        "cleanup.policy": ["delete"],
        "compression.type": "producer",
        "min.insync.replicas": 1,
        "unclean.leader.election.enable": False,
        "file.delete.delay.ms": 60000,
        "message.timestamp.before.max.ms": LONG_MAX,
        "message.timestamp.after.max.ms": 3600000,
        "min.cleanable.dirty.ratio": 0.5,
        "delete.retention.ms": 86400000,
    }
    for name, value in expected.items():
        assert topic.get(name) == value, name
        assert TOPIC_CONFIG_DEF[name].default == value, name
        assert topic.source(name) is ConfigSource.DEFAULT_CONFIG


def test_attributes_are_generated_for_every_key() -> None:
    cfg = BrokerConfig({"log.segment.bytes": "2048", "log.retention.hours": "5"})
    derived = {"log_dirs", "log_retention_ms", "log_roll_ms", "log_flush_interval_ms",
               "listeners", "advertised_listeners", "listener_security_protocol_map"}  # fmt: skip
    for key in BROKER_CONFIG_DEF.values():
        assert hasattr(cfg, key.attr), key.name
        if key.attr not in derived:
            assert getattr(cfg, key.attr) == cfg.get(key.name), key.name
    assert cfg.log_segment_bytes == 2048
    assert cfg.get("log.retention.ms") is None and cfg.log_retention_ms == 5 * HOUR_MS
    topic = TopicConfig.from_broker(cfg)
    for key in TOPIC_CONFIG_DEF.values():
        assert getattr(topic, key.attr) == topic.get(key.name)
    with pytest.raises(KeyError):
        cfg.get("no.such.key")


def test_list_values_are_copies() -> None:
    cfg = BrokerConfig()
    cfg.log_cleanup_policy.append("compact")
    cfg.log_dirs.append("/elsewhere")
    assert cfg.log_cleanup_policy == ["delete"]
    assert BrokerConfig().log_cleanup_policy == ["delete"]
    assert cfg.log_dirs == ["./logkeel-data"]


# ---- precedence -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, 168 * HOUR_MS),
        ({"log.retention.hours": "2"}, 2 * HOUR_MS),
        ({"log.retention.hours": "2", "log.retention.minutes": "3"}, 3 * 60_000),
        ({"log.retention.hours": "2", "log.retention.minutes": "3", "log.retention.ms": "7"}, 7),
        ({"log.retention.minutes": "3", "log.retention.ms": "7"}, 7),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.ms": "-100"}, -1),
        ({"log.retention.hours": "-3"}, -1),
        ({"log.retention.minutes": "-1", "log.retention.hours": "4"}, -1),
    ],
)
def test_retention_ms_beats_minutes_beats_hours(props: dict[str, str], expected: int) -> None:
    cfg = BrokerConfig(props)
    assert cfg.log_retention_ms == expected
    topic = TopicConfig.from_broker(cfg)
    assert topic.retention_ms == expected
    source = ConfigSource.STATIC_BROKER_CONFIG if props else ConfigSource.DEFAULT_CONFIG
    assert topic.source("retention.ms") is source


def test_zero_retention_is_rejected_naming_the_key_that_set_it() -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig({"log.retention.minutes": "0"})
    assert err.value.keys == ("log.retention.minutes",)


@pytest.mark.parametrize(
    ("props", "roll"),
    [
        ({}, 168 * HOUR_MS),
        ({"log.roll.hours": "1"}, HOUR_MS),
        ({"log.roll.hours": "1", "log.roll.ms": "500"}, 500),
    ],
)
def test_roll_ms_beats_hours(props: dict[str, str], roll: int) -> None:
    cfg = BrokerConfig(props)
    assert cfg.log_roll_ms == roll
    assert TopicConfig.from_broker(cfg).segment_ms == roll


def test_roll_ms_below_one_is_rejected() -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig({"log.roll.ms": "0"})
    assert set(err.value.keys) == {"log.roll.ms"}


def test_flush_interval_falls_back_to_scheduler_interval() -> None:
    assert BrokerConfig().log_flush_interval_ms == LONG_MAX
    cfg = BrokerConfig({"log.flush.scheduler.interval.ms": "2000"})
    assert cfg.log_flush_interval_ms == 2000
    assert TopicConfig.from_broker(cfg).flush_ms == 2000
    cfg = BrokerConfig({"log.flush.scheduler.interval.ms": "2000", "log.flush.interval.ms": "50"})
    assert cfg.log_flush_interval_ms == 50
    assert TopicConfig.from_broker(cfg).flush_ms == 50


def test_log_dirs_beats_log_dir_and_is_split_on_commas() -> None:
    assert BrokerConfig({"log.dir": "/d"}).log_dirs == ["/d"]
    cfg = BrokerConfig({"log.dir": "/d", "log.dirs": " /a , /b,,/c "})
    assert cfg.log_dirs == ["/a", "/b", "/c"]
    with pytest.raises(ConfigError) as err:
        BrokerConfig({"log.dirs": " , "})
    assert err.value.keys == ("log.dirs",)


def test_node_id_and_broker_id_are_synonyms() -> None:
    assert BrokerConfig({"broker.id": "3"}).node_id == 3
    assert BrokerConfig({"node.id": "4"}).broker_id == 4
    cfg = BrokerConfig({"node.id": "5", "broker.id": " 5"})
    assert (cfg.node_id, cfg.broker_id) == (5, 5)
    assert cfg.source("broker.id") is ConfigSource.STATIC_BROKER_CONFIG
    with pytest.raises(ConfigError) as err:
        BrokerConfig({"node.id": "1", "broker.id": "2"})
    assert "broker.id" in str(err.value)
    with pytest.raises(ConfigError):
        BrokerConfig({"node.id": "-1"})


# ---- .properties syntax -----------------------------------------------------------------------


def test_properties_file_edge_cases(tmp_path: Path) -> None:
    text = (
        "# comment\n"
        "! bang comment\n"
        "   # indented comment\n"
        "\n"
        "plain=value\n"
        "colon: value two\n"
        "space   value three\n"
        "\tspaced.key \t=\t  padded value  \n"
        "empty=\n"
        "nosep\n"
        "eq.in.value=a=b:c\n"
        "continued=first,\\\n"
        "     second,\\\n"
        "\t\tthird\n"
        "even.backslashes=ends\\\\\n"
        "after.even=yes\n"
        "escaped\\ key\\=x=v\n"
        "escapes=tab\\there\\nnl\\u00e9\\q\\\\\n"
        "unicode=naïve ✓\n"
        "comment.continues=# not a comment\\\n"
        "# still value\n"
        "# comment ending in backslash \\\n"
        "after.comment=1\n"
        "dup=first\n"
        "dup=second\r\n"
        "crlf=x\r\n"
        "cr=y\r"
        "last=no newline\\"
    )
    props = load_properties(write(tmp_path, text))
    assert props == {
        "plain": "value",
        "colon": "value two",
        "space": "value three",
        "spaced.key": "padded value  ",
        "empty": "",
        "nosep": "",
        "eq.in.value": "a=b:c",
        "continued": "first,second,third",
        "even.backslashes": "ends\\",
        "after.even": "yes",
        "escaped key=x": "v",
        "escapes": "tab\there\nnl\u00e9q\\",
        "unicode": "naïve ✓",
        "comment.continues": "# not a comment# still value",
        "after.comment": "1",
        "dup": "second",
        "crlf": "x",
        "cr": "y",
        "last": "no newline",
    }


def test_java_line_reader_corner_cases() -> None:
    assert parse_properties("\\\n#not.a.key=1\n") == {}  # a comment, though after a continuation
    assert parse_properties("x\\\n!y=1\n") == {"x!y": "1"}  # not a comment mid-line
    assert parse_properties("\\\n") == {"": ""}
    assert parse_properties("\\\r\n") == {}
    assert parse_properties("\\\n  \n") == {}


def test_malformed_unicode_escape_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "ok=1\nbad=\\u12G4\nworse\\uZZ=2\n")
    with pytest.raises(ConfigError) as err:
        load_properties(path)
    assert len(err.value.problems) == 2
    assert f"{path}:2" in str(err.value) and f"{path}:3" in str(err.value)


def test_latin1_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "latin.properties"
    path.write_bytes("broker.rack=caf\xe9\n".encode("latin-1"))
    assert BrokerConfig.from_properties(path).broker_rack == "café"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.properties"):
        BrokerConfig.from_properties(tmp_path / "nope.properties")


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
        max_size=6,
    )
)
def test_escaped_properties_round_trip(props: dict[str, str]) -> None:
    text = "".join(
        f"{escape_property(k, is_key=True)}={escape_property(v)}\n" for k, v in props.items()
    )
    assert parse_properties(text) == props


JAVA_DUMP = r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;

public class PropsDump {
    public static void main(String[] args) throws Exception {
        for (String name : args) {
            Properties props = new Properties();
            try (Reader reader = Files.newBufferedReader(Paths.get(name), StandardCharsets.UTF_8)) {
                props.load(reader);
            }
            StringBuilder out = new StringBuilder();
            for (String key : new TreeSet<>(props.stringPropertyNames())) {
                out.append(hex(key)).append(' ').append(hex(props.getProperty(key))).append('\n');
            }
            Files.write(Paths.get(name + ".out"), out.toString().getBytes(StandardCharsets.UTF_8));
        }
    }

    static String hex(String s) {
        StringBuilder b = new StringBuilder("x");
        for (byte c : s.getBytes(StandardCharsets.UTF_8)) b.append(String.format("%02x", c));
        return b.toString();
    }
}
"""

# Pieces chosen to hit every branch of the grammar; none starts with "u", so no generated text
# holds a malformed \uXXXX escape (Java would refuse the file; that case is tested above).
_PIECES = ["a", "b", "key", "é", "✓", " ", "  ", "\t", "\f", "=", ":", "#", "!", "\\", "\\\\",
           "\n", "\r\n", "\r", "\\u0041", "\\u00e9", "\\t", "\\n", "\\=", "\\:", "\\ ", "x.y",
           "\\\n", "\\\r\n", "=\\\n  "]  # fmt: skip
# JDK quirk left out: after a comment line ending in a backslash, Java's LineReader keeps the
# backslash state and misreads a backslash that starts the next line (reading stale buffer
# bytes). Real files do not do this, and logkeel reads that next line normally.
_JDK_COMMENT_QUIRK = re.compile(r"[#!][^\r\n]*\\(\r\n|\r|\n)")


def test_parser_agrees_with_java_util_properties(tmp_path: Path) -> None:
    java = shutil.which("java")
    assert java is not None, "Java 17 is needed (scripts/test installs it)"
    rng = random.Random(20240601)
    texts = [
        "a=1\nb : 2\nc 3\n d=\\\n   4\n#x\n!y\n",
        "k\\ with\\ spaces = v \nk2=v\\\\\nk3=\\\\\\\ncont\n",
        "only.key\n\n\n   \nx\\\n\ny=1",
        "trail=back\\",
        "=novalue\n:colon\n  =\n",
        "a=b\\\n# c\n#real comment\\\nd=e",
        "\\\n#not.a.key=1\nx\\\n!part.of.x=1\n",
        "\\\n",
        "\\\r\n",
        "\\",
        "k=\\\n\n",
    ]
    while len(texts) < 300:
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 25)))
        if not _JDK_COMMENT_QUIRK.search(text):
            texts.append(text)
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"case{i}.properties"
        path.write_bytes(text.encode("utf-8"))
        paths.append(path)
    source = tmp_path / "PropsDump.java"
    source.write_text(JAVA_DUMP)
    subprocess.run([java, str(source), *map(str, paths)], check=True, timeout=120)

    for path, text in zip(paths, texts, strict=True):
        expected = {}
        for line in Path(f"{path}.out").read_text().splitlines():
            key, value = line.split(" ")
            expected[bytes.fromhex(key[1:]).decode()] = bytes.fromhex(value[1:]).decode()
        assert parse_properties(text) == expected, repr(text)


# ---- validation -------------------------------------------------------------------------------


def test_every_bad_value_is_reported_at_once(tmp_path: Path, caplog) -> None:
    path = write(
        tmp_path,
        "log.segment.bytes=1GB\n"
        "num.partitions=0\n"
        "auto.create.topics.enable=yes\n"
        "log.message.timestamp.type=createtime\n"
        "log.cleanup.policy=delete,shred\n"
        "log.retention.bytes=99999999999999999999\n"
        "log.dirs=/data\n"
        "some.plugin.setting=1\n",
    )
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError) as err:
        BrokerConfig.from_properties(path, ["socket.request.max.bytes=-1", "garbage"])
    problems = {p.key: p for p in err.value.problems}
    assert set(problems) == {
        "log.segment.bytes",
        "num.partitions",
        "auto.create.topics.enable",
        "log.message.timestamp.type",
        "log.cleanup.policy",
        "log.retention.bytes",
        "socket.request.max.bytes",
        "garbage",
    }
    assert problems["log.segment.bytes"].value == "1GB"
    assert "INT" in problems["log.segment.bytes"].reason
    assert "at least 1" in problems["num.partitions"].reason
    assert "true or false" in problems["auto.create.topics.enable"].reason
    assert "CreateTime" in problems["log.message.timestamp.type"].reason
    assert "shred" in problems["log.cleanup.policy"].reason
    assert "range" in problems["log.retention.bytes"].reason
    message = str(err.value)
    assert "8 problems" in message
    assert "log.segment.bytes='1GB'" in message
    assert "some.plugin.setting" in caplog.text  # unknown: warned, not an error


def test_unknown_keys_are_kept_and_warned_not_fatal(tmp_path: Path, caplog) -> None:
    path = write(tmp_path, "log.segments.bytes=1024\nmetric.reporters=com.example.X\n")
    with caplog.at_level(logging.WARNING, logger="logkeel.config"):
        cfg = BrokerConfig.from_properties(path)
    assert cfg.unknown_keys == ("log.segments.bytes", "metric.reporters")
    assert cfg.originals["log.segments.bytes"] == "1024"
    assert cfg.log_segment_bytes == 1073741824
    assert "log.segments.bytes" in caplog.text and "metric.reporters" in caplog.text


def test_overrides_beat_the_file_as_list_or_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "num.partitions=3\nlog.segment.bytes=1000\n")
    cfg = BrokerConfig.from_properties(path, ["num.partitions=7", "broker.rack=r1=a"])
    assert (cfg.num_partitions, cfg.log_segment_bytes, cfg.broker_rack) == (7, 1000, "r1=a")
    cfg = BrokerConfig.from_properties(path, {"num.partitions": 9})
    assert cfg.num_partitions == 9
    assert cfg.originals == {"num.partitions": "9", "log.segment.bytes": "1000"}
    assert BrokerConfig.from_properties(None, ["log.dirs=/x"]).log_dirs == ["/x"]


@pytest.mark.parametrize(
    ("config_type", "raw", "expected"),
    [
        (ConfigType.INT, " 42 ", 42),
        (ConfigType.INT, "+7", 7),
        (ConfigType.INT, "-2147483648", -(2**31)),
        (ConfigType.LONG, "9223372036854775807", LONG_MAX),
        (ConfigType.BOOLEAN, "TRUE", True),
        (ConfigType.BOOLEAN, " False ", False),
        (ConfigType.LIST, "", []),
        (ConfigType.LIST, " compact , delete ", ["compact", "delete"]),
        (ConfigType.DOUBLE, "0.25", 0.25),
        (ConfigType.DOUBLE, "1e-3", 0.001),
        (ConfigType.DOUBLE, "2d", 2.0),
        (ConfigType.STRING, "  x  ", "x"),
    ],
)
def test_values_parse_like_kafka(config_type: ConfigType, raw: str, expected: object) -> None:
    assert parse_value(config_type, raw) == expected


@pytest.mark.parametrize(
    ("config_type", "raw"),
    [
        (ConfigType.INT, "2147483648"),
        (ConfigType.INT, "1_000"),
        (ConfigType.INT, "１２"),
        (ConfigType.INT, "1.0"),
        (ConfigType.INT, ""),
        (ConfigType.SHORT, "40000"),
        (ConfigType.LONG, "9223372036854775808"),
        (ConfigType.BOOLEAN, "1"),
        (ConfigType.BOOLEAN, "yes"),
        (ConfigType.DOUBLE, "half"),
    ],
)
def test_values_kafka_rejects_are_rejected(config_type: ConfigType, raw: str) -> None:
    with pytest.raises(ValueError):
        parse_value(config_type, raw)


@given(st.integers(min_value=-(2**40), max_value=2**40))
def test_int_parsing_respects_java_int_width(number: int) -> None:
    in_range = -(2**31) <= number < 2**31
    try:
        assert parse_value(ConfigType.INT, str(number)) == number
        assert in_range
    except ValueError:
        assert not in_range


def test_new_logkeel_settings_are_validated() -> None:
    cfg = BrokerConfig({"log.startup.validation": "eager",
                        "log.startup.validation.rate.bytes.per.sec": "0"})  # fmt: skip
    assert (cfg.log_startup_validation, cfg.log_startup_validation_rate_bytes_per_sec) == (
        "eager",
        0,
    )
    with pytest.raises(ConfigError) as err:
        BrokerConfig({"log.startup.validation": "sometimes",
                      "log.startup.validation.rate.bytes.per.sec": "-1",
                      "producer.state.snapshot.interval.ms": "-5"})  # fmt: skip
    assert len(err.value.problems) == 3


# ---- listeners --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PLAINTEXT://127.0.0.1:9092", ("PLAINTEXT", "127.0.0.1", 9092)),
        ("plaintext://host.example:1", ("PLAINTEXT", "host.example", 1)),
        ("PLAINTEXT://:9092", ("PLAINTEXT", None, 9092)),
        ("INTERNAL://[::1]:19092", ("INTERNAL", "::1", 19092)),
        ("EXTERNAL://fe80::1%eth0:0", ("EXTERNAL", "fe80::1%eth0", 0)),
    ],
)
def test_parse_listener(text: str, expected: tuple[str, str | None, int]) -> None:
    listener = parse_listener(text)
    assert tuple(listener) == expected
    assert parse_listener(listener.connection_string) == listener


@pytest.mark.parametrize(
    "text", ["127.0.0.1:9092", "PLAINTEXT://host", "://h:1", "P://h:70000", "P://h:-1", "P://a b:1"]
)
def test_parse_listener_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_listener(text)


def test_listener_rules() -> None:
    cfg = BrokerConfig({
        "listeners": "INTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "advertised.listeners": "INTERNAL://broker1:9092",
    })  # fmt: skip
    assert [listener.name for listener in cfg.listeners] == ["INTERNAL"]
    assert cfg.advertised_listeners == [Listener("INTERNAL", "broker1", 9092)]

    bad = [
        ({"listeners": "CUSTOM://:9092"}, "listeners"),
        ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "listeners"),
        ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "listeners"),
        ({"listeners": ""}, "listeners"),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "advertised.listeners"),
        ({"advertised.listeners": "SSL://h:9093"}, "advertised.listeners"),
        ({"listener.security.protocol.map": "PLAINTEXT:QUIC"}, "listener.security.protocol.map"),
    ]
    for props, key in bad:
        with pytest.raises(ConfigError) as err:
            BrokerConfig(props)
        assert key in err.value.keys, props


# ---- topic configs ----------------------------------------------------------------------------


def test_topic_defaults_come_from_the_broker() -> None:
    broker = BrokerConfig({
        "log.segment.bytes": "4096",
        "log.roll.hours": "2",
        "log.retention.minutes": "30",
        "message.max.bytes": "2000",
        "log.flush.interval.ms": "100",
        "log.index.interval.bytes": "128",
        "log.cleanup.policy": "compact,delete",
        "min.insync.replicas": "2",
        "log.segment.delete.delay.ms": "0",
        "log.message.timestamp.type": "LogAppendTime",
    })  # fmt: skip
    topic = TopicConfig.from_broker(broker, None)
    assert topic.segment_bytes == 4096
    assert topic.segment_ms == 2 * HOUR_MS
    assert topic.retention_ms == 30 * 60_000
    assert topic.max_message_bytes == 2000
    assert topic.flush_ms == 100
    assert topic.index_interval_bytes == 128
    assert topic.cleanup_policy == ["compact", "delete"]
    assert topic.min_insync_replicas == 2
    assert topic.file_delete_delay_ms == 0
    assert topic.message_timestamp_type == "LogAppendTime"
    assert topic.overrides == {}
    assert topic.source("segment.bytes") is ConfigSource.STATIC_BROKER_CONFIG
    assert topic.source("retention.bytes") is ConfigSource.DEFAULT_CONFIG


def test_topic_overrides_win_and_are_described() -> None:
    broker = BrokerConfig({"log.segment.bytes": "4096"})
    topic = TopicConfig.from_broker(
        broker, {"segment.bytes": "1024", "retention.ms": -1, "cleanup.policy": "compact"}
    )
    assert topic.overrides == {"segment.bytes": "1024", "retention.ms": "-1",
                               "cleanup.policy": "compact"}  # fmt: skip
    assert (topic.segment_bytes, topic.retention_ms, topic.cleanup_policy) == (
        1024,
        -1,
        ["compact"],
    )
    rows = {row.name: row for row in topic.describe()}
    assert set(rows) == set(TOPIC_CONFIG_DEF)
    assert rows["segment.bytes"] == ("segment.bytes", "1024", ConfigSource.TOPIC_CONFIG,
                                     False, False)  # fmt: skip
    assert rows["retention.ms"].value == "-1"
    assert rows["max.message.bytes"].source is ConfigSource.DEFAULT_CONFIG
    assert rows["unclean.leader.election.enable"].value == "false"
    assert [row.name for row in topic.describe(["flush.ms", "not.a.config"])] == ["flush.ms"]

    changed = topic.with_overrides({"flush.messages": "1"}, delete=["segment.bytes"])
    assert changed.segment_bytes == 4096 and changed.flush_messages == 1
    assert changed.source("segment.bytes") is ConfigSource.STATIC_BROKER_CONFIG
    assert set(changed.overrides) == {"retention.ms", "cleanup.policy", "flush.messages"}


def test_topic_override_validation_reports_every_problem() -> None:
    with pytest.raises(ConfigError) as err:
        TopicConfig.from_broker(
            BrokerConfig(),
            {
                "segment.bytes": "10",
                "retention.ms": "-2",
                "cleanup.policy": "compact,archive",
                "compression.type": "brotli",
                "log.segment.bytes": "4096",
                "made.up": "1",
                "min.cleanable.dirty.ratio": "1.5",
                "compression.gzip.level": "0",
            },
        )
    problems = {p.key: p.reason for p in err.value.problems}
    assert set(problems) == {
        "segment.bytes",
        "retention.ms",
        "cleanup.policy",
        "compression.type",
        "log.segment.bytes",
        "made.up",
        "min.cleanable.dirty.ratio",
        "compression.gzip.level",
    }
    assert "unknown topic config" in problems["made.up"]
    assert "segment.bytes" in problems["log.segment.bytes"]  # points at the topic-level name


def test_validate_topic_overrides() -> None:
    validate_topic_overrides({})
    validate_topic_overrides({"segment.ms": "60000", "compression.type": "producer",
                              "unclean.leader.election.enable": "FALSE"})  # fmt: skip
    with pytest.raises(ConfigError) as err:
        validate_topic_overrides({"segment.ms": "0"})
    assert err.value.keys == ("segment.ms",)
    with pytest.raises(ConfigError) as err:
        validate_topic_overrides({"num.partitions": "3"})
    assert "broker config" in str(err.value)


def test_broker_describe_and_synonyms() -> None:
    cfg = BrokerConfig({"log.retention.hours": "1"})
    rows = {row.name: row for row in cfg.describe()}
    assert set(rows) == set(BROKER_CONFIG_DEF)
    assert rows["log.retention.hours"] == ("log.retention.hours", "1",
                                           ConfigSource.STATIC_BROKER_CONFIG, False, True)  # fmt: skip
    assert rows["log.retention.ms"].value is None
    assert rows["log.cleanup.policy"].value == "delete"
    assert rows["log.cleaner.min.cleanable.ratio"].value == "0.5"
    assert all(row.read_only for row in rows.values())
    assert broker_synonyms("retention.ms") == (
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    )
    assert broker_synonyms("flush.ms") == (
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
    )
    assert broker_synonyms("max.message.bytes") == ("message.max.bytes",)


def test_updated_reapplies_validation() -> None:
    cfg = BrokerConfig({"num.partitions": "2"})
    assert cfg.updated({"log.segment.bytes": 2048}).log_segment_bytes == 2048
    assert cfg.updated({}).num_partitions == 2
    with pytest.raises(ConfigError):
        cfg.updated({"num.partitions": "zero"})


def test_sample_server_properties_loads(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
############################# Server Basics #############################
broker.id=1

############################# Socket Server Settings #############################
listeners=PLAINTEXT://0.0.0.0:19092
advertised.listeners=PLAINTEXT://localhost:19092
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################
log.dirs=/var/lib/logkeel/a,/var/lib/logkeel/b
num.partitions=3
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Retention Policy #############################
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
""",
    )
    cfg = BrokerConfig.from_properties(path)
    # Settings of features logkeel does not have are not defined: warned and ignored.
    assert cfg.unknown_keys == ("num.network.threads",)
    assert cfg.zookeeper_connection_timeout_ms == 18000
    assert cfg.node_id == 1
    assert cfg.log_dirs == ["/var/lib/logkeel/a", "/var/lib/logkeel/b"]
    assert cfg.listeners == [Listener("PLAINTEXT", "0.0.0.0", 19092)]
    assert cfg.advertised_listeners == [Listener("PLAINTEXT", "localhost", 19092)]
    assert cfg.group_initial_rebalance_delay_ms == 0
    clustered = BrokerConfig.from_properties(path, ["zookeeper.connect=localhost:2181/logkeel"])
    assert clustered.zookeeper_connect == "localhost:2181/logkeel"
    assert not clustered.embedded_metadata and cfg.embedded_metadata


def test_config_reference_lists_logkeel_settings() -> None:
    full = config_reference(BROKER_CONFIG_DEF)
    assert full.count("\n") == len(BROKER_CONFIG_DEF) + 2
    assert "| `log.segment.bytes` | int | `1073741824` | [14,...] |" in full
    assert "| `log.cleaner.min.cleanable.ratio` | double | `0.5` | [0,...,1] |" in full
    ours = config_reference(BROKER_CONFIG_DEF, only_logkeel=True)
    for name in ("log.startup.validation", "producer.state.snapshot.interval.ms", "log.dir",
                 "node.id"):  # fmt: skip
        assert f"`{name}`" in ours
    assert "`num.partitions`" not in ours


def test_queued_max_request_bytes_fits_one_frame_of_socket_request_max_bytes() -> None:
    assert BrokerConfig({}).queued_max_request_bytes == 512 * 1024 * 1024
    # Left at its default it follows a larger frame limit; set explicitly it must fit one.
    assert BrokerConfig({"socket.request.max.bytes": 2**30}).queued_max_request_bytes == 2**30
    assert BrokerConfig({"queued.max.request.bytes": -1}).queued_max_request_bytes == -1
    with pytest.raises(ConfigError, match="at least socket.request.max.bytes"):
        BrokerConfig({"socket.request.max.bytes": 2**30, "queued.max.request.bytes": 2**29})


def test_per_ip_connection_overrides_are_host_count_pairs() -> None:
    config = BrokerConfig({"max.connections.per.ip.overrides": "broker1:100, 127.0.0.1:200"})
    assert config.per_ip_connection_limits == {"broker1": 100, "127.0.0.1": 200}
    with pytest.raises(ConfigError, match="is not host:count"):
        BrokerConfig({"max.connections.per.ip.overrides": "broker1"})
    with pytest.raises(ConfigError, match="only allowed with max.connections.per.ip.overrides"):
        BrokerConfig({"max.connections.per.ip": 0})
