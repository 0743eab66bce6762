"""Kafka's ZooKeeper layout: znode paths and the JSON each holds, as pure encode/decode
functions (Kafka's ZkData), so Kafka's tools reading a logkeel ZooKeeper see familiar data.

Beyond Kafka, a broker registration carries the ids of the broker's log dirs and which of them
are offline (for KIP-18/KIP-112 status). Its broker epoch is, as in Kafka (KIP-380), the
creation zxid of its ephemeral znode, so it is read from the znode's stat, not its data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from logkeel.cluster.partition_state import ELECTION_TYPES, ElectionRequest, PartitionRegistration
from logkeel.storage.topic_partition import TopicPartition

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPIC_CONFIGS = "/config/topics"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
# Partitions per ISR change notification: ~290 KB with 249-character topic names.
ISR_CHANGE_CHUNK = 1000
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1
# logkeel's own: a failed dir is back online (beyond KIP-18, without a restart).
LOG_DIR_ONLINE_EVENT = 2
CLUSTER_ID = "/cluster/id"
# logkeel's own: a broker stopping on SIGTERM creates an ephemeral child named by its id and the
# controller moves its leaderships away (Kafka used a ControlledShutdown request instead).
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
# logkeel's own: each broker's replicas it cannot serve (their log dir failed, or their log could
# not be loaded), as an ephemeral znode per broker; Kafka's controller learned this from
# LeaderAndIsr responses instead.
OFFLINE_REPLICAS = "/logkeel/offline_replicas"
# logkeel's own: every ACL binding of the cluster in one JSON document (``cluster.acls``),
# changed by compare-and-set so concurrent CreateAcls/DeleteAcls on two brokers both land.
# Kafka kept one znode per resource under /kafka-acl instead.
ACLS = "/logkeel/acls"
# logkeel's own: the SCRAM credentials of every user, salted (``cluster.scram`` documents:
# salt, iterations, stored and server keys, never a password), in one JSON document
# ``{"user": {"SCRAM-SHA-512": {...}}}`` changed by compare-and-set like the ACLs. Kafka kept
# them in /config/users/<user>.
SCRAM_CREDENTIALS = "/logkeel/scram_credentials"
# logkeel's own: the cluster's secret (random bytes, written once by the first broker) from
# which every broker derives the same decoy SCRAM credential for an unknown user
# (``cluster.scram.decoy_credential``).
SCRAM_SECRET = "/logkeel/scram_secret"

# logkeel's own: each broker's report of its replicas' logs (last leader epoch, log end
# offset), one persistent znode per broker, read by the controller for unclean and designated
# elections (Kafka's ZooKeeper controller had no such report and picked the first live replica).
REPLICA_LOGS = "/logkeel/replica_logs"
# logkeel's own: the controller bumps this number to ask every broker for a fresh report.
REPLICA_LOG_REQUEST = "/logkeel/replica_log_request"
# logkeel's own: leader elections asked for by ElectLeaders or `logkeel elect` (including a
# designated replica, which ElectLeaders cannot name), one sequential child each; the controller
# writes the results into the child and the requester deletes it.
ELECTIONS = "/logkeel/elections"
# logkeel's own: every election after which replicas lose records (an unclean leader, a
# designated one out of the ISR), one persistent sequential child each, written by the
# controller and shown by `logkeel cluster status`.
ELECTION_LOSSES = "/logkeel/election_losses"
# logkeel's own: partition reassignments asked by AlterPartitionReassignments (KIP-455), one
# sequential child each, applied and answered by the controller (results written into the
# child, which the requester deletes). The moves themselves live, as in Kafka, in the
# adding_replicas/removing_replicas of /brokers/topics/<t>.
REASSIGNMENTS = "/logkeel/reassignments"
REASSIGNMENT_PREFIX = "reassignment_"
ELECTION_LOSS_PREFIX = "loss_"
# Why a partition is offline, as the controller last decided (one znode a partition, removed
# once it leads again): what `logkeel cluster status` shows beside the offline state.
OFFLINE_REASONS = "/logkeel/offline_reasons"


# logkeel's own (Kafka's controller sent UpdateMetadata instead): a few slots, each overwritten in
# turn by the controller inside its transaction of partition states with those states and
# their new versions, so that a broker watching the slots learns a transaction's states with
# one read, ahead of its watches' re-reads of each state znode (which stay the record: a
# notice overwritten before a broker read it is only a lost shortcut).
STATE_NOTICES = "/logkeel/state_notices"
# Enough for the leaderships of 6,400 partitions in flight at once: a slot overwritten before a
# broker read it costs that broker its watches' re-reads of those states.
STATE_NOTICE_SLOTS = 64


def offline_reason_path(tp: TopicPartition) -> str:
    return f"{OFFLINE_REASONS}/{tp.topic}-{tp.partition}"


# logkeel's own: the last broker epoch each broker id was declared crashed under (one znode a
# broker id, `crash_detection`), written in the transaction that deletes that registration.
# Every registration is created at version 0, so the delete's version alone cannot tell the
# registration a broker probed from one made since: two brokers declaring the same crash
# serialize on this znode's version instead, and the later one deletes nothing.
CRASH_VERDICTS = "/logkeel/crash_verdicts"


def crash_verdict_path(broker_id: int) -> str:
    return f"{CRASH_VERDICTS}/{broker_id}"


def encode_crash_verdict(broker_epoch: int, by: int) -> bytes:
    return _dump({"version": 1, "broker_epoch": broker_epoch, "by": by})


# Kafka's: the last producer id block handed to a broker, so that no two brokers give out the
# same id (`{"version":1,"broker":N,"block_start":"S","block_end":"E"}`, E inclusive).
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
ELECTION_PREFIX = "election_"

# Persistent parents created once per cluster (Kafka's ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (
    BROKER_IDS,
    TOPICS,
    TOPIC_CONFIGS,
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    LOG_DIR_EVENT_NOTIFICATION,
    CONTROLLED_SHUTDOWN,
    OFFLINE_REPLICAS,
    REPLICA_LOGS,
    ELECTIONS,
    ELECTION_LOSSES,
    REASSIGNMENTS,
    STATE_NOTICES,
    CRASH_VERDICTS,
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def is_partition_state_path(path: str) -> bool:
    """Whether ``path`` is a partition's state znode (what quiet watches hold back)."""
    return path.startswith(TOPICS + "/") and path.endswith("/state")


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def encode_controlled_shutdown(broker_epoch: int, remaining: int | None = None) -> bytes:
    """A controlled-shutdown request of the broker incarnation ``broker_epoch`` (logkeel's
    znode in place of Kafka's ControlledShutdown request) and, once the controller answered,
    how many of its leaderships the controller could still move (Kafka's
    partitionsRemaining, as a count)."""
    body: dict[str, object] = {"version": 1, "broker_epoch": broker_epoch}
    if remaining is not None:
        body["remaining"] = remaining
    return _dump(body)


