"""The controller's decisions, pure: what the brokers and their reports say of each replica
(`LiveBrokers`), a new partition's first state, one partition's next state after an event
(`decide`), which partitions an auto rebalance moves, and in which order a pass writes its
changes. `controller` feeds them from its watch-fed context and writes what they return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import partial

from logkeel.cluster.elections import (
    controlled_shutdown,
    on_replicas_offline,
    preferred_election,
)
from logkeel.cluster.partition_state import (
    NO_LEADER,
    Decision,
    PartitionRegistration,
    ReplicaLog,
    ReplicaView,
    Views,
    acknowledged_offset,
)
from logkeel.cluster.zk_data import LeaderIsr, ReplicaLogReport
from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "LiveBrokers",
    "decide",
    "imbalanced_partitions",
    "initial_state",
    "leader_moves_first",
    "leaders_leaving",
    "shutdown_remaining",
    "state_notice",
]


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
    # `_unreported_since_restart` per broker, worked out once per pass (it reads every report
    # of the broker, and a pass asks it for every replica of thousands of partitions).
    _unreported: dict[int, bool] = field(default_factory=dict, compare=False, repr=False)

    def views(
        self,
        tp: TopicPartition,
        reg: PartitionRegistration,
        *,
        shutdown: bool,
        topic_id: str | None = None,
        fresh: bool = False,
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
        reported yet may not lead. An ISR member that registered again after the ISR was
        written (``restarted_since_isr``) is vouched for by nobody: it leaves the ISR while
        the leader lives, and is judged on its report of this run when the leader is gone."""
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
                log_ = self._log(r, tp, topic_id, None, in_isr_of=reg)
                awaiting = r in self.live and self._unreported_since_restart(r)
            rejoined = (
                not judged
                and r != reg.leader
                and r in reg.isr
                and reg.joined_isr_zxid(r) >= 0
                and self.epochs.get(r, -1) > reg.joined_isr_zxid(r)
            )
            if rejoined and reg.leader not in self.live and self.logs is not None:
                # Nobody vouches for it and its earlier log may be gone: it is judged on its
                # report of this run, as it is (the leader it could have fetched from since
                # is gone too), and may not lead before making one. This is every replica
                # after the whole cluster went down at once, the state naming a dead leader.
                log_ = self._log(r, tp, topic_id, None)
                log_ = None if log_ is None else replace(log_, current=True)
                awaiting = log_ is None
                rejoined = False
            out[r] = ReplicaView(
                live=r in self.live,
                log_dir_online=tp not in self.offline_replicas.get(r, ()),
                shutting_down=shutdown and r in self.shutting_down,
                log=log_,
                awaiting_report=awaiting,
                restarted=restarted,
                restarted_since_isr=rejoined,
            )
        return out

    def _unreported_since_restart(self, broker: int) -> bool:
        """The broker reported before (in an earlier run) but not in this one."""
        known = self._unreported.get(broker)
        if known is None:
            reports = (self.logs or {}).get(broker, {})
            epoch = self.epochs.get(broker)
            known = bool(reports) and all(rep.broker_epoch != epoch for rep in reports.values())
            self._unreported[broker] = known
        return known

    def stamp(
        self, decided: PartitionRegistration, before: PartitionRegistration | None = None
    ) -> PartitionRegistration:
        """``decided`` with its leader's broker epoch: the current one for a new leadership
        term, the recorded one otherwise."""
        if decided.leader == NO_LEADER:
            epoch = -1
        elif before is not None and (decided.leader, decided.leader_epoch) == (
            before.leader,
            before.leader_epoch,
        ):
            epoch = before.leader_broker_epoch
        else:
            epoch = self.epochs.get(decided.leader, -1)
        return replace(decided, leader_broker_epoch=epoch)

    def _log(
        self,
        broker: int,
        tp: TopicPartition,
        topic_id: str | None,
        partition_epoch: int | None,
        *,
        in_isr_of: PartitionRegistration | None = None,
    ) -> ReplicaLog | None:
        """The broker's report of this run (a dead broker's last), made against
        ``partition_epoch`` (None: any, then given as an older report). ``in_isr_of``: the
        state decided on, to tell whether an older report was made against it by a member of
        its ISR seen joining it during this run (`ReplicaLog.in_sync_when_reported`)."""
        report = (self.logs or {}).get(broker, {}).get(tp)
        if (
            report is None
            or report.topic_id != topic_id
            or (partition_epoch is not None and report.partition_epoch != partition_epoch)
            or report.broker_epoch != self.epochs.get(broker, report.broker_epoch)
        ):
            return None
        joined = -1 if in_isr_of is None else in_isr_of.joined_isr_zxid(broker)
        return ReplicaLog(
            report.last_epoch,
            report.log_end_offset,
            high_watermark=report.high_watermark,
            current=partition_epoch is not None,
            unflushed_lost=report.unflushed_lost,
            in_sync_when_reported=(
                in_isr_of is not None
                and report.partition_epoch == in_isr_of.partition_epoch
                and 0 <= report.broker_epoch < joined
                and broker in in_isr_of.isr_seen_joining
            ),
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
    tp: TopicPartition,
    reg: PartitionRegistration,
    cluster: LiveBrokers,
    *,
    unclean: bool,
    preferred: bool,
    topic_id: str | None = None,
    now_ms: int = 0,
    unclean_wait_started_ms: int | None = None,
    unclean_wait_ms: int = 0,
) -> Decision:
    """One partition's next registration (``.state``, ``reg`` itself when nothing changes):
    elections when replicas died, returned or lost their log dir (an unclean one may ask to be
    retried at ``.retry_at_ms`` while it waits for reports), then controlled shutdowns, then a
    requested preferred election."""
    had_data = cluster.had_data(tp, topic_id)
    acked = cluster.acked(tp, topic_id)
    views = cluster.views(tp, reg, shutdown=False, topic_id=topic_id)
    first = on_replicas_offline(
        reg,
        views,
        unclean_allowed=unclean,
        partition_had_data=had_data,
        acked=acked,
        now_ms=now_ms,
        unclean_wait_started_ms=unclean_wait_started_ms,
        unclean_wait_ms=unclean_wait_ms,
    )
    state = first.state
    # The reasons of the decisions that changed something, in the order they were applied.
    reasons = [first.reason] if first.changed else []
    # The same views, with the shutting-down replicas marked (they differ in nothing else).
    shutdown_views = {
        r: replace(v, shutting_down=True) if r in cluster.shutting_down else v
        for r, v in views.items()
    }
    later: list[Callable[[PartitionRegistration], Decision]] = [
        partial(
            controlled_shutdown,
            views=shutdown_views,
            broker=broker,
            partition_had_data=had_data,
            acked=acked,
        )  # fmt: skip
        for broker in sorted(cluster.shutting_down & set(reg.replicas))
    ]
    if preferred:
        later.append(
            partial(
                preferred_election, views=shutdown_views, partition_had_data=had_data, acked=acked
            )  # fmt: skip
        )
    for step in later:
        d = step(state)
        if d.changed:
            state = d.state
            reasons.append(d.reason)
    if state is first.state:
        return first
    return replace(first, state=state, changed=state != reg, reason="; ".join(reasons))


