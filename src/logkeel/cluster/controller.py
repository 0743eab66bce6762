"""The cluster controller (ZooKeeper mode): one broker at a time, elected through the ephemeral
/controller znode and fenced by /controller_epoch (every write it makes checks the epoch's
version, `zk_controller`).

Every broker runs a `Controller`; all but one stay idle. The one in office keeps a
`ControllerContext`: the cluster as its watches deliver it, loaded once when it takes office
(which is also what makes failover lose nothing: a new controller starts from what ZooKeeper
holds). Each delivery names the partitions it touches; one thread takes every queued event at
once and decides only those partitions, with the pure functions of `controller_decisions`, and
writes the changed states pipelined, each conditional on the partition epoch it was decided
against and on the controller epoch: new leaderships first, then changes of the ISR alone.
Requests (deletions, ISR-change notifications, log dir failures, preferred elections, elections
asked through /logkeel/elections) are read when their watch fires and every few seconds.

Controlled shutdown is requested through an ephemeral /admin/controlled_shutdown/<id> znode
(logkeel's choice, instead of Kafka's ControlledShutdown request): the controller moves every
leadership of that broker to another in-sync replica, and then drops it from the ISRs. A pass
decides and writes the partitions whose leader is leaving first, and answers each controlled
shutdown in its znode with how many leaderships are left to move (the broker stops at 0).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.controller_context import ControllerContext
from logkeel.cluster.controller_decisions import (
    LiveBrokers,
    decide,
    imbalanced_partitions,
    initial_state,
    leader_moves_first,
    leaders_leaving,
    shutdown_remaining,
    state_notice,
)
from logkeel.cluster.crash_detection import CrashDetector
from logkeel.cluster.elections import (
    designated_election,
    elect_leader,
    preferred_election,
    resign_leadership,
)
from logkeel.cluster.partition_state import (
    NO_LEADER,
    Decision,
    ElectionRequest,
    PartitionRegistration,
)
from logkeel.cluster.reassignment_driver import ReassignmentDriver
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_controller import ControllerEpoch, ControllerMoved
from logkeel.cluster.zk_data import LeaderIsr, TopicAssignment
from logkeel.cluster.zk_handler import GaveUp
from logkeel.cluster.zk_history import ControllerHistory
from logkeel.cluster.zk_topics import StalePartitionState
from logkeel.storage.topic_partition import TopicPartition

# The pure decisions lived here before; importers of them keep working.
__all__ = ["Controller", "LiveBrokers", "decide", "imbalanced_partitions", "initial_state"]

log = logging.getLogger(__name__)

# Without any event, the requests are read this often (a request whose watch was missed)...
_IDLE_RECONCILE_S = 5.0
# ...and every partition is decided again this often (from the context: no read), a safety net
# only: the context's watches touch each partition a change concerns, and a refused write is
# retried on its own. At 2,000 partitions a sweep every 5 s was most of an idle controller's CPU.
_FULL_SWEEP_S = 60.0
# How long an unclean or designated election waits for the live brokers' fresh reports.
_REPORT_WAIT_S = 3.0
# A finished election whose requester never came back for the results is removed after this.
_ELECTION_RESULT_TTL_S = 300.0
# How long a new controller waits for its context to load before it retries.
_LOAD_TIMEOUT_S = 60.0
# First leaders of a new topic's partitions are created in transactions of this many.
_CREATE_BATCH = 500
# Partition states written in one ZooKeeper transaction (one log entry there, not one each).
_WRITE_BATCH = 100
# ISR-only changes written between two looks for brokers that started leaving meanwhile.
_PREEMPT_CHUNK = 500
# A pass writing more changes than this logs one summary line rather than one per partition.
_LOGGED_CHANGES = 20
# How long a standby context whose watch failed waits before it is loaded again.
_STANDBY_RETRY_S = 1.0
# How often a standby context reads the partition states that changed.
_STANDBY_CATCH_UP_S = 2.0
# The first auto leader rebalance check after taking office comes this long after it (at most
# the check interval), as Kafka's controller schedules its first 5 s after its failover: run
# in the first pass, it moved 1,666 leaderships back to a preferred leader in the very pass
# that moved a dead controller's 5,001 (10,000 partitions).
_FIRST_REBALANCE_DELAY_S = 5.0
# Events that read the requests in ZooKeeper (not only the partitions touched).
_REQUEST_EVENTS = frozenset({"admin", "idle", "retry", "elect", "moved", "reload"})


class Controller:
    """Runs in every broker of a cluster; acts only while it holds the controller's office."""

    def __init__(
        self,
        client: ZkMetadataClient,
        broker_id: int,
        *,
        unclean_leader_election: bool = False,
        unclean_wait_ms: int = 0,
        rebalance_interval_s: float | None = None,
        imbalance_percentage: int = 10,
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
        # Why each offline partition waits, as recorded in ZooKeeper (None: not read yet).
        self._offline_reasons: dict[TopicPartition, str] | None = None
        # Told of every election after which replicas lose records (an unclean leader, a
        # designated one out of the ISR): partition, replica -> offsets it is known to lose.
        self.on_truncation: Callable[[TopicPartition, Mapping[int, int]], None] | None = None
        # Told of each transaction's states once ZooKeeper answered it (the states with their
        # new versions): this broker's own metadata store takes them at once instead of after
        # its watches' re-reads, queued on this same connection behind the controller's own
        # writes and its context's re-reads (the controller's broker lagged the others by
        # seconds in showing the leaderships it had just moved).
        self.on_states_written: Callable[[list[tuple[TopicPartition, LeaderIsr]]], None] | None = (
            None
        )
        self.rebalance_interval_s = rebalance_interval_s
        self.imbalance_percentage = imbalance_percentage
        self._next_rebalance = 0.0
        self.epoch: ControllerEpoch | None = None
        self._events: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._writing = False
        self._context: ControllerContext | None = None
        # A broker out of office keeps a loaded context too (KRaft's standby controllers keep
        # the metadata): taking office after the controller died then reads only the partition
        # states that changed in the last 2 s (all 2,000 otherwise: 2-3.6 s of the failover).
        self._standby: ControllerContext | None = None
        self._standby_not_before = 0.0  # time.monotonic()
        # Partitions the context's deliveries touched since the last pass.
        self._touched: set[TopicPartition] = set()
        self._touched_lock = threading.Lock()
        self._next_sweep = 0.0
        # The last answer written to each controlled shutdown: (broker epoch, remaining).
        self._shutdown_answers: dict[int, tuple[int, int]] = {}
        # Whether each transaction of states carries a notice of them (`zk_data.STATE_NOTICES`),
        # and the slot the next one overwrites.
        self._notices = True
        self._notice_slot = 0
        # Every broker probes the others: a crashed one (the controller's included) is removed
        # at once rather than after its session expires.
        self.crash_detector = CrashDetector(client, broker_id)
        self.reassignments = ReassignmentDriver(client)
        # Elections, slow leaders' step-downs, log dirs failing and back: what `logkeel
        # console` shows of the cluster's history, written at the end of each pass.
        self.history = ControllerHistory(client)

    @property
    def active(self) -> bool:
        return self.epoch is not None

    @property
    def writing(self) -> bool:
        """In a pass (which may write thousands of states on this broker's connection)."""
        return self._writing

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        c = self.client
        c.controller(watch=self._on_controller)
        for parent in (zd.DELETE_TOPICS, zd.ISR_CHANGE_NOTIFICATION, zd.LOG_DIR_EVENT_NOTIFICATION):
            c.zk.ChildrenWatch(parent, lambda _children: self._events.put("admin"))
        c.zk.DataWatch(zd.PREFERRED_REPLICA_ELECTION, lambda _d, _s: self._events.put("admin"))
        c.zk.ChildrenWatch(zd.ELECTIONS, lambda _children: self._events.put("admin"))
        c.zk.ChildrenWatch(zd.REASSIGNMENTS, lambda _children: self._events.put("admin"))
        c.add_session_listener(self._on_session)
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self._thread.start()
        self._events.put("elect")
        self.crash_detector.start()

    def stop(self) -> None:
        """Resigns (so another broker takes over at once, not after a session timeout)."""
        self._stopping = True
        self.crash_detector.stop()
        self._events.put("stop")
        ended = True
        if self._thread is not None:
            # A pass under way gives up at its next step (`_check_stopping`).
            self._thread.join(10)
            ended = not self._thread.is_alive()
            self._thread = None
        ctl, self.epoch = self.epoch, None
        if ended:
            self._leave_office()
        elif self._context is not None:
            # The thread still uses the context (its writes fail on the epoch from now on);
            # only its watches end, before the session does (see `ZkMetadataStore.close`).
            self._context.close()
        self._drop_standby()
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

    def _on_session(self, state: str) -> None:
        if state == "LOST":
            self._events.put("moved")  # the ephemeral /controller went with the session
        elif state == "CONNECTED":
            self._events.put("elect")

    def _context_changed(self, kind: str, partitions: Iterable[TopicPartition]) -> None:
        if kind == "reload":
            self._events.put("reload")
            return
        if self.epoch is None:
            if kind == "report":
                self._events.put("report")  # decoded on this thread (`_keep_standby`)
            return  # a standby's change: taking office decides every partition anyway
        with self._touched_lock:
            was_empty = not self._touched
            self._touched.update(partitions)
            if not was_empty or not self._touched:
                return  # a pass is queued already, or nothing was touched
        self._events.put("partitions")

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
                if "reload" in events and self._standby is not None:
                    # A watch of it failed: never taken into office; armed again only after a
                    # pause (while ZooKeeper is unreachable every read fails at once).
                    self._drop_standby()
                    self._standby_not_before = time.monotonic() + _STANDBY_RETRY_S
                if "moved" in events and self.epoch is not None:
                    current = self.client.controller()
                    if current != self.broker_id:
                        log.warning("broker %d is no longer the controller", self.broker_id)
                        self.epoch = None
                        self._leave_office()
                # "retry": an election attempt that failed (ZooKeeper slow or unreachable)
                # is made again; nothing else would ask for it while /controller stays empty.
                if (
                    self.epoch is None
                    and events & {"elect", "moved", "retry"}
                    and not self._stopping
                ):
                    self._elect()
                if self.epoch is None:
                    self._keep_standby(events)
                if self.epoch is not None:
                    if "reload" in events:
                        self._leave_office()
                    self._writing = True
                    try:
                        self.reconcile(self.epoch, events)
                    finally:
                        self._writing = False
            except _Stopping:
                return
            except ControllerMoved:
                log.warning("controller epoch moved on; broker %d resigns", self.broker_id)
                self.epoch = None
                self._leave_office()
            except Exception as exc:
                # GaveUp: its broker is stopping with ZooKeeper out of reach (one line, not a
                # traceback every half second until the session ends).
                if isinstance(exc, GaveUp):
                    log.info("controller pass skipped: %s", exc)
                else:
                    log.exception("controller pass failed; retrying")
                self._events.put("retry")
                threading.Event().wait(0.5)

    def _check_stopping(self) -> None:
        """Ends the pass under way once `stop` was called: the broker is leaving, and what is
        left of the pass is decided by the next controller (nothing written is undone; every
        write is a whole transaction)."""
        if self._stopping:
            raise _Stopping

    def _elect(self) -> None:
        ctl = self.client.try_become_controller(self.broker_id)
        if ctl is not None:
            log.info("broker %d is the controller (epoch %d)", self.broker_id, ctl.epoch)
            self.epoch = ctl

    def _leave_office(self) -> None:
        ctx, self._context = self._context, None
        self._offline_reasons = None  # a controller meanwhile may change them
        self._shutdown_answers.clear()
        if ctx is not None:
            ctx.close()

    def _keep_standby(self, events: set[str]) -> None:
        """Out of office: the standby context, loaded again after it failed or the session
        ended (its watches went with it)."""
        if "moved" in events:
            self._drop_standby()  # out of office, "moved" is the session lost: its watches too
        if self._standby is not None:
            due = self._retry_at
            if events == {"report"} and due is not None and time.monotonic() < due:
                # The states wait for their catch-up, which reports arriving faster than they
                # are decoded must not put off.
                self._standby.decode_reports()
                return
            self._retry_at = time.monotonic() + _STANDBY_CATCH_UP_S
            self._standby.catch_up()
            return
        self._retry_at = None  # out of office, only a paused standby asks for a wake-up
        if self._stopping:
            return
        if time.monotonic() < self._standby_not_before:
            self._retry_at = self._standby_not_before
            return
        # Not waited for here: this thread must stay free to take office meanwhile.
        self._standby = ControllerContext(self.client.zk, self._context_changed)
        self._standby.start_loading()
        # Partition states that change are read every _STANDBY_CATCH_UP_S, not at each change:
        # a standby re-reading every change (leaderships moving by the thousand under load)
        # cost every broker enough to fail sends in the bench; taking office reads the rest.
        self._standby.quiet()
        self._retry_at = time.monotonic() + _STANDBY_CATCH_UP_S

    def _drop_standby(self) -> None:
        ctx, self._standby = self._standby, None
        if ctx is not None:
            ctx.close()

    def _take_office(self) -> ControllerContext:
        """The context, loaded (every partition is decided on the first pass)."""
        if self._context is None:
            self._check_stopping()
            started = time.monotonic()
            ctx, self._standby = self._standby, None
            source = "standby, kept by its watches" if ctx is not None else "read"
            if ctx is None:
                ctx = ControllerContext(self.client.zk, self._context_changed)
                ctx.start_loading()
            # Sent first, answered while the context loads (once a cluster's first controller
            # made them, each only answers that it exists).
            slots = self._create_notice_slots()
            stale = ctx.take_office(lambda: self._events.put("states"))
            woken = time.monotonic()
            if not ctx.wait_loaded(_LOAD_TIMEOUT_S):
                ctx.close()
                if ctx.failed:
                    # The next pass ("retry") reads a context of its own: never this one.
                    raise RuntimeError(f"reading the controller's context ({source}) failed")
                raise TimeoutError(f"the controller's context did not load in {_LOAD_TIMEOUT_S}s")
            loaded = time.monotonic()
            # Read now, before the first pass's writes: read after them it waited ~0.9 s behind
            # their watches' re-reads on the one connection, between leaderships and ISRs.
            self._offline_reasons = self.client.offline_reasons()
            self._notices = _notice_slots_ready(slots)
            read = time.monotonic()
            self._context = ctx
            if self.rebalance_interval_s is not None:
                self._next_rebalance = time.monotonic() + min(
                    _FIRST_REBALANCE_DELAY_S, self.rebalance_interval_s
                )
            with ctx.lock:
                everything = ctx.all_partitions()
            with self._touched_lock:
                self._touched |= everything
            log.info("controller context loaded (%s): %d partitions in %.2fs (%d znodes changed "
                     "since read again; reports decoded %.2fs, reads waited for %.2fs, offline "
                     "reasons and notice slots read in %.2fs)", source, len(everything),
                     time.monotonic() - started, stale, woken - started, loaded - woken,
                     read - loaded)  # fmt: skip
        return self._context

    def _create_notice_slots(self) -> list[Any]:
        """Creates the slots of the state notices that are missing (pipelined, answered in
        `_notice_slots_ready`)."""
        zk = self.client.zk
        empty = zd.encode_state_notice(())
        return [zk.create_async(zd.state_notice_path(slot), empty)
                for slot in range(zd.STATE_NOTICE_SLOTS)]  # fmt: skip

    # -- one pass -------------------------------------------------------------------------------

    def reconcile(self, ctl: ControllerEpoch, events: Iterable[str] = ("idle",)) -> None:
        """Brings the partitions that events touched (every one on a sweep) in line with
        the live brokers and pending requests."""
        ctx = self._take_office()
        # The states changed since the last pass (their watches only noted it): read now,
        # before deciding, and never between this pass's writes.
        if not ctx.read_changed_states(_LOAD_TIMEOUT_S):
            raise RuntimeError("reading the partition states that changed failed or timed out")
        events = set(events)
        self._retry_at = None
        preferred: set[TopicPartition] = set()
        if events & _REQUEST_EVENTS:
            preferred = self._take_requests(ctl, ctx)
        with self._touched_lock:
            touched, self._touched = self._touched, set()
        now = time.monotonic()
        if "retry" in events or ("idle" in events and now >= self._next_sweep):
            self._next_sweep = now + _FULL_SWEEP_S
            with ctx.lock:
                touched |= ctx.all_partitions()
        touched |= preferred | set(self._unclean_waits)
        if touched:
            self._reconcile_partitions(ctl, ctx, touched, preferred)
            self.reassignments.progress(ctl, ctx, touched)
        self._answer_shutdowns(ctx)
        if events & _REQUEST_EVENTS:
            self._run_elections(ctl)
            self.reassignments.take_requests(ctl, ctx)
        self.history.flush()

    def _early_answers(
        self, ctx: ControllerContext, decided: _Decided
    ) -> dict[int, tuple[int, list[tuple[str, int]]]]:
        """The brokers in a controlled shutdown that the states just decided leave with nothing
        to move, each with its epoch and the (state path, version) each of its moved
        leaderships will have once written. Their answer is sent right behind those writes,
        conditional on those versions: ZooKeeper applies it after them or not at all, and
        ahead of the reads the writes' watches set off on every broker (and on the broker
        waiting for it, whose session reads in order)."""
        with ctx.lock:
            if not ctx.shutting_down:
                return {}
            states = dict(ctx.states)
            for tp, (_before, after, _d, _reg) in decided.changes.items():
                states[tp] = after
            remaining = shutdown_remaining(
                ctx.live_brokers(), ((tp, s.leader, s.isr) for tp, s in states.items())
            )
            epochs = {b: reg.broker_epoch for b, reg in ctx.brokers.items()}
        out = {}
        for broker, left in sorted(remaining.items()):
            done = (epochs.get(broker), 0)
            if left or broker not in epochs or self._shutdown_answers.get(broker) == done:
                continue
            checks = [
                (zd.partition_state_path(tp.topic, tp.partition), before.zk_version + 1)
                for tp, (before, after, _d, _reg) in decided.changes.items()
                if before.leader == broker and after.leader != broker
            ]
            # No checks: nothing it leads can move (every other replica is leaving too, or
            # out of the ISR), which these writes do not change.
            out[broker] = (epochs[broker], checks)
        return out

    def _take_early_answers(self, sent: Mapping[int, tuple[int, Any]]) -> None:
        for broker, (epoch, pending) in sent.items():
            try:
                results = pending.get()
            except Exception:  # noqa: BLE001 - answered by `_answer_shutdowns` instead
                continue
            if not any(isinstance(r, Exception) for r in results):
                self._shutdown_answers[broker] = (epoch, 0)
                log.info("controlled shutdown of broker %d: 0 leaderships left to move "
                         "(answered behind the writes)", broker)  # fmt: skip

    def _answer_shutdowns(self, ctx: ControllerContext) -> None:
        """Tells each broker in a controlled shutdown how many of its leaderships are left to
        move, when that changed (Kafka's ControlledShutdown response: at 0 the broker refuses
        writes, and stops once its own view shows the moves, `ZkMetadataStore.controlled_shutdown`)."""
        with ctx.lock:
            if not ctx.shutting_down:
                self._shutdown_answers.clear()
                return
            remaining = shutdown_remaining(
                ctx.live_brokers(), ((tp, s.leader, s.isr) for tp, s in ctx.states.items())
            )
            epochs = {b: reg.broker_epoch for b, reg in ctx.brokers.items()}
        answers = {
            broker: (epochs[broker], left)
            for broker, left in sorted(remaining.items())
            if broker in epochs and self._shutdown_answers.get(broker) != (epochs[broker], left)
        }
        if not answers:
            return
        self.client.answer_controlled_shutdowns(answers)
        self._shutdown_answers.update(answers)
        for broker, (_epoch, left) in answers.items():
            log.info("controlled shutdown of broker %d: %d leaderships left to move", broker, left)

    def _take_requests(self, ctl: ControllerEpoch, ctx: ControllerContext) -> set[TopicPartition]:
        """Deletions, notifications and preferred elections asked for; returns the partitions
        of a preferred election (asked, or by the auto rebalance)."""
        c = self.client
        for event in c.take_log_dir_failures():  # the offline replicas come through the context
            self.history.log_dir(event)
        for topic in c.topics_to_delete():
            if c.topic_assignment(topic) is not None:
                c.delete_topic(ctl, topic)
                log.info("controller deleted topic %s", topic)
            else:  # a request for a topic that does not exist
                c.zk.delete(zd.delete_topic_path(topic))
        self._drain_isr_notifications()
        preferred = c.take_preferred_election()
        if self.rebalance_interval_s is not None and time.monotonic() >= self._next_rebalance:
            self._next_rebalance = time.monotonic() + self.rebalance_interval_s
            with ctx.lock:
                regs = self._registrations(ctx)
                live = frozenset(ctx.brokers)
            preferred |= imbalanced_partitions(regs, live, self.imbalance_percentage)
        return preferred

    def _drain_isr_notifications(self) -> None:
        """The context watches the state znodes themselves; the leaders' notifications are only
        removed (pipelined)."""
        zk = self.client.zk
        children = zk.get_children(zd.ISR_CHANGE_NOTIFICATION)
        for pending in [zk.delete_async(f"{zd.ISR_CHANGE_NOTIFICATION}/{c}") for c in children]:
            try:
                pending.get()
            except NoNodeError:
                continue  # another reader (an old controller) took it

    @staticmethod
    def _registrations(ctx: ControllerContext) -> dict[TopicPartition, PartitionRegistration]:
        out = {}
        for topic, a in ctx.assignments.items():
            for p, replicas in a.partitions.items():
                state = ctx.states.get(TopicPartition(topic, p))
                if state is not None:
                    out[TopicPartition(topic, p)] = zd.registration_of(replicas, state)
        return out

    def _reconcile_partitions(
        self,
        ctl: ControllerEpoch,
        ctx: ControllerContext,
        touched: set[TopicPartition],
        preferred: set[TopicPartition],
    ) -> None:
        """Decides ``touched`` and writes what changed. The partitions whose leader is leaving
        (shutting down, gone, its log dir offline) are decided and their new leaderships
        written first, before the rest is even decided: a controlled shutdown is over, and
        clients find a leader again, as soon as those are in ZooKeeper. A broker that starts
        leaving while the rest is decided or written has its leaderships moved between two
        chunks of the rest's writes, not after them (at 10,000 partitions a pass's ISR changes
        took 9 s to write, and a controlled shutdown asked meanwhile waited for all of them)."""
        started = time.monotonic()
        with ctx.lock:
            view = _leaving_view(ctx)
            # Every leadership of a leaving broker, touched or not: a pass that took its
            # partitions before the shutdown's own event added them (the watch had set the
            # broker leaving, not yet handed over what it touched) moved none of them, then
            # wrote 3,334 ISR changes for 16 s at 10,000 partitions while the broker waited.
            leaving = leaders_leaving(
                ctx.live_brokers(),
                ((tp, s.leader) for tp in touched if (s := ctx.states.get(tp)) is not None),
            ) | _led_by_leaving(ctx)
        first = self._move_leaving(ctl, ctx, leaving, preferred)
        moved = time.monotonic()

        def move_newly_leaving() -> bool:
            """True if a broker started or stopped leaving since the last look."""
            nonlocal view
            with ctx.lock:
                now = _leaving_view(ctx)
                if now == view:
                    return False  # no broker started leaving: no leader can have become one
                view = now
                newly = _led_by_leaving(ctx)
            if newly:
                log.info("controller pass: %d leaderships of brokers leaving meanwhile moved "
                         "first", len(self._move_leaving(ctl, ctx, newly, preferred).changes))  # fmt: skip
            return True

        move_newly_leaving()
        rest = self._decide_partitions(ctl, ctx, touched - leaving, preferred)
        for topic, states in sorted(rest.new.items()):
            self._create_first_states(ctl, ctx, topic, states, move_newly_leaving)
        decided = time.monotonic()
        leaders, isr_only = self._write_changes(ctl, ctx, rest, move_newly_leaving)
        # After the leaderships: a reason changes rarely, and is written (one by one) only then.
        self._note_offline(first.outcomes + rest.outcomes)
        if first.changes or rest.changes:
            log.info(
                "controller pass: %d partitions of leaving leaders decided and %d changes "
                "written in %.3fs; %d others decided in %.3fs, %d new leaderships and %d ISR "
                "changes written in %.3fs", len(leaving), len(first.changes), moved - started,
                len(touched) - len(leaving), decided - moved, leaders, isr_only,
                time.monotonic() - decided,
            )  # fmt: skip

    def _move_leaving(
        self,
        ctl: ControllerEpoch,
        ctx: ControllerContext,
        leaving: set[TopicPartition],
        preferred: set[TopicPartition],
    ) -> _Decided:
        """Decides and writes the partitions of leaving leaders, _PREEMPT_CHUNK at a time:
        each chunk's new leaderships are sent as soon as it is decided, so that ZooKeeper
        writes them while the next is decided (deciding 3,333 took 2 s before the first write
        at 10,000 partitions, loaded), and each controlled shutdown this leaves with nothing
        to move is answered right behind them all."""
        decided = _Decided()
        sent: list[tuple[list[Any], Any]] = []
        isr_only: list[Any] = []
        ordered = sorted(leaving)
        for i in range(0, len(ordered), _PREEMPT_CHUNK):
            chunk = self._decide_partitions(
                ctl, ctx, set(ordered[i : i + _PREEMPT_CHUNK]), preferred
            )
            decided.add(chunk)
            moves, isr = _split_writes(chunk)
            sent += [(batch, self._commit(ctl, ctx, batch)) for batch in _batches(moves)]
            isr_only += isr
        answers = {
            broker: (epoch, self.client.answer_controlled_shutdown_after(broker, epoch, checks))
            for broker, (epoch, checks) in self._early_answers(ctx, decided).items()
        }
        self._write_states(ctl, ctx, [], sent=sent)
        self._write_states(ctl, ctx, isr_only)
        self._take_early_answers(answers)
        self._answer_shutdowns(ctx)
        self._check_stopping()
        return decided

    def _decide_partitions(
        self,
        ctl: ControllerEpoch,
        ctx: ControllerContext,
        touched: set[TopicPartition],
        preferred: set[TopicPartition],
    ) -> _Decided:
        out = _Decided()
        if not touched:
            return out
        now_ms = int(time.time() * 1000)
        with ctx.lock:
            cluster = ctx.live_brokers()
            for tp in sorted(touched):
                a = ctx.assignments.get(tp.topic)
                replicas = a.partitions.get(tp.partition) if a is not None else None
                if a is None or replicas is None:
                    self._unclean_waits.pop(tp, None)
                    continue
                current = ctx.states.get(tp)
                if current is None:
                    out.new.setdefault(tp.topic, {})[tp.partition] = _first_state(
                        ctl, cluster, replicas
                    )
                    continue
                reg = zd.registration_of(replicas, current)
                decision = decide(
                    tp,
                    reg,
                    cluster,
                    unclean=self._unclean_allowed(ctx, tp.topic),
                    preferred=tp in preferred,
                    topic_id=a.topic_id,
                    now_ms=now_ms,
                    unclean_wait_started_ms=self._unclean_waits.get(tp),
                    unclean_wait_ms=self.unclean_wait_ms,
                )
                self._note_wait(tp, decision, now_ms)
                decided = cluster.stamp(decision.state, reg)
                out.outcomes.append((tp, decided, decision.reason))
                if decided != reg:
                    out.changes[tp] = (current, zd.leader_isr_of(decided, ctl.epoch), decision, reg)
        return out

    def _write_changes(
        self,
        ctl: ControllerEpoch,
        ctx: ControllerContext,
        decided: _Decided,
        between: Callable[[], object] | None = None,
    ) -> tuple[int, int]:
        """Writes the new leaderships, then the changes of the ISR alone, ``between`` called
        before each _PREEMPT_CHUNK of those; returns how many of each."""
        leaders, isr_only = _split_writes(decided)
        self._write_states(ctl, ctx, leaders)
        for i in range(0, len(isr_only), _PREEMPT_CHUNK):
            if between is not None:
                between()
            self._write_states(ctl, ctx, isr_only[i : i + _PREEMPT_CHUNK])
        return len(leaders), len(isr_only)

    def _create_first_states(
        self,
        ctl: ControllerEpoch,
        ctx: ControllerContext,
        topic: str,
        states: dict[int, LeaderIsr],
        between: Callable[[], bool] | None = None,
    ) -> None:
        """Creates the first states in batches of _CREATE_BATCH. With ``between`` (which moves
        the leaderships of brokers that started leaving), each batch is decided again,
        against the context and the controlled shutdown requests read from ZooKeeper just
        before: a shutdown asked while a 1,000-partition topic was created got first
        leaderships on the leaving broker after its request, moved again later, and waited for
        the whole creation. The context's watch brings a request only after the first reads of
        the states just created, queued ahead of it (two batches went to a leaving broker that
        way); and a batch decided again only when the read found a request the context did not
        hold went to one when the watch landed between the two looks (1,000 partitions)."""
        ordered = sorted(states.items())
        for i in range(0, len(ordered), _CREATE_BATCH):
            chunk = dict(ordered[i : i + _CREATE_BATCH])
            if between is not None:
                between()
                asked = self.client.shutting_down()
                with ctx.lock:
                    cluster = ctx.live_brokers()
                    cluster = replace(cluster, shutting_down=cluster.shutting_down | asked)
                    a = ctx.assignments.get(topic)
                    if a is None:
                        return  # deleted meanwhile
                    chunk = {
                        p: _first_state(ctl, cluster, replicas)
                        for p in chunk
                        if (replicas := a.partitions.get(p)) is not None
                    }
            try:
                self.client.create_partition_states(ctl, topic, chunk)
            except NoNodeError:
                return  # deleted meanwhile
            except NodeExistsError:
                # A state this controller wrote, whose watch's first delivery (still "absent")
                # came after the write and dropped it from the context: take up what ZooKeeper
                # holds, and create only what is really missing.
                self._take_up_existing_states(ctl, ctx, topic, chunk)
                continue
            for p, state in chunk.items():
                ctx.state_written(TopicPartition(topic, p), replace(state, zk_version=0))
        log.info("%s: first leaders of %d partitions elected", topic, len(states))

    def _take_up_existing_states(
        self, ctl: ControllerEpoch, ctx: ControllerContext, topic: str, chunk: dict[int, LeaderIsr]
    ) -> None:
        for p, state in chunk.items():
            existing = self.client.partition_state(topic, p)
            if existing is None:
                try:
                    self.client.create_partition_states(ctl, topic, {p: state})
                except NodeExistsError:
                    existing = self.client.partition_state(topic, p)
                else:
                    existing = replace(state, zk_version=0)
            if existing is not None:
                ctx.state_written(TopicPartition(topic, p), existing)

    def _write_states(
        self,
        ctl: ControllerEpoch,
        ctx: ControllerContext,
        writes: list[tuple[TopicPartition, LeaderIsr, LeaderIsr, Decision, PartitionRegistration]],
        sent: Iterable[tuple[list[Any], Any]] = (),
    ) -> None:
        """Writes in transactions of up to _WRITE_BATCH partitions (the controller epoch
        checked first, then each state over the version it was decided against), every one
        sent before the first answer is awaited; ``sent``: transactions of `_commit` already
        sent, whose answers are taken first. A
        transaction refused for one partition that changed meanwhile (a leader's ISR change)
        is sent again without it; that partition is decided again on its new state."""
        pending = _batches(writes)
        collect = list(sent)
        logged = len(writes) + sum(len(batch) for batch, _answer in collect) <= _LOGGED_CHANGES
        moved = False
        while (pending or collect) and not moved:
            collect += [(batch, self._commit(ctl, ctx, batch)) for batch in pending]
            pending = []
            sent_now, collect = collect, []
            for batch, answer in sent_now:
                try:
                    results: list[Any] = answer.get()
                except Exception as exc:  # noqa: BLE001 - the connection: decided again later
                    log.warning("writing %d partition states failed: %s", len(batch), exc)
                    for w in batch:
                        self._retry(w[0])
                    continue
                first = len(results) - len(batch)  # the epoch check, and a notice if sent
                failed = next((i for i in range(len(results)) if _failed(results, i)), None)
                if failed == 0:
                    moved = True
                elif failed is not None and failed < first:
                    # The notice's slot is gone (removed by hand): the watches tell instead.
                    log.warning("state notices off: writing %s failed (%r)", zd.STATE_NOTICES,
                                results[failed])  # fmt: skip
                    self._notices = False
                    pending.append(batch)
                elif failed is not None:
                    self._retry(batch[failed - first][0])
                    rest = batch[: failed - first] + batch[failed - first + 1 :]
                    if rest:
                        pending.append(rest)
                else:
                    # This broker's store first: the context and the history can wait.
                    self._tell_written(batch, results[first:])
                    for w, stat in zip(batch, results[first:], strict=True):
                        self._written(ctx, w, stat, logged=logged)
        if moved:
            raise ControllerMoved(f"controller epoch {ctl.epoch} is no longer current")

    def _commit(self, ctl: ControllerEpoch, ctx: ControllerContext, batch: list[Any]) -> Any:
        txn = self.client.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        if self._notices:
            # First after the check: ZooKeeper sends each session its watch events in the
            # order of the operations, so a broker reads the notice ahead of its re-reads of
            # the states below.
            slot, self._notice_slot = (
                self._notice_slot,
                (self._notice_slot + 1) % zd.STATE_NOTICE_SLOTS,
            )
            with ctx.lock:
                ids = {
                    tp.topic: a.topic_id for tp, *_ in batch if (a := ctx.assignments.get(tp.topic))
                }
            notice = state_notice(batch, ids)
            txn.set_data(zd.state_notice_path(slot), zd.encode_state_notice(notice))
        for tp, before, after, _decision, _reg in batch:
            txn.set_data(
                zd.partition_state_path(tp.topic, tp.partition),
                zd.encode_partition_state(after),
                version=before.zk_version,
            )
        return txn.commit_async()

    def _written(self, ctx: ControllerContext, write: Any, stat: Any, *, logged: bool) -> None:
        tp, _before, after, decision, reg = write
        ctx.state_written(
            tp, replace(after, zk_version=int(stat.version), written_zxid=int(stat.mzxid))
        )
        # One line per partition costs seconds when a pass moves thousands: the pass's
        # summary line is logged instead, each partition at DEBUG.
        log.log(
            logging.INFO if logged else logging.DEBUG,
            "%s-%d: leader %d -> %d, ISR %s -> %s (%s)", tp.topic, tp.partition, reg.leader,
            after.leader, list(reg.isr), list(after.isr), decision.reason,
        )  # fmt: skip
        if after.leader != reg.leader:
            unclean = decision.truncate_from is not None
            self.history.election(tp, reg.leader, after.leader, after.leader_epoch,
                                  "unclean" if unclean else "clean", decision.reason)  # fmt: skip
        if decision.truncate_from is not None:
            a = ctx.assignments.get(tp.topic)
            self._report_loss(tp, decision, a.topic_id if a is not None else None)

    def _tell_written(self, batch: list[Any], stats: list[Any]) -> None:
        if self.on_states_written is None:
            return
        written = [(w[0], replace(w[2], zk_version=int(stat.version)))
                   for w, stat in zip(batch, stats, strict=True)]  # fmt: skip
        try:
            self.on_states_written(written)
        except Exception:  # its watches still bring them
            log.exception("handing %d written partition states to this broker failed", len(batch))

    def _retry(self, tp: TopicPartition) -> None:
        with self._touched_lock:
            self._touched.add(tp)
        self._events.put("partitions")

    def _note_offline(
        self, outcomes: list[tuple[TopicPartition, PartitionRegistration, str]]
    ) -> None:
        """Records in ZooKeeper why each offline partition waits (for `logkeel cluster status`)
        when that changes, and drops the record once it leads (all of a pass at once);
        logged when it changes."""
        if self._offline_reasons is None:
            self._offline_reasons = self.client.offline_reasons()
        known = self._offline_reasons
        changed: dict[TopicPartition, str | None] = {}
        for tp, decided, why in outcomes:
            reason = why if decided.offline else None
            if known.get(tp) != reason:
                changed[tp] = reason
        if not changed:
            return
        self.client.set_offline_reasons(changed)
        went_offline = {tp: r for tp, r in changed.items() if r is not None}
        for tp, reason in changed.items():
            if reason is None:
                known.pop(tp, None)
            else:
                known[tp] = reason
        if len(went_offline) <= _LOGGED_CHANGES:
            for tp, reason in went_offline.items():
                log.warning("%s: %s", tp, reason)
        else:
            tp, reason = next(iter(went_offline.items()))
            log.warning("%d partitions offline, %s among them: %s", len(went_offline), tp, reason)

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
        self,
        ctl: ControllerEpoch,
        request: ElectionRequest,
        tp: TopicPartition,
        topic_id: str | None,
        replicas: tuple[int, ...],
        cluster: LiveBrokers,
    ) -> tuple[str | None, str]:
        c = self.client
        for _ in range(3):  # a leader may change the ISR meanwhile: decide again on the new state
            current = c.partition_state(tp.topic, tp.partition)
            if current is None:
                return ("ELIGIBLE_LEADERS_NOT_AVAILABLE", f"{tp} has no leader yet")
            reg = zd.registration_of(replicas, current)
            views = cluster.views(
                tp,
                reg,
                shutdown=True,
                topic_id=topic_id,
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
                    reg,
                    views,
                    request.replica,
                    force=request.force,
                    partition_had_data=had,
                    acked=acked,
                )
            if not d.changed:
                return (d.error, d.reason)
            written = zd.leader_isr_of(cluster.stamp(d.state, reg), ctl.epoch)
            try:
                version = c.update_partition_state(
                    ctl, tp.topic, tp.partition, written, current.zk_version
                )
            except StalePartitionState:
                continue
            if self._context is not None:
                self._context.state_written(tp, replace(written, zk_version=version))
            if request.kind == "resign":
                assert request.replica is not None
                self.history.step_down(tp, request.replica, written.leader, written.leader_epoch,
                                       request.reason or d.reason)  # fmt: skip
            elif written.leader != reg.leader:
                kind = "unclean" if d.truncate_from is not None else request.kind
                self.history.election(tp, reg.leader, written.leader, written.leader_epoch, kind,
                                      d.reason)  # fmt: skip
            if d.truncate_from is not None:
                self._report_loss(tp, d, topic_id)
            else:
                log.info("%s: %s", tp, d.reason)
            return (None, d.reason)
        return ("REQUEST_TIMED_OUT", f"{tp}: the partition state kept changing; try again")

    def _report_loss(self, tp: TopicPartition, d: Decision, topic_id: str | None) -> None:
        """An election after which replicas lose records: the log line, the metric and the
        record in ZooKeeper that `logkeel cluster status` shows. Reporting must not stop the
        election, which is already written."""
        log.warning("%s: %s", tp, d.reason)
        loss = zd.ElectionLoss(
            tp, d.state.leader, d.state.leader_epoch, -1 if d.truncate_from is None
            else d.truncate_from, dict(d.truncated), d.reason, int(time.time() * 1000), topic_id,
        )  # fmt: skip
        try:
            self.client.record_election_loss(loss)
        except Exception:
            log.exception("%s: recording the election's loss in ZooKeeper failed", tp)
        if self.on_truncation is not None:
            try:
                self.on_truncation(tp, d.truncated)
            except Exception:
                log.exception("%s: counting the election's loss failed", tp)

    def _unclean_allowed(self, ctx: ControllerContext, topic: str) -> bool:
        value = ctx.configs.get(topic, {}).get("unclean.leader.election.enable")
        return self.unclean_default if value is None else value.strip().lower() == "true"

    # -- the cluster as elections asked for see it --------------------------------------------

    def _cluster(self) -> LiveBrokers:
        ctx = self._take_office()
        with ctx.lock:
            return ctx.live_brokers()

    def _fresh_cluster(self) -> LiveBrokers:
        """The cluster once every live broker has answered a new request for reports (or
        ``_REPORT_WAIT_S`` passed): what an operator's election decides on."""
        ctx = self._take_office()
        generation = self.client.request_replica_logs()
        deadline = time.monotonic() + _REPORT_WAIT_S
        while True:
            with ctx.lock:
                if all(ctx.reports.get(b, (0, {}))[0] >= generation for b in ctx.brokers):
                    return ctx.live_brokers()
            if time.monotonic() >= deadline:
                log.warning("not every broker reported its replicas' logs within %.0fs",
                            _REPORT_WAIT_S)  # fmt: skip
                return self._cluster()
            time.sleep(0.05)


