"""Brokers of one test that share their metadata, with partition states set by the test.

``SharedMetadata`` is an in-memory ``MetadataStore`` that every broker of a test is given. Its
``update_partition`` is the seam a controller uses: it publishes a partition state (leader,
leader epoch, replicas, ISR) and every broker's replica manager applies it through its metadata
listener, exactly as a ZooKeeper-backed store's watches will. Nothing else of a controller is
here: the tests decide the states themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from logkeel.cluster.metadata import (
    BrokerInfo,
    Listener,
    MetadataError,
    MetadataStore,
    PartitionState,
    TopicState,
)
from logkeel.config import BrokerConfig
from logkeel.records.walk import iter_headers
from logkeel.server.broker import Broker
from logkeel.server.replica.isr_manager import IsrProposal
from logkeel.storage.log_dir import random_uuid
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.broker_process import free_port
from tests.server.test_metadata_offline import InProcessBroker

__all__ = ["Cluster", "SharedMetadata", "log_batches"]


class SharedMetadata(MetadataStore):
    """Metadata held in memory and shared by the brokers of one test."""

    def __init__(self, brokers: list[BrokerInfo]) -> None:
        self.cluster_id = random_uuid()
        self.controller_id = -1
        self._brokers = brokers
        self._topics: Mapping[str, TopicState] = MappingProxyType({})
        self._listeners: list[Listener] = []
        self._lock = threading.RLock()

    def brokers(self) -> list[BrokerInfo]:
        return list(self._brokers)

    def topics(self) -> Mapping[str, TopicState]:
        return self._topics

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def _publish(self, name: str, state: TopicState | None) -> None:
        with self._lock:
            topics = dict(self._topics)
            if state is None:
                topics.pop(name, None)
            else:
                topics[name] = state
            self._topics = MappingProxyType(topics)
            for fn in list(self._listeners):
                fn(name, state)

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
        ids = [b.node_id for b in self._brokers]
        if replication_factor > len(ids):
            raise MetadataError("INVALID_REPLICATION_FACTOR", "more replicas than brokers")
        if name in self._topics:
            raise MetadataError("TOPIC_ALREADY_EXISTS", f"topic '{name}' already exists")
        partitions = {}
        for i in range(num_partitions):
            replicas = (
                list(assignment[i])
                if assignment is not None
                else [ids[(i + j) % len(ids)] for j in range(replication_factor)]
            )
            partitions[i] = PartitionState(name, i, replicas, replicas[0], 0, list(replicas))
        state = TopicState(name, random_uuid(), partitions, dict(configs), internal)
        if not validate_only:
            self._publish(name, state)
        return state

    def delete_topic(self, name: str) -> TopicState:
        state = self._topics[name]
        self._publish(name, None)
        return state

    def create_partitions(
        self,
        name: str,
        total: int,
        *,
        validate_only: bool = False,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicState:
        raise MetadataError("INVALID_REQUEST", "not supported by the test metadata")

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicState:
        state = replace(self._topics[name], configs=dict(configs))
        self._publish(name, state)
        return state

    def update_partition(self, state: PartitionState) -> None:
        """The controller's seam: publish one partition's new state to every broker."""
        with self._lock:
            topic = self._topics[state.topic]
            self._publish(
                state.topic, replace(topic, partitions={**topic.partitions, state.partition: state})
            )

    def set_leader(self, tp: TopicPartition, leader: int, isr: list[int]) -> PartitionState:
        """A new leadership term for ``tp`` (the epochs move on), as an election decides."""
        with self._lock:
            current = self.partition(tp)
            assert current is not None
            new = replace(
                current,
                leader=leader,
                leader_epoch=current.leader_epoch + 1,
                isr=list(isr),
                partition_epoch=current.partition_epoch + 1,
            )
            self.update_partition(new)
            return new

    def set_isr(self, tp: TopicPartition, isr: list[int]) -> PartitionState:
        """An ISR change within the term (what AlterPartition would write)."""
        with self._lock:
            current = self.partition(tp)
            assert current is not None
            new = replace(current, isr=list(isr), partition_epoch=current.partition_epoch + 1)
            self.update_partition(new)
            return new


class Cluster:
    """``size`` in-process brokers on fixed loopback ports sharing one ``SharedMetadata``."""

    def __init__(self, root: Path, size: int, overrides: dict[str, str] | None = None) -> None:
        self.root = root
        # The ISR changes leaders asked for: (broker, tp, proposed ISR), as a controller gets them.
        self.isr_requests: list[tuple[int, TopicPartition, tuple[int, ...]]] = []
        self.ports = [free_port() for _ in range(size)]
        self.metadata = SharedMetadata(
            [BrokerInfo(i, "127.0.0.1", port) for i, port in enumerate(self.ports)]
        )
        self.overrides = overrides or {}
        self.procs: dict[int, InProcessBroker] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def config(self, node: int) -> BrokerConfig:
        return BrokerConfig(
            {
                "node.id": str(node),
                "listeners": f"PLAINTEXT://127.0.0.1:{self.ports[node]}",
                "log.dirs": str(self.root / f"broker-{node}"),
                "replica.fetch.backoff.ms": "100",
                "replica.fetch.wait.max.ms": "200",
                **self.overrides,
            }
        )

    def start(self, node: int) -> Broker:
        def requested(proposal: IsrProposal) -> None:
            self.isr_requests.append((node, proposal.tp, proposal.state.isr))

        proc = InProcessBroker(
            self.config(node), metadata=self.metadata, isr_change_requested=requested
        )
        self.procs[node] = proc
        return proc.start()

    def stop(self, node: int) -> None:
        proc = self.procs.pop(node, None)
        if proc is not None:
            proc.stop()

    def broker(self, node: int) -> Broker:
        proc = self.procs[node]
        assert proc.broker is not None
        return proc.broker

    def stop_all(self) -> None:
        for node in list(self.procs):
            self.stop(node)


def log_batches(broker: Broker, tp: TopicPartition) -> list[tuple[int, int, int]]:
    """(base offset, partition leader epoch, last offset) of every batch in ``tp``'s log."""
    p = broker.replica_manager.partition(tp)
    assert p is not None and p.log is not None
    plog = p.log
    with plog.lock:
        data = b"".join(s.log.path.read_bytes() for s in plog.segments)
    return [
        (h.base_offset, h.partition_leader_epoch, h.base_offset + h.last_offset_delta)
        for _, h in iter_headers(data)
    ]
