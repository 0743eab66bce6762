"""aiokafka's AIOKafkaAdminClient against a real `logkeel serve` process.

aiokafka speaks older versions of the admin APIs (CreateTopics v2-3, DescribeConfigs v1-2,
AlterConfigs v0-1, Metadata v0-5), so this also covers the low end of what logkeel advertises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.brokerproc import BrokerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("admin-aiokafka")) as b:
        yield b


async def _admin_session(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        created = await admin.create_topics(
            [
                NewTopic("aio-a", 2, 1),
                NewTopic("aio-b", 1, 1, topic_configs={"retention.ms": "3600000"}),
                NewTopic("aio bad", 1, 1),
            ]
        )
        errors = {entry[0]: entry[1] for entry in created.topic_errors}
        assert errors == {"aio-a": 0, "aio-b": 0, "aio bad": 17}  # INVALID_TOPIC_EXCEPTION
        again = await admin.create_topics([NewTopic("aio-a", 2, 1)])
        assert again.topic_errors[0][1] == 36  # TOPIC_ALREADY_EXISTS

        topics = await admin.list_topics()
        assert {"aio-a", "aio-b"} <= set(topics)
        [described] = await admin.describe_topics(["aio-a"])
        assert described["topic"] == "aio-a"
        assert sorted(p["partition"] for p in described["partitions"]) == [0, 1]

        await admin.create_partitions({"aio-a": NewPartitions(4)})
        [described] = await admin.describe_topics(["aio-a"])
        assert len(described["partitions"]) == 4

        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "aio-b")]
        )
        [resource] = response.resources
        error_code, _message, _type, name, entries = resource[:5]
        assert (error_code, name) == (0, "aio-b")
        values = {entry[0]: entry[1] for entry in entries}
        assert values["retention.ms"] == "3600000"

        [altered] = await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "aio-b", {"segment.ms": "60000"})]
        )
        assert altered.resources[0][0] == 0
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "aio-b", {"segment.ms": None})]
        )
        entries = response.resources[0][4]
        assert [(e[0], e[1]) for e in entries] == [("segment.ms", "60000")]

        deleted = await admin.delete_topics(["aio-a", "aio-b", "aio-never"])
        codes = {entry[0]: entry[1] for entry in deleted.topic_error_codes}
        assert codes == {"aio-a": 0, "aio-b": 0, "aio-never": 3}  # UNKNOWN_TOPIC_OR_PARTITION
        assert not {"aio-a", "aio-b"} & set(await admin.list_topics())
    finally:
        await admin.close()


def test_admin_create_list_describe_alter_delete(server: BrokerProcess) -> None:
    asyncio.run(_admin_session(server.bootstrap))
