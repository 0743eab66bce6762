"""One owner for a partition's leader/ISR state, and the ISR manager, as a model: a real
Partition over a real log leads; hypothesis interleaves appends, follower fetches, metadata
arriving late, controller writes (leader epoch bumps, shrinks), brokers entering a controlled
shutdown, and the ISR manager's writes to a model ZooKeeper that fails on demand. Checked after
every step: the high watermark never passes what a replica of the ISR as written holds, a
shutting-down broker is never proposed (KIP-841), a failed write leaves no proposal pending, a
refused one is not resent in its partition epoch. A threaded test runs the same parts at once.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from logkeel.cluster.metadata import PartitionState
from logkeel.cluster.partition_state import PartitionRegistration
from logkeel.records.builder import build_batch
from logkeel.server.replica import isr_rules, partition_reads
from logkeel.server.replica.isr_manager import IsrManager, IsrProposal, IsrRefused, IsrWrite
from logkeel.server.replica.isr_rules import IsrConfig
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.results import FetchPartitionRequest
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
LEADER = 1
FOLLOWERS = (2, 3)


class ZooKeeperDown(Exception):
    pass


def each(write: Callable[[IsrProposal], None]) -> IsrWrite:
    """A batch writer from a one-proposal fake (the manager writes batches)."""

    def write_batch(batch: list[IsrProposal]) -> list[BaseException | None]:
        out: list[BaseException | None] = []
        for proposal in batch:
            try:
                write(proposal)
                out.append(None)
            except Exception as exc:  # noqa: BLE001 - answered per proposal, as the broker does
                out.append(exc)
        return out

    return write_batch


@dataclass
class ModelZk:
    """The partition's state znode, the brokers in a controlled shutdown, and a fault switch."""

    state: PartitionRegistration
    shutting_down: frozenset[int] = frozenset()
    failing: bool = False
    writes: int = 0
    proposed_shutting_down: int = 0

    def submit_to(self, manager: IsrManager, isr_before: Callable[[], list[int]]):
        """``manager.submit``, checking first that no shutting-down broker is proposed."""

        def submit(proposal: IsrProposal) -> None:
            if (set(proposal.state.isr) - set(isr_before())) & self.shutting_down:
                self.proposed_shutting_down += 1
            manager.submit(proposal)

        return submit

    def write(self, proposal: IsrProposal) -> None:
        if self.failing:
            raise ZooKeeperDown("injected")
        decision = isr_rules.validate_isr_write(
            self.state,
            proposal.state,
            LEADER,
            live={LEADER, *FOLLOWERS},
            shutting_down=self.shutting_down,
        )
        if not decision.changed:
            stale = decision.error in ("INVALID_UPDATE_VERSION", "FENCED_LEADER_EPOCH")
            raise IsrRefused(decision.reason, stale=stale)
        self.state = replace(
            self.state, isr=proposal.state.isr, partition_epoch=self.state.partition_epoch + 1
        )
        self.writes += 1


def state_of(reg: PartitionRegistration) -> PartitionState:
    return PartitionState(
        "t", 0, list(reg.replicas), reg.leader, reg.leader_epoch, list(reg.isr),
        reg.partition_epoch,
    )  # fmt: skip


class IsrModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.manager_logs = LogManager([Path(self._dir.name)])
        self.manager_logs.startup(start_background=False)
        self.zk = ModelZk(PartitionRegistration((1, 2, 3), LEADER, 0, (1, 2, 3), 0))
        self.now_ms = int(time.time() * 1000)
        self.isr_manager = IsrManager(
            each(self.zk.write),
            first_backoff_ms=10,
            max_backoff_ms=40,
            clock_ms=lambda: self.now_ms,
        )
        self.p = Partition(
            TP, "id", LEADER, IsrConfig(replica_lag_time_max_ms=1000),
            self.zk.submit_to(self.isr_manager, lambda: self.p.isr),
        )  # fmt: skip
        self.p.shutting_down = lambda: self.zk.shutting_down
        self.p.log = self.manager_logs.get_or_create_log(TP)
        self.p.apply_state(state_of(self.zk.state))
        self.p.become_leader_or_follower()
        # What each follower holds, as far as the leader knows (its last fetch offset).
        self.held = {r: 0 for r in FOLLOWERS}
        self.last_failed: list[IsrProposal] = []

    def teardown(self) -> None:
        self.isr_manager.stop()
        self.manager_logs.shutdown()
        self._dir.cleanup()

    # -- the data path ----------------------------------------------------------------------

    @rule(n=st.integers(1, 3))
    def append(self, n: int) -> None:
        self.p.append_as_leader(build_batch([(self.now_ms, None, b"v", ())] * n), True)

    @rule(replica=st.sampled_from(FOLLOWERS), ahead=st.one_of(st.none(), st.integers(0, 2)))
    def follower_fetches(self, replica: int, ahead: int | None) -> None:
        """From the leader's log end (None: caught up) or ``ahead`` of its last fetch."""
        end = self.p.log.log_end_offset
        offset = end if ahead is None else min(end, self.held[replica] + ahead)
        result, _ = partition_reads.read(
            self.p, FetchPartitionRequest(TP, offset, 1 << 20, self.p.leader_epoch), replica,
            1 << 20, 0, True,
        )  # fmt: skip
        if result.records is not None:
            result.records.close()
        self.held[replica] = offset

    @rule(ms=st.integers(1, 1500))
    def time_passes(self, ms: int) -> None:
        self.now_ms += ms

    @rule()
    def shrink_check(self) -> None:
        self.p.maybe_shrink_isr(self.now_ms)

    # -- the cluster ------------------------------------------------------------------------

    @rule()
    def metadata_arrives(self) -> None:
        self.p.apply_state(state_of(self.zk.state))

    @rule()
    def controller_bumps_leader_epoch(self) -> None:
        s = self.zk.state
        self.zk.state = replace(
            s, leader_epoch=s.leader_epoch + 1, partition_epoch=s.partition_epoch + 1
        )

    @rule(replica=st.sampled_from(FOLLOWERS))
    def controller_removes(self, replica: int) -> None:
        s = self.zk.state
        if replica in s.isr:
            isr = tuple(r for r in s.isr if r != replica)
            self.zk.state = replace(s, isr=isr, partition_epoch=s.partition_epoch + 1)

    @rule(replica=st.sampled_from(FOLLOWERS), down=st.booleans())
    def controlled_shutdown(self, replica: int, down: bool) -> None:
        if down:
            self.zk.shutting_down |= {replica}
        else:
            self.zk.shutting_down -= {replica}

    @rule(failing=st.booleans())
    def zookeeper_fails(self, failing: bool) -> None:
        self.zk.failing = failing

    @rule()
    def isr_manager_runs(self) -> None:
        pending = self.p.pending_isr
        # Queued, not written yet: this run fails its write.
        attempted = pending is not None and self.isr_manager.queued > 0
        failing = self.zk.failing
        self.isr_manager.run_once()
        if attempted and failing and self.p.pending_isr is pending:
            raise AssertionError("a proposal stayed pending after its write failed")

    # -- what must hold ---------------------------------------------------------------------

    @invariant()
    def high_watermark_within_the_written_isr(self) -> None:
        hw = self.p.high_watermark
        for r in self.zk.state.isr:
            if r != LEADER:
                assert self.held[r] >= hw, (
                    f"HW {hw} counts {r} (holds {self.held[r]}) of the written ISR "
                    f"{self.zk.state.isr}"
                )

    @invariant()
    def no_shutting_down_broker_proposed(self) -> None:
        assert self.zk.proposed_shutting_down == 0

    @invariant()
    def a_pending_proposal_is_queued_or_written(self) -> None:
        pending = self.p.pending_isr
        if pending is None:
            return
        queued = self.isr_manager.queued > 0
        moved_on = self.zk.state.partition_epoch > pending.state.partition_epoch
        assert queued or moved_on, f"{pending} is pending, neither queued nor written"


IsrModel.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
test_isr_model = IsrModel.TestCase


def test_a_written_expansion_counts_before_its_metadata_arrives() -> None:
    """The model's steps for the case random runs rarely reach: a follower's joining is
    written, the metadata has not brought it yet, and the other follower's fetch would move
    the high watermark past what the joiner holds."""
    m = IsrModel()
    try:
        m.controller_removes(3)
        m.metadata_arrives()
        m.append(2)
        m.follower_fetches(2, None)
        m.follower_fetches(3, None)  # caught up: its joining is proposed
        m.isr_manager_runs()
        assert m.zk.state.isr == (1, 2, 3) and m.p.isr == [1, 2]
        m.append(2)
        m.follower_fetches(2, None)
        m.high_watermark_within_the_written_isr()
        assert m.p.high_watermark == 2
        m.metadata_arrives()
        m.follower_fetches(3, None)
        assert m.p.high_watermark == 4
    finally:
        m.teardown()


