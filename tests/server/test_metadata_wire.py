"""Metadata and DescribeCluster over the wire, every version, against a real `logkeel serve`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from logkeel.config import BrokerConfig
from logkeel.server.api.metadata import CLUSTER_OPERATIONS, TOPIC_OPERATIONS
from logkeel.server.protocol import ApiKey
from tests.brokerproc import BrokerProcess
from tests.server.test_admin_wire import ZERO, Wire, make, request_types
from tests.server.test_metadata_offline import InProcessBroker


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("metadata-wire")
    with BrokerProcess(data, overrides={"num.partitions": "3"}, extra_args=["--node-id", "5"]) as b:
        yield b


@pytest.fixture
def wire(server: BrokerProcess) -> Iterator[Wire]:
    w = Wire(server.port)
    yield w
    w.close()


def cluster_id(server: BrokerProcess) -> str:
    text = (server.log_dirs[0] / "meta.properties").read_text()
    return next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("cluster."))


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_every_version(wire: Wire, server: BrokerProcess, version: int) -> None:
    name = f"md-v{version}"
    [created] = wire.create_topics([{"name": name, "partitions": 2}])
    response = wire.metadata([name], version=version)
    [broker] = response.brokers
    assert (broker.node_id, broker.host, broker.port) == (5, "127.0.0.1", server.port)
    if version >= 1:
        assert response.controller_id == 5
    if version >= 2:
        assert response.cluster_id == cluster_id(server)
    [topic] = response.topics
    assert (topic.name, topic.error_code) == (name, ErrorCode.none)
    if version >= 1:
        assert topic.is_internal is False
    if version >= 10:
        assert topic.topic_id == created.topic_id
    partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
    assert [p.partition_index for p in partitions] == [0, 1]
    for p in partitions:
        assert p.error_code == ErrorCode.none
        assert (p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)) == (5, (5,), (5,))
        if version >= 5:
            assert tuple(p.offline_replicas) == ()
        if version >= 7:
            assert p.leader_epoch >= 0
    if version >= 13:
        assert response.error_code == ErrorCode.none

    everything = wire.metadata(None, version=version)
    assert name in {t.name for t in everything.topics}


def test_metadata_v0_empty_list_means_all_topics(wire: Wire) -> None:
    wire.create_topics([{"name": "md-all", "partitions": 1}])
    m = request_types(ApiKey.METADATA, 0)
    response = wire.call(m.MetadataRequest(topics=()))
    assert "md-all" in {t.name for t in response.topics}
    v1 = request_types(ApiKey.METADATA, 1)
    assert wire.call(v1.MetadataRequest(topics=())).topics == ()


def test_metadata_topic_errors(wire: Wire) -> None:
    bad, unknown = wire.metadata(["bad name!", "md-unknown"], auto_create=False).topics
    assert (bad.name, bad.error_code) == ("bad name!", ErrorCode.invalid_topic_exception)
    assert (unknown.name, unknown.error_code) == (
        "md-unknown",
        ErrorCode.unknown_topic_or_partition,
    )
    assert bad.partitions == () and unknown.partitions == ()
    # An illegal name is never auto-created, whatever the request allows.
    [bad] = wire.metadata(["x" * 250], auto_create=True).topics
    assert bad.error_code == ErrorCode.invalid_topic_exception


def test_metadata_auto_creates_with_num_partitions(wire: Wire) -> None:
    [topic] = wire.metadata(["md-auto"], auto_create=True).topics
    assert topic.error_code == ErrorCode.none
    assert len(topic.partitions) == 3  # num.partitions
    # v3 and below cannot say no: auto-creation is implied.
    [old] = wire.metadata(["md-auto-v3"], version=3).topics
    assert old.error_code == ErrorCode.none


def test_metadata_internal_topic_is_not_auto_created(wire: Wire) -> None:
    [topic] = wire.metadata(["__transaction_state"], auto_create=True).topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition
    assert topic.is_internal is True


def test_metadata_by_topic_id(wire: Wire) -> None:
    [created] = wire.create_topics([{"name": "md-by-id", "partitions": 1}])
    stranger = uuid.uuid4()
    response = wire.metadata(None, ids=[created.topic_id, stranger], version=12)
    by_id = {t.topic_id: t for t in response.topics}
    assert by_id[created.topic_id].name == "md-by-id"
    assert by_id[created.topic_id].error_code == ErrorCode.none
    assert by_id[stranger].error_code == ErrorCode.unknown_topic_id
    assert by_id[stranger].name is None


def test_metadata_topic_id_before_v12_is_invalid(wire: Wire) -> None:
    [created] = wire.create_topics([{"name": "md-id-v11", "partitions": 1}])
    m = request_types(ApiKey.METADATA, 11)
    request = m.MetadataRequest(
        topics=(m.MetadataRequestTopic(name="md-id-v11", topic_id=created.topic_id),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    [topic] = wire.call(request).topics
    assert topic.error_code == ErrorCode.invalid_request


def test_metadata_authorized_operations(wire: Wire) -> None:
    wire.create_topics([{"name": "md-ops", "partitions": 1}])
    [topic] = wire.metadata(["md-ops"], topic_ops=True).topics
    assert topic.topic_authorized_operations == TOPIC_OPERATIONS
    [topic] = wire.metadata(["md-ops"], topic_ops=False).topics
    assert topic.topic_authorized_operations == -(2**31)
    m = request_types(ApiKey.METADATA, 9)
    response = wire.call(
        m.MetadataRequest(
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=False,
        )
    )
    assert response.cluster_authorized_operations == CLUSTER_OPERATIONS


@pytest.mark.parametrize("version", range(0, 3))
def test_describe_cluster(wire: Wire, server: BrokerProcess, version: int) -> None:
    m = request_types(ApiKey.DESCRIBE_CLUSTER, version)
    response = wire.call(
        make(
            m.DescribeClusterRequest,
            include_cluster_authorized_operations=True,
            endpoint_type=1,
            include_fenced_brokers=True,
        )
    )
    assert response.error_code == ErrorCode.none
    assert response.cluster_id == cluster_id(server)
    assert response.controller_id == 5
    assert response.cluster_authorized_operations == CLUSTER_OPERATIONS
    [broker] = response.brokers
    assert (broker.broker_id, broker.host, broker.port) == (5, "127.0.0.1", server.port)
    if version >= 2:
        assert broker.is_fenced is False
    if version >= 1:
        controllers = wire.call(
            make(
                m.DescribeClusterRequest,
                include_cluster_authorized_operations=False,
                endpoint_type=2,
                include_fenced_brokers=False,
            )
        )
        assert controllers.error_code == ErrorCode.mismatched_endpoint_type
        unknown = wire.call(
            make(
                m.DescribeClusterRequest,
                include_cluster_authorized_operations=False,
                endpoint_type=9,
                include_fenced_brokers=False,
            )
        )
        assert unknown.error_code == ErrorCode.unsupported_endpoint_type
        assert unknown.brokers == ()


def test_auto_create_disabled_on_the_broker(tmp_path: Path) -> None:
    proc = InProcessBroker(
        BrokerConfig(
            {
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "log.dirs": str(tmp_path),
                "auto.create.topics.enable": "false",
            }
        )
    )
    broker = proc.start()
    w = Wire(broker.port)
    try:
        [topic] = w.metadata(["md-no-auto"], auto_create=True).topics
        assert topic.error_code == ErrorCode.unknown_topic_or_partition
        [created] = w.create_topics([{"name": "md-explicit", "partitions": 1}])
        assert created.error_code == ErrorCode.none
        [topic] = w.metadata(["md-explicit"]).topics
        assert topic.error_code == ErrorCode.none
        assert topic.topic_id not in (None, ZERO)
    finally:
        w.close()
        proc.stop()
