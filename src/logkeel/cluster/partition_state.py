"""Value types the controller's pure decisions work on: a partition's registration (assignment,
leader, epochs, ISR), what the controller knows of each replica, and a decision's outcome.

Nothing here does IO; `elections` and `isr` take these and return new ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from logkeel.storage.topic_partition import TopicPartition

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition as the controller records it (Kafka's LeaderAndIsr plus the assignment).

    ``replicas`` is in assignment order, its first entry the preferred leader. ``partition_epoch``
    is the version of the partition state (the znode's zkVersion in ZooKeeper mode): every
    change bumps it, and an AlterPartition proposal made against an older one is refused.
    """

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    # The leader's broker epoch when it was elected (-1: unknown); the controller stamps it.
    leader_broker_epoch: int = -1
    # (ISR member, zxid of the state write that put it in the ISR, as far as the controller
    # saw); a member not listed is not known. Broker epochs are registration zxids, so a
    # member whose epoch is higher restarted since it joined, unseen
    # (`ReplicaView.restarted_since_isr`): a later write that kept it vouches for nothing.
    isr_since: tuple[tuple[int, int], ...] = ()
    # The members whose joining the controller saw happen at that zxid: the state created
    # with them, or a write one version after the one it knew that added them. A join read
    # at a context's load, or after versions the watch skipped, is dated to the state's last
    # write, later than it may have been.
    isr_seen_joining: frozenset[int] = frozenset()

    def joined_isr_zxid(self, replica: int) -> int:
        """The zxid at which ``replica`` joined the ISR (-1: not known)."""
        return next((z for r, z in self.isr_since if r == replica), -1)

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    def with_leader(self, leader: int, isr: Iterable[int]) -> PartitionRegistration:
        """A new leadership term: the leader epoch and the partition epoch both move on, even
        when the same broker is elected again (its followers must fence the old term)."""
        return replace(
            self,
            leader=leader,
            leader_epoch=self.leader_epoch + 1,
            isr=tuple(isr),
            partition_epoch=self.partition_epoch + 1,
        )

    def with_isr(self, isr: Iterable[int]) -> PartitionRegistration:
        """An ISR change within the same leadership term (AlterPartition)."""
        return replace(self, isr=tuple(isr), partition_epoch=self.partition_epoch + 1)


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """What a replica reported of its log for this partition."""

    last_epoch: int  # latest epoch in its leader-epoch cache; -1 when the cache is empty
    log_end_offset: int
    # The partition's log dir carries a different directory id than when it was assigned:
    # the disk was replaced or reformatted.
    dir_id_changed: bool = False
    # The replica's high watermark when it reported (-1: not told): the highest of all
    # replicas' reports is a lower bound of what was acknowledged (`acknowledged_mark`).
    high_watermark: int = -1
    # Made against the registration being decided on, while nobody could fetch (a leaderless
    # partition, or fresh reports an operator's election asked for): the log is exactly this.
    # An older report of a follower may understate a log that fetched since.
    current: bool = True
    # Its machine went down uncleanly since it last held what was acknowledged: records
    # acknowledged after its last flush may be missing, whatever its length says.
    unflushed_lost: bool = False
    # An older report made against the very state decided on, by a member of its ISR seen
    # joining it during this run of its broker: the high watermark never passes the log end of
    # a member of the written ISR, so an empty log then means nothing was acknowledged yet,
    # not a wiped one (a follower's last report from before the partition's first records).
    in_sync_when_reported: bool = False

    @property
    def empty(self) -> bool:
        # The end offset alone: a log recreated empty may already carry the current leader
        # epoch, and one that had data keeps its end offset even when retention emptied it.
        return self.log_end_offset == 0

    @property
    def position(self) -> tuple[int, int]:
        """What an unclean election ranks replicas by: highest leader epoch, then longest log.
        An empty log ranks lowest whatever epoch it carries (one recreated empty may already
        carry the current epoch)."""
        return (self.last_epoch, self.log_end_offset) if not self.empty else (-1, 0)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the controller knows of one replica of one partition."""

    live: bool  # the broker is registered (its ephemeral znode exists)
    log_dir_online: bool = True  # False once the broker reported the dir holding it failed
    shutting_down: bool = False  # controlled shutdown in progress
    log: ReplicaLog | None = None  # None: not reported (yet)
    # The partition has no leader and this replica has not reported its log since: it may be
    # back with a wiped disk, so it cannot lead until its report shows what it holds.
    awaiting_report: bool = False
    # This replica is the recorded leader, but its broker restarted since it was elected: the
    # leadership is stale (its log may have lost what it held) and must be decided anew.
    restarted: bool = False
    # An ISR member whose broker registered again after the ISR was written, without the
    # controller ever seeing it gone (a restart inside its session, or while the controller
    # was paused or changing): nothing vouches for its log any more (it may be back wiped),
    # so it leaves the ISR and rejoins once it catches up (Kafka's "bounced broker").
    restarted_since_isr: bool = False

    @property
    def can_lead(self) -> bool:
        """A leader must be reachable and able to serve its log."""
        return (
            self.live
            and self.log_dir_online
            and not self.shutting_down
            and not self.awaiting_report
            and not self.restarted_since_isr
        )


Views = Mapping[int, ReplicaView]
OFFLINE_VIEW = ReplicaView(live=False)


def view_of(views: Views, replica: int) -> ReplicaView:
    return views.get(replica, OFFLINE_VIEW)


def acknowledged_offset(
    reports: Iterable[tuple[int, int]], loss: tuple[int, int] | None = None
) -> int:
    """What the replicas' reports, (last leader epoch, high watermark) each, say was
    acknowledged: the highest high watermark. After an election that gave records up
    (``loss``: the new leader's epoch and the offset the others truncate from, -1 when not
    known), a report from before it counts only up to that offset: those records were lost
    and reported."""
    mark = 0
    for last_epoch, hw in reports:
        if loss is not None and last_epoch < loss[0]:
            hw = min(hw, max(loss[1], 0))
        mark = max(mark, hw)
    return mark


def acknowledged_mark(views: Views) -> int:
    """A lower bound of the offsets acknowledged to producers: the highest high watermark any
    replica reported (0: none reported)."""
    return max((v.log.high_watermark for v in views.values() if v.log is not None), default=0)


def lost_data(
    views: Views,
    replica: int,
    *,
    partition_had_data: bool = False,
    acked: int = 0,
    below_mark: bool = True,
) -> str | None:
    """Why the replica is known or suspected to have lost acknowledged records, None when
    nothing says so: a new directory id; an empty log (missing, wiped, a new disk) while
    another replica holds data or the partition is known to have had data; or -- judged on a
    current report only -- a log ending below the acknowledged mark (a truncated file, an old
    snapshot restored) or one back from a crash of its machine, which may lack records
    acknowledged after its last flush whatever its length. Such a replica never leads while one that may hold the data can
    return (the incident: every follower truncated to an empty leader). ``acked`` is the
    acknowledged mark over every report known, the views' own included; without
    ``below_mark`` a log ending below it does not count (an unclean election, whose candidates
    all lack acknowledged records by definition, excludes only the wiped)."""
    log = view_of(views, replica).log
    if log is None:
        return None
    acked = max(acked, acknowledged_mark(views))
    if log.dir_id_changed:
        return f"replica {replica} is on a new log dir (new directory id)"
    if log.empty and not log.in_sync_when_reported:
        others_hold_data = any(
            other != replica and v.log is not None and not v.log.empty for other, v in views.items()
        )
        if partition_had_data or others_hold_data or acked > 0:
            return f"replica {replica} has an empty log while the partition holds data"
        return None
    if below_mark and log.current and log.log_end_offset < acked:
        return (
            f"replica {replica}'s log ends at {log.log_end_offset}, below the acknowledged "
            f"offset {acked}"
        )
    if below_mark and log.current and log.unflushed_lost:
        return (
            f"replica {replica}'s machine went down uncleanly: records acknowledged after its "
            "last flush may be missing"
        )
    return None


def storage_wiped(
    views: Views, replica: int, *, partition_had_data: bool = False, acked: int = 0
) -> bool:
    """`lost_data` as a yes/no (what a forced designation overrides)."""
    return lost_data(views, replica, partition_had_data=partition_had_data, acked=acked) is not None


def lost_for_certain(
    views: Views, replica: int, *, partition_had_data: bool = False, acked: int = 0
) -> bool:
    """Lost by a current report: the replica leaves the ISR. A suspicion from an older report
    only keeps it from leading until the partition's current reports decide."""
    log = view_of(views, replica).log
    return (
        log is not None
        and log.current
        and storage_wiped(views, replica, partition_had_data=partition_had_data, acked=acked)
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one controller or leader decision.

    ``state`` is the new registration (the old one, unchanged, when nothing is to be written);
    ``error`` is Kafka's error name when the request is refused; ``retry_at_ms`` asks the caller
    to decide again at that time (an unclean election waiting for replicas to report);
    ``truncated`` maps replicas to how many offsets past the new leader's log end they will lose
    (as far as their last reports tell); ``truncate_from`` is set when the new leader leads alone
    out of the ISR (unclean or designated): its log end, from which every record the other
    replicas hold is truncated away (-1: its log end is not known).
    """

    state: PartitionRegistration
    reason: str
    changed: bool = False
    error: str | None = None
    retry_at_ms: int | None = None
    truncated: Mapping[int, int] = field(default_factory=dict)
    truncate_from: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def unchanged(state: PartitionRegistration, reason: str, error: str | None = None) -> Decision:
    return Decision(state, reason, changed=False, error=error)


ELECTION_TYPES = ("preferred", "unclean", "designated", "resign")


@dataclass(frozen=True, slots=True)
class ElectionRequest:
    """An election asked of the controller. ``partitions`` None means every partition
    (preferred and unclean only); ``results`` maps each partition to (Kafka's error name or
    None, the reason), written by the controller when done."""

    kind: str
    partitions: frozenset[TopicPartition] | None
    replica: int | None = None
    force: bool = False
    results: Mapping[TopicPartition, tuple[str | None, str]] | None = None
    reason: str = ""  # why the requester asks (a slow leader's resignation says why)

    def answered(self, results: Mapping[TopicPartition, tuple[str | None, str]]) -> ElectionRequest:
        return replace(self, results=results)