def test_failed_write_is_derived_again_after_the_backoff(tmp_path: Path) -> None:
    """A shrink whose write failed is not pending, is proposed again only after the backoff,
    and then from the state as it is (here: the follower came back, so no shrink at all)."""
    logs = LogManager([tmp_path])
    logs.startup(start_background=False)
    now = [int(time.time() * 1000)]
    zk = ModelZk(PartitionRegistration((1, 2, 3), LEADER, 0, (1, 2, 3), 0), failing=True)
    manager = IsrManager(each(zk.write), first_backoff_ms=100, clock_ms=lambda: now[0])
    p = Partition(TP, "id", LEADER, IsrConfig(replica_lag_time_max_ms=1000), manager.submit)
    try:
        p.log = logs.get_or_create_log(TP)
        p.apply_state(state_of(zk.state))
        p.become_leader_or_follower()
        p.append_as_leader(build_batch([(now[0], None, b"v", ())]), True)
        now[0] += 2000  # both followers lag
        assert p.maybe_shrink_isr(now[0]) is not None
        assert manager.run_once() == 1
        assert p.pending_isr is None
        assert manager.retries_pending == 1
        assert p.maybe_shrink_isr(now[0]) is None  # no proposal before the backoff ends
        for r in FOLLOWERS:  # the followers catch up meanwhile
            partition_reads.read(p, FetchPartitionRequest(TP, 1, 1 << 20, 0), r, 1 << 20, 0, True)
        zk.failing = False
        now[0] += 100
        manager.run_once()  # the retry derives from the state now: nothing to change
        assert p.pending_isr is None and manager.queued == 0 and zk.writes == 0
        p.append_as_leader(build_batch([(now[0], None, b"v", ())]), True)
        now[0] += 2000
        assert p.maybe_shrink_isr(now[0]) is not None  # lagging again: a fresh proposal
        manager.run_once()
        assert zk.writes == 1 and zk.state.isr == (1,)
    finally:
        manager.stop()
        logs.shutdown()


def test_stale_proposal_is_dropped_not_resent(tmp_path: Path) -> None:
    logs = LogManager([tmp_path])
    logs.startup(start_background=False)
    now = [int(time.time() * 1000)]
    zk = ModelZk(PartitionRegistration((1, 2, 3), LEADER, 0, (1, 2, 3), 0))
    manager = IsrManager(each(zk.write), clock_ms=lambda: now[0])
    p = Partition(TP, "id", LEADER, IsrConfig(replica_lag_time_max_ms=1000), manager.submit)
    try:
        p.log = logs.get_or_create_log(TP)
        p.apply_state(state_of(zk.state))
        p.become_leader_or_follower()
        p.append_as_leader(build_batch([(now[0], None, b"v", ())]), True)
        now[0] += 2000
        zk.state = replace(zk.state, partition_epoch=1)  # the controller wrote meanwhile
        assert p.maybe_shrink_isr(now[0]) is not None
        manager.run_once()
        assert p.pending_isr is None and zk.writes == 0
        assert p.maybe_shrink_isr(now[0]) is None  # not resent in the stale epoch
        p.apply_state(state_of(zk.state))  # the new state arrives: derived from it
        assert p.maybe_shrink_isr(now[0]) is not None
        manager.run_once()
        assert zk.writes == 1 and zk.state.isr == (1,)
    finally:
        manager.stop()
        logs.shutdown()


def test_submit_after_stop_is_answered_not_scheduled() -> None:
    outcomes = []

    class Owner:
        def isr_write_done(self, proposal: IsrProposal, outcome: object) -> None:
            outcomes.append(outcome)

        def rederive_isr(self, now_ms: int) -> None:
            raise AssertionError("no retry after stop")

    manager = IsrManager(each(lambda _p: None)).start()
    manager.stop()
    reg = PartitionRegistration((1, 2), 1, 0, (1,), 0)
    manager.submit(IsrProposal(TP, reg, "test", Owner()))
    assert [o.value for o in outcomes] == ["stopped"]


