"""kafka-python's KafkaAdminClient against a real `logkeel serve` process."""

from __future__ import annotations

from collections.abc import Iterator

import kafka.errors as errors
import pytest
from kafka import KafkaConsumer
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient

from tests.brokerproc import BrokerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("admin-kafka-python")) as b:
        yield b


@pytest.fixture(scope="module")
def admin(server: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)
    yield client
    client.close()


def test_create_list_describe_delete(admin: KafkaAdminClient) -> None:
    result = admin.create_topics(
        {
            "kp-a": {"num_partitions": 2, "replication_factor": 1},
            "kp-b": {"configs": {"retention.ms": "3600000"}},
        }
    )
    by_name = {t["name"]: t for t in result["topics"]}
    assert by_name["kp-a"]["error_code"] == 0
    assert by_name["kp-b"]["num_partitions"] == 1  # -1: the broker's num.partitions
    assert {"kp-a", "kp-b"} <= set(admin.list_topics())

    [described] = admin.describe_topics(["kp-a"])
    assert described["name"] == "kp-a" and described["error_code"] == 0
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1]
    assert all(p["leader_id"] == 0 for p in described["partitions"])

    deleted = admin.delete_topics(["kp-a", "kp-b"])
    assert [t["error_code"] for t in deleted["topics"]] == [0, 0]
    assert not {"kp-a", "kp-b"} & set(admin.list_topics())


def test_create_errors(admin: KafkaAdminClient) -> None:
    admin.create_topics({"kp-dup": {"num_partitions": 1}})
    with pytest.raises(errors.TopicAlreadyExistsError):
        admin.create_topics({"kp-dup": {"num_partitions": 1}})
    with pytest.raises(errors.InvalidTopicError):
        admin.create_topics({"kp bad": {"num_partitions": 1}})
    with pytest.raises(errors.InvalidConfigurationError):
        admin.create_topics({"kp-cfg": {"configs": {"segment.bytes": "huge"}}})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.delete_topics(["kp-never"])


def test_create_partitions(admin: KafkaAdminClient) -> None:
    admin.create_topics({"kp-grow": {"num_partitions": 1}})
    admin.create_partitions({"kp-grow": 3})
    [described] = admin.describe_topics(["kp-grow"])
    assert len(described["partitions"]) == 3
    with pytest.raises(errors.InvalidPartitionsError):
        admin.create_partitions({"kp-grow": 2})


def test_describe_and_alter_configs(admin: KafkaAdminClient) -> None:
    admin.create_topics({"kp-cfg2": {"configs": {"retention.ms": "1000"}}})
    topic = ConfigResource(ConfigResourceType.TOPIC, "kp-cfg2")
    described = admin.describe_configs([topic], include_synonyms=True, config_filter="all")
    configs = described["topic"]["kp-cfg2"]
    assert configs["retention.ms"]["value"] == "1000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"

    change = ConfigResource(
        ConfigResourceType.TOPIC,
        "kp-cfg2",
        configs={
            "segment.ms": "60000",
            "retention.ms": (AlterConfigOp.DELETE, None),
        },
    )
    admin.alter_configs([change])
    modified = admin.describe_configs([topic])["topic"]["kp-cfg2"]  # only modified keys
    assert set(modified) == {"segment.ms"}
    assert modified["segment.ms"]["value"] == "60000"

    broker = ConfigResource(ConfigResourceType.BROKER, "0")
    broker_configs = admin.describe_configs([broker], config_filter="all")["broker"]["0"]
    assert broker_configs["num.partitions"]["value"] == "1"
    assert broker_configs["num.partitions"]["read_only"] is True


def test_describe_cluster_and_consumer_metadata(
    admin: KafkaAdminClient, server: BrokerProcess
) -> None:
    cluster = admin.describe_cluster()
    [node] = cluster["brokers"]
    assert (node["broker_id"], node["host"], node["port"]) == (0, "127.0.0.1", server.port)
    assert cluster["controller_id"] == 0
    assert cluster["cluster_id"]

    admin.create_topics({"kp-meta": {"num_partitions": 2}})
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap)
    try:
        assert "kp-meta" in consumer.topics()
        assert consumer.partitions_for_topic("kp-meta") == {0, 1}
    finally:
        consumer.close()
