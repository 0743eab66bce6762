"""The config surface is honest: every defined key is read by the code that implements it, or
refused at start-up ("not supported yet") unless left at its default; the README lists only
settings that work.

The reader check greps the package source outside ``config/`` for the key's attribute
(``.log_segment_bytes``) or its quoted name (``"segment.bytes"``), so it does not depend on where
the implementing code lives.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

import logkeel
from logkeel.cluster.dynamic_broker_configs import DYNAMIC_BROKER_CONFIGS
from logkeel.config import (
    BROKER_CONFIG_DEF,
    TOPIC_CONFIG_DEF,
    BrokerConfig,
    ConfigError,
    ConfigKey,
    ConfigType,
    validate_topic_overrides,
)
from logkeel.config.definitions import KAFKA_TOPIC_CONFIGS_NOT_SUPPORTED
from logkeel.config.types import OneOf, format_value
from logkeel.server.group.group_configs import GROUP_CONFIG_NAMES
from tests.brokerproc import BrokerProcess

PACKAGE = Path(logkeel.__file__).parent
README = PACKAGE.parents[1] / "README.md"

# Kafka settings logkeel defines but does not implement yet; each is refused unless left at its
# default. Adding a key here (or `unsupported=` in the definitions) is a decision, not a way
# around the reader check: both lists must agree.
REJECTED_UNLESS_DEFAULT = {
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "queued.max.requests",
    "log.cleaner.enable",
}
# None at present (compression.type is implemented since the broker recompresses).
REJECTED_TOPIC_KEYS: set[str] = set()

# Keys resolved inside config/ into another key's value, which the code reads: a synonym
# (broker.id), a fallback (log.dir), and the protocol map the listeners are checked against.
READ_THROUGH = {
    "broker.id": "node.id",
    "log.dir": "log.dirs",
    "listener.security.protocol.map": "listeners",
    "inter.broker.listener.name": "inter.broker.listener",
    "security.inter.broker.protocol": "inter.broker.listener",
    "max.connections.per.ip.overrides": "per.ip.connection.limits",
}


def _source_outside_config() -> str:
    return "\n".join(
        path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "config"
    )


SOURCE = _source_outside_config()


def is_read(name: str) -> bool:
    """Whether code outside config/ reads ``name`` as an attribute or by its quoted name."""
    attribute = re.compile(r"\." + re.escape(name.replace(".", "_")) + r"\b")
    quoted = re.compile(r"[\"']" + re.escape(name) + r"[\"']")
    return bool(attribute.search(SOURCE) or quoted.search(SOURCE))


def reader_names(key: ConfigKey) -> list[str]:
    """Names under which the code may read a broker key's value: its own, the topic config it
    is the server default of, and the key it is resolved into."""
    names = [key.name]
    if key.topic is not None:
        names.append(key.topic)
    if key.name in READ_THROUGH:
        names.append(READ_THROUGH[key.name])
    return names


def non_default(key: ConfigKey) -> str:
    """A valid value other than the key's default, as a property string."""
    if isinstance(key.validator, OneOf):
        return str(next(c for c in key.validator.choices if c != key.default))
    if key.type is ConfigType.BOOLEAN:
        return "false" if key.default else "true"
    if key.type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        for candidate in (key.default - 1, key.default + 1):
            if key.validator is None or key.validator.check(candidate) is None:
                return str(candidate)
    if key.type is ConfigType.STRING and key.default is None:
        return {"zookeeper.connect": "localhost:2181/logkeel"}.get(key.name, "PLAINTEXT")
    raise AssertionError(f"no non-default value known for {key.name}")


# ---- every defined key has a reader -------------------------------------------------------------


def test_the_reader_check_can_fail() -> None:
    assert is_read("log.segment.bytes") or is_read("segment.bytes")
    assert not is_read("log.no.such.setting.ms")


def test_rejected_keys_are_exactly_the_listed_ones() -> None:
    marked = {key.name for key in BROKER_CONFIG_DEF.values() if key.unsupported is not None}
    assert marked == REJECTED_UNLESS_DEFAULT
    marked_topic = {key.name for key in TOPIC_CONFIG_DEF.values() if key.unsupported is not None}
    assert marked_topic == REJECTED_TOPIC_KEYS


@pytest.mark.parametrize("name", sorted(BROKER_CONFIG_DEF))
def test_every_broker_key_is_read_or_rejected(name: str) -> None:
    key = BROKER_CONFIG_DEF[name]
    if name in REJECTED_UNLESS_DEFAULT:
        return  # test_rejected_broker_key_fails_start_up checks the refusal
    names = reader_names(key)
    assert any(is_read(n) for n in names), (
        f"{name} is defined but nothing outside logkeel/config reads it (looked for "
        f"{', '.join(names)}): implement it, remove it from the definitions, or refuse it "
        "with unsupported=..."
    )


@pytest.mark.parametrize("name", sorted(TOPIC_CONFIG_DEF))
def test_every_topic_key_is_read_or_rejected(name: str) -> None:
    if name in REJECTED_TOPIC_KEYS:
        return
    assert is_read(name), f"topic config {name} is defined but nothing reads it"


