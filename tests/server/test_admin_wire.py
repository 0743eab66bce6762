"""Admin APIs over the wire, request by request, against a real `logkeel serve` process.

Real admin clients (test_admin_confluent/kafka_python/aiokafka) show the common paths work; this
module pins down what clients rarely send: duplicates, manual assignments, validate_only,
deleting by topic id, every version of each API, and the exact Kafka error codes.
"""

from __future__ import annotations

import dataclasses
import importlib
import socket
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from logkeel.cluster.metadata import topic_id_text, topic_uuid
from logkeel.config import TOPIC_CONFIG_DEF, BrokerConfig, TopicConfig
from logkeel.server.api.config_changes import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    apply_incremental,
)
from logkeel.server.api.topic_admin import TOPIC_ADMIN_VERSIONS
from logkeel.server.protocol import (
    ApiKey,
    decode_response,
    encode_request,
    request_schema,
    response_schema,
)
from tests.brokerproc import BrokerProcess
from tests.server.conftest import recv_frame

TIMEOUT = i32Timedelta.parse(timedelta(seconds=10))
ZERO = uuid.UUID(int=0)


def make(cls: type[Any], **values: Any) -> Any:
    """``cls(**values)`` with only the fields this version of the schema has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def request_types(api_key: int, version: int) -> Any:
    schema = request_schema(api_key, version)
    assert schema is not None
    return importlib.import_module(schema.__module__)


class Wire:
    """One Kafka connection sending kio requests and decoding the responses."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.correlation_id = 0

    def call(self, request: Any) -> Any:
        self.correlation_id += 1
        self.sock.sendall(encode_request(request, self.correlation_id, "wire-test"))
        frame = recv_frame(self.sock)
        assert frame is not None, "the broker closed the connection"
        response_type = response_schema(request.__api_key__, request.__version__)
        correlation_id, body = decode_response(response_type, frame)
        assert correlation_id == self.correlation_id
        return body

    def close(self) -> None:
        self.sock.close()

    # -- request builders -------------------------------------------------------------------

    def create_topics(
        self,
        topics: list[dict[str, Any]],
        *,
        version: int = 7,
        validate_only: bool = False,
    ) -> list[Any]:
        m = request_types(ApiKey.CREATE_TOPICS, version)
        entries = []
        for t in topics:
            entries.append(
                make(
                    m.CreatableTopic,
                    name=t["name"],
                    num_partitions=t.get("partitions", -1),
                    replication_factor=t.get("replication", -1),
                    assignments=tuple(
                        make(m.CreatableReplicaAssignment, partition_index=i, broker_ids=tuple(b))
                        for i, b in t.get("assignments", {}).items()
                    ),
                    configs=tuple(
                        make(m.CreatableTopicConfig, name=k, value=v)
                        for k, v in t.get("configs", {}).items()
                    ),
                )
            )
        request = make(
            m.CreateTopicsRequest,
            topics=tuple(entries),
            timeout=TIMEOUT,
            validate_only=validate_only,
        )
        return list(self.call(request).topics)

    def delete_topics(
        self, names: list[str | None], ids: list[uuid.UUID] | None = None, *, version: int = 6
    ) -> list[Any]:
        m = request_types(ApiKey.DELETE_TOPICS, version)
        if version >= 6:
            ids = ids or [ZERO] * len(names)
            states = tuple(
                make(m.DeleteTopicState, name=n, topic_id=i)
                for n, i in zip(names, ids, strict=True)
            )
            request = make(m.DeleteTopicsRequest, topics=states, timeout=TIMEOUT)
        else:
            request = make(m.DeleteTopicsRequest, topic_names=tuple(names), timeout=TIMEOUT)
        return list(self.call(request).responses)

    def metadata(
        self,
        names: list[str] | None,
        *,
        version: int = 12,
        auto_create: bool = True,
        ids: list[uuid.UUID] | None = None,
        topic_ops: bool = False,
    ) -> Any:
        m = request_types(ApiKey.METADATA, version)
        topics = None
        if names is not None or ids is not None:
            topics = tuple(make(m.MetadataRequestTopic, name=n, topic_id=ZERO) for n in names or ())
            topics += tuple(make(m.MetadataRequestTopic, name=None, topic_id=i) for i in ids or ())
        return self.call(
            make(
                m.MetadataRequest,
                topics=topics if topics is not None or version >= 1 else (),
                allow_auto_topic_creation=auto_create,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=topic_ops,
            )
        )

    def describe_configs(
        self,
        resources: list[tuple[int, str, list[str] | None]],
        *,
        version: int = 4,
        synonyms: bool = False,
        docs: bool = False,
    ) -> list[Any]:
        m = request_types(ApiKey.DESCRIBE_CONFIGS, version)
        request = make(
            m.DescribeConfigsRequest,
            resources=tuple(
                make(
                    m.DescribeConfigsResource,
                    resource_type=t,
                    resource_name=n,
                    configuration_keys=None if keys is None else tuple(keys),
                )
                for t, n, keys in resources
            ),
            include_synonyms=synonyms,
            include_documentation=docs,
        )
        return list(self.call(request).results)

    def incremental_alter(
        self,
        resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
        *,
        version: int = 1,
        validate_only: bool = False,
    ) -> list[Any]:
        m = request_types(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
        request = make(
            m.IncrementalAlterConfigsRequest,
            resources=tuple(
                make(
                    m.AlterConfigsResource,
                    resource_type=t,
                    resource_name=n,
                    configs=tuple(
                        make(m.AlterableConfig, name=k, config_operation=op, value=v)
                        for k, op, v in ops
                    ),
                )
                for t, n, ops in resources
            ),
            validate_only=validate_only,
        )
        return list(self.call(request).responses)

    def alter(
        self,
        resources: list[tuple[int, str, dict[str, str | None]]],
        *,
        version: int = 2,
        validate_only: bool = False,
    ) -> list[Any]:
        m = request_types(ApiKey.ALTER_CONFIGS, version)
        request = make(
            m.AlterConfigsRequest,
            resources=tuple(
                make(
                    m.AlterConfigsResource,
                    resource_type=t,
                    resource_name=n,
                    configs=tuple(make(m.AlterableConfig, name=k, value=v) for k, v in c.items()),
                )
                for t, n, c in resources
            ),
            validate_only=validate_only,
        )
        return list(self.call(request).responses)

    def create_partitions(
        self,
        topics: list[tuple[str, int, list[list[int]] | None]],
        *,
        version: int = 3,
        validate_only: bool = False,
    ) -> list[Any]:
        m = request_types(ApiKey.CREATE_PARTITIONS, version)
        request = make(
            m.CreatePartitionsRequest,
            topics=tuple(
                make(
                    m.CreatePartitionsTopic,
                    name=name,
                    count=count,
                    assignments=None
                    if assignments is None
                    else tuple(
                        make(m.CreatePartitionsAssignment, broker_ids=tuple(a)) for a in assignments
                    ),
                )
                for name, count, assignments in topics
            ),
            timeout=TIMEOUT,
            validate_only=validate_only,
        )
        return list(self.call(request).results)

    def describe_log_dirs(self, topics: dict[str, list[int]] | None, *, version: int = 5) -> Any:
        m = request_types(ApiKey.DESCRIBE_LOG_DIRS, version)
        request = make(
            m.DescribeLogDirsRequest,
            topics=None
            if topics is None
            else tuple(
                make(m.DescribableLogDirTopic, topic=t, partitions=tuple(p))
                for t, p in topics.items()
            ),
        )
        return self.call(request)


TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("admin-wire")
    with BrokerProcess(
        data, overrides={"num.partitions": "2", "log.retention.ms": "86400000"}
    ) as b:
        yield b


@pytest.fixture
def wire(server: BrokerProcess) -> Iterator[Wire]:
    w = Wire(server.port)
    yield w
    w.close()


def codes(results: list[Any]) -> list[ErrorCode]:
    return [r.error_code for r in results]


# -- CreateTopics ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(TOPIC_ADMIN_VERSIONS[ApiKey.CREATE_TOPICS][0], 8))
def test_create_topics_every_version(wire: Wire, version: int) -> None:
    name = f"ct-v{version}"
    [result] = wire.create_topics(
        [{"name": name, "partitions": 3, "replication": 1, "configs": {"retention.ms": "1000"}}],
        version=version,
    )
    assert result.name == name
    assert result.error_code == ErrorCode.none
    if version >= 5:
        assert result.num_partitions == 3
        assert result.replication_factor == 1
        by_name = {c.name: c for c in result.configs}
        assert by_name["retention.ms"].value == "1000"
        assert by_name["retention.ms"].config_source == 1  # TOPIC_CONFIG
        assert by_name["segment.bytes"].config_source == 5  # DEFAULT_CONFIG
    if version >= 7:
        assert result.topic_id not in (None, ZERO)
    [topic] = wire.metadata([name], auto_create=False).topics
    assert topic.error_code == ErrorCode.none
    assert len(topic.partitions) == 3


def test_create_topics_defaults_and_validate_only(wire: Wire) -> None:
    [result] = wire.create_topics([{"name": "ct-defaults"}])  # -1/-1: broker defaults
    assert result.error_code == ErrorCode.none
    assert (result.num_partitions, result.replication_factor) == (2, 1)

    [dry] = wire.create_topics([{"name": "ct-dry", "partitions": 4}], validate_only=True)
    assert dry.error_code == ErrorCode.none
    assert dry.num_partitions == 4
    [missing] = wire.metadata(["ct-dry"], auto_create=False).topics
    assert missing.error_code == ErrorCode.unknown_topic_or_partition


def test_create_topics_errors(wire: Wire) -> None:
    wire.create_topics([{"name": "ct-exists", "partitions": 1}])
    results = wire.create_topics(
        [
            {"name": "ct-exists", "partitions": 1},
            {"name": "bad/name", "partitions": 1},
            {"name": "x" * 250, "partitions": 1},
            {"name": "ct-zero", "partitions": 0},
            {"name": "ct-rf0", "partitions": 1, "replication": 0},
            {"name": "ct-rf3", "partitions": 1, "replication": 3},
            {
                "name": "ct-badcfg",
                "partitions": 1,
                "configs": {"retention.ms": "soon", "nope": "1"},
            },
            {"name": "ct-brokerkey", "partitions": 1, "configs": {"log.retention.ms": "1"}},
            {"name": "ct-dup", "partitions": 1},
            {"name": "ct-dup", "partitions": 1},
        ]
    )
    assert codes(results) == [
        ErrorCode.topic_already_exists,
        ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_partitions,
        ErrorCode.invalid_replication_factor,
        ErrorCode.invalid_replication_factor,
        ErrorCode.invalid_config,
        ErrorCode.invalid_config,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
    ]
    bad_config = results[6]
    assert "retention.ms" in bad_config.error_message and "nope" in bad_config.error_message
    for r in results:
        assert r.topic_id in (None, ZERO) and r.num_partitions == -1  # kio reads zero as None
    names = {t.name for t in wire.metadata(None).topics}
    assert not names & {"ct-zero", "ct-rf0", "ct-rf3", "ct-badcfg", "ct-brokerkey", "ct-dup"}


def test_create_topics_colliding_name(wire: Wire) -> None:
    wire.create_topics([{"name": "ct.collide", "partitions": 1}])
    [result] = wire.create_topics([{"name": "ct_collide", "partitions": 1}])
    assert result.error_code == ErrorCode.invalid_topic_exception


def test_create_topics_manual_assignment(wire: Wire) -> None:
    ok, both, gap, unknown, dup = wire.create_topics(
        [
            {"name": "ca-ok", "assignments": {0: [0], 1: [0], 2: [0]}},
            {"name": "ca-both", "partitions": 3, "assignments": {0: [0]}},
            {"name": "ca-gap", "assignments": {0: [0], 2: [0]}},
            {"name": "ca-unknown", "assignments": {0: [7]}},
            {"name": "ca-dup", "assignments": {0: [0, 0]}},
        ]
    )
    assert ok.error_code == ErrorCode.none and ok.num_partitions == 3
    assert both.error_code == ErrorCode.invalid_request
    assert gap.error_code == ErrorCode.invalid_replica_assignment
    assert unknown.error_code == ErrorCode.invalid_replica_assignment
    assert dup.error_code == ErrorCode.invalid_replica_assignment


# -- DeleteTopics ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(1, 6))
def test_delete_topics_by_name_every_version(wire: Wire, version: int) -> None:
    name = f"dt-v{version}"
    wire.create_topics([{"name": name, "partitions": 1}])
    ok, unknown = wire.delete_topics([name, f"{name}-missing"], version=version)
    assert (ok.name, ok.error_code) == (name, ErrorCode.none)
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition
    [gone] = wire.metadata([name], auto_create=False).topics
    assert gone.error_code == ErrorCode.unknown_topic_or_partition


def test_delete_topics_by_id(wire: Wire) -> None:
    [created] = wire.create_topics([{"name": "dt-id", "partitions": 2}])
    stranger = uuid.uuid4()
    results = wire.delete_topics([None, None], [created.topic_id, stranger])
    by_id = {r.topic_id: r for r in results}
    assert by_id[created.topic_id].error_code == ErrorCode.none
    assert by_id[created.topic_id].name == "dt-id"
    assert by_id[stranger].error_code == ErrorCode.unknown_topic_id
    [gone] = wire.metadata(["dt-id"], auto_create=False).topics
    assert gone.error_code == ErrorCode.unknown_topic_or_partition


def test_delete_topics_bad_requests(wire: Wire) -> None:
    [created] = wire.create_topics([{"name": "dt-both", "partitions": 1}])
    both, neither = wire.delete_topics(["dt-both", None], [created.topic_id, ZERO])
    assert both.error_code == ErrorCode.invalid_request
    assert neither.error_code == ErrorCode.invalid_request
    dup1, dup2 = wire.delete_topics(["dt-both", "dt-both"])
    assert codes([dup1, dup2]) == [ErrorCode.invalid_request] * 2
    [still] = wire.metadata(["dt-both"], auto_create=False).topics
    assert still.error_code == ErrorCode.none


# -- CreatePartitions -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_every_version(wire: Wire, version: int) -> None:
    name = f"cp-v{version}"
    wire.create_topics([{"name": name, "partitions": 1}])
    [result] = wire.create_partitions([(name, 3, None)], version=version)
    assert result.error_code == ErrorCode.none
    [topic] = wire.metadata([name]).topics
    assert sorted(p.partition_index for p in topic.partitions) == [0, 1, 2]


def test_create_partitions_errors_and_validate_only(wire: Wire) -> None:
    wire.create_topics([{"name": "cp-err", "partitions": 2}])
    dup1, unknown, dup2 = wire.create_partitions(
        [("cp-err", 3, None), ("cp-missing", 4, None), ("cp-err", 4, None)]
    )
    assert codes([dup1, dup2]) == [ErrorCode.invalid_request] * 2
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition
    [fewer] = wire.create_partitions([("cp-err", 1, None)])
    [same] = wire.create_partitions([("cp-err", 2, None)])
    [bad_assign] = wire.create_partitions([("cp-err", 4, [[0]])])  # 2 added, 1 assignment
    [wrong_rf] = wire.create_partitions([("cp-err", 3, [[0, 5]])])
    assert fewer.error_code == ErrorCode.invalid_partitions
    assert same.error_code == ErrorCode.invalid_partitions
    assert bad_assign.error_code == ErrorCode.invalid_replica_assignment
    assert wrong_rf.error_code == ErrorCode.invalid_replica_assignment
    [dry] = wire.create_partitions([("cp-err", 5, None)], validate_only=True)
    assert dry.error_code == ErrorCode.none
    [topic] = wire.metadata(["cp-err"]).topics
    assert len(topic.partitions) == 2
    [manual] = wire.create_partitions([("cp-err", 3, [[0]])])
    assert manual.error_code == ErrorCode.none


# -- DescribeConfigs ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_configs_every_version(wire: Wire, version: int) -> None:
    wire.create_topics(
        [{"name": "dc-topic", "partitions": 1, "configs": {"segment.bytes": "2000000"}}]
    )
    topic, broker = wire.describe_configs(
        [(TOPIC, "dc-topic", None), (BROKER, "0", ["log.retention.ms", "log.segment.bytes"])],
        version=version,
        synonyms=True,
        docs=True,
    )
    assert topic.error_code == ErrorCode.none
    rows = {c.name: c for c in topic.configs}
    assert rows["segment.bytes"].value == "2000000"
    assert rows["segment.bytes"].config_source == 1  # TOPIC_CONFIG
    assert not rows["segment.bytes"].read_only
    # retention.ms comes from the broker's static log.retention.ms override.
    assert rows["retention.ms"].value == "86400000"
    assert rows["retention.ms"].config_source == 4  # STATIC_BROKER_CONFIG
    synonyms = [(s.name, s.value, s.source) for s in rows["retention.ms"].synonyms]
    assert synonyms == [("log.retention.ms", "86400000", 4), ("log.retention.hours", "168", 5)]
    seg_synonyms = [(s.name, s.value, s.source) for s in rows["segment.bytes"].synonyms]
    assert seg_synonyms == [("segment.bytes", "2000000", 1), ("log.segment.bytes", "1073741824", 5)]
    if version >= 3:
        assert rows["segment.bytes"].config_type == 3  # INT
        assert rows["cleanup.policy"].config_type == 7  # LIST
        assert rows["segment.bytes"].documentation
    assert broker.error_code == ErrorCode.none
    brows = {c.name: c for c in broker.configs}
    assert set(brows) == {"log.retention.ms", "log.segment.bytes"}
    assert brows["log.retention.ms"].config_source == 4 and brows["log.retention.ms"].read_only
    assert brows["log.segment.bytes"].config_source == 5


def test_describe_configs_selected_keys_and_errors(wire: Wire) -> None:
    wire.create_topics([{"name": "dc-keys", "partitions": 1}])
    keys, unknown, invalid, other_broker, default_broker, bad_type = wire.describe_configs(
        [
            (TOPIC, "dc-keys", ["retention.ms", "no.such.config"]),
            (TOPIC, "dc-missing", None),
            (TOPIC, "bad name!", None),
            (BROKER, "7", None),
            (BROKER, "", None),
            (99, "x", None),
        ]
    )
    assert [c.name for c in keys.configs] == ["retention.ms"]
    assert not keys.configs[0].synonyms  # not asked for
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition
    assert invalid.error_code == ErrorCode.invalid_topic_exception
    assert other_broker.error_code == ErrorCode.invalid_request
    assert (default_broker.error_code, default_broker.configs) == (ErrorCode.none, ())
    assert bad_type.error_code == ErrorCode.invalid_request
    # An empty key list asks for every config, as null does (Kafka's ConfigHelper).
    [empty] = wire.describe_configs([(TOPIC, "dc-keys", [])])
    [null] = wire.describe_configs([(TOPIC, "dc-keys", None)])
    assert len(empty.configs) == len(null.configs) == len(TOPIC_CONFIG_DEF)


# -- AlterConfigs and IncrementalAlterConfigs ----------------------------------------------------


def _topic_values(wire: Wire, name: str) -> dict[str, tuple[str | None, int]]:
    [result] = wire.describe_configs([(TOPIC, name, None)])
    assert result.error_code == ErrorCode.none
    return {c.name: (c.value, c.config_source) for c in result.configs}


@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_configs(wire: Wire, version: int) -> None:
    name = f"iac-v{version}"
    wire.create_topics([{"name": name, "partitions": 1, "configs": {"retention.ms": "5000"}}])
    [result] = wire.incremental_alter(
        [
            (
                TOPIC,
                name,
                [
                    ("segment.bytes", OP_SET, "3000000"),
                    ("retention.ms", OP_DELETE, None),
                    ("cleanup.policy", OP_APPEND, "compact"),
                ],
            )
        ],
        version=version,
    )
    assert result.error_code == ErrorCode.none
    values = _topic_values(wire, name)
    assert values["segment.bytes"] == ("3000000", 1)
    assert values["retention.ms"] == ("86400000", 4)  # back to the broker's value
    assert values["cleanup.policy"] == ("delete,compact", 1)
    [result] = wire.incremental_alter([(TOPIC, name, [("cleanup.policy", OP_SUBTRACT, "delete")])])
    assert result.error_code == ErrorCode.none
    assert _topic_values(wire, name)["cleanup.policy"] == ("compact", 1)


def test_incremental_alter_configs_errors(wire: Wire) -> None:
    wire.create_topics([{"name": "iac-err", "partitions": 1}])
    results = wire.incremental_alter(
        [
            (TOPIC, "iac-err", [("retention.ms", OP_APPEND, "1")]),
            (TOPIC, "iac-missing", [("retention.ms", OP_SET, "1")]),
            (TOPIC, "bad name!", [("retention.ms", OP_SET, "1")]),
            (BROKER, "0", [("log.retention.ms", OP_SET, "1")]),
        ]
    )
    assert codes(results) == [
        ErrorCode.invalid_config,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_request,
    ]
    [bad_value] = wire.incremental_alter([(TOPIC, "iac-err", [("retention.ms", OP_SET, "-5")])])
    assert bad_value.error_code == ErrorCode.invalid_config
    [dup_keys] = wire.incremental_alter(
        [(TOPIC, "iac-err", [("retention.ms", OP_SET, "1"), ("retention.ms", OP_DELETE, None)])]
    )
    assert dup_keys.error_code == ErrorCode.invalid_request
    [null_set] = wire.incremental_alter([(TOPIC, "iac-err", [("retention.ms", OP_SET, None)])])
    assert null_set.error_code == ErrorCode.invalid_request
    [bad_op] = wire.incremental_alter([(TOPIC, "iac-err", [("retention.ms", 9, "1")])])
    assert bad_op.error_code == ErrorCode.invalid_request
    dup1, dup2 = wire.incremental_alter([(TOPIC, "iac-err", [("retention.ms", OP_SET, "1")])] * 2)
    assert codes([dup1, dup2]) == [ErrorCode.invalid_request] * 2
    [dry] = wire.incremental_alter(
        [(TOPIC, "iac-err", [("retention.ms", OP_SET, "12345")])], validate_only=True
    )
    assert dry.error_code == ErrorCode.none
    assert _topic_values(wire, "iac-err")["retention.ms"] == ("86400000", 4)


@pytest.mark.parametrize("version", range(0, 3))
def test_alter_configs_replaces_overrides(wire: Wire, version: int) -> None:
    name = f"ac-v{version}"
    wire.create_topics(
        [
            {
                "name": name,
                "partitions": 1,
                "configs": {"retention.ms": "5000", "segment.ms": "60000"},
            }
        ]
    )
    [result] = wire.alter([(TOPIC, name, {"segment.bytes": "4000000"})], version=version)
    assert result.error_code == ErrorCode.none
    values = _topic_values(wire, name)
    assert values["segment.bytes"] == ("4000000", 1)
    assert values["segment.ms"][1] == 5  # the old override is gone
    assert values["retention.ms"] == ("86400000", 4)
    [bad] = wire.alter([(TOPIC, name, {"segment.bytes": "1"})], version=version)
    assert bad.error_code == ErrorCode.invalid_config
    [broker] = wire.alter([(BROKER, "0", {"num.partitions": "5"})], version=version)
    assert broker.error_code == ErrorCode.invalid_request


# -- broker loggers ------------------------------------------------------------------------------


def _levels(wire: Wire) -> dict[str, str]:
    [result] = wire.describe_configs([(BROKER_LOGGER, "0", None)])
    assert result.error_code == ErrorCode.none
    assert all(c.config_source == 6 and not c.read_only for c in result.configs)
    return {c.name: c.value for c in result.configs}


def test_broker_logger_levels(wire: Wire) -> None:
    levels = _levels(wire)
    assert levels["root"] == "INFO"  # `serve -v`
    assert levels["logkeel.server.network.server"] == "INFO"
    [ok] = wire.incremental_alter(
        [(BROKER_LOGGER, "0", [("logkeel.server.network.server", OP_SET, "DEBUG")])]
    )
    assert ok.error_code == ErrorCode.none
    assert _levels(wire)["logkeel.server.network.server"] == "DEBUG"
    [ok] = wire.incremental_alter(
        [(BROKER_LOGGER, "0", [("logkeel.server.network.server", OP_DELETE, None)])]
    )
    assert ok.error_code == ErrorCode.none
    assert _levels(wire)["logkeel.server.network.server"] == "INFO"  # inherited again

    [dry] = wire.incremental_alter(
        [(BROKER_LOGGER, "0", [("root", OP_SET, "ERROR")])], validate_only=True
    )
    assert dry.error_code == ErrorCode.none
    assert _levels(wire)["root"] == "INFO"


def test_broker_logger_errors(wire: Wire) -> None:
    results = wire.incremental_alter(
        [
            (BROKER_LOGGER, "0", [("no.such.logger", OP_SET, "DEBUG")]),
            (BROKER_LOGGER, "1", [("root", OP_SET, "DEBUG")]),
        ]
    )
    assert codes(results) == [ErrorCode.invalid_config, ErrorCode.invalid_request]
    for op, value, code in (
        (OP_SET, "VERBOSE", ErrorCode.invalid_config),
        (OP_DELETE, None, ErrorCode.invalid_request),  # the root logger keeps a level
        (OP_APPEND, "DEBUG", ErrorCode.invalid_request),
    ):
        [result] = wire.incremental_alter([(BROKER_LOGGER, "0", [("root", op, value)])])
        assert result.error_code == code
    [legacy] = wire.alter([(BROKER_LOGGER, "0", {"root": "DEBUG"})])
    assert legacy.error_code == ErrorCode.invalid_request
    [empty] = wire.describe_configs([(BROKER_LOGGER, "", None)])
    assert empty.error_code == ErrorCode.invalid_request
    assert _levels(wire)["root"] == "INFO"


# -- DescribeLogDirs ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(1, 6))
def test_describe_log_dirs(wire: Wire, server: BrokerProcess, version: int) -> None:
    wire.create_topics([{"name": "dld", "partitions": 2}])
    response = wire.describe_log_dirs(None, version=version)
    if version >= 3:
        assert response.error_code == ErrorCode.none
    [result] = response.results
    assert result.error_code == ErrorCode.none
    assert result.log_dir == str(server.log_dirs[0].absolute())
    topics = {t.name: t for t in result.topics}
    parts = topics["dld"].partitions
    assert sorted(p.partition_index for p in parts) == [0, 1]
    assert all(p.partition_size == 0 and p.offset_lag == 0 and not p.is_future_key for p in parts)
    if version >= 4:
        assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    [only] = wire.describe_log_dirs({"dld": [1]}, version=version).results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in only.topics] == [
        ("dld", [1])
    ]


