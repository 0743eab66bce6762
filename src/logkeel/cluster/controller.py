"""The cluster controller (ZooKeeper mode): one broker at a time, elected through the ephemeral
/controller znode and fenced by /controller_epoch (every write it makes checks the epoch's
version, `zk_client`).

Every broker runs a `Controller`; all but one stay idle. Watches (live brokers, topics and their
assignments, deletion requests, ISR-change notifications, controlled-shutdown requests, a
preferred-election request, /controller itself) only put an event on a queue; one thread takes
every queued event at once and reconciles: it reads the cluster from ZooKeeper, decides each
partition with the pure functions of `elections` and writes the changed states, each conditional
on the partition epoch it was decided against. Reconciling from what ZooKeeper holds, rather than
from the events, is what makes failover lose nothing: a new controller runs the same pass.

Controlled shutdown is requested through an ephemeral /admin/controlled_shutdown/<id> znode
(logkeel's choice, instead of Kafka's ControlledShutdown request): the controller moves every
leadership of that broker to another in-sync replica and drops it from the ISRs.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from kazoo.exceptions import NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.elections import controlled_shutdown, on_replicas_offline, preferred_election
from logkeel.cluster.partition_state import NO_LEADER, PartitionRegistration, ReplicaView, Views
from logkeel.cluster.zk_client import (
    ControllerEpoch,
    ControllerMoved,
    StalePartitionState,
    ZkMetadataClient,
)
from logkeel.cluster.zk_data import LeaderIsr, TopicAssignment
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["Controller", "LiveBrokers", "decide", "imbalanced_partitions", "initial_state"]

log = logging.getLogger(__name__)

# A reconcile pass also runs this often without any event: a retry after a refused write.
_IDLE_RECONCILE_S = 5.0


@dataclass(frozen=True, slots=True)
class LiveBrokers:
    """What the controller's decisions need of the brokers: who is registered, who asked for a
    controlled shutdown, and which replicas each cannot serve (failed log dir)."""

    live: frozenset[int]
    shutting_down: frozenset[int]
    offline_replicas: Mapping[int, AbstractSet[TopicPartition]] = field(default_factory=dict)

    def views(self, tp: TopicPartition, replicas: Iterable[int], *, shutdown: bool) -> Views:
        return {
            r: ReplicaView(
                live=r in self.live,
                log_dir_online=tp not in self.offline_replicas.get(r, ()),
                shutting_down=shutdown and r in self.shutting_down,
            )
            for r in replicas
        }


def initial_state(replicas: tuple[int, ...], cluster: LiveBrokers) -> PartitionRegistration:
    """A new partition: the first live replica (in assignment order, not shutting down) leads,
    every live replica is in sync (the log is empty everywhere). With no live replica, the
    partition starts offline with every replica in the ISR, so whichever returns first may lead."""
    live = tuple(r for r in replicas if r in cluster.live)
    leaders = [r for r in live if r not in cluster.shutting_down]
    if not leaders:
        return PartitionRegistration(replicas, NO_LEADER, 0, replicas)
    return PartitionRegistration(replicas, leaders[0], 0, live)


class Controller:
    """Runs in every broker of a cluster; acts only while it holds the controller's office."""

    def __init__(
        self, client: ZkMetadataClient, broker_id: int, *, unclean_leader_election: bool = False,
        rebalance_interval_s: float | None = None, imbalance_percentage: int = 10,
    ) -> None:
        """``rebalance_interval_s`` (None: off) is auto.leader.rebalance.enable with
        leader.imbalance.check.interval.seconds; ``imbalance_percentage`` is
        leader.imbalance.per.broker.percentage."""
        self.client = client
        self.broker_id = broker_id
        self.unclean_default = unclean_leader_election
        self.rebalance_interval_s = rebalance_interval_s
        self.imbalance_percentage = imbalance_percentage
        self._next_rebalance = 0.0
        self.epoch: ControllerEpoch | None = None
        self._events: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._watched_topics: set[str] = set()
        self._stopping = False

    @property
    def active(self) -> bool:
        return self.epoch is not None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        c = self.client
        c.controller(watch=self._on_controller)
        c.brokers(watch=lambda _ids: self._events.put("brokers"))
        c.topics(watch=self._on_topics)
        c.shutting_down(watch=lambda _ids: self._events.put("shutdown"))
        for parent in (zd.DELETE_TOPICS, zd.ISR_CHANGE_NOTIFICATION, zd.LOG_DIR_EVENT_NOTIFICATION):
            c.zk.ChildrenWatch(parent, lambda _children: self._events.put("admin"))
        c.zk.DataWatch(zd.PREFERRED_REPLICA_ELECTION, lambda _d, _s: self._events.put("admin"))
        c.add_session_listener(self._on_session)
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self._thread.start()
        self._events.put("elect")

    def stop(self) -> None:
        """Resigns (so another broker takes over at once, not after a session timeout)."""
        self._stopping = True
        self._events.put("stop")
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        ctl, self.epoch = self.epoch, None
        if ctl is not None:
            try:
                self.client.resign_controller(ctl)
                log.info("broker %d resigned as controller", self.broker_id)
            except Exception as exc:  # noqa: BLE001 - the session's end removes it anyway
                log.warning("resigning as controller failed: %s", exc)

    # -- watches (kazoo's thread: enqueue only) --------------------------------------------------

    def _on_controller(self, controller: int | None) -> None:
        if controller is None:
            self._events.put("elect")
        elif controller != self.broker_id and self.epoch is not None:
            self._events.put("moved")

    def _on_topics(self, names: list[str]) -> None:
        for name in names:
            if name not in self._watched_topics:
                self._watched_topics.add(name)
                self.client.zk.DataWatch(zd.topic_path(name), self._topic_watch(name))
        self._events.put("topics")

    def _topic_watch(self, name: str):  # noqa: ANN202 - kazoo's watcher signature
        def fired(data: bytes | None, _stat: object) -> bool:
            if data is None:
                self._watched_topics.discard(name)
                return False
            self._events.put("topics")
            return True

        return fired

    def _on_session(self, state: str) -> None:
        if state == "LOST":
            self._events.put("moved")  # the ephemeral /controller went with the session
        elif state == "CONNECTED":
            self._events.put("elect")

    # -- the event thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                events = {self._events.get(timeout=_IDLE_RECONCILE_S)}
            except queue.Empty:
                events = {"idle"}
            while True:
                try:
                    events.add(self._events.get_nowait())
                except queue.Empty:
                    break
            if "stop" in events:
                return
            try:
                if "moved" in events and self.epoch is not None:
                    current = self.client.controller()
                    if current != self.broker_id:
                        log.warning("broker %d is no longer the controller", self.broker_id)
                        self.epoch = None
                if self.epoch is None and events & {"elect", "moved"} and not self._stopping:
                    self._elect()
                if self.epoch is not None:
                    self.reconcile(self.epoch)
            except ControllerMoved:
                log.warning("controller epoch moved on; broker %d resigns", self.broker_id)
                self.epoch = None
            except Exception:  # noqa: BLE001 - a failed pass is retried, never fatal
                log.exception("controller pass failed; retrying")
                self._events.put("retry")
                threading.Event().wait(0.5)

    def _elect(self) -> None:
        ctl = self.client.try_become_controller(self.broker_id)
        if ctl is not None:
            log.info("broker %d is the controller (epoch %d)", self.broker_id, ctl.epoch)
            self.epoch = ctl

    # -- one pass -------------------------------------------------------------------------------

    def reconcile(self, ctl: ControllerEpoch) -> None:
        """Brings every partition in line with the live brokers and pending requests."""
        c = self.client
        c.take_log_dir_failures()  # the offline replicas are read whole below
        cluster = LiveBrokers(
            frozenset(c.brokers()), frozenset(c.shutting_down()), c.offline_replicas()
        )
        for topic in c.topics_to_delete():
            if c.topic_assignment(topic) is not None:
                c.delete_topic(ctl, topic)
                log.info("controller deleted topic %s", topic)
            else:  # a request for a topic that does not exist
                c.zk.delete(zd.delete_topic_path(topic))
        c.take_isr_changes()  # brokers watch the state znodes; the notifications are drained
        preferred = c.take_preferred_election()
        if self.rebalance_interval_s is not None and time.monotonic() >= self._next_rebalance:
            self._next_rebalance = time.monotonic() + self.rebalance_interval_s
            preferred |= imbalanced_partitions(self._registrations(), cluster.live,
                                               self.imbalance_percentage)
        for topic in c.topics():
            assignment = c.topic_assignment(topic)
            if assignment is not None:
                self._reconcile_topic(ctl, assignment, cluster, preferred)

    def _registrations(self) -> dict[TopicPartition, PartitionRegistration]:
        out = {}
        for topic in self.client.topics():
            a = self.client.topic_assignment(topic)
            for p, replicas in (a.partitions.items() if a is not None else ()):
                state = self.client.partition_state(topic, p)
                if state is not None:
                    out[TopicPartition(topic, p)] = zd.registration_of(replicas, state)
        return out

    def _reconcile_topic(
        self, ctl: ControllerEpoch, a: TopicAssignment, cluster: LiveBrokers,
        preferred: set[TopicPartition],
    ) -> None:
        c = self.client
        new: dict[int, LeaderIsr] = {}
        unclean: bool | None = None
        for p, replicas in sorted(a.partitions.items()):
            current = c.partition_state(a.topic, p)
            if current is None:
                new[p] = zd.leader_isr_of(initial_state(replicas, cluster), ctl.epoch)
                continue
            if unclean is None:
                unclean = self._unclean_allowed(a.topic)
            reg = zd.registration_of(replicas, current)
            tp = TopicPartition(a.topic, p)
            decided = decide(tp, reg, cluster, unclean=unclean, preferred=tp in preferred)
            if decided == reg:
                continue
            try:
                c.update_partition_state(
                    ctl, a.topic, p, zd.leader_isr_of(decided, ctl.epoch), current.zk_version
                )
            except StalePartitionState:
                self._events.put("retry")  # a leader changed the ISR meanwhile: decide again
                continue
            log.info(
                "%s-%d: leader %d -> %d, ISR %s -> %s", a.topic, p, reg.leader, decided.leader,
                list(reg.isr), list(decided.isr),
            )
        if new:
            try:
                c.create_partition_states(ctl, a.topic, new)
            except NoNodeError:
                return  # deleted meanwhile
            log.info("%s: first leaders of partitions %s elected", a.topic, sorted(new))

    def _unclean_allowed(self, topic: str) -> bool:
        value = self.client.topic_config(topic).get("unclean.leader.election.enable")
        return self.unclean_default if value is None else value.strip().lower() == "true"