def test_a_batch_is_written_at_once_and_each_proposal_told_its_own_outcome() -> None:
    """Every queued proposal goes to one write (pipelined by the broker); a stale, a refused
    and a failed one among them are each answered as if written alone, and a write that
    raises for the whole batch fails every proposal of it (each retried later)."""
    told: dict[str, str] = {}
    rederived: list[TopicPartition] = []

    class Owner:
        def isr_write_done(self, proposal: IsrProposal, outcome: object) -> None:
            told[proposal.tp.topic] = outcome.value  # type: ignore[attr-defined]

        def rederive_isr(self, now_ms: int) -> None:
            rederived.append(TP)

    answers: dict[str, BaseException | None] = {
        "ok": None,
        "stale": IsrRefused("epoch moved", stale=True),
        "refused": IsrRefused("shutting down", stale=False),
        "failed": ConnectionError("ZooKeeper"),
    }
    batches: list[list[str]] = []

    def write_batch(batch: list[IsrProposal]) -> list[BaseException | None]:
        batches.append([p.tp.topic for p in batch])
        return [answers[p.tp.topic] for p in batch]

    now = [0]
    manager = IsrManager(write_batch, first_backoff_ms=10, clock_ms=lambda: now[0])
    reg = PartitionRegistration((1, 2), 1, 0, (1,), 0)
    for topic in answers:
        manager.submit(IsrProposal(TopicPartition(topic, 0), reg, "test", Owner()))
    assert manager.run_once() == 4
    assert batches == [list(answers)]
    assert told == {"ok": "written", "stale": "stale", "refused": "refused", "failed": "failed"}
    assert manager.retries_pending == 2  # the refused and the failed one, after their backoff

    def broken(_batch: list[IsrProposal]) -> list[BaseException | None]:
        raise ConnectionError("connection lost")

    broken_manager = IsrManager(broken)
    broken_manager.submit(IsrProposal(TopicPartition("a", 0), reg, "test", Owner()))
    broken_manager.submit(IsrProposal(TopicPartition("b", 0), reg, "test", Owner()))
    assert broken_manager.run_once() == 2
    assert (told["a"], told["b"]) == ("failed", "failed")


@pytest.mark.parametrize("seed", range(3))
def test_concurrent_fetches_metadata_and_writes_keep_the_high_watermark_safe(
    tmp_path: Path, seed: int
) -> None:
    """The same parts on real threads at once: IO threads fetching and appending, a metadata
    thread applying the state (with controller shrinks and epoch bumps), and the ISR manager's
    own thread writing to a model ZooKeeper that fails every other second of the run; the HW
    is checked against the written ISR all along."""
    logs = LogManager([tmp_path])
    logs.startup(start_background=False)
    lock = threading.Lock()
    zk = ModelZk(PartitionRegistration((1, 2, 3), LEADER, 0, (1, 2, 3), 0))
    held = dict.fromkeys(FOLLOWERS, 0)

    def write(proposal: IsrProposal) -> None:
        with lock:
            zk.failing = int(time.monotonic() * 4 + seed) % 2 == 0
            zk.write(proposal)

    manager = IsrManager(each(write), first_backoff_ms=5, max_backoff_ms=20)
    p = Partition(TP, "id", LEADER, IsrConfig(replica_lag_time_max_ms=50), manager.submit)
    p.log = logs.get_or_create_log(TP)
    p.apply_state(state_of(zk.state))
    p.become_leader_or_follower()
    manager.start()
    stop = time.monotonic() + 1.5
    violations: list[str] = []

    def check() -> None:
        with lock:
            hw = p.high_watermark
            for r in zk.state.isr:
                if r != LEADER and held[r] < hw:
                    violations.append(f"HW {hw} > {held[r]} held by {r} in {zk.state.isr}")

    def producer() -> None:
        while time.monotonic() < stop:
            p.append_as_leader(build_batch([(0, None, b"v", ())]), True)
            check()

    def follower(r: int) -> None:
        while time.monotonic() < stop:
            if r == 2 or int(time.monotonic() * 10) % 3 != 0:  # 3 falls behind now and then
                with lock:
                    held[r] = p.log.log_end_offset
            result, _ = partition_reads.read(
                p, FetchPartitionRequest(TP, held[r], 1 << 20, -1), r, 1 << 20, 0, True
            )
            if result.records is not None:
                result.records.close()
            check()

    def metadata() -> None:
        n = 0
        while time.monotonic() < stop:
            n += 1
            with lock:
                s = zk.state
                if n % 50 == 0:
                    zk.state = replace(
                        s, leader_epoch=s.leader_epoch + 1, partition_epoch=s.partition_epoch + 1
                    )
                elif n % 37 == 0 and 2 in s.isr:
                    isr = tuple(r for r in s.isr if r != 2)
                    zk.state = replace(s, isr=isr, partition_epoch=s.partition_epoch + 1)
                current = zk.state
            p.apply_state(state_of(current))
            p.maybe_shrink_isr(int(time.time() * 1000))
            check()
            time.sleep(0.002)

    threads = [threading.Thread(target=producer), threading.Thread(target=metadata)]
    threads += [threading.Thread(target=follower, args=(r,)) for r in FOLLOWERS]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        manager.stop()
        logs.shutdown()
    assert not violations, violations[:5]
    assert zk.writes > 0  # ISR changes did go through
