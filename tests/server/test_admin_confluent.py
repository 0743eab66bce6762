"""confluent-kafka's AdminClient (librdkafka) against a real `logkeel serve` process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from tests.brokerproc import BrokerProcess

TIMEOUT = 15


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("admin-confluent")) as b:
        yield b


@pytest.fixture
def admin(server: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


def error_of(future: Any) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0]


def topic_configs(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource("topic", name)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def test_create_list_describe_delete(admin: AdminClient) -> None:
    futures = admin.create_topics(
        [NewTopic("cf-a", 3, 1), NewTopic("cf-b", 1, 1, config={"retention.ms": "3600000"})],
        operation_timeout=TIMEOUT,
    )
    for f in futures.values():
        assert f.result(TIMEOUT) is None
    md = admin.list_topics(timeout=TIMEOUT)
    assert {"cf-a", "cf-b"} <= set(md.topics)
    assert sorted(md.topics["cf-a"].partitions) == [0, 1, 2]
    part = md.topics["cf-a"].partitions[0]
    assert (part.leader, part.replicas, part.isrs) == (0, [0], [0])
    assert md.topics["cf-a"].error is None

    described = admin.describe_topics(TopicCollection(["cf-a"]))["cf-a"].result(TIMEOUT)
    assert described.name == "cf-a"
    assert len(described.partitions) == 3
    assert described.topic_id is not None

    configs = topic_configs(admin, "cf-b")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    for f in admin.delete_topics(["cf-a", "cf-b"], operation_timeout=TIMEOUT).values():
        assert f.result(TIMEOUT) is None
    remaining = admin.list_topics(timeout=TIMEOUT).topics
    assert "cf-a" not in remaining and "cf-b" not in remaining


def test_create_errors(admin: AdminClient) -> None:
    admin.create_topics([NewTopic("cf-exists", 1, 1)])["cf-exists"].result(TIMEOUT)
    futures = admin.create_topics(
        [
            NewTopic("cf-exists", 1, 1),
            NewTopic("cf bad", 1, 1),
            NewTopic("cf-config", 1, 1, config={"retention.ms": "forever", "bogus.key": "1"}),
            NewTopic("cf-rf", 1, 2),
        ],
        operation_timeout=TIMEOUT,
    )
    assert error_of(futures["cf-exists"]).code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert error_of(futures["cf bad"]).code() == KafkaError.TOPIC_EXCEPTION
    bad_config = error_of(futures["cf-config"])
    assert bad_config.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in bad_config.str() and "bogus.key" in bad_config.str()
    assert error_of(futures["cf-rf"]).code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_validate_only(admin: AdminClient) -> None:
    futures = admin.create_topics([NewTopic("cf-dry", 2, 1)], validate_only=True)
    assert futures["cf-dry"].result(TIMEOUT) is None
    assert "cf-dry" not in admin.list_topics(timeout=TIMEOUT).topics


def test_unknown_topics(admin: AdminClient) -> None:
    assert error_of(admin.delete_topics(["cf-never"])["cf-never"]).code() == (
        KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    resource = ConfigResource("topic", "cf-never")
    err = error_of(admin.describe_configs([resource])[resource])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    err = error_of(admin.create_partitions([NewPartitions("cf-never", 3)])["cf-never"])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions(admin: AdminClient) -> None:
    admin.create_topics([NewTopic("cf-grow", 1, 1)])["cf-grow"].result(TIMEOUT)
    assert admin.create_partitions([NewPartitions("cf-grow", 4)])["cf-grow"].result(TIMEOUT) is None
    assert sorted(admin.list_topics("cf-grow", timeout=TIMEOUT).topics["cf-grow"].partitions) == [
        0,
        1,
        2,
        3,
    ]
    err = error_of(admin.create_partitions([NewPartitions("cf-grow", 2)])["cf-grow"])
    assert err.code() == KafkaError.INVALID_PARTITIONS


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_incremental_alter_and_legacy_alter(admin: AdminClient) -> None:
    admin.create_topics([NewTopic("cf-alter", 1, 1, config={"retention.ms": "1000"})])[
        "cf-alter"
    ].result(TIMEOUT)
    resource = ConfigResource(
        "topic",
        "cf-alter",
        incremental_configs=[
            ConfigEntry("segment.bytes", "2097152", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    for f in admin.incremental_alter_configs([resource]).values():
        assert f.result(TIMEOUT) is None
    configs = topic_configs(admin, "cf-alter")
    assert configs["segment.bytes"].value == "2097152"
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"

    bad = ConfigResource(
        "topic",
        "cf-alter",
        incremental_configs=[
            ConfigEntry("segment.bytes", "tiny", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    [future] = admin.incremental_alter_configs([bad]).values()
    assert error_of(future).code() == KafkaError.INVALID_CONFIG

    legacy = ConfigResource("topic", "cf-alter", set_config={"max.message.bytes": "200000"})
    [future] = admin.alter_configs([legacy]).values()
    assert future.result(TIMEOUT) is None
    configs = topic_configs(admin, "cf-alter")
    assert configs["max.message.bytes"].value == "200000"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value  # replaced


def test_describe_broker_configs(admin: AdminClient) -> None:
    resource = ConfigResource("broker", "0")
    configs = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
    assert configs["num.partitions"].value == "1"
    assert configs["num.partitions"].is_read_only
    assert configs["log.retention.hours"].value == "168"
    assert configs["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    broker_change = ConfigResource(
        "broker",
        "0",
        incremental_configs=[
            ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    [future] = admin.incremental_alter_configs([broker_change]).values()
    assert error_of(future).code() == KafkaError.INVALID_REQUEST


def test_describe_cluster(admin: AdminClient, server: BrokerProcess) -> None:
    cluster = admin.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT)
    [node] = cluster.nodes
    assert (node.id, node.host, node.port) == (0, "127.0.0.1", server.port)
    assert cluster.controller.id == 0
    meta = (server.log_dirs[0] / "meta.properties").read_text()
    assert f"cluster.id={cluster.cluster_id}" in meta


def test_topics_and_configs_survive_restart(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics(
            [
                NewTopic("cf-durable", 2, 1, config={"retention.ms": "7200000"}),
                NewTopic("cf-gone", 1, 1),
            ]
        )["cf-durable"].result(TIMEOUT)
        resource = ConfigResource(
            "topic",
            "cf-durable",
            incremental_configs=[
                ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for f in admin.incremental_alter_configs([resource]).values():
            f.result(TIMEOUT)
        admin.delete_topics(["cf-gone"])["cf-gone"].result(TIMEOUT)
        topic_id = (
            admin.describe_topics(TopicCollection(["cf-durable"]))["cf-durable"]
            .result(TIMEOUT)
            .topic_id
        )
        del admin

        assert b.restart() is b
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        topics = admin.list_topics(timeout=TIMEOUT).topics
        assert "cf-gone" not in topics
        assert sorted(topics["cf-durable"].partitions) == [0, 1]
        configs = topic_configs(admin, "cf-durable")
        assert configs["retention.ms"].value == "7200000"
        assert configs["segment.ms"].value == "600000"
        assert configs["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        after = admin.describe_topics(TopicCollection(["cf-durable"]))["cf-durable"].result(TIMEOUT)
        assert str(after.topic_id) == str(topic_id)
