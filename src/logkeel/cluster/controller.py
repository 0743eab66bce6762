"""The cluster controller (ZooKeeper mode): one broker at a time, elected through the ephemeral
/controller znode and fenced by /controller_epoch (every write it makes checks the epoch's
version, `zk_controller`).

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
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from kazoo.exceptions import NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.elections import (
    controlled_shutdown,
    designated_election,
    elect_leader,
    on_replicas_offline,
    preferred_election,
    resign_leadership,
)
from logkeel.cluster.partition_state import (
    NO_LEADER,
    Decision,
    ElectionRequest,
    PartitionRegistration,
    ReplicaLog,
    ReplicaView,
    Views,
    acknowledged_offset,
)
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_controller import ControllerEpoch, ControllerMoved
from logkeel.cluster.zk_data import LeaderIsr, ReplicaLogReport, TopicAssignment
from logkeel.cluster.zk_topics import StalePartitionState
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["Controller", "LiveBrokers", "decide", "imbalanced_partitions", "initial_state"]

log = logging.getLogger(__name__)

# A reconcile pass also runs this often without any event: a retry after a refused write.
_IDLE_RECONCILE_S = 5.0
# How long an unclean or designated election waits for the live brokers' fresh reports.
_REPORT_WAIT_S = 3.0
# A finished election whose requester never came back for the results is removed after this.
_ELECTION_RESULT_TTL_S = 300.0


@dataclass(frozen=True, slots=True)
class LiveBrokers:
    """What the controller's decisions need of the brokers: who is registered, who asked for a
    controlled shutdown, and which replicas each cannot serve (failed log dir)."""

    live: frozenset[int]
    shutting_down: frozenset[int]
    offline_replicas: Mapping[int, AbstractSet[TopicPartition]] = field(default_factory=dict)
    # Each broker's last report of its replicas' logs (`zk_data.ReplicaLogReport`); None when
    # the controller runs without reports (then nothing waits for one).
    logs: Mapping[int, Mapping[TopicPartition, ReplicaLogReport]] | None = None
    # Each live broker's epoch (its registration's): tells a restarted broker from the one
    # that was elected, and a report of this incarnation from one of an earlier.
    epochs: Mapping[int, int] = field(default_factory=dict)
    # Each partition's last election that gave records up: (leader epoch, from offset).
    losses: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    def views(
        self, tp: TopicPartition, reg: PartitionRegistration, *, shutdown: bool,
        topic_id: str | None = None, fresh: bool = False,
    ) -> Views:
        """The replicas of ``reg`` as the decisions see them. Logs are judged exactly
        (``ReplicaLog.current``) only where a report is known to be true: every replica of an
        offline partition (nobody fetches, so a report made against its current state stays
        true), a leader back from a restart (its report of this run), and every replica when
        ``fresh`` (an operator's election, on reports just asked for); of those, a live
        replica with no such report may not lead until it reports (it may be back with a wiped
        disk). An online partition's followers fetch all the time: their last report of this
        run is given as an older one (a suspicion of loss only keeps them from leading until
        the partition's current reports decide), and a broker back from a restart that has not
        reported yet may not lead."""
        out = {}
        for r in reg.replicas:
            restarted = (
                r == reg.leader
                and reg.leader_broker_epoch >= 0
                and self.epochs.get(r, reg.leader_broker_epoch) != reg.leader_broker_epoch
            )
            judged = self.logs is not None and (reg.offline or restarted or fresh)
            if judged:
                log_ = self._log(r, tp, topic_id, reg.partition_epoch)
                awaiting = not fresh and log_ is None
            else:
                log_ = self._log(r, tp, topic_id, None)
                awaiting = r in self.live and self._unreported_since_restart(r)
            out[r] = ReplicaView(
                live=r in self.live,
                log_dir_online=tp not in self.offline_replicas.get(r, ()),
                shutting_down=shutdown and r in self.shutting_down,
                log=log_,
                awaiting_report=awaiting,
                restarted=restarted,
            )
        return out

    def _unreported_since_restart(self, broker: int) -> bool:
        """The broker reported before (in an earlier run) but not in this one."""
        reports = (self.logs or {}).get(broker, {})
        epoch = self.epochs.get(broker)
        return bool(reports) and all(rep.broker_epoch != epoch for rep in reports.values())

    def stamp(
        self, decided: PartitionRegistration, before: PartitionRegistration | None = None
    ) -> PartitionRegistration:
        """``decided`` with its leader's broker epoch: the current one for a new leadership
        term, the recorded one otherwise."""
        if decided.leader == NO_LEADER:
            epoch = -1
        elif before is not None and (decided.leader, decided.leader_epoch) == (
            before.leader, before.leader_epoch
        ):
            epoch = before.leader_broker_epoch
        else:
            epoch = self.epochs.get(decided.leader, -1)
        return replace(decided, leader_broker_epoch=epoch)

    def _log(
        self, broker: int, tp: TopicPartition, topic_id: str | None, partition_epoch: int | None
    ) -> ReplicaLog | None:
        """The broker's report of this run (a dead broker's last), made against
        ``partition_epoch`` (None: any, then given as an older report)."""
        report = (self.logs or {}).get(broker, {}).get(tp)
        if (
            report is None
            or report.topic_id != topic_id
            or (partition_epoch is not None and report.partition_epoch != partition_epoch)
            or report.broker_epoch != self.epochs.get(broker, report.broker_epoch)
        ):
            return None
        return ReplicaLog(
            report.last_epoch, report.log_end_offset, high_watermark=report.high_watermark,
            current=partition_epoch is not None,
        )

    def acked(self, tp: TopicPartition, topic_id: str | None) -> int:
        """What every report (of any run, live broker or not) says was acknowledged
        (`acknowledged_offset`, after the partition's last reported loss): a replica back with
        less has lost some of it."""
        return acknowledged_offset(
            (
                (r.last_epoch, r.high_watermark)
                for reports in (self.logs or {}).values()
                if (r := reports.get(tp)) is not None and r.topic_id == topic_id
            ),
            self.losses.get(tp),
        )

    def had_data(self, tp: TopicPartition, topic_id: str | None) -> bool:
        """Some replica (live or not: reports outlive their broker) once reported records."""
        return any(
            (r := reports.get(tp)) is not None and r.topic_id == topic_id and r.log_end_offset > 0
            for reports in (self.logs or {}).values()
        )


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
        unclean_wait_ms: int = 0,
        rebalance_interval_s: float | None = None, imbalance_percentage: int = 10,
    ) -> None:
        """``rebalance_interval_s`` (None: off) is auto.leader.rebalance.enable with
        leader.imbalance.check.interval.seconds; ``imbalance_percentage`` is
        leader.imbalance.per.broker.percentage; ``unclean_wait_ms`` is
        unclean.leader.election.wait.ms."""
        self.client = client
        self.broker_id = broker_id
        self.unclean_default = unclean_leader_election
        self.unclean_wait_ms = unclean_wait_ms
        # Partitions whose unclean election waits for reports: when the wait began (ms).
        self._unclean_waits: dict[TopicPartition, int] = {}
        self._retry_at: float | None = None  # time.monotonic() of the next pass a wait asked for
        self._watched_reports: set[str] = set()
        # Why each offline partition waits, as recorded in ZooKeeper (None: not read yet).
        self._offline_reasons: dict[TopicPartition, str] | None = None
        # Told of every election after which replicas lose records (an unclean leader, a
        # designated one out of the ISR): partition, replica -> offsets it is known to lose.
        self.on_truncation: Callable[[TopicPartition, Mapping[int, int]], None] | None = None
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
        c.topics(watch=self._watch_each(zd.topic_path, self._watched_topics, "topics"))
        c.shutting_down(watch=lambda _ids: self._events.put("shutdown"))
        for parent in (zd.DELETE_TOPICS, zd.ISR_CHANGE_NOTIFICATION, zd.LOG_DIR_EVENT_NOTIFICATION):
            c.zk.ChildrenWatch(parent, lambda _children: self._events.put("admin"))
        c.zk.DataWatch(zd.PREFERRED_REPLICA_ELECTION, lambda _d, _s: self._events.put("admin"))
        c.zk.ChildrenWatch(zd.ELECTIONS, lambda _children: self._events.put("admin"))
        c.zk.ChildrenWatch(
            zd.REPLICA_LOGS,
            self._watch_each(lambda b: f"{zd.REPLICA_LOGS}/{b}", self._watched_reports, "logs"),
        )
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

    def _watch_each(
        self, path_of: Callable[[str], str], watched: set[str], event: str
    ) -> Callable[[list[str]], None]:
        """A children watcher that queues ``event`` and sets a data watch on each new child,
        which queues it too on every change until the child is deleted."""

        def data_watch(child: str) -> Callable[[bytes | None, object], bool]:
            def fired(data: bytes | None, _stat: object) -> bool:
                if data is None:
                    watched.discard(child)
                    return False
                self._events.put(event)
                return True

            return fired

        def on_children(children: list[str]) -> None:
            for child in children:
                if child not in watched:
                    watched.add(child)
                    self.client.zk.DataWatch(path_of(child), data_watch(child))
            self._events.put(event)

        return on_children

    def _on_session(self, state: str) -> None:
        if state == "LOST":
            self._events.put("moved")  # the ephemeral /controller went with the session
        elif state == "CONNECTED":
            self._events.put("elect")

    # -- the event thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            timeout = _IDLE_RECONCILE_S
            if self._retry_at is not None:
                timeout = max(0.0, min(timeout, self._retry_at - time.monotonic()))
            try:
                events = {self._events.get(timeout=timeout)}
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

    def _cluster(self) -> LiveBrokers:
        c = self.client
        registered = c.brokers()
        return LiveBrokers(
            frozenset(registered), frozenset(c.shutting_down()), c.offline_replicas(),
            {broker: logs for broker, (_gen, logs) in c.replica_logs().items()},
            {b: reg.broker_epoch for b, reg in registered.items()},
            # Oldest first: the last of each partition wins.
            {x.tp: (x.leader_epoch, x.from_offset) for x in c.election_losses()},
        )

    def _fresh_cluster(self) -> LiveBrokers:
        """The cluster once every live broker has answered a new request for reports (or
        ``_REPORT_WAIT_S`` passed): what an operator's election decides on."""
        c = self.client
        generation = c.request_replica_logs()
        deadline = time.monotonic() + _REPORT_WAIT_S
        while True:
            live = c.brokers()
            reports = c.replica_logs()
            if all(reports.get(b, (0, {}))[0] >= generation for b in live):
                break
            if time.monotonic() >= deadline:
                log.warning("not every broker reported its replicas' logs within %.0fs",
                            _REPORT_WAIT_S)  # fmt: skip
                break
            time.sleep(0.05)
        return self._cluster()

    def reconcile(self, ctl: ControllerEpoch) -> None:
        """Brings every partition in line with the live brokers and pending requests."""
        c = self.client
        c.take_log_dir_failures()  # the offline replicas are read whole below
        self._retry_at = None
        cluster = self._cluster()
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
        self._run_elections(ctl)

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
                new[p] = zd.leader_isr_of(cluster.stamp(initial_state(replicas, cluster)), ctl.epoch)
                continue
            if unclean is None:
                unclean = self._unclean_allowed(a.topic)
            reg = zd.registration_of(replicas, current)
            tp = TopicPartition(a.topic, p)
            now_ms = int(time.time() * 1000)
            decision = decide(
                tp, reg, cluster, unclean=unclean, preferred=tp in preferred,
                topic_id=a.topic_id, now_ms=now_ms,
                unclean_wait_started_ms=self._unclean_waits.get(tp),
                unclean_wait_ms=self.unclean_wait_ms,
            )
            self._note_wait(tp, decision, now_ms)
            decided = cluster.stamp(decision.state, reg)
            self._note_offline(tp, decided, decision.reason)
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
                "%s-%d: leader %d -> %d, ISR %s -> %s (%s)", a.topic, p, reg.leader,
                decided.leader, list(reg.isr), list(decided.isr), decision.reason,
            )
            if decision.truncate_from is not None:
                self._report_loss(tp, decision)
        if new:
            try:
                c.create_partition_states(ctl, a.topic, new)
            except NoNodeError:
                return  # deleted meanwhile
            log.info("%s: first leaders of partitions %s elected", a.topic, sorted(new))

    def _note_offline(self, tp: TopicPartition, decided: PartitionRegistration, why: str) -> None:
        """Records in ZooKeeper why an offline partition waits (for `logkeel cluster status`)
        when that changes, and drops the record once it leads; logged when it changes."""
        if self._offline_reasons is None:
            self._offline_reasons = self.client.offline_reasons()
        reason = why if decided.offline else None
        if self._offline_reasons.get(tp) == reason:
            return
        try:
            self.client.set_offline_reason(tp, reason)
        except NoNodeError:
            return
        if reason is None:
            self._offline_reasons.pop(tp, None)
        else:
            self._offline_reasons[tp] = reason
            log.warning("%s: %s", tp, reason)

    def _note_wait(self, tp: TopicPartition, decision: Decision, now_ms: int) -> None:
        """Remembers when an unclean election began waiting for reports, and wakes the
        controller when the wait ends."""
        if decision.retry_at_ms is None:
            self._unclean_waits.pop(tp, None)
            return
        if tp not in self._unclean_waits:
            self._unclean_waits[tp] = now_ms
            log.info("%s: %s (up to %d ms)", tp, decision.reason, self.unclean_wait_ms)
        retry = time.monotonic() + max(0, decision.retry_at_ms - now_ms) / 1000
        self._retry_at = retry if self._retry_at is None else min(self._retry_at, retry)

    # -- elections asked for (ElectLeaders, `logkeel elect`) --------------------------------------

    def _run_elections(self, ctl: ControllerEpoch) -> None:
        c = self.client
        for path, request, age_s in c.elections():
            if request is None:
                log.warning("dropping unreadable election request %s", path)
                c.delete_election(path)
            elif request.results is not None:
                if age_s > _ELECTION_RESULT_TTL_S:
                    c.delete_election(path)
            else:
                results = self._elect_requested(ctl, request)
                c.set_election_results(path, request.answered(results))

    def _elect_requested(
        self, ctl: ControllerEpoch, request: ElectionRequest
    ) -> dict[TopicPartition, tuple[str | None, str]]:
        c = self.client
        # An operator's unclean or designated choice is decided on fresh reports.
        fresh = request.kind in ("unclean", "designated")
        cluster = self._fresh_cluster() if fresh else self._cluster()
        assignments: dict[str, TopicAssignment | None] = {}
        if request.partitions is None:
            targets = []
            for topic in c.topics():
                a = assignments[topic] = c.topic_assignment(topic)
                targets += [TopicPartition(topic, p) for p in (a.partitions if a else ())]
        else:
            targets = sorted(request.partitions)
        results: dict[TopicPartition, tuple[str | None, str]] = {}
        for tp in targets:
            if tp.topic not in assignments:
                assignments[tp.topic] = c.topic_assignment(tp.topic)
            a = assignments[tp.topic]
            replicas = a.partitions.get(tp.partition) if a is not None else None
            if a is None or replicas is None:
                results[tp] = ("UNKNOWN_TOPIC_OR_PARTITION", f"{tp} does not exist")
                continue
            results[tp] = self._elect_one(ctl, request, tp, a.topic_id, replicas, cluster)
        return results

    def _elect_one(
        self, ctl: ControllerEpoch, request: ElectionRequest, tp: TopicPartition,
        topic_id: str | None, replicas: tuple[int, ...], cluster: LiveBrokers,
    ) -> tuple[str | None, str]:
        c = self.client
        for _ in range(3):  # a leader may change the ISR meanwhile: decide again on the new state
            current = c.partition_state(tp.topic, tp.partition)
            if current is None:
                return ("ELIGIBLE_LEADERS_NOT_AVAILABLE", f"{tp} has no leader yet")
            reg = zd.registration_of(replicas, current)
            views = cluster.views(
                tp, reg, shutdown=True, topic_id=topic_id,
                fresh=request.kind in ("unclean", "designated"),
            )
            had, acked = cluster.had_data(tp, topic_id), cluster.acked(tp, topic_id)
            if request.kind == "preferred":
                d = preferred_election(reg, views, partition_had_data=had, acked=acked)
            elif request.kind == "unclean":
                # The operator asked now: no wait (the reports are fresh).
                d = elect_leader(
                    reg, views, unclean_allowed=True, partition_had_data=had, acked=acked
                )
            elif request.kind == "resign":
                assert request.replica is not None
                d = resign_leadership(
                    reg, views, request.replica, partition_had_data=had, acked=acked
                )
            else:
                assert request.replica is not None
                d = designated_election(
                    reg, views, request.replica, force=request.force, partition_had_data=had,
                    acked=acked,
                )
            if not d.changed:
                return (d.error, d.reason)
            try:
                c.update_partition_state(
                    ctl, tp.topic, tp.partition,
                    zd.leader_isr_of(cluster.stamp(d.state, reg), ctl.epoch), current.zk_version,
                )
            except StalePartitionState:
                continue
            if d.truncate_from is not None:
                self._report_loss(tp, d)
            else:
                log.info("%s: %s", tp, d.reason)
            return (None, d.reason)
        return ("REQUEST_TIMED_OUT", f"{tp}: the partition state kept changing; try again")

    def _report_loss(self, tp: TopicPartition, d: Decision) -> None:
        """An election after which replicas lose records: the log line, the metric and the
        record in ZooKeeper that `logkeel cluster status` shows. Reporting must not stop the
        election, which is already written."""
        log.warning("%s: %s", tp, d.reason)
        loss = zd.ElectionLoss(
            tp, d.state.leader, d.state.leader_epoch, -1 if d.truncate_from is None
            else d.truncate_from, dict(d.truncated), d.reason, int(time.time() * 1000),
        )  # fmt: skip
        try:
            self.client.record_election_loss(loss)
        except Exception:  # noqa: BLE001
            log.exception("%s: recording the election's loss in ZooKeeper failed", tp)
        if self.on_truncation is not None:
            try:
                self.on_truncation(tp, d.truncated)
            except Exception:  # noqa: BLE001
                log.exception("%s: counting the election's loss failed", tp)

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
    preferred: bool, topic_id: str | None = None, now_ms: int = 0,
    unclean_wait_started_ms: int | None = None, unclean_wait_ms: int = 0,
) -> Decision:
    """One partition's next registration (``.state``, ``reg`` itself when nothing changes):
    elections when replicas died, returned or lost their log dir (an unclean one may ask to be
    retried at ``.retry_at_ms`` while it waits for reports), then controlled shutdowns, then a
    requested preferred election."""
    had_data = cluster.had_data(tp, topic_id)
    acked = cluster.acked(tp, topic_id)
    first = on_replicas_offline(
        reg, cluster.views(tp, reg, shutdown=False, topic_id=topic_id), unclean_allowed=unclean,
        partition_had_data=had_data, acked=acked, now_ms=now_ms,
        unclean_wait_started_ms=unclean_wait_started_ms, unclean_wait_ms=unclean_wait_ms,
    )
    state = first.state
    shutdown_views = cluster.views(tp, reg, shutdown=True, topic_id=topic_id)
    for broker in sorted(cluster.shutting_down & set(reg.replicas)):
        state = controlled_shutdown(
            state, shutdown_views, broker, partition_had_data=had_data, acked=acked
        ).state
    if preferred:
        state = preferred_election(
            state, shutdown_views, partition_had_data=had_data, acked=acked
        ).state
    if state is first.state:
        return first
    return replace(first, state=state, changed=state != reg)
