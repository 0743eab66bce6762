"""Cluster metadata: brokers, topics, partition leaders/ISR/epochs, topic configs.

`MetadataStore` is the interface the broker codes against. `EmbeddedMetadataStore` keeps it
for a single node in a JSON document written atomically to every online log dir (so a dead
disk does not lose it); a ZooKeeper-backed store (kazoo) implements the same interface for
clusters.

Reads never wait for a write: readers (Produce, Fetch and Metadata on the event loop) get an
immutable snapshot, and a write builds the next snapshot, makes it durable (an fsync per log
dir), and only then swaps it in. Writes are serialised by a lock readers never take, and run
in threads. The ``TopicState``s of a published snapshot are never changed; a change to a
topic replaces its ``TopicState``.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from logkeel.cluster.acls import AclBinding, changed_bindings
from logkeel.cluster.adoption import Adoption, colliding_topic
from logkeel.cluster.keyed_overrides import replaced_overrides
from logkeel.cluster.partition_state import ElectionRequest, PartitionRegistration
from logkeel.cluster.reassignment import target_error
from logkeel.storage.errors import KafkaStorageError, io_guard
from logkeel.storage.fileio import atomic_write
from logkeel.storage.log_dir import random_uuid, uuid_from_text, uuid_text
from logkeel.storage.topic_partition import (
    TopicPartition,
    partition_dirs_fit,
    validate_topic_name,
)

log = logging.getLogger(__name__)

_PROCESS_SECRET = secrets.token_bytes(32)

METADATA_FILE = "logkeel-metadata.json"

# Topics that their owners (group and transaction coordinators) create with their own settings.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@functools.lru_cache(maxsize=4096)
def topic_uuid(topic_id: str) -> uuid.UUID:
    """The metadata's topic id (Kafka's Uuid text) as a ``uuid.UUID`` for kio. Cached (a
    ``UUID`` is immutable): followers' fetchers ask it for every partition of every round."""
    return uuid_from_text(topic_id)


def topic_id_text(value: uuid.UUID) -> str:
    """The inverse of ``topic_uuid``: Kafka's text form of a topic id."""
    return uuid_text(value)


class MetadataError(Exception):
    """A metadata change was refused; ``error_name`` is Kafka's error name for it."""

    def __init__(self, error_name: str, message: str) -> None:
        self.error_name = error_name
        super().__init__(message)


@dataclass(slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    # (listener name, host, port) of every endpoint the broker registered; host and port
    # above are its PLAINTEXT (or first) one.
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        return next(((h, p) for name, h, p in self.endpoints if name == listener), None)


@dataclass(slots=True)
class PartitionState:
    topic: str
    partition: int
    replicas: list[int]
    leader: int  # -1: no leader (offline)
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    partition_epoch: int = 0
    offline_replicas: list[int] = field(default_factory=list)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def registration(self) -> PartitionRegistration:
        """The same partition as the controller's and the ISR rules' decisions take it (the
        one conversion between the broker's shape and theirs; `zk_data.registration_of` is
        the one from the znode): the partition epoch is the state's znode version in both."""
        return PartitionRegistration(
            tuple(self.replicas), self.leader, self.leader_epoch, tuple(self.isr),
            self.partition_epoch,
        )  # fmt: skip


@dataclass(slots=True)
class TopicState:
    name: str
    topic_id: str  # Kafka Uuid, base64 text form
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)  # explicit overrides only
    internal: bool = False


Listener = Callable[[str, "TopicState | None"], None]
# An election's outcome per partition: Kafka's error name (None: done) and the reason.
ElectionResults = Mapping[TopicPartition, tuple[str | None, str]]
# A partition being reassigned: its replicas (the full set), those being added, removed.
Reassigning = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