def decode_controlled_shutdown(data: bytes | None) -> tuple[int, int | None]:
    """(broker epoch, leaderships remaining; None: not answered yet). An empty request (an
    older broker's) is of no known epoch."""
    if not data:
        return -1, None
    body = _load(data)
    remaining = body.get("remaining")
    return int(body.get("broker_epoch", -1)), None if remaining is None else int(remaining)


def offline_replicas_path(broker_id: int) -> str:
    return f"{OFFLINE_REPLICAS}/{broker_id}"


def replica_logs_path(broker_id: int) -> str:
    return f"{REPLICA_LOGS}/{broker_id}"


# A broker's report is split into znodes of this many partitions of one topic each (a child of
# its report znode): no znode grows with the partition count (ZooKeeper refuses one over 1 MB,
# about 5,800 partitions of a single report), and a part that did not change is not rewritten.
REPORT_CHUNK_PARTITIONS = 100


def replica_log_chunks(
    logs: Mapping[TopicPartition, ReplicaLogReport],
) -> dict[str, dict[TopicPartition, ReplicaLogReport]]:
    """A report split into its parts, by child name (`<topic>.<n>`: partitions
    n*REPORT_CHUNK_PARTITIONS and up)."""
    out: dict[str, dict[TopicPartition, ReplicaLogReport]] = {}
    for tp, report in logs.items():
        out.setdefault(f"{tp.topic}.{tp.partition // REPORT_CHUNK_PARTITIONS}", {})[tp] = report
    return out