def leaders_leaving(
    cluster: LiveBrokers, leaders: Iterable[tuple[TopicPartition, int]]
) -> set[TopicPartition]:
    """Of the partitions and their current leaders, those without a serving leader: none
    (offline: a replica back may lead it), or one that asked for a controlled shutdown, is no
    longer registered, or cannot serve the partition (failed log dir). A pass decides and
    writes these before any other change is even decided: a controlled shutdown waits for
    nothing else, and after a crash clients find leaders without waiting for the ISR-only
    changes of every other partition (~1 s of deciding at 2,000 partitions, loaded)."""
    return {
        tp
        for tp, leader in leaders
        if leader == NO_LEADER
        or leader in cluster.shutting_down
        or leader not in cluster.live
        or tp in cluster.offline_replicas.get(leader, ())
    }


def shutdown_remaining(
    cluster: LiveBrokers, states: Iterable[tuple[TopicPartition, int, Iterable[int]]]
) -> dict[int, int]:
    """The controller's answer to each controlled shutdown (Kafka's partitionsRemaining, as a
    count): of the partitions (leader, ISR) the broker still leads, those another replica could
    take, one in the ISR, registered, not shutting down and able to serve the partition. A
    partition no other replica can lead stays with the broker, as in Kafka, and is not waited
    for."""
    out = dict.fromkeys(cluster.shutting_down, 0)
    for tp, leader, isr in states:
        if leader in out and any(
            r != leader
            and r in cluster.live
            and r not in cluster.shutting_down
            and tp not in cluster.offline_replicas.get(r, ())
            for r in isr
        ):
            out[leader] += 1
    return out


def leader_moves_first(
    changes: Iterable[tuple[TopicPartition, PartitionRegistration, PartitionRegistration]],
) -> tuple[list[TopicPartition], list[TopicPartition]]:
    """A pass's changes (partition, before, after) in the order they are written: new
    leaderships first, then changes of the ISR alone. A controlled shutdown is done once the
    broker leads nothing; taking it out of its followers' ISRs can wait for that."""
    leaders: list[TopicPartition] = []
    isr_only: list[TopicPartition] = []
    for tp, before, after in changes:
        moved = (after.leader, after.leader_epoch) != (before.leader, before.leader_epoch)
        (leaders if moved else isr_only).append(tp)
    return leaders, isr_only


def state_notice(
    writes: Iterable[tuple[TopicPartition, LeaderIsr, LeaderIsr, object, object]],
    topic_ids: Mapping[str, str | None],
) -> list[tuple[TopicPartition, str | None, LeaderIsr]]:
    """What a transaction of conditional writes (partition, state decided from, new state, ...)
    tells the brokers: each new state with its topic's id and the version its znode has once
    the transaction is applied (one past the version it was conditional on)."""
    return [
        (tp, topic_ids.get(tp.topic), replace(after, zk_version=before.zk_version + 1))
        for tp, before, after, *_ in writes
    ]