class MetadataStore(ABC):
    """What the broker needs from cluster metadata; every method is thread-safe."""

    cluster_id: str
    controller_id: int

    @abstractmethod
    def brokers(self) -> list[BrokerInfo]: ...

    def advertised_brokers(self) -> list[BrokerInfo]:
        """The brokers clients are told of: the live ones, and in a cluster a broker just gone
        while still shown as a leader (`ZkMetadataStore`)."""
        return self.brokers()

    @abstractmethod
    def topics(self) -> Mapping[str, TopicState]:
        """The current snapshot (read-only; never changes after it is returned)."""

    def topic(self, name: str) -> TopicState | None:
        return self.topics().get(name)

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        t = self.topic(tp.topic)
        return t.partitions.get(tp.partition) if t else None

    def topic_by_id(self, topic_id: str) -> TopicState | None:
        return next((t for t in self.topics().values() if t.topic_id == topic_id), None)

    @abstractmethod
    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
        validate_only: bool = False,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicState:
        """``assignment`` (partition -> replicas, already checked against the live brokers) is
        an operator's manual placement; without it the store places the replicas."""

    @abstractmethod
    def delete_topic(self, name: str) -> TopicState: ...

    @abstractmethod
    def create_partitions(
        self,
        name: str,
        total: int,
        *,
        validate_only: bool = False,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicState:
        """``assignment`` places the new partitions only, as in ``create_topic``."""

    @abstractmethod
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicState:
        """Replaces the topic's explicit config overrides."""

    @abstractmethod
    def update_partition(self, state: PartitionState) -> None:
        """Leader, epoch or ISR change (the controller's decisions)."""

    def pending_deletions(self) -> list[TopicPartition]:
        """Partitions of deleted topics whose dirs a crash may have left; the broker deletes
        them at start-up, before serving anything, then calls ``forget_deletions``. A store
        that does not record deletions has none."""
        return []

    def forget_deletions(self, topics: Iterable[str]) -> None:
        """The dirs of ``topics``' pending deletions are gone (or set aside for removal)."""
        return None

    def deleted_topics(self) -> Mapping[str, str]:
        """Topics whose deletion finished (name -> topic id of the last one deleted): their
        leftover logs are never adopted (``cluster.adoption``). A store that does not record
        them has none."""
        return {}

    def adopt_topics(
        self, adoptions: Sequence[Adoption], configs: Callable[[Adoption], dict[str, str]]
    ) -> list[TopicState]:
        """Registers topics found as logs on disk (single node only, see ``cluster.adoption``)."""
        raise MetadataError("INVALID_REQUEST", "only a single node adopts logs found on disk")

    @abstractmethod
    def add_listener(self, fn: Listener) -> None:
        """``fn(topic_name, state_or_None)`` after each topic change (None: deleted)."""

    def scram_credentials(self) -> Mapping[str, Mapping[str, Mapping[str, Any]]]:
        """user -> SCRAM mechanism -> its salted credential document (``cluster.scram``)."""
        return {}

    def set_scram_credentials(
        self, user: str, credentials: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Replaces ``user``'s credentials (empty: the user has none left)."""
        raise MetadataError("UNSUPPORTED_VERSION", "this metadata store keeps no SCRAM credentials")

    def scram_secret(self) -> bytes:
        """The secret unknown SCRAM users' decoy credentials derive from: kept with the
        credentials, so it stays the same across restarts and on every broker. A store that
        keeps no credentials has no users to tell apart: a secret of this process will do."""
        return _PROCESS_SECRET

    def acl_bindings(self) -> tuple[AclBinding, ...]:
        """Every ACL binding of the cluster (``cluster.acls``)."""
        return ()

    def client_quotas(self) -> Mapping[str, Mapping[str, float]]:
        """Quota entity key (``cluster.client_quotas.entity_key``) -> quota name -> value."""
        return {}

    def alter_client_quotas(self, changes: Mapping[str, Mapping[str, float]]) -> None:
        """Replaces the quotas of each entity in ``changes`` (empty: the entity has none left),
        in one write."""
        raise MetadataError("UNSUPPORTED_VERSION", "this metadata store keeps no client quotas")

    def alter_acls(self, add: Iterable[AclBinding], remove: Iterable[AclBinding]) -> None:
        """Adds ``add`` and removes ``remove`` in one write; adding a present binding is a no-op."""
        raise MetadataError("SECURITY_DISABLED", "this metadata store keeps no ACLs")

    def group_configs(self) -> Mapping[str, Mapping[str, str]]:
        """Group id -> config override name -> value (kept by the metadata store)."""
        return {}

    def alter_group_configs(self, changes: Mapping[str, Mapping[str, str]]) -> None:
        """Replaces the overrides of each group in ``changes`` (empty: none left), in one write."""
        raise MetadataError("UNSUPPORTED_VERSION", "this metadata store keeps no group configs")

    def reserve_producer_ids(self, size: int) -> tuple[int, int] | None:
        """The next cluster-wide block of producer ids, [start, end); None when this node
        alone gives out ids (the block is then recorded in its log dirs)."""
        return None

    def elect_leaders(self, request: ElectionRequest, timeout_s: float) -> ElectionResults:
        """Runs ``request`` (blocking, up to ``timeout_s``): per partition, Kafka's error name
        (None: elected) and the reason. A single node leads every partition it has, alone."""
        targets = (
            request.partitions
            if request.partitions is not None
            else [s.tp for t in self.topics().values() for s in t.partitions.values()]
        )
        results: dict[TopicPartition, tuple[str | None, str]] = {}
        for tp in targets:
            state = self.partition(tp)
            if state is None:
                results[tp] = ("UNKNOWN_TOPIC_OR_PARTITION", f"{tp} does not exist")
            elif request.replica is not None and request.replica not in state.replicas:
                results[tp] = (
                    "INVALID_REPLICA_ASSIGNMENT",
                    f"{request.replica} is not a replica of {tp}",
                )
            else:
                results[tp] = ("ELECTION_NOT_NEEDED", f"{state.leader} is the only replica")
        return results

    def watch_dynamic_broker_configs(self, fn: Callable[[Mapping[str, str]], None]) -> None:
        """Calls ``fn`` with this broker's dynamic configs in effect (its own over the
        cluster-wide defaults) now and after every change. A single node has none."""
        fn({})

    def dynamic_broker_configs(self) -> tuple[Mapping[str, str], Mapping[str, str]]:
        """This broker's own dynamic configs and the cluster-wide defaults."""
        return {}, {}

    def alter_dynamic_broker_configs(
        self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> None:
        """Replaces the dynamic configs of ``entity`` (a broker id, or <default>) with
        ``change(current)``; returns once this broker's view shows them."""
        raise MetadataError(
            "INVALID_REQUEST",
            "dynamic broker configs (the replication throttles) need a cluster: a single node "
            "replicates nothing",
        )

    def alter_reassignments(
        self, request: Mapping[TopicPartition, tuple[int, ...] | None], timeout_s: float
    ) -> dict[TopicPartition, tuple[str | None, str | None]]:
        """AlterPartitionReassignments (blocking, up to ``timeout_s``): per partition, Kafka's
        error name (None: started) and a message. A single node has nowhere to move a replica:
        only its own assignment is accepted, as a reassignment with nothing to do."""
        registered = {b.node_id for b in self.brokers()}
        results: dict[TopicPartition, tuple[str | None, str | None]] = {}
        for tp, target in request.items():
            state = self.partition(tp)
            if state is None:
                results[tp] = ("UNKNOWN_TOPIC_OR_PARTITION", f"{tp} does not exist")
            elif target is None:
                results[tp] = ("NO_REASSIGNMENT_IN_PROGRESS", "no reassignment in progress")
            elif (why := target_error(target, registered)) is not None:
                results[tp] = ("INVALID_REPLICA_ASSIGNMENT", why)
            elif list(target) != list(state.replicas):
                why = "a single node cannot change a partition's replicas"
                results[tp] = ("INVALID_REPLICA_ASSIGNMENT", why)
            else:
                results[tp] = (None, None)
        return results

    def reassignments(self) -> dict[TopicPartition, Reassigning]:
        """The moves in progress: (replicas, adding, removing) per partition."""
        return {}


class EmbeddedMetadataStore(MetadataStore):
    """Single-node metadata in `logkeel-metadata.json`, copied into every online log dir."""

    def __init__(
        self,
        log_dirs: Iterable[str | Path],
        node_id: int,
        host: str,
        port: int,
        cluster_id: str | None = None,
    ) -> None:
        self._dirs = [Path(d) for d in log_dirs]
        # Held by writers across the disk writes; readers never take it.
        self._write_lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._self = BrokerInfo(node_id, host, port)
        self.controller_id = node_id
        self._version = 0
        self._snapshot: Mapping[str, TopicState] = MappingProxyType({})
        # Deleted topics whose partition dirs may still be on disk: {name, topic_id,
        # partitions}. Written in the same document that removes the topic, so a deletion a
        # crash interrupts before its dirs were renamed is finished at the next start.
        self._pending_deletions: list[dict[str, object]] = []
        # Deletions finished: name -> topic id (see deleted_topics).
        self._deleted: dict[str, str] = {}
        self._scram: Mapping[str, Mapping[str, Mapping[str, Any]]] = MappingProxyType({})
        # Written with the document, so it is on disk once any credential is.
        self._scram_secret = secrets.token_hex(32)
        self._acls: tuple[AclBinding, ...] = ()
        self._quotas: Mapping[str, Mapping[str, float]] = MappingProxyType({})
        self._group_configs: Mapping[str, Mapping[str, str]] = MappingProxyType({})
        self.cluster_id = cluster_id or ""
        self._load()
        if not self.cluster_id:
            self.cluster_id = random_uuid()

    # -- persistence ----------------------------------------------------------------------------
    def _load(self) -> None:
        """Reads the newest readable copy; copies that fail to parse are ignored (logged)."""
        best: dict[str, Any] | None = None
        for d in self._dirs:
            path = d / METADATA_FILE
            try:
                doc = json.loads(path.read_text())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.warning("ignoring unreadable metadata copy %s: %s", path, exc)
                continue
            if best is None or doc.get("version", 0) > best.get("version", 0):
                best = doc
        if best is None:
            return
        self._version = best.get("version", 0)
        self.cluster_id = self.cluster_id or best.get("cluster_id", "")
        self._pending_deletions = list(best.get("pending_deletions", []))
        self._deleted = dict(best.get("deleted_topics", {}))
        self._scram = MappingProxyType(best.get("scram_credentials", {}))
        self._scram_secret = best.get("scram_secret", self._scram_secret)
        self._acls = tuple(AclBinding.from_json(a) for a in best.get("acls", []))
        self._quotas = MappingProxyType(best.get("client_quotas", {}))
        self._group_configs = MappingProxyType(best.get("group_configs", {}))
        topics = {}
        for t in best.get("topics", []):
            parts = {p["partition"]: PartitionState(**p) for p in t.pop("partitions")}
            topics[t["name"]] = TopicState(partitions=parts, **t)
        self._snapshot = MappingProxyType(topics)

    def _publish(self, topics: dict[str, TopicState]) -> None:
        """Writes ``topics`` (and the pending deletions) to every log dir, then makes it the
        snapshot readers see. Call with ``_write_lock`` held."""
        self._version += 1
        doc = {
            "version": self._version,
            "cluster_id": self.cluster_id,
            "topics": [
                {**asdict(t), "partitions": [asdict(p) for p in t.partitions.values()]}
                for t in topics.values()
            ],
            "pending_deletions": self._pending_deletions,
            "deleted_topics": self._deleted,
            "scram_credentials": dict(self._scram),
            "scram_secret": self._scram_secret,
            "acls": [a.to_json() for a in self._acls],
            "client_quotas": dict(self._quotas),
            "group_configs": dict(self._group_configs),
        }
        data = json.dumps(doc, indent=1).encode()
        written = 0
        for d in self._dirs:
            try:
                with io_guard(d, "writing cluster metadata"):
                    atomic_write(d / METADATA_FILE, data)
                written += 1
            except KafkaStorageError as exc:
                log.error("could not write metadata to %s: %s", d, exc)
        if not written:
            raise MetadataError(
                "KAFKA_STORAGE_ERROR", "metadata could not be written to any log dir"
            )
        self._snapshot = MappingProxyType(topics)

    def _notify(self, name: str, state: TopicState | None) -> None:
        for fn in list(self._listeners):
            try:
                fn(name, state)
            except Exception:
                log.exception("metadata listener failed for topic %s", name)

    # -- reads ------------------------------------------------------------------------------------
    def brokers(self) -> list[BrokerInfo]:
        return [self._self]

    def topics(self) -> Mapping[str, TopicState]:
        return self._snapshot

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def pending_deletions(self) -> list[TopicPartition]:
        return [
            TopicPartition(str(e["name"]), int(i))
            for e in self._pending_deletions
            for i in e["partitions"]  # type: ignore[attr-defined]
        ]

    def forget_deletions(self, topics: Iterable[str]) -> None:
        done = set(topics)
        with self._write_lock:
            finished = [e for e in self._pending_deletions if e["name"] in done]
            if not finished:
                return
            self._pending_deletions = [e for e in self._pending_deletions if e["name"] not in done]
            # A dir of such a topic can still turn up (a log dir that was offline while the
            # deletion ran): it is recognised and never adopted.
            self._deleted = {
                **self._deleted,
                **{str(e["name"]): str(e["topic_id"]) for e in finished},
            }
            self._publish(dict(self._snapshot))

    def deleted_topics(self) -> Mapping[str, str]:
        return MappingProxyType(self._deleted)

    def adopt_topics(
        self, adoptions: Sequence[Adoption], configs: Callable[[Adoption], dict[str, str]]
    ) -> list[TopicState]:
        """Registers every adopted topic in one write, as created here with the given
        partitions and topic id; listeners hear of each."""
        node = self._self.node_id
        with self._write_lock:
            current = self._snapshot
            added: dict[str, TopicState] = {}
            for a in adoptions:
                check_topic_absent(a.topic, [*current, *added])
                check_partition_count(a.topic, a.partitions)
                added[a.topic] = TopicState(
                    a.topic,
                    a.topic_id,
                    {
                        i: PartitionState(a.topic, i, [node], node, 0, [node])
                        for i in range(a.partitions)
                    },
                    configs(a),
                    a.internal,
                )
            if not added:
                return []
            self._publish({**current, **added})
        for name, state in added.items():
            self._notify(name, state)
        return list(added.values())

    def scram_credentials(self) -> Mapping[str, Mapping[str, Mapping[str, Any]]]:
        return self._scram

    def scram_secret(self) -> bytes:
        return bytes.fromhex(self._scram_secret)

    # -- changes ----------------------------------------------------------------------------------
    def set_scram_credentials(
        self, user: str, credentials: Mapping[str, Mapping[str, Any]]
    ) -> None:
        with self._write_lock:
            changed = {k: v for k, v in self._scram.items() if k != user}
            if credentials:
                changed[user] = dict(credentials)
            self._publish_part("_scram", MappingProxyType(changed))

    def _publish_part(self, attribute: str, value: object) -> None:
        """Writes the document with one of its parts (credentials, quotas, group configs,
        ACLs) replaced by ``value``; the part is as before if the write fails. Under
        ``_write_lock``."""
        previous = getattr(self, attribute)
        setattr(self, attribute, value)
        try:
            self._publish(dict(self._snapshot))
        except MetadataError:
            setattr(self, attribute, previous)
            raise

    def acl_bindings(self) -> tuple[AclBinding, ...]:
        return self._acls

    def client_quotas(self) -> Mapping[str, Mapping[str, float]]:
        return self._quotas

    def alter_client_quotas(self, changes: Mapping[str, Mapping[str, float]]) -> None:
        with self._write_lock:
            self._publish_part(
                "_quotas", MappingProxyType(replaced_overrides(self._quotas, changes))
            )

    def group_configs(self) -> Mapping[str, Mapping[str, str]]:
        return self._group_configs

    def alter_group_configs(self, changes: Mapping[str, Mapping[str, str]]) -> None:
        with self._write_lock:
            self._publish_part(
                "_group_configs", MappingProxyType(replaced_overrides(self._group_configs, changes))
            )

    def alter_acls(self, add: Iterable[AclBinding], remove: Iterable[AclBinding]) -> None:
        with self._write_lock:
            self._publish_part("_acls", changed_bindings(self._acls, add, remove))

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
        validate_only: bool = False,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicState:
        # One node: a valid manual assignment can only name this node, as the default does.
        problem = validate_topic_name(name)
        if problem:
            raise MetadataError("INVALID_TOPIC_EXCEPTION", problem)
        check_partition_count(name, num_partitions)
        if replication_factor < 1:
            raise MetadataError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor must be at least 1, got {replication_factor}",
            )
        if replication_factor > len(self.brokers()):
            raise MetadataError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor {replication_factor} is larger than the {len(self.brokers())} available broker(s)",
            )
        node = self._self.node_id
        with self._write_lock:
            current = self._snapshot
            check_topic_absent(name, current)
            state = TopicState(
                name,
                random_uuid(),
                {
                    i: PartitionState(name, i, [node], node, 0, [node])
                    for i in range(num_partitions)
                },
                dict(configs),
                internal,
            )
            if validate_only:
                return state
            # Dirs an earlier topic of this name left are the log manager's to set aside now.
            self._pending_deletions = [e for e in self._pending_deletions if e["name"] != name]
            self._publish({**current, name: state})
        self._notify(name, state)
        return state

    def delete_topic(self, name: str) -> TopicState:
        with self._write_lock:
            topics = dict(self._snapshot)
            state = topics.pop(name, None)
            if state is None:
                raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic '{name}' does not exist")
            self._pending_deletions = [
                *self._pending_deletions,
                {"name": name, "topic_id": state.topic_id, "partitions": sorted(state.partitions)},
            ]
            self._publish(topics)
        self._notify(name, None)
        return state

    def create_partitions(
        self,
        name: str,
        total: int,
        *,
        validate_only: bool = False,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicState:
        node = self._self.node_id
        with self._write_lock:
            state = self._snapshot.get(name)
            if state is None:
                raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic '{name}' does not exist")
            current = len(state.partitions)
            check_partition_increase(name, current, total)
            if validate_only:
                return state
            partitions = dict(state.partitions)
            for i in range(current, total):
                partitions[i] = PartitionState(name, i, [node], node, 0, [node])
            state = replace(state, partitions=partitions)
            self._publish({**self._snapshot, name: state})
        self._notify(name, state)
        return state

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicState:
        with self._write_lock:
            state = self._snapshot.get(name)
            if state is None:
                raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic '{name}' does not exist")
            state = replace(state, configs=dict(configs))
            self._publish({**self._snapshot, name: state})
        self._notify(name, state)
        return state

    def update_partition(self, new: PartitionState) -> None:
        with self._write_lock:
            state = self._snapshot.get(new.topic)
            if state is None:
                raise MetadataError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"topic '{new.topic}' does not exist"
                )
            state = replace(state, partitions={**state.partitions, new.partition: new})
            self._publish({**self._snapshot, new.topic: state})
        self._notify(new.topic, state)


def check_partition_count(name: str, num_partitions: int) -> None:
    """INVALID_PARTITIONS for a count below 1, or one whose partition dir names (and their
    deletion names) would not fit the filesystem for this topic name."""
    if num_partitions < 1:
        raise MetadataError(
            "INVALID_PARTITIONS", f"number of partitions must be at least 1, got {num_partitions}"
        )
    too_long = partition_dirs_fit(name, num_partitions)
    if too_long:
        raise MetadataError("INVALID_PARTITIONS", too_long)


def check_partition_increase(name: str, current: int, total: int) -> None:
    if total <= current:
        raise MetadataError(
            "INVALID_PARTITIONS",
            f"topic '{name}' has {current} partitions; the new count must be larger, got {total}",
        )
    check_partition_count(name, total)


def check_topic_absent(name: str, existing: Iterable[str]) -> None:
    """Raises TOPIC_ALREADY_EXISTS, or INVALID_TOPIC_EXCEPTION for a name that collides with an
    existing one ('.' and '_' are interchangeable in metric names)."""
    names = set(existing)
    if name in names:
        raise MetadataError("TOPIC_ALREADY_EXISTS", f"topic '{name}' already exists")
    collision = colliding_topic(name, names)
    if collision:
        raise MetadataError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic '{name}' collides with existing topic '{collision}' ('.' and '_' are interchangeable in metric names)",
        )