@dataclass(frozen=True, slots=True)
class ReplicaLogReport:
    """One replica's log as its broker reported it, against the partition state it saw then:
    a report made while the partition was offline stays true (nobody fetches), one made
    earlier may be stale."""

    topic_id: str  # a topic deleted and created again must not inherit the old logs
    last_epoch: int
    log_end_offset: int
    partition_epoch: int  # the zkVersion of the partition state the broker saw
    broker_epoch: int = -1  # the reporting broker's registration: a restart makes it stale
    high_watermark: int = -1  # the replica's high watermark (-1: not told, an older broker)
    # Back after the machine went down uncleanly, not caught up since: records acknowledged
    # after its last flush may be missing (`PartitionLog.unflushed_lost`).
    unflushed_lost: bool = False


def encode_replica_logs(generation: int, logs: Mapping[TopicPartition, ReplicaLogReport]) -> bytes:
    return _dump(
        {
            "version": 1,
            "generation": generation,
            "partitions": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "topic_id": r.topic_id,
                    "last_epoch": r.last_epoch,
                    "log_end_offset": r.log_end_offset,
                    "partition_epoch": r.partition_epoch,
                    "broker_epoch": r.broker_epoch,
                    "high_watermark": r.high_watermark,
                    **({"unflushed_lost": True} if r.unflushed_lost else {}),
                }
                for tp, r in sorted(logs.items())
            ],
        }
    )


def decode_replica_logs(data: bytes) -> tuple[int, dict[TopicPartition, ReplicaLogReport]]:
    obj = _load(data)
    return int(obj.get("generation", 0)), {
        TopicPartition(p["topic"], int(p["partition"])): ReplicaLogReport(
            str(p["topic_id"]),
            int(p["last_epoch"]),
            int(p["log_end_offset"]),
            int(p["partition_epoch"]),
            int(p.get("broker_epoch", -1)),
            int(p.get("high_watermark", -1)),
            bool(p.get("unflushed_lost", False)),
        )
        for p in obj["partitions"]
    }


def encode_election(req: ElectionRequest) -> bytes:
    obj: dict[str, Any] = {
        "version": 1,
        "type": req.kind,
        "partitions": None
        if req.partitions is None
        else [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(req.partitions)],
        "replica": req.replica,
        "force": req.force,
    }
    if req.reason:
        obj["reason"] = req.reason
    if req.results is not None:
        obj["results"] = [
            {"topic": tp.topic, "partition": tp.partition, "error": err, "message": why}
            for tp, (err, why) in sorted(req.results.items())
        ]
    return _dump(obj)


def decode_election(data: bytes) -> ElectionRequest:
    obj = _load(data)
    kind = obj["type"]
    if kind not in ELECTION_TYPES:
        raise ValueError(f"unknown election type {kind!r}")
    parts = obj.get("partitions")
    results = obj.get("results")
    return ElectionRequest(
        kind,
        None
        if parts is None
        else frozenset(TopicPartition(p["topic"], int(p["partition"])) for p in parts),
        None if obj.get("replica") is None else int(obj["replica"]),
        bool(obj.get("force", False)),
        None
        if results is None
        else {
            TopicPartition(r["topic"], int(r["partition"])): (r["error"], r["message"])
            for r in results
        },
        str(obj.get("reason", "")),
    )


@dataclass(frozen=True, slots=True)
class ElectionLoss:
    """An election after which the other replicas truncate: ``leader`` leads alone at
    ``leader_epoch`` from its log end ``from_offset`` (-1: not reported); ``truncated``: how
    many offsets past it each replica held as far as its last report said."""

    tp: TopicPartition
    leader: int
    leader_epoch: int
    from_offset: int
    truncated: Mapping[int, int]
    reason: str
    time_ms: int
    # The topic's id: a loss of a topic deleted and created again under its name is not the
    # new topic's (None: recorded before ids were, taken as the current topic's).
    topic_id: str | None = None


