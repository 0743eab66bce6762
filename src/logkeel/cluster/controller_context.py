"""The active controller's view of the cluster, fed by ZooKeeper watches (Kafka's
ControllerContext): live brokers and their epochs, controlled shutdowns, replicas that cannot
serve, every topic's assignment and configs, every partition's state with its version, the
brokers' replica-log reports and each partition's last election that gave records up.

It is loaded once when a broker takes the controller's office, with pipelined reads, and kept
current by one-shot watches re-armed on every delivery; each change is written into the view
and reported with the partitions it touches, so that a controller pass decides only those and
never re-reads the cluster. The controller's own writes go into the view at once
(`state_written`); the watch that follows brings the same version and changes nothing.

Deliveries run on kazoo's thread and take ``lock``; the controller holds it while it decides.
A delivery that fails (not a missing znode) asks for a reload (``on_change("reload", ...)``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.controller_decisions import LiveBrokers
from logkeel.cluster.zk_data import BrokerRegistration, LeaderIsr, ReplicaLogReport, TopicAssignment
from logkeel.cluster.zk_watch import WatchedZnodes
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ControllerContext", "isr_joins", "isr_joins_seen"]

log = logging.getLogger(__name__)

# on_change(kind, partitions touched): kinds are "partitions" and "reload".
OnChange = Callable[[str, Iterable[TopicPartition]], None]


class ControllerContext:
    def __init__(self, zk: KazooClient, on_change: OnChange) -> None:
        self._zk = zk
        self._on_change = on_change
        self.lock = threading.RLock()
        self.brokers: dict[int, BrokerRegistration] = {}
        self.shutting_down: set[int] = set()
        # The controlled shutdown requests in ZooKeeper, and the registration (its broker
        # epoch) that made each one seen (`_settle_leaving`).
        self._requested: set[int] = set()
        self._leaving: dict[int, int] = {}
        self.offline_replicas: dict[int, set[TopicPartition]] = {}
        self.assignments: dict[str, TopicAssignment] = {}
        # Each topic's partitions and each broker's replicas, kept with the assignments: a
        # report or a broker's change asks for a broker's partitions, and at 10,000 partitions
        # working them out from the assignments on kazoo's thread, under ``lock``, held the
        # controller's pass behind it for over a second in a controlled shutdown.
        self._topic_tps: dict[str, frozenset[TopicPartition]] = {}
        self._replicas_of: dict[int, set[TopicPartition]] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.states: dict[TopicPartition, LeaderIsr] = {}
        self.reports: dict[int, tuple[int, dict[TopicPartition, ReplicaLogReport]]] = {}
        # Each partition's last recorded election loss: (its sequential znode's name, leader
        # epoch, from offset). The znodes are written once; the newest name wins.
        self.losses: dict[TopicPartition, tuple[str, int, int, str | None]] = {}
        # Brokers whose report znode was delivered but whose parts are still being read: the
        # first pass must not judge a returning replica before its earlier report is known.
        self._reports_reading: set[int] = set()
        self._reports_read = threading.Condition(self.lock)
        # Which delivery of each broker's report is in the view (or kept undecoded): an
        # earlier delivery read late is dropped.
        self._report_seq = 0
        self._report_installed: dict[int, int] = {}
        # A standby keeps the reports' parts as read, undecoded, and decodes them on its
        # owner's thread (`catch_up`, `take_office`): every broker rewrites its report when the
        # partitions' epochs move (a controlled shutdown moves them all), and decoding them
        # (~360 KB of JSON per broker at 2,000 partitions) on kazoo's one callback thread held
        # up that broker's partition-state deliveries and state notices behind it.
        self._defer_reports = False
        self._raw_reports: dict[int, tuple[int, int, dict[TopicPartition, ReplicaLogReport], list[bytes]]] = {}  # fmt: skip
        # A read failed: the view will not load (the owner is told to read it anew).
        self._failed = False
        self._watches = WatchedZnodes(zk, self._fail)

    # -- lifecycle ------------------------------------------------------------------------------

    def load(self, timeout_s: float) -> bool:
        """Reads the whole view (pipelined) and arms every watch; False if it took longer."""
        self.start_loading()
        return self.wait_loaded(timeout_s)

    def start_loading(self) -> None:
        """Arms every watch: the view fills in on kazoo's thread (see ``wait_loaded``). A
        standby keeps the replica-log reports too: left until it takes office, reading them
        took 0.68 s of a failover at 2,000 partitions (load ~20)."""
        w = self._watches
        w.children(zd.BROKER_IDS, self._on_broker_ids)
        w.children(zd.CONTROLLED_SHUTDOWN, self._on_shutting_down)
        w.children(zd.OFFLINE_REPLICAS, self._on_offline_parents)
        w.children(zd.TOPICS, self._on_topics)
        w.children(zd.REPLICA_LOGS, self._on_report_brokers)
        w.children(zd.ELECTION_LOSSES, self._on_losses)

    def wait_loaded(self, timeout_s: float) -> bool:
        """Waits until the whole view has been read once; False if it took longer, and at
        once if a read failed (what it was to read never comes: a broker taking office
        waited out the whole timeout while the cluster had no controller)."""
        w = self._watches
        with self._reports_read:
            reading = sorted(self._reports_reading)
        pending = w.undelivered()
        if pending or reading:
            # A new controller's first pass waits for these (0.71 s at 10,000 partitions with
            # nothing changed since the standby's last catch-up): which they are, to go on from.
            log.info("controller context: waiting for %d znode read(s) (%s) and the replica-log "
                     "reports of brokers %s", len(pending), ", ".join(p for _, p in pending[:5]),
                     reading)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        if not w.wait_loaded(timeout_s):
            return False
        # A report's parts are read after its znode's watch delivered (see _on_report).
        with self._reports_read:
            self._reports_read.wait_for(
                lambda: self._failed or not self._reports_reading,
                max(0.0, deadline - time.monotonic()),
            )
            return not self._failed and not self._reports_reading

    @property
    def failed(self) -> bool:
        return self._failed or self._watches.failed

    def close(self) -> None:
        """Stops every watch (each ends at its next delivery)."""
        self._watches.close()

    def quiet(self) -> None:
        """A standby's view: partition states that change are only noted, and read by
        ``catch_up`` or ``take_office`` (`WatchedZnodes.quiet`); the rest is read as it changes."""
        with self._reports_read:
            self._defer_reports = True
        self._watches.quiet(zd.is_partition_state_path)

    def take_office(self, on_state_noted: Callable[[], None]) -> int:
        """In office: the reports are decoded as they come; a partition state that changes is
        still only noted (``on_state_noted()`` called, on kazoo's thread) and read by
        ``read_changed_states`` at the start of the owner's next pass. Read as each watch
        fired, the states a pass had just written (3,333 after a SIGKILL at 10,000
        partitions) were read back between that pass's own writes on the one connection.
        Reads what changed while a standby (``wait_loaded`` then waits for it): how many
        znodes."""
        self._decode_reports(stay_quiet=False)
        self._watches.quiet(zd.is_partition_state_path, on_state_noted)
        return self._watches.catch_up()

    def read_changed_states(self, timeout_s: float) -> bool:
        """Reads the partition states noted as changed since the last look, and waits until
        they are in the view; False if that took longer, or a read failed."""
        if not self._watches.catch_up():
            return not self.failed
        return self._watches.wait_loaded(timeout_s)

    def catch_up(self) -> None:
        """Reads the partition states that changed since and decodes the reports read (a
        standby, every few seconds, on its owner's thread)."""
        self._watches.catch_up()
        self.decode_reports()

    def decode_reports(self) -> None:
        """A standby's reports read since the last look, decoded (on its owner's thread)."""
        self._decode_reports(stay_quiet=True)

    def _decode_reports(self, *, stay_quiet: bool) -> None:
        with self._reports_read:
            raw, self._raw_reports = self._raw_reports, {}
            self._defer_reports = stay_quiet and self._defer_reports
        for broker, (seq, generation, legacy, parts) in raw.items():
            logs = self._decoded_report(broker, legacy, parts)
            if logs is None:
                return
            with self._reports_read:
                if self._report_installed.get(broker) == seq:
                    self.reports[broker] = (generation, logs)

    # -- what the decisions read (under ``lock``) ---------------------------------------------

    def live_brokers(self) -> LiveBrokers:
        return LiveBrokers(
            frozenset(self.brokers), frozenset(self.shutting_down),
            {b: set(tps) for b, tps in self.offline_replicas.items()},
            {b: logs for b, (_gen, logs) in self.reports.items()},
            {b: reg.broker_epoch for b, reg in self.brokers.items()},
            {
                tp: (epoch, offset)
                for tp, (_name, epoch, offset, topic_id) in self.losses.items()
                # A loss of a topic deleted and created again under its name is not this one's.
                if topic_id is None
                or (a := self.assignments.get(tp.topic)) is None
                or a.topic_id == topic_id
            },
        )  # fmt: skip

    def partitions_of(self, brokers: Iterable[int]) -> set[TopicPartition]:
        """Every partition with a replica on one of ``brokers``."""
        return set().union(*(self._replicas_of.get(b, ()) for b in brokers))

    def all_partitions(self) -> set[TopicPartition]:
        return set().union(*self._topic_tps.values())

    def _index(self, topic: str, assignment: TopicAssignment | None) -> None:
        """Keeps `_topic_tps` and `_replicas_of` for ``topic`` now assigned so (None: gone)."""
        before = self.assignments.get(topic)
        if before is not None:
            for p, replicas in before.partitions.items():
                tp = TopicPartition(topic, p)
                for r in replicas:
                    self._replicas_of.get(r, set()).discard(tp)
        if assignment is None:
            self._topic_tps.pop(topic, None)
            return
        tps = []
        for p, replicas in assignment.partitions.items():
            tp = TopicPartition(topic, p)
            tps.append(tp)
            for r in replicas:
                self._replicas_of.setdefault(r, set()).add(tp)
        self._topic_tps[topic] = frozenset(tps)

    def state_written(self, tp: TopicPartition, state: LeaderIsr) -> None:
        """The controller wrote ``state`` (its ``zk_version`` the new one): in the view now,
        and watched from now on if it is new."""
        with self.lock:
            self._put_state(tp, state)
        self._watches.data(zd.partition_state_path(tp.topic, tp.partition), self._state_watcher(tp))

    def _fail(self, path: str, exc: BaseException) -> None:
        log.warning("controller context: reading %s failed (%s); reloading", path, exc)
        with self._reports_read:
            self._failed = True
            self._reports_read.notify_all()
        self._on_change("reload", ())

    # -- brokers ----------------------------------------------------------------------------------

    def _on_broker_ids(self, ids: list[str]) -> None:
        for child in ids:
            broker = int(child)
            self._watches.data(zd.broker_path(broker), partial(self._on_broker, broker))

    def _on_broker(self, broker: int, data: bytes | None, stat: Any) -> None:
        with self.lock:
            before = self.brokers.get(broker)
            if data is None:
                self.brokers.pop(broker, None)
            else:
                self.brokers[broker] = zd.decode_broker(broker, data, stat.czxid)
            if before == self.brokers.get(broker):
                return
            self._settle_leaving()
            touched = self.partitions_of([broker])
        self._on_change("partitions", touched)

    def _on_shutting_down(self, ids: list[str]) -> None:
        with self.lock:
            self._requested = {int(i) for i in ids}
            before = set(self.shutting_down)
            self._settle_leaving()
            touched = self.partitions_of(before ^ self.shutting_down)
        self._on_change("partitions", touched)

    def _settle_leaving(self) -> None:
        """``shutting_down``: the brokers whose request is in ZooKeeper, and those whose request
        went while the registration that made it is still seen. A request goes with its
        broker's session, as the registration does, but its watch may fire first: taken for
        live and not leaving in between, a broker was given first leaderships of a topic being
        created as it exited. Under ``lock``."""
        for b in self._requested:
            if (reg := self.brokers.get(b)) is not None:
                self._leaving[b] = reg.broker_epoch
        for b, epoch in list(self._leaving.items()):
            reg = self.brokers.get(b)
            if reg is None or reg.broker_epoch != epoch:
                del self._leaving[b]
        self.shutting_down = self._requested | set(self._leaving)

    def _on_offline_parents(self, ids: list[str]) -> None:
        for child in ids:
            broker = int(child)
            self._watches.data(zd.offline_replicas_path(broker), partial(self._on_offline, broker))

    def _on_offline(self, broker: int, data: bytes | None, _stat: Any = None) -> None:
        with self.lock:
            before = self.offline_replicas.get(broker, set())
            now = set() if data is None else set(zd.decode_partitions(data))
            self.offline_replicas[broker] = now
        self._on_change("partitions", before ^ now)

    # -- topics and partitions --------------------------------------------------------------------

    def _on_topics(self, names: list[str]) -> None:
        for topic in names:
            self._watches.data(zd.topic_path(topic), partial(self._on_assignment, topic))
            self._watches.data(zd.topic_config_path(topic), partial(self._on_config, topic))

    def _topic_partitions(self, topic: str) -> set[TopicPartition]:
        return set(self._topic_tps.get(topic, ()))

    def _on_assignment(self, topic: str, data: bytes | None, _stat: Any = None) -> None:
        with self.lock:
            if data is None:
                touched = self._topic_partitions(topic)
                self._index(topic, None)
                self.assignments.pop(topic, None)
                self.configs.pop(topic, None)
                for tp in touched:
                    self.states.pop(tp, None)
                # Watched again (from scratch) if a topic of this name is created anew.
                for tp in touched:
                    self._watches.forget(zd.partition_state_path(tp.topic, tp.partition))
                self._watches.forget(zd.topic_path(topic))
                self._watches.forget(zd.topic_config_path(topic))
            else:
                assignment = zd.decode_topic(topic, data)
                before = self.assignments.get(topic)
                if before is not None and before.topic_id != assignment.topic_id:
                    # Deleted and created again before this view read it gone: the new
                    # topic's state versions start over, so the old states would hide them.
                    for tp in self._topic_partitions(topic):
                        self.states.pop(tp, None)
                        self._watches.forget(zd.partition_state_path(tp.topic, tp.partition))
                self._index(topic, assignment)
                self.assignments[topic] = assignment
                touched = self._topic_partitions(topic)
        for tp in sorted(touched) if data is not None else ():
            self._watches.data(
                zd.partition_state_path(tp.topic, tp.partition), self._state_watcher(tp)
            )
        self._on_change("partitions", touched)

    def _on_config(self, topic: str, data: bytes | None, _stat: Any = None) -> None:
        with self.lock:
            if data is None:
                self.configs.pop(topic, None)
                return
            self.configs[topic] = zd.decode_topic_config(data)
            touched = self._topic_partitions(topic)
        self._on_change("partitions", touched)

    def _state_watcher(self, tp: TopicPartition) -> Callable[[bytes | None, Any], None]:
        def on_state(data: bytes | None, stat: Any) -> None:
            with self.lock:
                if data is None:
                    if self.states.pop(tp, None) is None:
                        return
                elif not self._put_state(
                    tp, zd.decode_partition_state(data, stat.version, stat.mzxid)
                ):
                    return
            self._on_change("partitions", (tp,))

        return on_state

    def _put_state(self, tp: TopicPartition, state: LeaderIsr) -> bool:
        """Keeps the newer of the cached state and ``state``; True if ``state`` was newer."""
        cached = self.states.get(tp)
        if cached is not None and cached.zk_version >= state.zk_version:
            if cached.zk_version == state.zk_version and cached.written_zxid < state.written_zxid:
                # A state this controller created (its write's zxid not known): the watch
                # brings it; nothing else changed.
                self.states[tp] = replace(
                    cached,
                    written_zxid=state.written_zxid,
                    isr_since=isr_joins(None, state),
                    isr_seen_joining=isr_joins_seen(None, state),
                )
            return False
        self.states[tp] = replace(
            state,
            isr_since=isr_joins(cached, state),
            isr_seen_joining=isr_joins_seen(cached, state),
        )
        return True

    # -- election losses --------------------------------------------------------------------------

    def _on_losses(self, names: list[str]) -> None:
        for name in names:
            self._watches.data(f"{zd.ELECTION_LOSSES}/{name}", partial(self._on_loss, name))

    def _on_loss(self, name: str, data: bytes | None, _stat: Any = None) -> None:
        if data is None:
            return
        loss = zd.decode_election_loss(data)
        with self.lock:
            kept = self.losses.get(loss.tp)
            if kept is not None and kept[0] >= name:
                return
            self.losses[loss.tp] = (name, loss.leader_epoch, loss.from_offset, loss.topic_id)
        self._on_change("partitions", (loss.tp,))

    # -- replica-log reports ----------------------------------------------------------------------

    def _on_report_brokers(self, ids: list[str]) -> None:
        for child in ids:
            broker = int(child)
            self._watches.data(zd.replica_logs_path(broker), partial(self._on_report, broker))

    def _on_report(self, broker: int, data: bytes | None, _stat: Any = None) -> None:
        """The report znode changes last when a broker reports: read its parts, then tell."""
        with self.lock:
            self._report_seq += 1
            seq = self._report_seq
        if data is None:
            with self._reports_read:
                self.reports.pop(broker, None)
                self._raw_reports.pop(broker, None)
                self._report_installed[broker] = seq
                self._reports_reading.discard(broker)
                self._reports_read.notify_all()
            return
        with self.lock:
            self._reports_reading.add(broker)
        generation, legacy = zd.decode_replica_logs(data)
        path = zd.replica_logs_path(broker)

        def parts_listed(result: Any) -> None:
            try:
                names = list(result.get())
            except NoNodeError:
                names = []
            except Exception as exc:  # noqa: BLE001
                self._fail(path, exc)
                return
            parts: list[bytes] = []
            left = [len(names)]

            def part_read(part: Any) -> None:
                try:
                    parts.append(part.get()[0])
                except NoNodeError:
                    pass  # removed by a newer report, whose watch comes next
                except Exception as exc:  # noqa: BLE001
                    self._fail(path, exc)
                finally:
                    left[0] -= 1
                    if left[0] == 0:
                        self._report_read(broker, seq, generation, legacy, parts)

            if not names:
                self._report_read(broker, seq, generation, legacy, parts)
            for name in names:
                self._zk.get_async(f"{path}/{name}").rawlink(part_read)

        self._zk.get_children_async(path).rawlink(parts_listed)

    def _report_read(
        self,
        broker: int,
        seq: int,
        generation: int,
        legacy: dict[TopicPartition, ReplicaLogReport],
        parts: list[bytes],
    ) -> None:
        with self._reports_read:
            if self._defer_reports:
                if seq > self._report_installed.get(broker, 0):
                    self._report_installed[broker] = seq
                    self._raw_reports[broker] = (seq, generation, legacy, parts)
                self._reports_reading.discard(broker)
                self._reports_read.notify_all()
                # A standby decides nothing (taking office decides every partition), but it
                # decodes the report on its owner's thread soon: left to taking office, the
                # reports written since the last catch-up took 0.2-0.55 s of a failover at
                # 10,000 partitions, before the first leadership was written.
                self._on_change("report", ())
                return
        logs = self._decoded_report(broker, legacy, parts)
        if logs is None:
            return
        with self._reports_read:
            self._reports_reading.discard(broker)
            self._reports_read.notify_all()
            if seq <= self._report_installed.get(broker, 0):
                return  # a newer delivery was read first
            self._report_installed[broker] = seq
            self._raw_reports.pop(broker, None)
            self.reports[broker] = (generation, logs)
            # What a report can change: elections of offline partitions, and of those led by a
            # restarted broker (they wait for its report of this run). A leadership of the
            # broker's current run is untouched: every broker rewrites its report whenever
            # partition epochs move, and each one touched every partition its broker led.
            reg = self.brokers.get(broker)
            epoch = None if reg is None else reg.broker_epoch
            touched = {
                tp
                for tp in self._replicas_of.get(broker, ())
                if (s := self.states.get(tp)) is None
                or s.leader == -1
                or (s.leader == broker and s.leader_broker_epoch != epoch)
            }
        self._on_change("partitions", touched)

    def _decoded_report(
        self, broker: int, legacy: dict[TopicPartition, ReplicaLogReport], parts: list[bytes]
    ) -> dict[TopicPartition, ReplicaLogReport] | None:
        """The report's parts decoded; None when one is unreadable (the view is read anew)."""
        logs = dict(legacy)
        try:
            for part in parts:
                logs.update(zd.decode_replica_logs(part)[1])
        except Exception as exc:  # noqa: BLE001
            self._fail(zd.replica_logs_path(broker), exc)
            return None
        return logs


def isr_joins(before: LeaderIsr | None, after: LeaderIsr) -> tuple[tuple[int, int], ...]:
    """When each member of ``after``'s ISR joined: a member already in ``before``'s ISR keeps
    its zxid (a later write kept it, it did not vouch for it again), a new one joined at
    ``after``'s write. Versions the watch skipped may hide a leave and a rejoin: the member
    then counts from its first join, and a restart since takes it out once more (harmless)."""
    if after.written_zxid < 0:
        return ()
    known = dict(before.isr_since) if before is not None else {}
    return tuple(
        (
            r,
            known[r]
            if before is not None and r in before.isr and r in known
            else after.written_zxid,
        )
        for r in after.isr
    )


def isr_joins_seen(before: LeaderIsr | None, after: LeaderIsr) -> frozenset[int]:
    """The members of ``after``'s ISR whose join `isr_joins` dates exactly: all of them for a
    state created with them (version 0); one added by a write the version after ``before``;
    one kept from ``before`` if its join was seen there. Read without the version before
    (a load) or across versions the watch skipped, a new member's join is dated to
    ``after``'s write, perhaps later than it was."""
    if after.written_zxid < 0:
        return frozenset()
    if after.zk_version == 0:
        return frozenset(after.isr)
    if before is None:
        return frozenset()
    next_version = after.zk_version == before.zk_version + 1
    return frozenset(
        r
        for r in after.isr
        if (r in before.isr and r in before.isr_seen_joining)
        or (r not in before.isr and next_version)
    )
