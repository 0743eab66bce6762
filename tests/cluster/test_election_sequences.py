"""Issue 20: a property over the pure election functions. Hypothesis draws sequences of writes,
kills, wipes (partition dir deleted, disk replaced), truncations below the reported high
watermark, restarts, reports and elections (the controller's pass, preferred, designated with
and without --force) on a model of three replicas; after every step, a leader holds every
acknowledged record, unless an operator forced the election or the election reported the loss
(`Decision.truncate_from`), as `logkeel cluster status` would show it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.cluster.elections import (
    designated_election,
    on_replicas_offline,
    preferred_election,
)
from logkeel.cluster.partition_state import (
    NO_LEADER,
    Decision,
    PartitionRegistration,
    ReplicaLog,
    ReplicaView,
    acknowledged_offset,
)

REPLICAS = (0, 1, 2)
Record = tuple[int, int]  # (record id, leader epoch it was written in)


@dataclass
class Model:
    reg: PartitionRegistration = field(
        default_factory=lambda: PartitionRegistration(REPLICAS, 0, 0, REPLICAS)
    )
    logs: dict[int, list[Record]] = field(default_factory=lambda: {r: [] for r in REPLICAS})
    live: set[int] = field(default_factory=lambda: set(REPLICAS))
    # What the controller has of each broker: its last report (outlives the broker).
    reports: dict[int, ReplicaLog] = field(default_factory=dict)
    # Each report's partition epoch, if it was made by a member of that state's ISR that
    # joined it in the reporting broker's run (`ReplicaLog.in_sync_when_reported`).
    reported_in_sync: dict[int, int] = field(default_factory=dict)
    # The broker run each report was made in: one of an earlier run is not used for a live
    # broker (the controller waits for its report of this run, and judges that exactly).
    report_runs: dict[int, int] = field(default_factory=dict)
    # The broker run in which each member of the ISR joined it.
    joined_run: dict[int, int] = field(default_factory=lambda: dict.fromkeys(REPLICAS, 0))
    hw: int = 0  # the leader's high watermark: the records below it are acknowledged
    acked: set[int] = field(default_factory=set)  # ids acknowledged to producers
    excused: set[int] = field(default_factory=set)  # ids an election reported lost, or forced
    next_id: int = 0
    # Each broker's run (a restart starts the next) and the run the leader was elected in:
    # the controller tells a restarted leader by its broker epoch.
    runs: dict[int, int] = field(default_factory=lambda: dict.fromkeys(REPLICAS, 0))
    leader_run: int = 0
    loss: tuple[int, int] | None = None  # the last election that gave records up

    # -- what the controller sees --------------------------------------------------------------

    def log_of(self, r: int, *, current: bool) -> ReplicaLog:
        records = self.logs[r]
        hw = self.hw if r == self.reg.leader else min(self.hw, len(records))
        return ReplicaLog(
            records[-1][1] if records else -1, len(records), high_watermark=hw, current=current
        )

    def views(self) -> dict[int, ReplicaView]:
        """Live replicas report against an offline partition (or one whose leader restarted)
        at once (exact); otherwise, the leader live or dead but not yet replaced, the
        controller has their last periodic report, flagged when made in sync against this
        very state; a dead one's last report stays (its disk may have changed since)."""
        lead = self.reg.leader
        restarted = lead != NO_LEADER and self.runs[lead] != self.leader_run
        leaderless = self.reg.offline or restarted
        out = {}
        for r in REPLICAS:
            if r in self.live and (leaderless or self.report_runs.get(r) != self.runs[r]):
                log = self.log_of(r, current=True)
            elif r in self.reports:
                log = self.reports[r]
                if self.reported_in_sync.get(r) == self.reg.partition_epoch:
                    log = replace(log, in_sync_when_reported=True)
            else:
                log = None
            out[r] = ReplicaView(live=r in self.live, log=log, restarted=restarted and r == lead)
        return out

    def acked_mark(self) -> int:
        return acknowledged_offset(
            ((log.last_epoch, log.high_watermark) for log in self.reports.values()), self.loss
        )

    def had_data(self) -> bool:
        return any(log.log_end_offset > 0 for log in self.reports.values())

    # -- steps -----------------------------------------------------------------------------------

    def serving_leader(self) -> int:
        """The replica that acts as leader: a broker back from a restart does not take up a
        leadership granted to its earlier run until the controller elects again (its cache
        hides it: `zk_store`, leader_broker_epoch), so it neither takes writes nor serves."""
        lead = self.reg.leader
        if lead == NO_LEADER or lead not in self.live or self.runs[lead] != self.leader_run:
            return NO_LEADER
        return lead

    def write(self, n: int) -> None:
        lead = self.serving_leader()
        if lead == NO_LEADER:
            return
        epoch = self.reg.leader_epoch
        for _ in range(n):
            self.logs[lead].append((self.next_id, epoch))
            self.next_id += 1
        followers = [r for r in self.reg.isr if r != lead]
        if all(r in self.live for r in followers):
            for r in followers:
                self.logs[r] = list(self.logs[lead])
            self.hw = len(self.logs[lead])
            self.acked.update(i for i, _ in self.logs[lead])

    def catch_up(self, r: int) -> None:
        """A live follower fetches the leader's log (truncating what diverges) and joins."""
        lead = self.serving_leader()
        if lead in (NO_LEADER, r) or r not in self.live:
            return
        self.logs[r] = list(self.logs[lead])
        if r not in self.reg.isr:
            self.reg = self.reg.with_isr((*self.reg.isr, r))
            self.joined_run[r] = self.runs[r]

    def report(self) -> None:
        for r in self.live:
            self.reports[r] = self.log_of(r, current=False)
            self.report_runs[r] = self.runs[r]
            if r in self.reg.isr and self.joined_run[r] == self.runs[r]:
                self.reported_in_sync[r] = self.reg.partition_epoch
            else:
                self.reported_in_sync.pop(r, None)

    def kill(self, r: int) -> None:
        self.live.discard(r)

    def wipe(self, r: int) -> None:
        if r not in self.live:
            self.logs[r] = []

    def truncate(self, r: int) -> None:
        """A truncated file or an old snapshot restored: the log ends below what the reports
        say was acknowledged (a cut above it cannot be told from a lagging copy)."""
        mark = self.acked_mark()
        if r not in self.live and 0 < mark <= len(self.logs[r]):
            self.logs[r] = self.logs[r][: mark - 1]

    def restart(self, r: int) -> None:
        if r not in self.live:
            self.live.add(r)
            self.runs[r] += 1

    def apply(self, d: Decision, *, forced: bool = False) -> None:
        if not d.changed:
            return
        new = d.state
        if new.leader != NO_LEADER and (new.leader, new.leader_epoch) != (
            self.reg.leader,
            self.reg.leader_epoch,
        ):
            kept = {i for i, _ in self.logs[new.leader]}
            if forced or d.truncate_from is not None:
                self.excused |= self.acked - kept
                self.loss = (new.leader_epoch, len(self.logs[new.leader]))
            # In-sync followers hold the leader's log; the high watermark is what it holds.
            for r in new.isr:
                self.logs[r] = list(self.logs[new.leader])
            self.hw = min(self.hw, len(self.logs[new.leader]))
            self.leader_run = self.runs[new.leader]
        self.reg = new

    def controller_pass(self) -> None:
        self.apply(
            on_replicas_offline(
                self.reg,
                self.views(),
                partition_had_data=self.had_data(),
                acked=self.acked_mark(),
            )
        )

    def preferred(self) -> None:
        self.apply(
            preferred_election(
                self.reg, self.views(), partition_had_data=self.had_data(), acked=self.acked_mark()
            )
        )

    def designate(self, r: int, force: bool) -> None:
        d = designated_election(
            self.reg,
            self.views(),
            r,
            force=force,
            partition_had_data=self.had_data(),
            acked=self.acked_mark(),
        )
        self.apply(d, forced=force)

    # -- the property ----------------------------------------------------------------------------

    def lost(self) -> set[int]:
        lead = self.serving_leader()
        if lead == NO_LEADER:
            return set()
        held = {i for i, _ in self.logs[lead]}
        return self.acked - held - self.excused