def encode_election_loss(loss: ElectionLoss) -> bytes:
    obj: dict[str, Any] = {
        "version": 1, "topic": loss.tp.topic, "partition": loss.tp.partition,
        "leader": loss.leader, "leader_epoch": loss.leader_epoch, "from_offset": loss.from_offset,
        "truncated": {str(r): n for r, n in sorted(loss.truncated.items())},
        "reason": loss.reason, "time_ms": loss.time_ms,
    }  # fmt: skip
    if loss.topic_id is not None:
        obj["topic_id"] = loss.topic_id
    return _dump(obj)


def decode_election_loss(data: bytes) -> ElectionLoss:
    obj = _load(data)
    return ElectionLoss(
        TopicPartition(obj["topic"], int(obj["partition"])), int(obj["leader"]),
        int(obj["leader_epoch"]), int(obj["from_offset"]),
        {int(r): int(n) for r, n in obj.get("truncated", {}).items()}, str(obj.get("reason", "")),
        int(obj.get("time_ms", 0)), obj.get("topic_id"),
    )  # fmt: skip


def encode_producer_id_block(broker_id: int, start: int, end_inclusive: int) -> bytes:
    return _dump(
        {"version": 1, "broker": broker_id, "block_start": str(start),
         "block_end": str(end_inclusive)}
    )  # fmt: skip


def decode_producer_id_block_end(data: bytes) -> int:
    """The last id of the block (inclusive)."""
    return int(_load(data)["block_end"])


def encode_scram_credentials(credentials: Mapping[str, Mapping[str, Any]]) -> bytes:
    return _dump({"version": 1, "users": credentials})


def decode_scram_credentials(data: bytes | None) -> dict[str, dict[str, Any]]:
    """user -> mechanism -> credential document; {} for a missing znode."""
    return dict(_load(data).get("users", {})) if data else {}


def _dump(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _load(data: bytes) -> dict[str, Any]:
    obj = json.loads(data.decode())
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {data[:80]!r}")
    return obj


# ---- /brokers/ids/<id> -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndPoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    log_dir_ids: tuple[str, ...] = ()
    offline_log_dir_ids: tuple[str, ...] = ()
    broker_epoch: int = -1  # the registration znode's czxid; -1 until registered

    @property
    def plaintext(self) -> EndPoint | None:
        return next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)


def encode_broker(reg: BrokerRegistration) -> bytes:
    """Version 5 of Kafka's registration; top-level host/port name the first PLAINTEXT endpoint
    for old clients (null/-1 without one), as Kafka writes them."""
    plain = reg.plaintext
    obj: dict[str, Any] = {
        "version": 5,
        "host": plain.host if plain else None,
        "port": plain.port if plain else -1,
        "endpoints": [e.connection_string for e in reg.endpoints],
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in reg.endpoints},
        "jmx_port": reg.jmx_port,
        "timestamp": str(reg.timestamp_ms),
        "features": {},
        "log_dir_ids": list(reg.log_dir_ids),
        "offline_log_dir_ids": list(reg.offline_log_dir_ids),
    }
    if reg.rack is not None:
        obj["rack"] = reg.rack
    return _dump(obj)


def _parse_endpoint(text: str, protocols: Mapping[str, str]) -> EndPoint:
    listener, _, address = text.partition("://")
    host, _, port = address.rpartition(":")
    return EndPoint(listener, host.strip("[]"), int(port), protocols.get(listener, listener))