def imbalanced_partitions(
    regs: Mapping[TopicPartition, PartitionRegistration], live: frozenset[int], percentage: int
) -> set[TopicPartition]:
    """Kafka's auto leader rebalance: for each live broker, the share of the partitions it is
    preferred leader of that it does not lead; above ``percentage``, those of them where it is
    in sync go back to it."""
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp, reg in regs.items():
        by_preferred.setdefault(reg.preferred_leader, []).append(tp)
    out: set[TopicPartition] = set()
    for broker, tps in by_preferred.items():
        if broker not in live:
            continue
        not_led = [tp for tp in tps if regs[tp].leader != broker]
        if len(not_led) * 100 > percentage * len(tps):
            out.update(tp for tp in not_led if broker in regs[tp].isr)
    return out


def decide(
    tp: TopicPartition, reg: PartitionRegistration, cluster: LiveBrokers, *, unclean: bool,
    preferred: bool,
) -> PartitionRegistration:
    """One partition's next registration (``reg`` itself when nothing changes): elections when
    replicas died, returned or lost their log dir, then controlled shutdowns, then a requested
    preferred election."""
    state = on_replicas_offline(
        reg, cluster.views(tp, reg.replicas, shutdown=False), unclean_allowed=unclean
    ).state
    shutdown_views = cluster.views(tp, reg.replicas, shutdown=True)
    for broker in sorted(cluster.shutting_down & set(reg.replicas)):
        state = controlled_shutdown(state, shutdown_views, broker).state
    if preferred:
        state = preferred_election(state, shutdown_views).state
    return state