class _Stopping(Exception):
    """The controller is stopping: the pass under way ends here."""


def _notice_slots_ready(pending: list[Any]) -> bool:
    """Whether every slot of the state notices exists; False when creating one failed (the
    states' watches alone tell the brokers then)."""
    ready = True
    for answer in pending:
        try:
            answer.get()
        except NodeExistsError:
            continue
        except Exception as exc:  # noqa: BLE001 - a shortcut only
            log.warning("state notices off: creating their slots failed (%s)", exc)
            ready = False
    return ready


def _first_state(
    ctl: ControllerEpoch, cluster: LiveBrokers, replicas: tuple[int, ...]
) -> LeaderIsr:
    return zd.leader_isr_of(cluster.stamp(initial_state(replicas, cluster)), ctl.epoch)


def _split_writes(decided: _Decided) -> tuple[list[Any], list[Any]]:
    """The writes of ``decided``: new leaderships (`leader_moves_first`), then ISR-only ones."""
    changes = decided.changes
    leaders, isr_only = leader_moves_first(
        (tp, reg, zd.registration_of(reg.replicas, after))
        for tp, (_before, after, _d, reg) in changes.items()
    )
    return [(tp, *changes[tp]) for tp in leaders], [(tp, *changes[tp]) for tp in isr_only]


