"""One partition replica on this broker: its leadership state, high watermark and log access.

A ``Partition`` is built by the replica manager from cluster metadata over a log from the log
manager. It answers for itself whether it can serve a request (offline, not the leader, a
fenced epoch), takes leadership changes, appends as leader and as follower, and as leader moves
the high watermark and proposes ISR changes from what ``FollowerTracking`` knows of its
followers; ``partition_reads`` serves fetches and ListOffsets from it. The replica manager
routes requests to it and handles failures of its log dir. Methods that touch the log run on
the IO threads and take ``log.lock``.

Leader and ISR state (leader, epochs, replicas, ISR, the pending ISR proposal) change only
under ``_state_lock`` (Kafka's leader-ISR update lock): metadata changes (a metadata thread),
follower fetches and appends moving the high watermark (IO threads), the periodic shrink check
(event loop) and the outcomes of ISR writes (the ISR manager's thread) all see one consistent
state. It is the innermost lock: taken inside ``log.lock``, never the other way round, and
nothing blocking runs under it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Set

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import PartitionState
from logkeel.cluster.partition_state import Decision, PartitionRegistration
from logkeel.server.replica import isr_rules
from logkeel.server.replica.append_checks import AppendRejected, prepare_client_batches
from logkeel.server.replica.append_turns import AppendTurns
from logkeel.server.replica.context import IsrChangeRequested
from logkeel.server.replica.follower_tracking import FollowerTracking
from logkeel.server.replica.isr_manager import IsrOutcome, IsrProposal
from logkeel.server.replica.isr_rules import FollowerState, IsrConfig
from logkeel.server.replica.topic_settings import TopicSettings
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.log_results import AppendInfo
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["Partition"]

log = logging.getLogger(__name__)


class Partition:
    """One partition replica on this broker: leadership, ISR, high watermark, and its log.

    Attributes are read without a lock (single attribute loads); the log's data and high
    watermark change under ``log.lock``, leader and ISR state under ``_state_lock``.
    """

    def __init__(
        self,
        tp: TopicPartition,
        topic_id: str,
        node_id: int,
        isr_config: IsrConfig | None = None,
        isr_change_requested: IsrChangeRequested | None = None,
    ) -> None:
        self.tp = tp
        self.topic_id = topic_id
        self.node_id = node_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = 0
        self.replicas: list[int] = []
        # When each replica became one (time.monotonic()): a follower's fetch received before
        # its replica was (re)added is from its earlier incarnation (`Fetches`).
        self.replica_since: dict[int, float] = {}
        self.isr: list[int] = []
        self.log: PartitionLog | None = None
        self.offline_reason: str | None = None
        # When a producer's append was last refused as not led here (time.monotonic()): see
        # `Appends._append_result`.
        self.refused_not_leader_at: float | None = None
        # The metadata state last applied: an apply of an equal one changes nothing.
        self.applied: PartitionState | None = None
        # As leader: what it knows of its followers.
        self.followers = FollowerTracking(node_id, isr_config or IsrConfig())
        self._isr_change_requested = isr_change_requested
        self._state_lock = threading.Lock()
        # The ISR proposal in flight (one at a time, as Kafka's pending ISR state).
        self._pending: IsrProposal | None = None
        # Replicas a proposal of this partition epoch may have added to the ISR as written in
        # ZooKeeper (sent, not known refused): the high watermark counts them until the next
        # partition epoch tells (a failed write's outcome may be unknown).
        self._maybe_joined: frozenset[int] = frozenset()
        # A proposal refused in this partition epoch is not made again in it: the next one
        # is derived from the state the metadata brings.
        self._refused_in_epoch: int | None = None
        # A write failed: no proposal until the ISR manager's backoff ends (rederive_isr).
        self._awaiting_rederive = False
        # KIP-841: brokers in a controlled shutdown are never proposed for the ISR.
        self.shutting_down: Callable[[], Set[int]] = frozenset
        # The registered brokers (a gone one is never proposed for the ISR); None: not known.
        self.live_brokers: Callable[[], Set[int]] | None = None
        # Beyond KIP-501: the leader epoch in which this leader, too slow for its followers,
        # asked to resign.
        self._resigned_in_epoch: int | None = None
        self.resign_requested: Callable[[TopicPartition, str], None] | None = None
        # Bytes appended since start: delayed fetches compare it to decide they have enough.
        self.appended_bytes = 0
        self.append_turns = AppendTurns()
        # Cached under the log's lock after every change, for cheap reads on the event loop.
        self.last_stable_offset = 0
        # The topic's settings the data path checks on every append, refreshed on each
        # metadata change of the topic (configs only change through metadata).
        self.settings = TopicSettings()

    def __repr__(self) -> str:
        return (
            f"Partition({self.tp}, leader={self.leader_id}, epoch={self.leader_epoch}, "
            f"isr={self.isr}, offline={self.offline_reason is not None})"
        )

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark if self.log is not None else -1

    @property
    def online(self) -> bool:
        return self.offline_reason is None and self.log is not None

    def apply_state(self, state: PartitionState) -> bool:
        """Takes leader, epoch, replicas and ISR from metadata; True if the epoch moved."""
        with self._state_lock:
            moved = state.leader_epoch != self.leader_epoch or state.leader != self.leader_id
            if moved or state.partition_epoch != self.partition_epoch:
                # Whatever was proposed was written or superseded: the new state says which.
                self._pending = None
                self._maybe_joined = frozenset()
                self._refused_in_epoch = None
                self._awaiting_rederive = False
            if moved and state.leader == self.node_id:
                self.followers.new_term(state.replicas, state.isr, _now_ms())
            self.leader_id = state.leader
            self.leader_epoch = state.leader_epoch
            self.partition_epoch = state.partition_epoch
            now = time.monotonic()
            for r in state.replicas:
                if r not in self.replicas:
                    self.replica_since[r] = now
            self.replicas = list(state.replicas)
            self.isr = list(state.isr)
            self.followers.keep_only(self.replicas)
            self.applied = state
        return moved

    def state_error(self, *, leader_only: bool = True) -> ErrorCode | None:
        """Why this replica cannot serve a request now, or None."""
        if self.offline_reason is not None:
            return ErrorCode.kafka_storage_error
        if self.log is None or self.node_id not in self.replicas:
            return ErrorCode.not_leader_or_follower
        if leader_only and not self.is_leader:
            return ErrorCode.not_leader_or_follower
        return None

    def epoch_error(self, current_leader_epoch: int) -> ErrorCode | None:
        """Kafka's check of a request's ``current_leader_epoch`` (-1: not checked)."""
        if current_leader_epoch < 0:
            return None
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.unknown_leader_epoch
        return None

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset over the maximal ISR (the ISR plus any follower a
        proposal of this partition epoch may have added, written or not yet known); only ever
        moves forward.

        A joining follower counts at once, as in Kafka: the controller may elect it as soon as
        the change lands, so nothing it lacks may be acknowledged meanwhile (a soak saw records
        acked past a joiner's log end, then lost when it was elected).

        Call with ``log.lock`` held (producer state learns the new HW too).
        """
        plog = self.log
        if plog is None:
            return False
        with self._state_lock:
            if not self.is_leader:
                return False
            joined = self._maybe_joined
            maximal = (*self.isr, *(r for r in joined if r not in self.isr)) if joined else self.isr
            new_hw = isr_rules.high_watermark(
                plog.high_watermark,
                self.node_id,
                plog.log_end_offset,
                maximal,
                self.followers.states,
            )
        changed = new_hw > plog.high_watermark
        if changed:
            plog.high_watermark = new_hw
            plog.producer_state.on_high_watermark_updated(new_hw)
        self.last_stable_offset = plog.last_stable_offset()
        return changed

    def become_leader_or_follower(self) -> None:
        """After a leadership change: a new leader starts its epoch at the log end."""
        plog = self.log
        assert plog is not None
        with plog.lock:
            if self.is_leader:
                plog.unflushed_lost = False  # elected knowing it: its log is the partition's now
                latest = plog.leader_epochs.latest_epoch
                if self.leader_epoch >= 0 and (latest is None or latest < self.leader_epoch):
                    # Unsynced: see leader_epoch's module (hundreds of fsyncs on a failover).
                    plog.leader_epochs.assign(self.leader_epoch, plog.log_end_offset, sync=False)
                self.maybe_increment_high_watermark()
            else:
                self.last_stable_offset = plog.last_stable_offset()

    # -- appends (IO threads) -------------------------------------------------------------------

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, origin_is_client: bool
    ) -> AppendInfo:
        """Appends ``records`` and moves the high watermark; raises ``AppendRejected`` when
        this replica cannot take them, storage errors as the log raises them."""
        plog = self.log
        if plog is None:
            raise AppendRejected(ErrorCode.kafka_storage_error, f"{self.tp} is offline")
        batches = None
        if origin_is_client:
            # Outside the log's lock: decompressing, checking and recompressing take CPU time.
            records, batches = prepare_client_batches(
                records, self.settings, self.tp, plog.config.max_message_bytes
            )
        with plog.lock:
            if self.log is not plog or not self.is_leader:
                raise AppendRejected(ErrorCode.not_leader_or_follower, f"{self.tp} changed state")
            info = plog.append_as_leader(
                records,
                max(self.leader_epoch, 0),
                origin_is_client=origin_is_client,
                batches=batches,
            )
            self.maybe_increment_high_watermark()
        return info

    # -- as a follower (IO threads) ---------------------------------------------------------

    def fetch_position(self) -> tuple[int, int, int] | None:
        """(log end offset, latest epoch or -1, log start offset) a follower fetches from."""
        plog = self.log
        if plog is None:
            return None
        latest = plog.leader_epochs.latest_epoch
        return plog.log_end_offset, -1 if latest is None else latest, plog.log_start_offset

    def append_as_follower(
        self,
        records: bytes,
        leader_epoch: int,
        leader_high_watermark: int,
        leader_log_start_offset: int = -1,
        *,
        expected_log_end: int | None = None,
    ) -> AppendInfo | None:
        """Appends the leader's batches with their offsets and epochs unchanged, then takes the
        leader's high watermark (never above our own log end) and log start offset (never above
        our high watermark). None: the partition moved on (no longer a follower in
        ``leader_epoch``, or, with records, its log end is no longer ``expected_log_end``, where
        the leader read them: a cut since the fetch would leave a gap) and nothing was
        written."""
        plog = self.log
        if plog is None:
            return None
        with plog.lock:
            if self.log is not plog or self.is_leader or self.leader_epoch != leader_epoch:
                return None
            if records and expected_log_end is not None and plog.log_end_offset != expected_log_end:
                log.info(
                    "%s: fetched at %d but the log end is now %d; fetching again",
                    self.tp,
                    expected_log_end,
                    plog.log_end_offset,
                )
                return None
            info = plog.append_as_follower(records) if records else None
            self._follower_high_watermark_locked(leader_high_watermark)
            if plog.unflushed_lost and leader_high_watermark <= plog.log_end_offset:
                plog.unflushed_lost = False  # it holds all its leader acknowledged
            new_start = min(leader_log_start_offset, plog.high_watermark)
            if new_start > plog.log_start_offset:
                plog.maybe_increment_log_start_offset(new_start)
        if info is not None:
            self.appended_bytes += info.valid_bytes
        return info

    def _follower_high_watermark_locked(self, leader_high_watermark: int) -> None:
        plog = self.log
        assert plog is not None
        hw = max(plog.log_start_offset, min(leader_high_watermark, plog.log_end_offset))
        if hw != plog.high_watermark:
            plog.high_watermark = hw
            plog.producer_state.on_high_watermark_updated(hw)
        self.last_stable_offset = plog.last_stable_offset()

    def truncate_as_follower(self, offset: int, leader_epoch: int, *, fully: bool = False) -> bool:
        """Removes our records at and above ``offset`` (a divergent tail), or with ``fully``
        empties the log to restart at ``offset`` (we fell below the leader's log start).
        False if the partition moved on meanwhile."""
        plog = self.log
        if plog is None:
            return False
        with plog.lock:
            if self.log is not plog or self.is_leader or self.leader_epoch != leader_epoch:
                return False
            if fully:
                plog.truncate_fully_and_start_at(offset)
            else:
                plog.truncate_to(offset)
            self.last_stable_offset = plog.last_stable_offset()
        return True

    # -- as the leader: ISR and high watermark --------------------------------------------------

    def follower_fetched_locked(
        self,
        replica_id: int,
        fetch_offset: int,
        started_ms: int,
        leader_end: int,
        *,
        sending: bool = False,
    ) -> bool:
        """A follower's fetch from ``fetch_offset`` was served: it holds everything below it.
        Moves the high watermark (True if it moved) and asks for an ISR expansion when the
        follower caught up. Call with ``log.lock`` held."""
        state = self.followers.fetch_completed(
            replica_id,
            self.replicas,
            fetch_offset,
            started_ms,
            _now_ms(),
            leader_end,
            sending=sending,
        )
        if state is None:
            return False
        moved = self.maybe_increment_high_watermark()
        if replica_id not in self.isr:
            self._maybe_expand(replica_id, state)
        return moved

    def _maybe_expand(self, replica_id: int, state: FollowerState) -> None:
        plog = self.log
        if plog is None:
            return
        epoch_start = plog.leader_epochs.epoch_entry(self.leader_epoch)
        with self._state_lock:
            decision = isr_rules.expand_isr(
                self.registration(),
                replica_id,
                state,
                plog.high_watermark,
                epoch_start.start_offset if epoch_start is not None else 0,
                shutting_down=self.shutting_down(),
                live=self.live_brokers() if self.live_brokers is not None else None,
            )
            proposal = self._propose_locked(decision)
        self._hand_over(proposal)

    def registration(self) -> PartitionRegistration:
        """This partition's state as the controller's decisions take it."""
        return PartitionRegistration(
            replicas=tuple(self.replicas),
            leader=self.leader_id,
            leader_epoch=self.leader_epoch,
            isr=tuple(self.isr),
            partition_epoch=self.partition_epoch,
        )

    def maybe_resign(self, now_ms: int) -> bool:
        """The periodic check: a leader slow to serve every in-sync follower for longer than
        replica.lag.time.max.ms asks the controller, once per leader epoch, to hand leadership
        to one of them (one slow follower or network is not the leader's fault). True if it
        asked."""
        followers = [r for r in self.isr if r != self.node_id]
        if not self.is_leader or self.resign_requested is None or not followers:
            return False
        resign, why = self.followers.too_slow_for_all(followers, now_ms)
        if not resign or self._resigned_in_epoch == self.leader_epoch:
            return False
        self._resigned_in_epoch = self.leader_epoch
        log.warning("%s: %s; asking the controller to move leadership", self.tp, why)
        self.resign_requested(self.tp, why)
        return True

    def maybe_shrink_isr(self, now_ms: int) -> Decision | None:
        """The periodic check (Kafka's isr-expiration task): proposes an ISR without the
        followers that fell behind; the proposal, or None when nothing is to change."""
        plog = self.log
        if plog is None:
            return None
        with self._state_lock:
            if not self.is_leader:
                return None
            decision = isr_rules.shrink_isr(
                self.registration(),
                self.followers.snapshot(),
                plog.log_end_offset,
                now_ms,
                self.followers.config,
            )
            proposal = self._propose_locked(decision)
        self._hand_over(proposal)
        return decision if proposal is not None else None

    def rederive_isr(self, now_ms: int) -> None:
        """After a failed write (the ISR manager's backoff): the proposal is derived again
        from the state now, a shrink first, else an expansion of a follower that caught up."""
        with self._state_lock:
            self._awaiting_rederive = False
        if self.maybe_shrink_isr(now_ms) is not None:
            return
        for replica, state in self.followers.snapshot().items():
            if replica not in self.isr and self._pending is None:
                self._maybe_expand(replica, state)

    def _propose_locked(self, decision: Decision) -> IsrProposal | None:
        """Makes a changed ISR the pending proposal when none is in flight and none was
        refused in this partition epoch; the proposal, for ``_hand_over`` once the lock is
        released (the hook may answer at once, and the answer takes the lock). Call with
        ``_state_lock`` held."""
        if not decision.changed or self._pending is not None:
            return None
        if self._refused_in_epoch == self.partition_epoch or self._awaiting_rederive:
            return None
        proposal = IsrProposal(self.tp, decision.state, decision.reason, self)
        self._pending = proposal
        self._maybe_joined |= frozenset(r for r in decision.state.isr if r not in self.isr)
        return proposal

    def _hand_over(self, proposal: IsrProposal | None) -> None:
        if proposal is not None and self._isr_change_requested is not None:
            self._isr_change_requested(proposal)

    def isr_write_done(self, proposal: IsrProposal, outcome: IsrOutcome) -> None:
        """How a proposal's write ended (the ISR manager's thread)."""
        with self._state_lock:
            if self._pending is not proposal:
                return  # superseded by a new state meanwhile
            if outcome is IsrOutcome.WRITTEN:
                return  # pending until the metadata brings the new state
            self._pending = None
            if outcome is IsrOutcome.STALE:
                # Dropped, not resent: the next proposal comes from the next state. Its
                # joiners still count in the high watermark until that state is here (an
                # earlier failed write of this epoch may have added them).
                self._refused_in_epoch = proposal.state.partition_epoch
            elif outcome in (IsrOutcome.REFUSED, IsrOutcome.FAILED):
                # The manager calls rederive_isr after its backoff; no proposal before that.
                self._awaiting_rederive = True

    @property
    def pending_isr(self) -> IsrProposal | None:
        """The ISR proposal in flight, if any."""
        return self._pending

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(the largest epoch <= ``leader_epoch``, its end offset), from the in-memory epoch
        cache: cheap enough for the event loop."""
        plog = self.log
        assert plog is not None
        return plog.leader_epochs.end_offset_for(leader_epoch, plog.log_end_offset)


def _now_ms() -> int:
    return int(time.time() * 1000)
