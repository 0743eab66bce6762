"""Cluster metadata read from ZooKeeper: a `MetadataStore` whose snapshot is a cache fed by
watches on live brokers, the controller, topics, their assignments, configs and partition states.

Watches only say *what* changed (a partition state's watch is only noted, and read every
250 ms: the controller's notices of the states it wrote come first); one worker thread re-reads
it from ZooKeeper, builds the next immutable snapshot, swaps it in and calls the listeners (the
partition table, which may create or delete logs: never on kazoo's own thread, which must stay
free to deliver events). Writes
(topic creation, deletion, partitions, configs) go to ZooKeeper, where the controller acts on
them; each then waits, bounded, until this broker's cache shows the result, so that an admin
request answers with the leaders the controller chose.
"""

from __future__ import annotations

import functools
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from types import MappingProxyType
from typing import Any, TypeVar

from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.acls import AclBinding, changed_bindings
from logkeel.cluster.assignment import assign_replicas, validate_assignment
from logkeel.cluster.dynamic_broker_configs import DEFAULT_ENTITY, effective
from logkeel.cluster.metadata import (
    INTERNAL_TOPICS,
    BrokerInfo,
    ElectionResults,
    Listener,
    MetadataError,
    MetadataStore,
    PartitionState,
    Reassigning,
    TopicState,
    check_partition_count,
    check_partition_increase,
    check_topic_absent,
)
from logkeel.cluster.partition_state import ElectionRequest
from logkeel.cluster.reassignment import assignment_of
from logkeel.cluster.session_fence import SessionFence
from logkeel.cluster.zk_brokers import BrokerIdInUse
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_data import BrokerRegistration, EndPoint, LeaderIsr, TopicAssignment
from logkeel.cluster.zk_handler import GaveUp
from logkeel.cluster.zk_topics import StalePartitionState
from logkeel.cluster.zk_watch import WatchedZnodes
from logkeel.storage.log_dir import random_uuid
from logkeel.storage.topic_partition import TopicPartition, validate_topic_name