replica = st.sampled_from(REPLICAS)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 5)),
        st.tuples(st.just("catch_up"), replica),
        st.tuples(st.just("report")),
        st.tuples(st.just("kill"), replica),
        st.tuples(st.just("wipe"), replica),
        st.tuples(st.just("truncate"), replica),
        st.tuples(st.just("restart"), replica),
        st.tuples(st.just("controller_pass")),
        st.tuples(st.just("controller_pass")),
        st.tuples(st.just("preferred")),
        st.tuples(st.just("designate"), replica, st.booleans()),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(steps)
def test_no_acknowledged_record_is_lost_unless_forced_or_reported(sequence) -> None:
    m = Model()
    for step in sequence:
        # No pass follows a kill by itself: brokers die together, or while no controller runs.
        getattr(m, step[0])(*step[1:])
        assert not m.lost(), (step, m.reg, m.logs, sorted(m.acked))
        if m.reg.leader != NO_LEADER:
            assert m.reg.leader in m.reg.isr


def test_all_killed_a_wiped_isr_member_back_alone_waits_then_the_holder_leads() -> None:
    """The issue's scenario, step by step, as the property test replays it."""
    m = Model()
    m.write(5)
    m.report()
    for r in REPLICAS:
        m.kill(r)
    m.wipe(2)
    m.restart(2)
    m.controller_pass()
    assert m.reg.offline
    m.restart(0)
    m.controller_pass()
    assert m.reg.leader == 0 and not m.lost()