def _batches(writes: list[Any]) -> list[list[Any]]:
    """Writes in the transactions they are sent in."""
    return [writes[i : i + _WRITE_BATCH] for i in range(0, len(writes), _WRITE_BATCH)]


def _led_by_leaving(ctx: ControllerContext) -> set[TopicPartition]:
    """Every partition whose leader is leaving (`leaders_leaving`, offline partitions aside:
    those wait for a replica to come back, and are decided when one does). Under
    ``ctx.lock``."""
    return leaders_leaving(
        ctx.live_brokers(),
        ((tp, s.leader) for tp, s in ctx.states.items() if s.leader != NO_LEADER),
    )


def _leaving_view(ctx: ControllerContext) -> tuple[Any, ...]:
    """What decides which leaders are leaving (`leaders_leaving`): the registered brokers,
    those in a controlled shutdown, the replicas each cannot serve. Under ``ctx.lock``."""
    return (
        frozenset(ctx.brokers),
        frozenset(ctx.shutting_down),
        frozenset((b, frozenset(tps)) for b, tps in ctx.offline_replicas.items()),
    )


@dataclass
class _Decided:
    """What a pass decided for some partitions: first states of new partitions (by topic),
    changed states (before, after, decision, registration decided from) and every decided
    partition with its reason."""

    new: dict[str, dict[int, LeaderIsr]] = field(default_factory=dict)
    changes: dict[TopicPartition, tuple[LeaderIsr, LeaderIsr, Decision, PartitionRegistration]] = (
        field(default_factory=dict)
    )
    outcomes: list[tuple[TopicPartition, PartitionRegistration, str]] = field(default_factory=list)

    def add(self, other: _Decided) -> None:
        for topic, states in other.new.items():
            self.new.setdefault(topic, {}).update(states)
        self.changes.update(other.changes)
        self.outcomes += other.outcomes


def _failed(results: list[Any], index: int) -> bool:
    """Whether operation ``index`` of a transaction is the one that failed it."""
    r = results[index]
    return isinstance(r, Exception) and not isinstance(r, RolledBackError)