__all__ = ["ZkMetadataStore", "noticed_states"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# How long an admin write waits for the controller's result to reach this broker's cache.
ADMIN_WAIT_S = 15.0
# Changes are gathered until none came for this long, or this long passed since the first.
_COALESCE_QUIET_S = 0.01
_COALESCE_MAX_S = 0.1
# How often the partition states whose watches fired are read (`_state_watches`).
_STATE_CATCH_UP_S = 0.25
# How long a rebuild waits for the first states of partitions it just began watching.
_FIRST_STATES_WAIT_S = 30.0
# The longest the re-reads of changed states wait for this broker's controller to finish a pass.
_HOLD_MAX_S = 2.0
# How often a controlled shutdown asks again while ZooKeeper is out of reach.
_CONNECTION_CHECK_S = 0.25

_Task = tuple[str, str]  # ("topic", name) | ("brokers", "") | ("register", "") | ("stop", "")


class ZkMetadataStore(MetadataStore):
    """One broker's view of the cluster. ``start`` connects and loads the cache; ``register``
    (once the listener is bound) announces the broker; ``close`` ends the session."""

    def __init__(
        self,
        client: ZkMetadataClient,
        node_id: int,
        *,
        rack: str | None = None,
        cluster_id: str | None = None,
        departed_linger_s: float | None = None,
    ) -> None:
        """``departed_linger_s``: how long a broker gone while leading is still shown at most
        (`_refresh_brokers`; default: the session timeout)."""
        self.client = client
        self.node_id = node_id
        self.rack = rack
        self.cluster_id = cluster_id or ""
        self.controller_id = -1
        self._registration: BrokerRegistration | None = None
        self.broker_epoch = -1  # this incarnation's, once registered
        self._live: Mapping[int, BrokerRegistration] = MappingProxyType({})
        # Brokers whose registration went while they still led partitions here, with when
        # they stop being shown anyway (`advertised_brokers`). Replaced whole, never changed.
        self._departed: Mapping[int, tuple[BrokerRegistration, float]] = MappingProxyType({})
        # What clients are told (`advertised_brokers`): one value, so that a reader never
        # sees a broker twice or not at all while it departs or registers again.
        self._advertised: tuple[BrokerInfo, ...] = ()
        self._shown: Mapping[int, BrokerRegistration] = MappingProxyType({})  # _advertised's
        self._departed_timer: threading.Timer | None = None
        self._departed_linger_s = (
            client.session_timeout_ms / 1000 if departed_linger_s is None else departed_linger_s
        )
        self._snapshot: Mapping[str, TopicState] = MappingProxyType({})
        self._leader_isr: dict[tuple[str, int], LeaderIsr] = {}
        # Each topic's assignment and configs as last read (a partition state's change
        # rebuilds its topic from these, reading nothing).
        self._assignments: dict[str, TopicAssignment] = {}
        self._configs: dict[str, dict[str, str]] = {}
        # The partition states, watched pipelined (thousands of them: `zk_watch`).
        self._states = self._state_watches()
        # Whether the re-reads of changed states should wait (this broker's controller is
        # writing a burst of them: `_catch_up`).
        self.hold_state_reads: Callable[[], bool] = lambda: False
        # Partitions whose state a watch delivered since their topic was last rebuilt.
        self._changed_states: dict[str, set[int]] = {}
        self._changed_lock = threading.Lock()
        # A state comes from its watch (kazoo's thread) or from this broker's controller
        # (`states_written`): the newer version wins, whichever comes first.
        self._states_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._watched: set[str] = set()
        self._tasks: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self._changed = threading.Condition()
        self._worker: threading.Thread | None = None
        self._session_lost = False
        self.write_fence = SessionFence(client.session_timeout_ms)
        self._closing = False
        self._catch_up_wake = threading.Event()
        self._leaving = False  # a controlled shutdown is under way: no registering again
        self._cannot_serve: dict[int, set[TopicPartition]] = {}
        self._known_topics: set[str] = set()
        self._offline: frozenset[TopicPartition] = frozenset()
        self._acls: tuple[AclBinding, ...] = ()
        self._scram: Mapping[str, Mapping[str, Any]] = MappingProxyType({})
        self._quotas: Mapping[str, Mapping[str, float]] = MappingProxyType({})
        self._group_configs: Mapping[str, Mapping[str, str]] = MappingProxyType({})
        # Dynamic broker configs of this broker and the cluster-wide defaults, as watched.
        self._dynamic: dict[str, Mapping[str, str]] = {}
        self._dynamic_listeners: list[Callable[[Mapping[str, str]], None]] = []

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ZkMetadataStore:
        """Connects (raises ZooKeeperUnavailable), agrees on the cluster id, loads every topic
        and starts watching. A log dir's cluster id that differs from the cluster's is refused."""
        self.client.start()
        # As Kafka's ZooKeeper client, requests at start-up wait out a dropped connection (a
        # loaded ZooKeeper, a broker starved of CPU) rather than fail the start.
        deadline = time.monotonic() + 2 * self.client.session_timeout_ms / 1000
        proposed = self.cluster_id or random_uuid()
        actual = _until_connected(deadline, self.client.cluster_id, proposed)
        if self.cluster_id and actual != self.cluster_id:
            self.client.close()
            raise MetadataError(
                "INCONSISTENT_CLUSTER_ID",
                f"the log dirs belong to cluster {self.cluster_id}, but ZooKeeper at "
                f"{self.client.connect} holds cluster {actual}",
            )
        self.cluster_id = actual
        _until_connected(deadline, self._refresh_brokers)
        self._known_topics = set(_until_connected(deadline, self.client.topics))
        for name in self._known_topics:
            _until_connected(deadline, functools.partial(self._refresh_topic, name, notify=False))
        self._scram_secret = _until_connected(deadline, self.client.scram_secret)
        self._watch_notices()
        self.client.brokers(watch=lambda _ids: self._tasks.put(("brokers", "")))
        # A registration's data changes (offline log dirs) come with a log dir event.
        self.client.zk.ChildrenWatch(
            zd.LOG_DIR_EVENT_NOTIFICATION, lambda _events: self._tasks.put(("brokers", ""))
        )
        self.client.topics(watch=self._on_topics)
        self.client.acls(watch=self._on_acls)
        self.client.scram_credentials(watch=self._on_scram)
        self.client.client_quotas(watch=self._on_quotas)
        self.client.group_configs(watch=self._on_group_configs)
        for entity in (str(self.node_id), DEFAULT_ENTITY):
            self.client.watch_broker_configs(entity, functools.partial(self._on_dynamic, entity))
        self.client.controller(watch=self._on_controller)
        self.client.add_session_listener(self._on_session)
        self._worker = threading.Thread(target=self._run, name="zk-metadata", daemon=True)
        self._worker.start()
        threading.Thread(target=self._catch_up, name="zk-state-catch-up", daemon=True).start()
        return self

    def register(
        self,
        host: str,
        port: int,
        log_dir_ids: Iterable[str],
        *,
        listener: str = "PLAINTEXT",
        timeout_s: float | None = None,
        endpoints: Sequence[EndPoint] = (),
    ) -> int:
        """Creates this broker's ephemeral registration (every one of ``endpoints``, else
        ``listener`` at host:port); returns the broker epoch. A previous run's registration (a
        SIGKILLed broker restarted at once) lives on until its session expires, so an id in
        use is retried for up to a session timeout."""
        self._registration = BrokerRegistration(
            self.node_id,
            tuple(endpoints) or (EndPoint(listener, host, port),),
            rack=self.rack,
            timestamp_ms=int(time.time() * 1000),
            log_dir_ids=tuple(log_dir_ids),
        )
        return self._register(timeout_s)

    def _register(self, timeout_s: float | None = None) -> int:
        assert self._registration is not None
        session_s = self.client.session_timeout_ms / 1000
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else session_s + 2.0)
        while True:
            try:
                epoch = self.client.register_broker(self._registration)
            except BrokerIdInUse:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
                continue
            log.info("registered broker %d in ZooKeeper (broker epoch %d)", self.node_id, epoch)
            self.broker_epoch = epoch
            self._watch_registration(epoch)
            if self._offline:  # ephemeral, so gone with an expired session
                self.client.set_offline_replicas(self.node_id, self._offline)
            self.write_fence.registered()
            return epoch

    def _watch_registration(self, epoch: int) -> None:
        """Registers again when this registration is deleted while the session lives on: a
        peer took this broker for a crashed one (`crash_detection`)."""

        def fired(data: bytes | None, stat: Any) -> bool:
            if self.broker_epoch != epoch or self._closing or self._leaving:
                return False
            if data is None:
                log.warning(
                    "this broker's registration (broker epoch %d) was removed while it runs; "
                    "registering again", epoch,
                )  # fmt: skip
                self._tasks.put(("register", ""))
                return False
            return True

        self.client.zk.DataWatch(zd.broker_path(self.node_id), fired)

    def report_offline_replicas(
        self,
        partitions: Iterable[TopicPartition],
        offline_log_dir_ids: Iterable[str],
        event: zd.LogDirEvent | None = None,
    ) -> None:
        """This broker cannot serve ``partitions`` (a log dir failed): the controller elects
        other leaders for them and drops this broker from their ISRs (KIP-18). ``event``: the
        dir that failed or came back, for the controller's history."""
        self._offline = frozenset(partitions)
        self.client.set_offline_replicas(self.node_id, self._offline)
        if self._registration is not None:
            self._registration = replace(
                self._registration, offline_log_dir_ids=tuple(offline_log_dir_ids)
            )
            self.client.update_broker(self._registration)
        self.client.notify_log_dir_failure(event or zd.LogDirEvent(self.node_id))

    def reserve_producer_ids(self, size: int) -> tuple[int, int] | None:
        return self.client.reserve_producer_ids(self.node_id, size)

    def elect_leaders(self, request: ElectionRequest, timeout_s: float) -> ElectionResults:
        return self.client.run_election(request, timeout_s)

    def _on_dynamic(self, entity: str, configs: dict[str, str]) -> None:
        self._dynamic[entity] = MappingProxyType(configs)
        own, default = self.dynamic_broker_configs()
        for fn in list(self._dynamic_listeners):
            fn(effective(own, default))
        self._signal()

    def watch_dynamic_broker_configs(self, fn: Callable[[Mapping[str, str]], None]) -> None:
        self._dynamic_listeners.append(fn)
        fn(effective(*self.dynamic_broker_configs()))

    def dynamic_broker_configs(self) -> tuple[Mapping[str, str], Mapping[str, str]]:
        empty: Mapping[str, str] = {}
        return (self._dynamic.get(str(self.node_id), empty),
                self._dynamic.get(DEFAULT_ENTITY, empty))  # fmt: skip

    def alter_dynamic_broker_configs(
        self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> None:
        self.client.alter_broker_configs(entity, change)
        if entity in (str(self.node_id), DEFAULT_ENTITY):

            def seen() -> bool:
                current = dict(self._dynamic.get(entity, {}))
                return change(current) == current

            self.wait_for(seen, ADMIN_WAIT_S)

    def alter_reassignments(
        self, request: Mapping[TopicPartition, tuple[int, ...] | None], timeout_s: float
    ) -> dict[TopicPartition, tuple[str | None, str | None]]:
        results = self.client.run_reassignment(request, timeout_s)
        started = {tp: request[tp] for tp, (error, _) in results.items() if error is None}

        def cached() -> bool:
            """This broker's cache shows every move started (or cancelled), so that a
            ListPartitionReassignments sent next agrees with the answer."""
            for tp, target in started.items():
                a = self._assignments.get(tp.topic)
                now = assignment_of(a, tp.partition) if a is not None else None
                if now is None or (now.moving if target is None else now.target != target):
                    return False
            return True

        self.wait_for(cached, ADMIN_WAIT_S)
        return results

    def reassignments(self) -> dict[TopicPartition, Reassigning]:
        out = {}
        for a in list(self._assignments.values()):
            for p in set(a.adding_replicas) | set(a.removing_replicas):
                out[TopicPartition(a.topic, p)] = (
                    tuple(a.partitions.get(p, ())),
                    tuple(a.adding_replicas.get(p, ())),
                    tuple(a.removing_replicas.get(p, ())),
                )
        return out

    def close(self) -> None:
        """Ends the session: the registration (and /controller, if held) goes at once."""
        self._closing = True
        self._catch_up_wake.set()
        if self._worker is not None:
            self._tasks.put(("stop", ""))
            self._worker.join(10)
            self._worker = None
        # Before the session ends: kazoo fires every watch when its connection drops (which
        # the server's close of a session can look like), and each of thousands re-armed then
        # wakes the connection through a socket nobody drains any more, whose buffer fills and
        # blocks kazoo's callback thread, which kazoo's stop waits for (a stop hung for ever).
        self._states.close()
        self.client.close()

    # -- reads ----------------------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        return _broker_infos(self._live.values())

    def advertised_brokers(self) -> list[BrokerInfo]:
        """The live brokers and those departed (`_refresh_brokers`) that still lead."""
        return list(self._advertised)

    def registrations(self) -> Mapping[int, BrokerRegistration]:
        """Every live broker's registration (log dirs, epoch), for status tools."""
        return self._live

    def topics(self) -> Mapping[str, TopicState]:
        return self._snapshot

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Waits until ``predicate()`` holds for the cache (checked after every change)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    # -- watches (kazoo's thread: enqueue only) ---------------------------------------------------

    def _on_topics(self, names: list[str]) -> None:
        """Topics created or deleted; changes within a topic come through its own watches."""
        current = set(names)
        for name in current ^ self._known_topics:
            self._tasks.put(("topic", name))
        self._known_topics = current

    def _on_acls(self, bindings: tuple[AclBinding, ...]) -> None:
        self._acls = bindings
        self._signal()

    def acl_bindings(self) -> tuple[AclBinding, ...]:
        return self._acls

    def _on_scram(self, users: dict[str, dict[str, Any]]) -> None:
        self._scram = MappingProxyType(users)
        self._signal()

    def scram_credentials(self) -> Mapping[str, Mapping[str, Mapping[str, Any]]]:
        return self._scram

    def scram_secret(self) -> bytes:
        return self._scram_secret

    def set_scram_credentials(
        self, user: str, credentials: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Written to ZooKeeper; served here once this broker's watch has seen it."""
        self.client.set_scram_credentials(user, credentials)
        wanted = {mech: dict(doc) for mech, doc in credentials.items()}
        self.wait_for(lambda: dict(self._scram.get(user, {})) == wanted, 10.0)

    def _on_quotas(self, entities: dict[str, dict[str, float]]) -> None:
        self._quotas = MappingProxyType(entities)
        self._signal()

    def client_quotas(self) -> Mapping[str, Mapping[str, float]]:
        return self._quotas

    def alter_client_quotas(self, changes: Mapping[str, Mapping[str, float]]) -> None:
        """Written to ZooKeeper; served here once this broker's watch has seen it."""
        self.client.alter_client_quotas(changes)
        self.wait_for(
            lambda: all(dict(self._quotas.get(k, {})) == dict(v) for k, v in changes.items()),
            10.0,
        )

    def _on_group_configs(self, groups: dict[str, dict[str, str]]) -> None:
        self._group_configs = MappingProxyType(groups)
        self._signal()

    def group_configs(self) -> Mapping[str, Mapping[str, str]]:
        return self._group_configs

    def alter_group_configs(self, changes: Mapping[str, Mapping[str, str]]) -> None:
        """Written to ZooKeeper; served here once this broker's watch has seen it."""
        self.client.alter_group_configs(changes)
        self.wait_for(
            lambda: all(
                dict(self._group_configs.get(k, {})) == dict(v) for k, v in changes.items()
            ),
            10.0,
        )

    def alter_acls(self, add: Iterable[AclBinding], remove: Iterable[AclBinding]) -> None:
        """Written to ZooKeeper; every broker's watch (this one's too) then sees the change."""
        self.client.alter_acls(add, remove)
        self.wait_for(lambda: self._acls == changed_bindings(self._acls, add, remove), 10.0)

    def _on_controller(self, controller: int | None) -> None:
        self.controller_id = -1 if controller is None else controller

    def _on_session(self, state: str) -> None:
        self.write_fence.on_state(state)
        if state == "LOST" and not self._closing:
            self._session_lost = True
            log.error("ZooKeeper session expired; registering again once reconnected")
        elif state == "CONNECTED" and self._session_lost:
            self._session_lost = False
            self._tasks.put(("register", ""))

    def _watch_topic(self, name: str) -> None:
        for path in (zd.topic_path(name), zd.topic_config_path(name)):
            self._watch(path, name)

    def _watch(self, path: str, topic: str) -> None:
        if path in self._watched:
            return
        self._watched.add(path)

        def fired(_data: bytes | None, _stat: object) -> bool:
            if path not in self._watched:
                return False  # the topic is gone: stop watching
            self._tasks.put(("topic", topic))
            return True

        self.client.zk.DataWatch(path, fired)

    def _watch_state(self, topic: str, partition: int) -> bool:
        """Keeps the partition's state from what its watch delivers (a refresh of its topic
        then reads no partition state) and queues a rebuild of the topic on each change."""
        key = (topic, partition)

        def on_state(data: bytes | None, stat: Any) -> None:
            if data is None:
                with self._states_lock:
                    self._leader_isr.pop(key, None)
            elif not self._put_state(key, zd.decode_partition_state(data, stat.version)):
                return
            self._state_changed(topic, [partition])

        return self._states.data(zd.partition_state_path(topic, partition), on_state)

    def _forget_if_created_again(self, name: str, assignment: zd.TopicAssignment) -> None:
        """A topic deleted and created again before this worker read it gone (another topic
        id): the new topic's state versions start over, so the old topic's cached states
        would hide them as stale. They are dropped and their watches read afresh."""
        before = self._assignments.get(name)
        if before is None or before.topic_id == assignment.topic_id:
            return
        log.info("topic %s was created again (topic id %s, was %s)",
                 name, assignment.topic_id, before.topic_id)  # fmt: skip
        with self._states_lock:
            for key in [k for k in self._leader_isr if k[0] == name]:
                del self._leader_isr[key]
        for p in before.partitions:
            self._states.forget(zd.partition_state_path(name, p))

    def _put_state(self, key: tuple[str, int], state: LeaderIsr) -> bool:
        with self._states_lock:
            cached = self._leader_isr.get(key)
            if cached is not None and cached.zk_version >= state.zk_version:
                return False
            self._leader_isr[key] = state
            return True

    def _state_changed(self, topic: str, partitions: Iterable[int]) -> None:
        with self._changed_lock:
            self._changed_states.setdefault(topic, set()).update(partitions)
        self._tasks.put(("state", topic))

    def states_written(self, states: Iterable[tuple[TopicPartition, LeaderIsr]]) -> None:
        """States the controller has just written (this broker's controller once ZooKeeper
        answered the transaction, or any controller's notice; each with its new version):
        taken at once, as their watches would bring them, the newer version winning. Only
        partitions already watched: a new one's first state comes from its watch."""
        changed: dict[str, list[int]] = {}
        for tp, state in states:
            key = (tp.topic, tp.partition)
            if key in self._leader_isr and self._put_state(key, state):
                changed.setdefault(tp.topic, []).append(tp.partition)
        for topic, partitions in changed.items():
            self._state_changed(topic, partitions)

    def _state_watches(self) -> WatchedZnodes:
        """Partition-state watches that only note a change, read every _STATE_CATCH_UP_S
        (`_catch_up`): the controller's notices bring its states at once, and re-reading each
        moved state as its watch fired, on every broker, tripled ZooKeeper's reads in the very
        burst of writes a controlled shutdown waits for; a leader's own ISR change shows here
        that much later."""
        watches = WatchedZnodes(self.client.zk, self._state_watch_failed)
        watches.quiet(zd.is_partition_state_path)
        return watches

    def _catch_up(self) -> None:
        held_since = time.monotonic()
        while not self._closing:
            # While this broker's controller writes a burst of states on this connection
            # (handed to this store as each transaction is answered), their re-reads wait
            # behind it rather than between its writes: up to _HOLD_MAX_S at a time.
            if not self.hold_state_reads() or time.monotonic() - held_since >= _HOLD_MAX_S:
                self._states.catch_up()
                held_since = time.monotonic()
            self._catch_up_wake.wait(_STATE_CATCH_UP_S)

    def _watch_notices(self) -> None:
        """The controller's notices of the states it wrote (`zk_data.STATE_NOTICES`): one read
        brings a whole transaction's states, ahead of the re-reads their watches set off."""
        for slot in range(zd.STATE_NOTICE_SLOTS):
            self._states.data(zd.state_notice_path(slot), self._on_notice)

    def _on_notice(self, data: bytes | None, _stat: Any) -> None:
        if not data:
            return
        try:
            notice = zd.decode_state_notice(data)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring an unreadable state notice (%s)", exc)
            return
        self.states_written(noticed_states(notice, self._assignments))

    def _take_changed_states(self, topic: str) -> set[int]:
        with self._changed_lock:
            return self._changed_states.pop(topic, set())

    def _state_watch_failed(self, path: str, exc: BaseException) -> None:
        log.warning("watching %s failed (%s); watching every partition state anew", path, exc)
        self._tasks.put(("rewatch", ""))

    def _rewatch_states(self) -> None:
        """After a session expired (its watches went with it) or a watch failed."""
        self._states.close()
        self._states = self._state_watches()
        self._watch_notices()
        for name in list(self._assignments):
            self._refresh_topic(name)

    # -- the worker -------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = {self._tasks.get()}
            # A burst of changes (a controller moving hundreds of leaderships) is taken in one
            # rebuild of each topic, not one per partition.
            until = time.monotonic() + _COALESCE_MAX_S
            while (left := until - time.monotonic()) > 0:
                try:
                    batch.add(self._tasks.get(timeout=min(left, _COALESCE_QUIET_S)))
                except queue.Empty:
                    break
            if ("stop", "") in batch:
                return
            try:
                if ("register", "") in batch:
                    self._register()
                    self._rewatch_states()
                elif ("rewatch", "") in batch:
                    self._rewatch_states()
                if ("brokers", "") in batch:
                    self._refresh_brokers()
                reread = {name for kind, name in batch if kind == "topic"}
                for name in sorted(reread | {name for kind, name in batch if kind == "state"}):
                    self._refresh_topic(name, reread=name in reread, full=name in reread)
                if self._departed:
                    # Those whose every leadership moved are shown no more; no partition's
                    # view changes with it (each shows a departed broker only as its leader).
                    kept = self._still_leading(self._departed)
                    if kept.keys() != self._departed.keys():
                        self._set_brokers(self._live, kept)
            except Exception as exc:
                # GaveUp: stopping with ZooKeeper out of reach, tried again until the session ends.
                if not isinstance(exc, GaveUp):
                    log.exception("refreshing metadata from ZooKeeper failed; retrying")
                time.sleep(0.5)
                for task in batch:
                    self._tasks.put(task)

    def _refresh_brokers(self) -> None:
        """The live brokers, from their registrations. A broker whose registration went while
        it still led partitions here is *departed* until the controller's new states name other
        leaders, or for a session timeout at most: clients are still shown it, as the leader of
        those partitions only, as Kafka's metadata cache shows a dead leader until the
        controller's update brings its successor and the broker's removal together. Shown gone
        at once, its partitions read leaderless (LEADER_NOT_AVAILABLE) for the seconds the
        controller takes at thousands of partitions, and librdkafka's idempotent producer, handed
        such a partition to no broker while its requests to the dead one were in flight, sent it
        nothing more until its messages timed out (`bench/cluster_scale.py`, 10,000 partitions:
        1,235 sends to 325 partitions failed)."""
        live = self.client.brokers()
        now = time.monotonic()
        departed = {
            b: entry for b, entry in self._departed.items() if b not in live and entry[1] > now
        }
        for b, reg in self._live.items():
            if b not in live and b != self.node_id and b not in departed:
                departed[b] = (reg, now + self._departed_linger_s)
        # A broker no longer shown stays advertised until the topics are rebuilt without it
        # as a leader: a client is never handed a leader missing from the broker list.
        self._set_brokers(MappingProxyType(live), self._still_leading(departed), keep_shown=True)
        if self._departed_timer is not None:
            self._departed_timer.cancel()
            self._departed_timer = None
        if self._departed:
            # Shown no longer once its time is up, led partitions or not: then leaderless.
            self._departed_timer = threading.Timer(
                min(until for _, until in self._departed.values()) - now + 0.01,
                lambda: self._tasks.put(("brokers", "")),
            )
            self._departed_timer.daemon = True
            self._departed_timer.start()
        self._cannot_serve = self.client.offline_replicas()
        # offline_replicas depend on liveness: rebuild every topic from the cached states.
        for name in list(self._snapshot):
            self._refresh_topic(name, reread=False)
        self._set_brokers(self._live, self._departed)
        self._signal()

    def _set_brokers(
        self,
        live: Mapping[int, BrokerRegistration],
        departed: Mapping[int, tuple[BrokerRegistration, float]],
        *,
        keep_shown: bool = False,
    ) -> None:
        """``keep_shown``: those advertised before stay so (until a call without it)."""
        # Departed first: the partitions' rebuilds never see the broker gone from both.
        self._departed = departed
        self._live = live
        shown = {b: reg for b, (reg, _) in departed.items()} | dict(live)
        if keep_shown:
            shown = dict(self._shown) | shown
        self._shown = MappingProxyType(shown)
        self._advertised = tuple(_broker_infos(shown.values()))

    def _still_leading(
        self, departed: Mapping[int, tuple[BrokerRegistration, float]]
    ) -> Mapping[int, tuple[BrokerRegistration, float]]:
        """Those of ``departed`` that the published topics still show as a leader. Not the
        cached states: a state handed over (`states_written`) is cached before its topic is
        rebuilt, and a broker dropped on it was a leader clients could not find until then."""
        if not departed:
            return MappingProxyType({})
        leaders = {p.leader for t in self._snapshot.values() for p in t.partitions.values()}
        return MappingProxyType({b: e for b, e in departed.items() if b in leaders})

    def _refresh_topic(
        self, name: str, *, notify: bool = True, reread: bool = True, full: bool = True
    ) -> None:
        """Rebuilds the topic's state; ``reread``: its assignment and configs changed;
        not ``full``: only the partition states the watches delivered since changed."""
        read_now = reread or name not in self._assignments
        if read_now:
            assignment = self.client.topic_assignment(name)
            if assignment is not None:
                self._forget_if_created_again(name, assignment)
                self._assignments[name] = assignment
                self._configs[name] = self.client.topic_config(name)
        else:
            assignment = self._assignments[name]
        old = self._snapshot.get(name)
        if assignment is None:
            self._watched.difference_update({zd.topic_path(name), zd.topic_config_path(name)})
            gone = self._assignments.pop(name, None)
            self._configs.pop(name, None)
            for p in gone.partitions if gone is not None else ():
                self._states.forget(zd.partition_state_path(name, p))
            for key in [k for k in self._leader_isr if k[0] == name]:
                del self._leader_isr[key]
            if old is not None:
                self._publish(name, None, notify)
            return
        self._watch_topic(name)
        configs = self._configs[name]
        if full or old is None or read_now:
            # Only a new assignment brings partitions to watch: a rebuild for changed states
            # (one per burst of moves) went over every partition's watch for nothing.
            new = {
                zd.partition_state_path(name, p)
                for p in assignment.partitions
                if self._watch_state(name, p)
            }
            # The first delivery of each watch just set (a new topic, or new partitions).
            self._states.wait_delivered(new, _FIRST_STATES_WAIT_S)
        changed = self._take_changed_states(name)
        if full or old is None:
            partitions: dict[int, PartitionState] = {}
            targets: Iterable[int] = assignment.partitions
        else:  # only partition states changed: the others are kept as they are
            partitions = dict(old.partitions)
            targets = changed
        for p in sorted(targets):
            replicas = assignment.partitions.get(p)
            state = self._leader_isr.get((name, p))
            if replicas is None or state is None:
                # Not elected its first leader yet (or gone with the assignment).
                partitions.pop(p, None)
                continue
            leader = state.leader
            if leader == self.node_id and state.leader_broker_epoch not in (-1, self.broker_epoch):
                # Elected in an earlier run of this broker, whose disk may have lost what it
                # held: not taken up until the controller elects again (on this run's report).
                leader = -1
            partitions[p] = PartitionState(
                name,
                p,
                list(replicas),
                leader,
                state.leader_epoch,
                list(state.isr),
                state.zk_version,
                [
                    r
                    for r in replicas
                    if (r not in self._live and (r != leader or r not in self._departed))
                    or ((cannot := self._cannot_serve.get(r)) and TopicPartition(name, p) in cannot)
                ],
            )
        if not partitions:
            if old is not None:
                self._publish(name, None, notify)
            return
        if old is None and len(partitions) < len(assignment.partitions):
            # A new topic appears whole: a client shown some of its partitions takes that for
            # the partition count, and a send to a later partition fails as unknown.
            return
        topic_state = TopicState(
            name, assignment.topic_id or random_uuid(), partitions, configs, name in INTERNAL_TOPICS
        )
        if topic_state != old:
            self._publish(name, topic_state, notify)

    def _publish(self, name: str, state: TopicState | None, notify: bool) -> None:
        topics = dict(self._snapshot)
        if state is None:
            topics.pop(name, None)
        else:
            topics[name] = state
        self._snapshot = MappingProxyType(topics)
        if notify:
            for fn in list(self._listeners):
                try:
                    fn(name, state)
                except Exception:
                    log.exception("metadata listener failed for topic %s", name)
        self._signal()

    def _signal(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # -- changes --------------------------------------------------------------------------------

    def _live_racks(self) -> dict[int, str | None]:
        return {b: reg.rack for b, reg in self.client.brokers().items()}

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
        _check_new_name(name, self.client.topics())
        check_partition_count(name, num_partitions)
        brokers = self._live_racks()
        placed = self._place(brokers, num_partitions, replication_factor, assignment, 0)
        topic_id = random_uuid()
        planned = TopicState(
            name,
            topic_id,
            {p: PartitionState(name, p, list(rs), -1) for p, rs in placed.items()},
            dict(configs),
            internal or name in INTERNAL_TOPICS,
        )
        if validate_only:
            return planned
        try:
            self.client.create_topic(TopicAssignment(name, topic_id, placed), configs)
        except NodeExistsError:
            raise MetadataError("TOPIC_ALREADY_EXISTS", f"topic '{name}' already exists") from None
        self._tasks.put(("topic", name))
        self.wait_for(lambda: self._complete(name, num_partitions), ADMIN_WAIT_S)
        return self._snapshot.get(name) or planned

    def _complete(self, name: str, partitions: int) -> bool:
        state = self._snapshot.get(name)
        return state is not None and len(state.partitions) >= partitions

    def delete_topic(self, name: str) -> TopicState:
        state = self._snapshot.get(name)
        if state is None or self.client.topic_assignment(name) is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic '{name}' does not exist")
        self.client.request_topic_deletion(name)
        self.wait_for(lambda: name not in self._snapshot, ADMIN_WAIT_S)
        return state

    @staticmethod
    def _place(
        brokers: Mapping[int, str | None],
        partitions: int,
        replication_factor: int,
        manual: Mapping[int, Sequence[int]] | None,
        first: int,
    ) -> dict[int, tuple[int, ...]]:
        if manual is not None:
            validate_assignment(manual, list(brokers), first_partition=first)
            return {p: tuple(rs) for p, rs in manual.items()}
        return assign_replicas(
            brokers,
            partitions,
            replication_factor,
            first_partition=first,
            start_index=random.randrange(max(len(brokers), 1)),
            shift=random.randrange(max(len(brokers), 1)),
        )

    def create_partitions(
        self,
        name: str,
        total: int,
        *,
        validate_only: bool = False,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicState:
        # Conditional on the assignment's version: two CreatePartitions racing on two brokers
        # must not both place "the next" partitions; the loser decides again on the new count.
        while True:
            found = self.client.versioned_topic_assignment(name)
            state = self._snapshot.get(name)
            if found is None or state is None:
                raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic '{name}' does not exist")
            current, version = found
            have = len(current.partitions)
            check_partition_increase(name, have, total)
            brokers = self._live_racks()
            replication = len(next(iter(current.partitions.values())))
            added = self._place(brokers, total - have, replication, assignment, have)
            if validate_only:
                return state
            if self.client.set_topic_assignment(
                replace(current, partitions={**current.partitions, **added}), version
            ):
                break
        self.wait_for(lambda: self._complete(name, total), ADMIN_WAIT_S)
        return self._snapshot.get(name) or state

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicState:
        before = self._snapshot.get(name)
        if before is None:
            raise MetadataError("UNKNOWN_TOPIC_OR_PARTITION", f"topic '{name}' does not exist")
        try:
            self.client.set_topic_config(name, configs)
        except NoNodeError:
            raise MetadataError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"topic '{name}' does not exist"
            ) from None

        def applied() -> bool:
            current = self._snapshot.get(name)
            return current is None or current.configs == configs

        self.wait_for(applied, ADMIN_WAIT_S)
        return self._snapshot.get(name) or replace(before, configs=dict(configs))

    def update_partition(self, state: PartitionState) -> None:
        """One leader's ISR change (`update_partitions`); raises what it answers."""
        [answer] = self.update_partitions([state])
        if answer is not None:
            raise answer

    def update_partitions(self, states: list[PartitionState]) -> list[Exception | None]:
        """A leader's ISR changes (AlterPartition semantics), pipelined: each
        ``state.partition_epoch`` is the proposal's new epoch, so it applies only over
        ``partition_epoch - 1``; a stale proposal is answered INVALID_UPDATE_VERSION (a
        MetadataError), a failed write its error, a written one None. The controller is told
        by one notification for all that were written."""
        writes = []
        for state in states:
            current = self._leader_isr.get((state.topic, state.partition))
            controller_epoch = current.controller_epoch if current is not None else 0
            # Only the leader writes its ISR, and it is this run of this broker.
            after = LeaderIsr(
                state.leader, state.leader_epoch, tuple(state.isr), controller_epoch,
                leader_broker_epoch=self.broker_epoch,
            )  # fmt: skip
            writes.append((state.tp, after, state.partition_epoch - 1))
        out: list[Exception | None] = []
        for answer in self.client.leader_update_partition_states(writes):
            if isinstance(answer, (StalePartitionState, NoNodeError)):
                out.append(MetadataError("INVALID_UPDATE_VERSION", str(answer)))
            else:
                out.append(answer if isinstance(answer, Exception) else None)
        written = [s.tp for s, answer in zip(states, out, strict=True) if answer is None]
        if written:
            self.client.notify_isr_change(written)
        return out

    # -- controlled shutdown --------------------------------------------------------------------

    def controlled_shutdown(
        self, timeout_s: float, leaving: Callable[[], AbstractSet[int]] = frozenset
    ) -> bool:
        """Asks the controller to move this broker's leaderships away and waits for its answer
        that none is left, and until this broker's own view shows none that another in-sync
        replica could take (so that it has stopped leading them, and unloaded their
        coordinators, before it stops);
        False when ``timeout_s`` passed first. ``leaving``: the brokers in a controlled
        shutdown, this one's included."""
        self._leaving = True
        answered = threading.Event()

        def on_answer(epoch: int, remaining: int | None) -> None:
            if epoch == self.broker_epoch and remaining == 0:
                # Every leadership that could move has: a write taken as a leader this broker's
                # view still shows would be truncated away, and the view can lag seconds
                # behind (its worker applying a topic being created).
                self.write_fence.left()
                answered.set()
                self._signal()

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.client.request_controlled_shutdown(self.node_id, self.broker_epoch, on_answer)
                break
            except (ConnectionLoss, GaveUp):
                # ZooKeeper out of reach (the session may live on): asked again once it is back,
                # until the time is up; no controller could move anything meanwhile.
                if time.monotonic() >= deadline:
                    return False
                time.sleep(_CONNECTION_CHECK_S)
        me = self.node_id

        def moved() -> bool:
            """Once the controller answered that nothing is left to move: every leadership
            here that another live replica not leaving could take moved, as this broker's view
            shows it (when every broker stops at once, none can: nothing to wait for, where
            waiting for the ISRs to shrink to this broker took seconds). With no controller to
            answer: every leadership here moved or alone in the ISR."""
            led = [p for t in self._snapshot.values() for p in t.partitions.values()
                   if p.leader == me and p.isr != [me]]  # fmt: skip
            if not answered.is_set():
                # This broker's view may not hold yet every leadership the controller just gave
                # it (the states of a topic being created): it leaving on that view left nine
                # behind. Only the controller's answer says none is left, unless no controller
                # can answer (none elected, or ZooKeeper out of reach).
                if self.controller_id >= 0 and self.client.zk.connected:
                    return False
                return not led
            if not led:
                return True
            live, gone = self._live, leaving()
            return not any(r != me and r in live and r not in gone for p in led for r in p.isr)

        if not self.wait_for(moved, max(0.0, deadline - time.monotonic())):
            return False
        self.write_fence.left()
        return True


def noticed_states(
    notice: Iterable[tuple[TopicPartition, str | None, LeaderIsr]],
    assignments: Mapping[str, TopicAssignment],
) -> list[tuple[TopicPartition, LeaderIsr]]:
    """The states of a notice that belong to the topics as this broker knows them: a notice
    read late may name a deleted topic whose name was taken again (its znodes' versions
    start over), so a state is taken only under the topic id it was written for."""
    out = []
    for tp, topic_id, state in notice:
        a = assignments.get(tp.topic)
        if topic_id is not None and a is not None and a.topic_id == topic_id:
            out.append((tp, state))
    return out


def _broker_infos(registrations: Iterable[BrokerRegistration]) -> list[BrokerInfo]:
    out = []
    for reg in sorted(registrations, key=lambda r: r.broker_id):
        end = reg.plaintext or (reg.endpoints[0] if reg.endpoints else None)
        if end is not None:
            out.append(
                BrokerInfo(
                    reg.broker_id,
                    end.host,
                    end.port,
                    reg.rack,
                    tuple((e.listener, e.host, e.port) for e in reg.endpoints),
                )
            )
    return out


def _until_connected(deadline: float, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``, again after each ConnectionLoss (kazoo reconnects meanwhile) until
    ``deadline``; idempotent reads only."""
    while True:
        try:
            return fn(*args)
        except ConnectionLoss:
            if time.monotonic() >= deadline:
                raise
            log.warning("ZooKeeper connection lost while loading the metadata; retrying")
            time.sleep(0.2)


def _check_new_name(name: str, existing: Iterable[str]) -> None:
    problem = validate_topic_name(name)
    if problem:
        raise MetadataError("INVALID_TOPIC_EXCEPTION", problem)
    check_topic_absent(name, existing)