def decode_broker(broker_id: int, data: bytes, czxid: int = -1) -> BrokerRegistration:
    obj = _load(data)
    protocols = obj.get("listener_security_protocol_map") or {}
    if "endpoints" in obj:
        endpoints = tuple(_parse_endpoint(e, protocols) for e in obj["endpoints"])
    else:  # version 1: host and port only
        endpoints = (EndPoint("PLAINTEXT", obj["host"], int(obj["port"])),)
    return BrokerRegistration(
        broker_id=broker_id,
        endpoints=endpoints,
        rack=obj.get("rack"),
        jmx_port=int(obj.get("jmx_port", -1)),
        timestamp_ms=int(obj.get("timestamp", 0)),
        log_dir_ids=tuple(obj.get("log_dir_ids", ())),
        offline_log_dir_ids=tuple(obj.get("offline_log_dir_ids", ())),
        broker_epoch=czxid,
    )


# ---- /brokers/topics/<t> ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    topic: str
    topic_id: str | None
    partitions: Mapping[int, tuple[int, ...]]
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


def _by_partition(assignment: Mapping[int, Iterable[int]]) -> dict[str, list[int]]:
    return {str(p): list(replicas) for p, replicas in sorted(assignment.items())}


def _from_json(obj: Mapping[str, Iterable[int]] | None) -> dict[int, tuple[int, ...]]:
    return {int(p): tuple(int(r) for r in rs) for p, rs in (obj or {}).items()}


def encode_topic(a: TopicAssignment) -> bytes:
    obj: dict[str, Any] = {
        "version": 2,
        "partitions": _by_partition(a.partitions),
        "adding_replicas": _by_partition(a.adding_replicas),
        "removing_replicas": _by_partition(a.removing_replicas),
    }
    if a.topic_id is not None:
        obj["topic_id"] = a.topic_id
    return _dump(obj)


def decode_topic(topic: str, data: bytes) -> TopicAssignment:
    obj = _load(data)
    return TopicAssignment(
        topic=topic,
        topic_id=obj.get("topic_id"),
        partitions=_from_json(obj.get("partitions")),
        adding_replicas=_from_json(obj.get("adding_replicas")),
        removing_replicas=_from_json(obj.get("removing_replicas")),
    )


# ---- /brokers/topics/<t>/partitions/<p>/state ------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderIsr:
    """A partition state znode (Kafka's LeaderIsrAndControllerEpoch); ``zk_version`` is the
    znode's version, which is the partition epoch."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = 0
    # logkeel's own: the leader's broker epoch when it was elected (-1: not recorded). A broker
    # back from a restart with another epoch does not take the leadership up again: its disk
    # may have lost what it held (the incident), so the controller elects anew.
    leader_broker_epoch: int = -1
    # The zxid of the znode's last write (its mzxid; -1: not known), and per ISR member the
    # zxid of the write that put it in the ISR, as the controller saw the versions go by
    # (`PartitionRegistration.isr_since`). Neither is stored in the znode.
    written_zxid: int = field(default=-1, compare=False)
    isr_since: tuple[tuple[int, int], ...] = field(default=(), compare=False)
    isr_seen_joining: frozenset[int] = field(default=frozenset(), compare=False)


def _partition_state_obj(s: LeaderIsr) -> dict[str, Any]:
    return {
        "controller_epoch": s.controller_epoch,
        "leader": s.leader,
        "version": 1,
        "leader_epoch": s.leader_epoch,
        "isr": list(s.isr),
        **({"leader_broker_epoch": s.leader_broker_epoch} if s.leader_broker_epoch >= 0 else {}),
    }


def encode_partition_state(s: LeaderIsr) -> bytes:
    return _dump(_partition_state_obj(s))


def decode_partition_state(data: bytes, zk_version: int, written_zxid: int = -1) -> LeaderIsr:
    return _partition_state_of(_load(data), zk_version, written_zxid)


def _partition_state_of(
    obj: Mapping[str, Any], zk_version: int, written_zxid: int = -1
) -> LeaderIsr:
    return LeaderIsr(
        leader=int(obj["leader"]),
        leader_epoch=int(obj["leader_epoch"]),
        isr=tuple(int(r) for r in obj["isr"]),
        controller_epoch=int(obj["controller_epoch"]),
        zk_version=zk_version,
        leader_broker_epoch=int(obj.get("leader_broker_epoch", -1)),
        written_zxid=written_zxid,
    )


def state_notice_path(slot: int) -> str:
    return f"{STATE_NOTICES}/{slot}"


def encode_state_notice(states: Iterable[tuple[TopicPartition, str | None, LeaderIsr]]) -> bytes:
    """The body of /logkeel/state_notices/<slot>: each state of one controller transaction,
    with its topic's id and the version its znode has once written."""
    return _dump(
        {
            "version": 1,
            "states": [
                {"topic": tp.topic, "topic_id": topic_id, "partition": tp.partition,
                 "zk_version": s.zk_version, "state": _partition_state_obj(s)}
                for tp, topic_id, s in states
            ],
        }
    )  # fmt: skip