# ---- rejected keys ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REJECTED_UNLESS_DEFAULT))
def test_rejected_broker_key_fails_start_up(name: str, tmp_path: Path) -> None:
    key = BROKER_CONFIG_DEF[name]
    value = non_default(key)
    with pytest.raises(ConfigError) as err:
        BrokerConfig.from_properties(None, [f"{name}={value}"])
    assert err.value.keys == (name,)
    assert "not supported yet" in str(err.value)
    # A server.properties that spells out the default still starts.
    if key.default is not None:
        path = tmp_path / "server.properties"
        path.write_text(f"{name}={format_value(key.type, key.default)}\n", encoding="utf-8")
        assert BrokerConfig.from_properties(path).get(name) == key.default


def test_several_listeners_and_custom_names_are_accepted() -> None:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093,SSL://:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,SSL:SSL",
            "listener.name.internal.ssl.client.auth": "required",
        }
    )
    assert [listener.name for listener in config.listeners] == ["PLAINTEXT", "INTERNAL", "SSL"]
    assert config.security_protocol("INTERNAL") == "SASL_SSL"
    assert config.listener_value("INTERNAL", "ssl.client.auth") == "required"
    assert config.listener_value("SSL", "ssl.client.auth") == "none"


def test_bad_per_listener_override_fails_with_its_key() -> None:
    config = BrokerConfig(
        {"listeners": "SSL://127.0.0.1:9093", "listener.name.ssl.ssl.client.auth": "maybe"}
    )
    with pytest.raises(ConfigError) as err:
        config.listener_value("SSL", "ssl.client.auth")
    assert set(err.value.keys) == {"listener.name.ssl.ssl.client.auth"}


@pytest.mark.parametrize("name", sorted(KAFKA_TOPIC_CONFIGS_NOT_SUPPORTED))
def test_kafka_topic_config_logkeel_lacks_is_refused_as_not_supported(name: str) -> None:
    assert name not in TOPIC_CONFIG_DEF
    with pytest.raises(ConfigError, match="not supported yet") as err:
        validate_topic_overrides({name: "1"})
    assert err.value.keys == (name,)


def test_unknown_topic_config_is_still_called_unknown() -> None:
    with pytest.raises(ConfigError, match="unknown topic config"):
        validate_topic_overrides({"segment.byte": "1024"})


# ---- end to end: the broker process and the admin APIs ------------------------------------------


def test_broker_process_refuses_to_start_with_an_unsupported_setting(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, overrides={"log.cleaner.enable": "false"})
    with pytest.raises(RuntimeError, match="exited with 2") as err:
        broker.start()
    assert "log.cleaner.enable" in str(err.value)
    assert "not supported yet" in str(err.value)


def test_admin_apis_refuse_unsupported_topic_configs(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
        try:
            created = admin.create_topics(
                {
                    "surface-a": {"configs": {"preallocate": "true"}},
                    "surface-b": {"configs": {"segment.jitter.ms": "1000"}},
                    "surface-ok": {"configs": {"compression.type": "gzip"}},
                },
                raise_errors=False,
            )
            by_name = {t["name"]: t for t in created["topics"]}
            for name in ("surface-a", "surface-b"):
                assert by_name[name]["error_code"] == 40, by_name[name]  # INVALID_CONFIG
                assert "not supported yet" in by_name[name]["error_message"]
            assert by_name["surface-ok"]["error_code"] == 0
            assert "surface-a" not in admin.list_topics()

            # AlterConfigs of compression.type: Kafka's values only, and the level's bounds.
            change = ConfigResource(
                ConfigResourceType.TOPIC, "surface-ok", configs={"compression.type": "brotli"}
            )
            altered = admin.alter_configs([change])["topic"]["surface-ok"]
            assert "InvalidConfigurationError" in str(altered), altered
            change = ConfigResource(
                ConfigResourceType.TOPIC,
                "surface-ok",
                configs={"compression.type": "zstd", "compression.zstd.level": "7"},
            )
            altered = admin.alter_configs([change])["topic"]["surface-ok"]
            assert "Error" not in str(altered), altered
            topic = ConfigResource(ConfigResourceType.TOPIC, "surface-ok")
            described = admin.describe_configs([topic], config_filter="all")["topic"]["surface-ok"]
            assert described["compression.type"]["value"] == "zstd"
            assert described["compression.zstd.level"]["value"] == "7"
        finally:
            admin.close()


# ---- the README lists only settings that work ---------------------------------------------------


def test_readme_configuration_names_only_working_settings() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z][a-z0-9]*(?:\.[a-z0-9]+)+)`", section)) - {"server.properties"}
    assert named, "the Configuration section names no settings"
    # A consumer group's own settings (the GROUP config resource) are checked by its
    # coordinator, and the dynamic-only broker configs by their module, not by a definition.
    for name in sorted(named - set(GROUP_CONFIG_NAMES) - set(DYNAMIC_BROKER_CONFIGS)):
        key = BROKER_CONFIG_DEF.get(name) or TOPIC_CONFIG_DEF.get(name)
        assert key is not None, f"README names {name}, which is not defined"
        assert key.unsupported is None, f"README names {name}, which is not supported yet"
