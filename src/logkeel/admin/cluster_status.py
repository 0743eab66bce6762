"""A cluster as `logkeel cluster status` and `logkeel console` show it: the bootstrap broker's
Metadata (v12: leader epochs, offline replicas), each broker's log dirs (DescribeLogDirs) and,
from ZooKeeper, whose address the broker's DescribeConfigs gives (``zookeeper.connect``), the
elections after which replicas lost records, the controller's history (`cluster.zk_history`),
why each offline partition waits and the replica to designate for it (`cluster.designation`)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from logkeel.admin.session import AdminSession, nested
from logkeel.cluster.designation import replica_to_designate
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_data import ReplicaLogReport
from logkeel.cluster.zk_session import ZooKeeperUnavailable
from logkeel.server.network.client import BrokerConnectionError
from logkeel.server.protocol import ApiKey, request_schema
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["status_of", "zookeeper_connect"]

_BROKER_RESOURCE = 4


def status_of(admin: AdminSession, *, with_losses: bool = True) -> dict[str, Any]:
    """The cluster as the bootstrap broker of ``admin`` sees it, as plain data (what `cluster
    status --json` prints); with ``with_losses``, ``election_losses`` and ``history`` (None
    when ZooKeeper could not be read: a single node has none). ``BrokerConnectionError``."""
    response = admin.metadata()
    brokers = [
        {"id": int(b.node_id), "host": b.host, "port": int(b.port), "rack": b.rack,
         **_log_dirs(admin, f"{b.host}:{int(b.port)}")}
        for b in sorted(response.brokers, key=lambda b: b.node_id)
    ]  # fmt: skip
    partitions = []
    for t in sorted(response.topics, key=lambda t: t.name or ""):
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            replicas = [int(r) for r in p.replica_nodes]
            isr = [int(r) for r in p.isr_nodes]
            partitions.append({
                "topic": t.name,
                "partition": int(p.partition_index),
                "leader": int(p.leader_id),
                "leader_epoch": int(p.leader_epoch),
                "replicas": replicas,
                "isr": isr,
                "offline_replicas": [int(r) for r in p.offline_replicas],
                "offline": int(p.leader_id) < 0,
                "under_replicated": len(isr) < len(replicas),
            })  # fmt: skip
    status: dict[str, Any] = {
        "cluster_id": response.cluster_id,
        "controller": int(response.controller_id),
        "brokers": brokers,
        "partitions": partitions,
    }
    if with_losses:
        connect = zookeeper_connect(admin, status)
        status["election_losses"], status["history"] = _from_zookeeper(
            connect, status, admin.bootstrap()
        )
    return status


def zookeeper_connect(admin: AdminSession, status: dict[str, Any]) -> str | None:
    """The cluster's zookeeper.connect, from the bootstrap broker's DescribeConfigs (None: not a
    cluster member, or not among the brokers ``status`` lists)."""
    host, _, port = admin.bootstrap().rpartition(":")
    node = next(
        (
            b["id"]
            for b in status["brokers"]
            if b["port"] == int(port) and (not host or b["host"] == host)
        ),  # fmt: skip
        None,
    )
    if node is None:
        return None
    request_type = request_schema(ApiKey.DESCRIBE_CONFIGS, 1)
    assert request_type is not None
    resource = nested(request_type, "DescribeConfigsResource")
    response = admin.send(request_type(
        resources=(resource(resource_type=i8(_BROKER_RESOURCE), resource_name=str(node),
                            configuration_keys=("zookeeper.connect",)),),
        include_synonyms=False,
    ))  # fmt: skip
    for result in response.results:
        for config in result.configs:
            if config.name == "zookeeper.connect" and config.value:
                return str(config.value)
    return None


def _from_zookeeper(
    connect: str | None, status: dict[str, Any], bootstrap: str
) -> tuple[list[dict[str, Any]] | None, dict[str, list[dict[str, Any]]] | None]:
    """The election losses and the controller's history (`zk_history`: elections, slow
    leaders' step-downs, log dir events), None when unknown; each offline partition of
    ``status`` gets why it waits (``offline_reason``) and the replica to designate
    (``designate``, `cluster.designation`: the audit's ranking of the brokers' reports)."""
    if connect is None:
        return None, None
    client = ZkMetadataClient(connect, session_timeout_ms=10_000)
    try:
        client.start()
    except ZooKeeperUnavailable:
        return None, None
    try:
        reasons = {(tp.topic, tp.partition): r for tp, r in client.offline_reasons().items()}
        _designations(client, status, bootstrap)
        for p in status["partitions"]:
            if p["offline"]:
                p["offline_reason"] = reasons.get((p["topic"], p["partition"]))
        return [
            {"topic": x.tp.topic, "partition": x.tp.partition, "leader": x.leader,
             "leader_epoch": x.leader_epoch, "from_offset": x.from_offset,
             "truncated": {str(r): n for r, n in x.truncated.items()}, "reason": x.reason,
             "time_ms": x.time_ms}
            for x in client.election_losses()
        ], client.history()  # fmt: skip
    finally:
        client.close()


def _designations(client: ZkMetadataClient, status: dict[str, Any], bootstrap: str) -> None:
    """Each offline partition's replica to designate, from its replicas' last reports (each
    broker's read once)."""
    offline = [p for p in status["partitions"] if p["offline"]]
    if not offline:
        return
    live = {b["id"] for b in status["brokers"]}
    logs: dict[int, dict[TopicPartition, ReplicaLogReport]] = {}
    topic_ids: dict[str, str | None] = {}
    for p in offline:
        tp = TopicPartition(p["topic"], p["partition"])
        for b in p["replicas"]:
            if b not in logs:
                found = client.replica_logs_of(b)
                logs[b] = found[1] if found is not None else {}
        if tp.topic not in topic_ids:
            assignment = client.topic_assignment(tp.topic)
            topic_ids[tp.topic] = assignment.topic_id if assignment is not None else None
        reports = {b: logs[b][tp] for b in p["replicas"] if tp in logs[b]}
        p["designate"] = replica_to_designate(
            tp.topic, tp.partition, p["replicas"], reports,
            topic_id=topic_ids[tp.topic], live=live, bootstrap=bootstrap,
        )  # fmt: skip


def _log_dirs(admin: AdminSession, address: str) -> dict[str, Any]:
    """The broker's log dirs, online and offline (DescribeLogDirs), and each dir's error, bytes
    and replica sizes (``log_dirs``); empty and ``reachable`` false when it did not answer."""
    request_type = request_schema(ApiKey.DESCRIBE_LOG_DIRS, 1)
    assert request_type is not None
    try:
        response = admin.send_to(address, request_type(topics=None))
    except BrokerConnectionError:
        return {"log_dirs_online": [], "log_dirs_offline": [], "log_dirs": [], "reachable": False}
    online = [r.log_dir for r in response.results if r.error_code == ErrorCode.none]
    offline = [r.log_dir for r in response.results if r.error_code != ErrorCode.none]
    details = [
        {
            "log_dir": r.log_dir,
            "error": None if r.error_code == ErrorCode.none else r.error_code.name.upper(),
            "bytes": sum(int(p.partition_size) for t in r.topics for p in t.partitions),
            "replicas": {
                f"{t.name}-{int(p.partition_index)}": int(p.partition_size)
                for t in r.topics
                for p in t.partitions
                if not p.is_future_key
            },
        }
        for r in response.results
    ]
    return {
        "log_dirs_online": online,
        "log_dirs_offline": offline,
        "log_dirs": details,
        "reachable": True,
    }