def decode_state_notice(data: bytes) -> list[tuple[TopicPartition, str | None, LeaderIsr]]:
    return [
        (TopicPartition(o["topic"], int(o["partition"])), o.get("topic_id"),
         _partition_state_of(o["state"], int(o["zk_version"])))
        for o in _load(data)["states"]
    ]  # fmt: skip


def registration_of(replicas: Iterable[int], state: LeaderIsr) -> PartitionRegistration:
    """The controller's value for a partition: its assignment and its state znode."""
    return PartitionRegistration(
        tuple(replicas),
        state.leader,
        state.leader_epoch,
        state.isr,
        state.zk_version,
        leader_broker_epoch=state.leader_broker_epoch,
        isr_since=state.isr_since,
        isr_seen_joining=state.isr_seen_joining,
    )


def leader_isr_of(reg: PartitionRegistration, controller_epoch: int) -> LeaderIsr:
    return LeaderIsr(
        reg.leader,
        reg.leader_epoch,
        reg.isr,
        controller_epoch,
        reg.partition_epoch,
        reg.leader_broker_epoch,
    )


# ---- /controller, /controller_epoch ----------------------------------------------------------


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes) -> int:
    return int(_load(data)["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# ---- /cluster/id ------------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_load(data)["id"])


# ---- /config/topics/<t> ----------------------------------------------------------------------


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(configs)})


def decode_topic_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    return {k: str(v) for k, v in (_load(data).get("config") or {}).items()}


# ---- notifications: ISR changes, preferred election, log dir events ----------------------------


def encode_partitions(partitions: Iterable[TopicPartition]) -> bytes:
    """The body of /isr_change_notification/isr_change_<seq> and
    /admin/preferred_replica_election."""
    items = sorted(set(partitions))
    return _dump(
        {
            "version": 1,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in items],
        }
    )


def decode_partitions(data: bytes) -> set[TopicPartition]:
    return {TopicPartition(p["topic"], int(p["partition"])) for p in _load(data)["partitions"]}


@dataclass(frozen=True, slots=True)
class LogDirEvent:
    """A broker's notification that one of its log dirs failed or (``online``) is back:
    Kafka's notification names only the broker; logkeel's adds the dir, why and when (the
    history `logkeel console` shows). ``log_dir`` None: not told (Kafka's own form)."""

    broker: int
    log_dir: str | None = None
    online: bool = False
    reason: str = ""
    time_ms: int = 0


def encode_log_dir_event(event: LogDirEvent) -> bytes:
    obj: dict[str, Any] = {
        "version": 1,
        "broker": event.broker,
        "event": LOG_DIR_ONLINE_EVENT if event.online else LOG_DIR_FAILURE_EVENT,
    }
    if event.log_dir is not None:
        obj.update(log_dir=event.log_dir, reason=event.reason, time_ms=event.time_ms)
    return _dump(obj)


def decode_log_dir_event(data: bytes) -> LogDirEvent:
    obj = _load(data)
    log_dir = obj.get("log_dir")
    return LogDirEvent(
        int(obj["broker"]), None if log_dir is None else str(log_dir),
        obj.get("event") == LOG_DIR_ONLINE_EVENT, str(obj.get("reason", "")),
        int(obj.get("time_ms", 0)),
    )  # fmt: skip