def test_every_replica_reported_and_none_holds_everything_the_most_leads_with_the_loss_told() -> (
    None
):
    m = Model()
    m.write(5)
    m.report()
    for r in REPLICAS:
        m.kill(r)
    m.truncate(0)
    m.wipe(1)
    m.wipe(2)
    for r in REPLICAS:
        m.restart(r)
    d = on_replicas_offline(m.reg, m.views(), partition_had_data=True, acked=m.acked_mark())
    assert d.state.leader == 0 and d.truncate_from == 4, d.reason
    assert "holds the most" in d.reason


def test_after_a_reported_loss_older_reports_count_only_up_to_it() -> None:
    """A dead replica's report from before an election that gave records up no longer says
    they were acknowledged: the new lineage is judged by what it holds."""
    reports = [(3, 1000), (4, 500)]  # (last epoch, high watermark)
    assert acknowledged_offset(reports) == 1000
    assert acknowledged_offset(reports, (4, 500)) == 500
    assert acknowledged_offset(reports, (4, -1)) == 500  # the newer report still counts
    assert acknowledged_offset([(3, 1000)], (4, -1)) == 0


def test_a_wiped_leader_back_before_any_pass_does_not_serve_and_is_not_reelected() -> None:
    """Hypothesis found it: the leader dies, its disk is wiped, it comes back before the
    controller acted. It does not take its old leadership up (a grant to its earlier run), and
    the pass that follows elects a replica that holds the records."""
    m = Model()
    m.write(1)
    m.kill(0)
    m.wipe(0)
    m.restart(0)
    assert m.serving_leader() == NO_LEADER and not m.lost()
    m.controller_pass()
    assert m.reg.leader in (1, 2) and not m.lost(), m.reg


def test_a_wiped_follower_back_in_the_isr_is_not_vouched_for_by_its_empty_report() -> None:
    """A follower dies, is wiped, restarts and reports its empty log while still in the ISR
    (nothing has written since); then the leader dies. Its report was made against the
    current state by an ISR member, but it joined the ISR in its earlier run: nothing vouches
    for that empty log, and the other follower, which holds the records, takes over."""
    m = Model()
    m.write(3)
    m.kill(1)
    m.wipe(1)
    m.restart(1)
    m.report()
    m.kill(0)
    m.controller_pass()
    assert m.reg.leader != 1 and not m.lost(), m.reg