# -- pure helpers ---------------------------------------------------------------------------------


@given(st.uuids())
def test_topic_id_text_round_trip(value: uuid.UUID) -> None:
    text = topic_id_text(value)
    assert len(text) == 22 and "=" not in text
    assert topic_uuid(text) == value


_items = st.lists(st.sampled_from(["delete", "compact"]), max_size=3)


@given(start=_items, added=st.sampled_from(["delete", "compact"]))
def test_append_then_subtract(start: list[str], added: str) -> None:
    topic = TopicConfig.from_broker(BrokerConfig(warn_unknown=False))
    current = {"cleanup.policy": ",".join(dict.fromkeys(start))} if start else {}
    appended = apply_incremental(current, [("cleanup.policy", OP_APPEND, added)], topic)
    items = appended["cleanup.policy"].split(",")
    assert items.count(added) == 1
    before = current.get("cleanup.policy", "delete").split(",")
    assert items[: len([i for i in before if i])] == [i for i in before if i]
    removed = apply_incremental(appended, [("cleanup.policy", OP_SUBTRACT, added)], topic)
    assert added not in [i for i in removed["cleanup.policy"].split(",") if i]
    deleted = apply_incremental(removed, [("cleanup.policy", OP_DELETE, None)], topic)
    assert "cleanup.policy" not in deleted
    assert apply_incremental({}, [("retention.ms", OP_SET, "7")], topic) == {"retention.ms": "7"}


def test_topic_deletion_disabled(tmp_path: Path) -> None:
    from tests.server.test_metadata_offline import InProcessBroker  # it imports this module

    proc = InProcessBroker(
        BrokerConfig(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "log.dirs": str(tmp_path),
                "delete.topic.enable": "false",
            }
        )
    )
    broker = proc.start()
    w = Wire(broker.port)
    try:
        w.create_topics([{"name": "keep", "partitions": 1}])
        [result] = w.delete_topics(["keep"])
        assert result.error_code == ErrorCode.topic_deletion_disabled
        [old] = w.delete_topics(["keep"], version=2)  # before v3 Kafka says INVALID_REQUEST
        assert old.error_code == ErrorCode.invalid_request
        [still] = w.metadata(["keep"], auto_create=False).topics
        assert still.error_code == ErrorCode.none
    finally:
        w.close()
        proc.stop()
