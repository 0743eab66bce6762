"""Cluster metadata in ZooKeeper through kazoo, in Kafka's znode layout (`zk_data`).

Every write a controller makes is one ZooKeeper transaction that also checks the version of
/controller_epoch it saw when it was elected, so a controller that lost its office cannot
change anything (Kafka's controller-epoch zkVersion check); partition state writes are further
conditional on the state znode's version (the partition epoch), so no concurrent change is lost.
Calls block: from asyncio code run them in a thread.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from logkeel.cluster import zk_data as zd
from logkeel.cluster.acls import AclBinding, changed_bindings, decode_bindings, encode_bindings
from logkeel.cluster.zk_data import BrokerRegistration, LeaderIsr, TopicAssignment
from logkeel.storage.topic_partition import TopicPartition

T = TypeVar("T")


class ZooKeeperUnavailable(Exception):
    """ZooKeeper could not be reached within zookeeper.connection.timeout.ms."""


class BrokerIdInUse(Exception):
    """Another live broker is registered with this broker.id."""


class ControllerMoved(Exception):
    """The write was made by a controller whose epoch is no longer current."""


class StalePartitionState(Exception):
    """A partition state write was made against an older partition epoch (znode version)."""


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """What a controller proves its office with: its epoch and the /controller_epoch znode
    version that every one of its writes checks."""

    broker_id: int
    epoch: int
    zk_version: int


def _raise_first_failure(results: list[object], path_errors: Mapping[int, type[Exception]]) -> None:
    """A kazoo transaction returns per-operation results; the failing one holds its error and
    the others RolledBackError. Map the failing operation to our exception."""
    for index, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            raise path_errors.get(index, type(result))(
                str(result) or type(result).__name__
            ) from result


class ZkMetadataClient:
    """One broker's ZooKeeper session. ``connect`` is Kafka's zookeeper.connect
    (`host:port[,host:port...][/chroot]`)."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18_000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.zk = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000)

    # ---- session ---------------------------------------------------------------------------

    def start(self) -> ZkMetadataClient:
        try:
            self.zk.start(timeout=self.connection_timeout_ms / 1000)
        except KazooTimeoutError as e:
            self.zk.stop()
            self.zk.close()
            raise ZooKeeperUnavailable(
                f"could not connect to ZooKeeper at {self.connect} within "
                f"zookeeper.connection.timeout.ms={self.connection_timeout_ms}"
            ) from e
        for path in zd.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        return self

    def close(self) -> None:
        """Ends the session: every ephemeral node of it (registration, controller) goes."""
        self.zk.stop()
        self.zk.close()

    def add_session_listener(self, fn: Callable[[str], None]) -> None:
        """``fn`` gets "CONNECTED", "SUSPENDED" (connection lost, session may live on) or
        "LOST" (session expired: ephemeral nodes are gone). Called on kazoo's thread. After
        LOST kazoo connects again with a new session, in which the broker must register anew
        (and a controller must be elected again)."""
        self.zk.add_listener(lambda state: fn(str(state)))

    def cluster_id(self, proposed: str) -> str:
        """The cluster's id from /cluster/id, created with ``proposed`` by the first broker."""
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zd.CLUSTER_ID, zd.encode_cluster_id(proposed), makepath=True)
        data, _ = self.zk.get(zd.CLUSTER_ID)
        return zd.decode_cluster_id(data)

    # ---- brokers ---------------------------------------------------------------------------

    def register_broker(self, reg: BrokerRegistration) -> int:
        """Creates the broker's ephemeral registration and returns its broker epoch."""
        path = zd.broker_path(reg.broker_id)
        try:
            self.zk.create(path, zd.encode_broker(reg), ephemeral=True)
        except NodeExistsError as e:
            raise BrokerIdInUse(f"broker.id {reg.broker_id} is already registered at {path}") from e
        _, stat = self.zk.get(path)
        return int(stat.czxid)

    def update_broker(self, reg: BrokerRegistration) -> None:
        """Rewrites this broker's own registration (e.g. a log dir went offline)."""
        self.zk.set(zd.broker_path(reg.broker_id), zd.encode_broker(reg))

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        try:
            data, stat = self.zk.get(zd.broker_path(broker_id))
        except NoNodeError:
            return None
        return zd.decode_broker(broker_id, data, stat.czxid)

    def brokers(
        self, watch: Callable[[list[int]], None] | None = None
    ) -> dict[int, BrokerRegistration]:
        """Live brokers; with ``watch``, it is called with the live ids on every change."""
        if watch is not None:
            self.zk.ChildrenWatch(zd.BROKER_IDS, lambda ids: watch(sorted(int(i) for i in ids)))
        found = {}
        for child in self.zk.get_children(zd.BROKER_IDS):
            reg = self.broker(int(child))
            if reg is not None:
                found[reg.broker_id] = reg
        return found

    def request_controlled_shutdown(self, broker_id: int) -> None:
        """Ephemeral, so a broker that dies mid-shutdown leaves no stale request behind."""
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zd.controlled_shutdown_path(broker_id), ephemeral=True)

    def shutting_down(self, watch: Callable[[set[int]], None] | None = None) -> set[int]:
        """Brokers with a controlled shutdown under way."""
        if watch is not None:
            self.zk.ChildrenWatch(
                zd.CONTROLLED_SHUTDOWN, lambda ids: watch({int(i) for i in ids})
            )
        return {int(i) for i in self.zk.get_children(zd.CONTROLLED_SHUTDOWN)}

    # ---- controller ------------------------------------------------------------------------

    def controller(self, watch: Callable[[int | None], None] | None = None) -> int | None:
        if watch is not None:
            self.zk.DataWatch(
                zd.CONTROLLER,
                lambda data, _stat: watch(None if data is None else zd.decode_controller(data)),
            )
        try:
            data, _ = self.zk.get(zd.CONTROLLER)
        except NoNodeError:
            return None
        return zd.decode_controller(data)

    def acls(self, watch: Callable[[tuple[AclBinding, ...]], None]) -> None:
        """Calls ``watch`` with the cluster's ACL bindings now and after every change."""
        self.zk.DataWatch(zd.ACLS, lambda data, _stat: watch(decode_bindings(data)))

    def alter_acls(self, add: Iterable[AclBinding], remove: Iterable[AclBinding]) -> None:
        add, remove = list(add), list(remove)
        self._compare_and_set(
            zd.ACLS, lambda data: encode_bindings(changed_bindings(decode_bindings(data), add, remove))
        )

    def _compare_and_set(self, path: str, change: Callable[[bytes | None], bytes]) -> None:
        """Writes ``change(current data)`` (None: no znode yet) over the version it read; if
        another broker wrote first, the change is applied again to theirs."""
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                data, stat = None, None
            new = change(data)
            try:
                if stat is None:
                    self.zk.create(path, new, makepath=True)
                else:
                    self.zk.set(path, new, version=stat.version)
                return
            except (NodeExistsError, BadVersionError):
                continue

    def scram_credentials(self, watch: Callable[[dict[str, dict[str, Any]]], None]) -> None:
        """Calls ``watch`` with every user's SCRAM credentials now and after every change."""
        self.zk.DataWatch(
            zd.SCRAM_CREDENTIALS, lambda data, _stat: watch(zd.decode_scram_credentials(data))
        )

    def set_scram_credentials(self, user: str, credentials: Mapping[str, Mapping[str, Any]]) -> None:
        """Replaces ``user``'s credentials (empty: removes the user), over whatever another
        broker wrote meanwhile."""

        def change(data: bytes | None) -> bytes:
            users = zd.decode_scram_credentials(data)
            users.pop(user, None)
            if credentials:
                users[user] = {mech: dict(doc) for mech, doc in credentials.items()}
            return zd.encode_scram_credentials(users)

        self._compare_and_set(zd.SCRAM_CREDENTIALS, change)

    def controller_epoch(self) -> tuple[int, int]:
        """(epoch, znode version); (0, -1) before any controller was elected."""
        try:
            data, stat = self.zk.get(zd.CONTROLLER_EPOCH)
        except NoNodeError:
            return 0, -1
        return zd.decode_controller_epoch(data), int(stat.version)

    def try_become_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Creates the ephemeral /controller and increments /controller_epoch in one transaction;
        None when another broker is controller (or won the race)."""
        if not self.zk.exists(zd.CONTROLLER_EPOCH):
            with contextlib.suppress(NodeExistsError):
                self.zk.create(zd.CONTROLLER_EPOCH, zd.encode_controller_epoch(0))
        epoch, version = self.controller_epoch()
        txn = self.zk.transaction()
        txn.create(
            zd.CONTROLLER, zd.encode_controller(broker_id, int(time.time() * 1000)), ephemeral=True
        )
        txn.set_data(zd.CONTROLLER_EPOCH, zd.encode_controller_epoch(epoch + 1), version=version)
        results = txn.commit()
        if any(isinstance(r, (NodeExistsError, BadVersionError)) for r in results):
            return None
        _raise_first_failure(results, {})
        return ControllerEpoch(broker_id, epoch + 1, version + 1)

    def resign_controller(self, ctl: ControllerEpoch) -> None:
        txn = self.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        txn.delete(zd.CONTROLLER)
        _raise_first_failure(txn.commit(), {0: ControllerMoved})

    # ---- topics ----------------------------------------------------------------------------

    def topics(self, watch: Callable[[list[str]], None] | None = None) -> list[str]:
        if watch is not None:
            self.zk.ChildrenWatch(zd.TOPICS, lambda names: watch(sorted(names)))
        return sorted(self.zk.get_children(zd.TOPICS))

    def topic_assignment(self, topic: str) -> TopicAssignment | None:
        found = self.versioned_topic_assignment(topic)
        return None if found is None else found[0]

    def versioned_topic_assignment(self, topic: str) -> tuple[TopicAssignment, int] | None:
        """The assignment and its znode version, for a conditional change."""
        try:
            data, stat = self.zk.get(zd.topic_path(topic))
        except NoNodeError:
            return None
        return zd.decode_topic(topic, data), int(stat.version)

    def topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self.zk.get(zd.topic_config_path(topic))
        except NoNodeError:
            return {}
        return zd.decode_topic_config(data)

    def create_topic(self, assignment: TopicAssignment, configs: Mapping[str, str]) -> None:
        """What Kafka's admin path writes: the config, then the assignment the controller
        watches for. Raises NodeExistsError when the topic exists."""
        txn = self.zk.transaction()
        txn.create(zd.topic_config_path(assignment.topic), zd.encode_topic_config(configs))
        txn.create(zd.topic_path(assignment.topic), zd.encode_topic(assignment))
        _raise_first_failure(txn.commit(), {})

    def set_topic_assignment(self, assignment: TopicAssignment, expected_version: int) -> bool:
        """CreatePartitions: the assignment with the new partitions added, only over the
        version it was read at (False: another change came first); the controller watches it
        and elects their first leaders."""
        try:
            self.zk.set(
                zd.topic_path(assignment.topic), zd.encode_topic(assignment),
                version=expected_version,
            )
        except BadVersionError:
            return False
        return True

    def set_topic_config(self, topic: str, configs: Mapping[str, str]) -> None:
        self.zk.set(zd.topic_config_path(topic), zd.encode_topic_config(configs))

    def request_topic_deletion(self, topic: str) -> None:
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zd.delete_topic_path(topic))

    def topics_to_delete(self) -> list[str]:
        return sorted(self.zk.get_children(zd.DELETE_TOPICS))

    def delete_topic(self, ctl: ControllerEpoch, topic: str) -> None:
        """The controller's last step of a deletion, once every replica is gone."""
        partitions = (
            self.zk.get_children(zd.partitions_path(topic))
            if self.zk.exists(zd.partitions_path(topic))
            else []
        )
        txn = self.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        for p in partitions:
            if self.zk.exists(zd.partition_state_path(topic, int(p))):
                txn.delete(zd.partition_state_path(topic, int(p)))
            txn.delete(zd.partition_path(topic, int(p)))
        if partitions:
            txn.delete(zd.partitions_path(topic))
        txn.delete(zd.topic_path(topic))
        txn.delete(zd.topic_config_path(topic))
        txn.delete(zd.delete_topic_path(topic))
        _raise_first_failure(txn.commit(), {0: ControllerMoved})

    # ---- partition state -------------------------------------------------------------------

    def partition_state(self, topic: str, partition: int) -> LeaderIsr | None:
        try:
            data, stat = self.zk.get(zd.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return zd.decode_partition_state(data, stat.version)

    def create_partition_states(
        self, ctl: ControllerEpoch, topic: str, states: Mapping[int, LeaderIsr]
    ) -> None:
        """New partitions' first leader and ISR (partition epoch 0)."""
        txn = self.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        if not self.zk.exists(zd.partitions_path(topic)):
            txn.create(zd.partitions_path(topic))
        for p, state in sorted(states.items()):
            txn.create(zd.partition_path(topic, p))
            txn.create(zd.partition_state_path(topic, p), zd.encode_partition_state(state))
        _raise_first_failure(txn.commit(), {0: ControllerMoved})

    def update_partition_state(
        self,
        ctl: ControllerEpoch,
        topic: str,
        partition: int,
        state: LeaderIsr,
        expected_version: int,
    ) -> int:
        """Writes ``state`` only if the znode is still at ``expected_version`` (the partition
        epoch the decision was made against) and ``ctl`` is still the controller; returns the
        new version (the new partition epoch)."""
        path = zd.partition_state_path(topic, partition)
        txn = self.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        txn.set_data(path, zd.encode_partition_state(state), version=expected_version)
        results = txn.commit()
        _raise_first_failure(results, {0: ControllerMoved, 1: StalePartitionState})
        stat = results[1]
        return int(stat.version) if isinstance(stat, ZnodeStat) else expected_version + 1

    def leader_update_partition_state(
        self, topic: str, partition: int, state: LeaderIsr, expected_version: int
    ) -> int:
        """A leader's own ISR change (Kafka's ZooKeeper-mode AlterPartition): conditional on the
        partition epoch only; the caller then sends an ISR-change notification."""
        try:
            stat = self.zk.set(
                zd.partition_state_path(topic, partition),
                zd.encode_partition_state(state),
                version=expected_version,
            )
        except BadVersionError as e:
            raise StalePartitionState(
                f"{topic}-{partition}: partition epoch {expected_version} is stale"
            ) from e
        return int(stat.version)

    # ---- notifications ---------------------------------------------------------------------

    def _notify(self, parent: str, prefix: str, data: bytes) -> str:
        return str(self.zk.create(f"{parent}/{prefix}", data, sequence=True))

    def _drain(self, parent: str, decode: Callable[[bytes], T]) -> list[T]:
        """Reads every notification under ``parent`` in sequence order, deleting each."""
        out: list[T] = []
        for child in sorted(self.zk.get_children(parent)):
            path = f"{parent}/{child}"
            try:
                data, _ = self.zk.get(path)
                self.zk.delete(path)
            except NoNodeError:
                continue  # another reader (an old controller) took it
            out.append(decode(data))
        return out

    def notify_isr_change(self, partitions: Iterable[TopicPartition]) -> str:
        return self._notify(
            zd.ISR_CHANGE_NOTIFICATION, zd.ISR_CHANGE_PREFIX, zd.encode_partitions(partitions)
        )

    def take_isr_changes(self) -> set[TopicPartition]:
        changed: set[TopicPartition] = set()
        for tps in self._drain(zd.ISR_CHANGE_NOTIFICATION, zd.decode_partitions):
            changed |= tps
        return changed

    def set_offline_replicas(self, broker_id: int, partitions: Iterable[TopicPartition]) -> None:
        """This broker's replicas that cannot serve (ephemeral: they go with the broker)."""
        path = zd.offline_replicas_path(broker_id)
        data = zd.encode_partitions(partitions)
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, ephemeral=True)

    def offline_replicas(self) -> dict[int, set[TopicPartition]]:
        """Every live broker's replicas that cannot serve."""
        return self._by_broker(zd.OFFLINE_REPLICAS, zd.decode_partitions)

    def _by_broker(self, parent: str, decode: Callable[[bytes], T]) -> dict[int, T]:
        """The children of ``parent``, each named by a broker id, decoded."""
        out: dict[int, T] = {}
        for child in self.zk.get_children(parent):
            try:
                data, _ = self.zk.get(f"{parent}/{child}")
            except NoNodeError:
                continue
            out[int(child)] = decode(data)
        return out

    def notify_log_dir_failure(self, broker_id: int) -> str:
        return self._notify(
            zd.LOG_DIR_EVENT_NOTIFICATION,
            zd.LOG_DIR_EVENT_PREFIX,
            zd.encode_log_dir_event(broker_id),
        )

    def take_log_dir_failures(self) -> list[int]:
        """Brokers that reported a failed log dir, in the order they reported."""
        return self._drain(zd.LOG_DIR_EVENT_NOTIFICATION, zd.decode_log_dir_event)

    def set_replica_logs(
        self, broker_id: int, generation: int, logs: Mapping[TopicPartition, zd.ReplicaLogReport]
    ) -> None:
        """This broker's report of its replicas' logs. Persistent: the last report of a broker
        that is gone still says whether a partition held data."""
        path = zd.replica_logs_path(broker_id)
        data = zd.encode_replica_logs(generation, logs)
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, makepath=True)

    def replica_logs(
        self,
    ) -> dict[int, tuple[int, dict[TopicPartition, zd.ReplicaLogReport]]]:
        """Every broker's last report (gone brokers' too): broker -> (generation, logs)."""
        return self._by_broker(zd.REPLICA_LOGS, zd.decode_replica_logs)

    def replica_log_request(self, watch: Callable[[int], None] | None = None) -> int:
        """The generation of reports the controller last asked for (0: never)."""

        def parse(data: bytes | None) -> int:
            return int(data or b"0")

        if watch is not None:
            self.zk.DataWatch(
                zd.REPLICA_LOG_REQUEST, lambda data, _stat: watch(parse(data))
            )
        try:
            data, _ = self.zk.get(zd.REPLICA_LOG_REQUEST)
        except NoNodeError:
            return 0
        return parse(data)

    def request_replica_logs(self) -> int:
        """Asks every broker for a fresh report; returns the generation to wait for."""
        generation = self.replica_log_request() + 1
        data = str(generation).encode()
        try:
            self.zk.set(zd.REPLICA_LOG_REQUEST, data)
        except NoNodeError:
            self.zk.create(zd.REPLICA_LOG_REQUEST, data, makepath=True)
        return generation

    def record_election_loss(self, loss: zd.ElectionLoss) -> None:
        self.zk.create(f"{zd.ELECTION_LOSSES}/{zd.ELECTION_LOSS_PREFIX}",
                       zd.encode_election_loss(loss), sequence=True, makepath=True)  # fmt: skip

    def election_losses(self) -> list[zd.ElectionLoss]:
        """Every election loss the controllers recorded, oldest first."""
        try:
            children = sorted(self.zk.get_children(zd.ELECTION_LOSSES))
        except NoNodeError:
            return []
        out = []
        for child in children:
            with contextlib.suppress(NoNodeError):
                out.append(zd.decode_election_loss(self.zk.get(f"{zd.ELECTION_LOSSES}/{child}")[0]))
        return out

    def reserve_producer_ids(self, broker_id: int, size: int) -> tuple[int, int]:
        """The next block of ``size`` producer ids for this broker, [start, end): a
        conditional write of /latest_producer_id_block, retried when another broker won."""
        while True:
            try:
                data, stat = self.zk.get(zd.PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self.zk.create(
                        zd.PRODUCER_ID_BLOCK, zd.encode_producer_id_block(broker_id, 0, size - 1)
                    )
                    return 0, size
                except NodeExistsError:
                    continue
            start = zd.decode_producer_id_block_end(data) + 1
            try:
                self.zk.set(
                    zd.PRODUCER_ID_BLOCK,
                    zd.encode_producer_id_block(broker_id, start, start + size - 1),
                    version=stat.version,
                )
            except BadVersionError:
                continue
            return start, start + size

    def submit_election(self, request: zd.ElectionRequest) -> str:
        """Queues an election for the controller; returns the znode to read the results from."""
        return str(
            self.zk.create(
                f"{zd.ELECTIONS}/{zd.ELECTION_PREFIX}", zd.encode_election(request),
                sequence=True, makepath=True,
            )
        )

    def run_election(
        self, request: zd.ElectionRequest, timeout_s: float
    ) -> dict[TopicPartition, tuple[str | None, str]]:
        """Queues ``request`` for the controller and waits up to ``timeout_s`` for its results;
        named partitions it has not answered by then get REQUEST_TIMED_OUT."""
        path = self.submit_election(request)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                done = self.election(path)
                if done is not None and done.results is not None:
                    return dict(done.results)
                time.sleep(0.05)
        finally:
            self.delete_election(path)
        why = f"the controller did not finish the election within {timeout_s:.0f}s"
        return {tp: ("REQUEST_TIMED_OUT", why) for tp in request.partitions or ()}

    def election(self, path: str) -> zd.ElectionRequest | None:
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return zd.decode_election(data)

    def delete_election(self, path: str) -> None:
        with contextlib.suppress(NoNodeError):
            self.zk.delete(path)

    def elections(self) -> list[tuple[str, zd.ElectionRequest | None, float]]:
        """Every queued election in order: (znode, request or None if unreadable, age in s)."""
        out = []
        now = time.time()
        for child in sorted(self.zk.get_children(zd.ELECTIONS)):
            path = f"{zd.ELECTIONS}/{child}"
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue
            try:
                request: zd.ElectionRequest | None = zd.decode_election(data)
            except (ValueError, KeyError, TypeError):
                request = None
            out.append((path, request, now - stat.mtime / 1000))
        return out

    def set_election_results(self, path: str, request: zd.ElectionRequest) -> None:
        with contextlib.suppress(NoNodeError):  # the requester gave up and deleted it
            self.zk.set(path, zd.encode_election(request))

    def request_preferred_election(self, partitions: Iterable[TopicPartition]) -> None:
        """Raises NodeExistsError while an earlier request is still pending, as Kafka does."""
        self.zk.create(
            zd.PREFERRED_REPLICA_ELECTION, zd.encode_partitions(partitions), makepath=True
        )

    def take_preferred_election(self) -> set[TopicPartition]:
        try:
            data, _ = self.zk.get(zd.PREFERRED_REPLICA_ELECTION)
            self.zk.delete(zd.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return set()
        return zd.decode_partitions(data)
