"""One partition replica on this broker: its leadership state, high watermark and log access.

A ``Partition`` is built by the replica manager from cluster metadata over a log from the log
manager. It answers for itself whether it can serve a request (offline, not the leader, a
fenced epoch), appends as leader, reads for consumers and followers, and moves the high
watermark; the replica manager routes requests to it and handles failures of its log dir.
Methods that touch the log run on the IO threads and take ``log.lock``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from logkeel.cluster import isr as isr_rules
from logkeel.cluster.isr import FollowerState, IsrConfig, SlowLeader
from logkeel.cluster.metadata import PartitionState
from logkeel.cluster.partition_state import Decision, PartitionRegistration
from logkeel.config import TopicConfig
from logkeel.records.batch import NO_TIMESTAMP, InvalidBatchError
from logkeel.records.walk import iter_headers
from logkeel.server.replica.append_turns import AppendTurns
from logkeel.server.replica.context import IsrChangeRequested
from logkeel.server.replica.results import (
    DEBUGGING_CONSUMER_ID,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    READ_COMMITTED,
    FetchPartitionRequest,
    FetchPartitionResult,
    ListOffsetResult,
    RegionRecords,
)
from logkeel.storage import errors as storage_errors
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.log_results import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
)
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["AppendRejected", "Partition", "TopicSettings"]

log = logging.getLogger(__name__)


class AppendRejected(Exception):
    """An append refused before it reached the log; ``code`` is the partition's answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """Topic configs read on every append (Kafka's names in the comments)."""

    min_insync_replicas: int = 1  # min.insync.replicas
    timestamp_before_max_ms: int | None = None  # message.timestamp.before.max.ms
    timestamp_after_max_ms: int | None = None  # message.timestamp.after.max.ms
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime

    @classmethod
    def from_topic_config(cls, config: TopicConfig) -> TopicSettings:
        return cls(
            min_insync_replicas=_int_config(config, "min.insync.replicas") or 1,
            timestamp_before_max_ms=_int_config(config, "message.timestamp.before.max.ms"),
            timestamp_after_max_ms=_int_config(config, "message.timestamp.after.max.ms"),
            log_append_time=_str_config(config, "message.timestamp.type") == "LogAppendTime",
        )


class Partition:
    """One partition replica on this broker: leadership, ISR, high watermark, and its log.

    Attributes are read on the event loop and written under ``log.lock`` (appends, high
    watermark) or by metadata changes; each write is a single attribute store.
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
        self.isr: list[int] = []
        self.log: PartitionLog | None = None
        self.offline_reason: str | None = None
        # As leader: each follower's fetch state (Kafka's Replica), replaced on every change.
        self.followers: dict[int, FollowerState] = {}
        self.isr_config = isr_config or IsrConfig()
        self._isr_change_requested = isr_change_requested
        # The last ISR asked for in this partition epoch, so a proposal is made once.
        self._proposed_isr: tuple[int, ...] | None = None
        self._followers_lock = threading.Lock()
        # Beyond KIP-501: how slow this leader is to serve each follower, the responses to
        # them still being sent (token -> follower, start ms), and the epoch it resigned in.
        self._slow: dict[int, SlowLeader] = {}
        self._unsent: dict[int, tuple[int, int]] = {}
        # follower -> (fetch offset, start ms) of its read whose records are being sent: it
        # stays pending (KIP-501) until they are.
        self._reads_unsent: dict[int, tuple[int, int]] = {}
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
        moved = state.leader_epoch != self.leader_epoch or state.leader != self.leader_id
        if moved or state.partition_epoch != self.partition_epoch:
            self._proposed_isr = None
        if moved and state.leader == self.node_id:
            # A new term: followers start unknown; ISR members count as caught up now, so the
            # periodic check gives them replica.lag.time.max.ms to fetch (Kafka does the same).
            now = _now_ms()
            with self._followers_lock:
                self.followers = {
                    r: FollowerState(last_caught_up_ms=now if r in state.isr else 0)
                    for r in state.replicas
                    if r != self.node_id
                }
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        with self._followers_lock:
            self.followers = {r: f for r, f in self.followers.items() if r in self.replicas}
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
        """HW = the smallest log end offset over the maximal ISR (the ISR plus a follower whose
        joining is proposed but not yet written); only ever moves forward.

        The joining follower counts at once, as in Kafka: the controller may elect it as soon as
        the change lands, so nothing it lacks may be acknowledged meanwhile (a soak saw records
        acked past a joiner's log end, then lost when it was elected).

        Call with ``log.lock`` held (producer state learns the new HW too).
        """
        plog = self.log
        if plog is None or not self.is_leader:
            return False
        joining = tuple(r for r in self._proposed_isr or () if r not in self.isr)
        new_hw = isr_rules.high_watermark(
            plog.high_watermark, self.node_id, plog.log_end_offset, (*self.isr, *joining),
            self.followers,
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
                latest = plog.leader_epochs.latest_epoch
                if self.leader_epoch >= 0 and (latest is None or latest < self.leader_epoch):
                    plog.leader_epochs.assign(self.leader_epoch, plog.log_end_offset)
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
        if origin_is_client:
            self._validate_client_batches(records)
        with plog.lock:
            if self.log is not plog or not self.is_leader:
                raise AppendRejected(ErrorCode.not_leader_or_follower, f"{self.tp} changed state")
            info = plog.append_as_leader(
                records, max(self.leader_epoch, 0), origin_is_client=origin_is_client
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
    ) -> AppendInfo | None:
        """Appends the leader's batches with their offsets and epochs unchanged, then takes the
        leader's high watermark (never above our own log end) and log start offset (never above
        our high watermark). None: the partition moved on (no longer a follower in
        ``leader_epoch``) and nothing was written."""
        plog = self.log
        if plog is None:
            return None
        with plog.lock:
            if self.log is not plog or self.is_leader or self.leader_epoch != leader_epoch:
                return None
            info = plog.append_as_follower(records) if records else None
            self._follower_high_watermark_locked(leader_high_watermark)
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

    def _validate_client_batches(self, records: bytes | bytearray | memoryview) -> None:
        """What Kafka's LogValidator checks beyond structure and CRC (the log checks those):
        no control batches from clients, and CreateTime timestamps within the topic's bounds."""
        settings = self.settings
        before = settings.timestamp_before_max_ms
        after = settings.timestamp_after_max_ms
        now = int(time.time() * 1000)
        try:
            for _, header in iter_headers(records):
                if header.is_control:
                    raise AppendRejected(
                        ErrorCode.invalid_record, "clients may not write control batches"
                    )
                if settings.log_append_time or header.records_count == 0:
                    continue
                for ts in (header.base_timestamp, header.max_timestamp):
                    if ts == NO_TIMESTAMP:
                        continue
                    if (before is not None and now - ts > before) or (
                        after is not None and ts - now > after
                    ):
                        raise AppendRejected(
                            ErrorCode.invalid_timestamp,
                            f"timestamp {ts} of a batch for {self.tp} is out of the range allowed "
                            "by message.timestamp.before.max.ms/after.max.ms",
                        )
        except InvalidBatchError:
            return  # the log's own parse reports it as CORRUPT_MESSAGE

    # -- reads (IO threads) ---------------------------------------------------------------------

    def read(
        self,
        r: FetchPartitionRequest,
        replica_id: int,
        limit: int,
        isolation_level: int,
        min_one_message: bool,
    ) -> tuple[FetchPartitionResult, bool]:
        """One partition of a fetch: (the result, whether a follower's fetch moved the high
        watermark). Storage errors other than an offset out of range propagate."""
        tp = self.tp
        follower = replica_id >= 0
        error = self.state_error(leader_only=replica_id != DEBUGGING_CONSUMER_ID)
        error = error or self.epoch_error(r.current_leader_epoch)
        if error is None and follower and replica_id not in self.replicas:
            # Only assigned replicas read past the high watermark.
            error = ErrorCode.not_leader_or_follower
        if error is not None:
            result = FetchPartitionResult(
                tp, error, leader_id=self.leader_id, leader_epoch=self.leader_epoch
            )
            return result, False
        plog = self.log
        assert plog is not None
        hw_moved = False
        now = _now_ms()
        if follower:
            self._update_follower(
                replica_id,
                lambda f: isr_rules.fetch_started(f, r.fetch_offset, now, self.isr_config),
            )
        served = False
        try:
            with plog.lock:
                if self.log is not plog:
                    return FetchPartitionResult(tp, ErrorCode.kafka_storage_error), False
                lso = plog.last_stable_offset()
                self.last_stable_offset = lso
                result = FetchPartitionResult(
                    tp,
                    high_watermark=plog.high_watermark,
                    last_stable_offset=lso,
                    log_start_offset=plog.log_start_offset,
                )
                if r.last_fetched_epoch >= 0:
                    epoch, end = plog.leader_epochs.end_offset_for(
                        r.last_fetched_epoch, plog.log_end_offset
                    )
                    if end < r.fetch_offset or epoch < r.last_fetched_epoch:
                        result.diverging_epoch = (epoch, end)
                        return result, False
                if follower:
                    max_offset = None
                elif isolation_level == READ_COMMITTED:
                    max_offset = lso
                else:
                    max_offset = plog.high_watermark
                leader_end = plog.log_end_offset
                info = plog.read(
                    r.fetch_offset,
                    limit,
                    max_offset=max_offset,
                    min_one_message=min_one_message,
                    include_aborted=isolation_level == READ_COMMITTED and not follower,
                )
                if info.region is not None and info.region.size > 0:
                    result.records = RegionRecords(
                        os.dup(info.region.fd), info.region.position, info.region.size
                    )
                if isolation_level == READ_COMMITTED and not follower:
                    result.aborted_transactions = info.aborted_transactions
                if follower:
                    served = True
                    sending = result.records is not None
                    if sending:
                        with self._followers_lock:
                            self._reads_unsent[replica_id] = (r.fetch_offset, now)
                    hw_moved = self._follower_fetched_locked(
                        replica_id, r.fetch_offset, now, leader_end, sending=sending
                    )
                    # The follower learns the high watermark its own fetch just moved.
                    result.high_watermark = plog.high_watermark
                    result.last_stable_offset = self.last_stable_offset
                return result, hw_moved
        except storage_errors.OffsetOutOfRangeError:
            result = FetchPartitionResult(
                tp,
                ErrorCode.offset_out_of_range,
                high_watermark=plog.high_watermark,
                last_stable_offset=self.last_stable_offset,
                log_start_offset=plog.log_start_offset,
            )
            return result, hw_moved
        finally:
            if follower and not served:
                self._update_follower(
                    replica_id, lambda f: isr_rules.fetch_failed(f, r.fetch_offset, now)
                )

    # -- the leader's view of its followers -------------------------------------------------------

    def _update_follower(
        self, replica_id: int, change: Callable[[FollowerState], FollowerState]
    ) -> FollowerState | None:
        """Replaces one follower's state with ``change(state)`` (any thread)."""
        with self._followers_lock:
            if replica_id == self.node_id or replica_id not in self.replicas:
                return None
            state = change(self.followers.get(replica_id, FollowerState()))
            self.followers[replica_id] = state
            return state

    def _follower_fetched_locked(
        self, replica_id: int, fetch_offset: int, started_ms: int, leader_end: int,
        *, sending: bool = False,
    ) -> bool:
        """A follower's fetch from ``fetch_offset`` was served: it holds everything below it.
        Moves the high watermark (True if it moved) and asks for an ISR expansion when the
        follower caught up. Call with ``log.lock`` held."""
        now = _now_ms()
        state = self._update_follower(
            replica_id,
            lambda f: isr_rules.fetch_completed(
                f, fetch_offset, started_ms, now, leader_end, self.isr_config, sending=sending
            ),
        )
        if state is None:
            return False
        moved = self.maybe_increment_high_watermark()
        if replica_id not in self.isr and self.log is not None:
            epoch_start = self.log.leader_epochs.epoch_entry(self.leader_epoch)
            decision = isr_rules.expand_isr(
                self.registration(),
                replica_id,
                state,
                self.log.high_watermark,
                epoch_start.start_offset if epoch_start is not None else 0,
            )
            self._propose(decision)
        return moved

    def registration(self) -> PartitionRegistration:
        """This partition's state as the controller's decisions take it."""
        return PartitionRegistration(
            replicas=tuple(self.replicas),
            leader=self.leader_id,
            leader_epoch=self.leader_epoch,
            isr=tuple(self.isr),
            partition_epoch=self.partition_epoch,
        )

    def follower_states(self) -> dict[int, FollowerState]:
        """Per follower: log end offset, last caught-up time, pending fetches (KIP-501)."""
        with self._followers_lock:
            return dict(self.followers)

    # -- beyond KIP-501: a leader too slow for its followers resigns -----------------------------

    def follower_response_started(self, replica_id: int, token: int, now_ms: int) -> None:
        with self._followers_lock:
            self._unsent[token] = (replica_id, now_ms)

    def follower_response_sent(self, token: int, now_ms: int) -> None:
        """A response carrying this partition's records to a follower is sent (or dropped)."""
        with self._followers_lock:
            entry = self._unsent.pop(token, None)
            if entry is not None:
                read = self._reads_unsent.pop(entry[0], None)
                if read is not None:
                    offset, read_started = read
                    state = self.followers.get(entry[0])
                    if state is not None:
                        self.followers[entry[0]] = isr_rules.fetch_sent(
                            state, offset, read_started, now_ms, self.isr_config
                        )
            if entry is not None and self.is_leader:
                replica, started = entry
                self._slow[replica] = isr_rules.follower_fetch_served(
                    self._slow.get(replica, SlowLeader()), now_ms - started, now_ms,
                    self.isr_config,
                )

    def maybe_resign(self, now_ms: int) -> bool:
        """The periodic check: a leader slow to serve every in-sync follower for longer than
        replica.lag.time.max.ms asks the controller, once per leader epoch, to hand leadership
        to one of them (one slow follower or network is not the leader's fault). True if it
        asked."""
        followers = [r for r in self.isr if r != self.node_id]
        if not self.is_leader or self.resign_requested is None or not followers:
            return False
        verdicts = []
        with self._followers_lock:
            for r in followers:
                oldest = min((t for f, t in self._unsent.values() if f == r), default=None)
                self._slow[r], resign, why = isr_rules.slow_leader_check(
                    self._slow.get(r, SlowLeader()), oldest, now_ms, self.isr_config
                )
                verdicts.append((resign, f"follower {r}: {why}"))
        resign = all(v for v, _ in verdicts)
        why = "; ".join(w for _, w in verdicts)
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
        if plog is None or not self.is_leader:
            return None
        decision = isr_rules.shrink_isr(
            self.registration(),
            self.follower_states(),
            plog.log_end_offset,
            now_ms,
            self.isr_config,
        )
        return decision if self._propose(decision) else None

    def _propose(self, decision: Decision) -> bool:
        """Hands a changed ISR to the hook once per partition epoch; True if it was new."""
        isr = decision.state.isr
        if not decision.changed or isr == self._proposed_isr:
            return False
        self._proposed_isr = isr
        if self._isr_change_requested is not None:
            self._isr_change_requested(self.tp, decision.state, decision.reason)
        return True

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(the largest epoch <= ``leader_epoch``, its end offset), from the in-memory epoch
        cache: cheap enough for the event loop."""
        plog = self.log
        assert plog is not None
        return plog.leader_epochs.end_offset_for(leader_epoch, plog.log_end_offset)

    def offset_for_timestamp(self, timestamp: int, isolation_level: int | None) -> ListOffsetResult:
        """ListOffsets on the IO threads; ``isolation_level`` None: a follower's request."""
        plog = self.log
        if plog is None:
            return ListOffsetResult(ErrorCode.kafka_storage_error)
        with plog.lock:
            if isolation_level is None:
                last_fetchable = plog.log_end_offset
            elif isolation_level == READ_COMMITTED:
                last_fetchable = plog.last_stable_offset()
            else:
                last_fetchable = plog.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return ListOffsetResult(
                ErrorCode.none, NO_TIMESTAMP, last_fetchable, max(self.leader_epoch, -1)
            )
        if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            # No tiered storage: Kafka answers "no offset" for these.
            return ListOffsetResult(ErrorCode.none, NO_TIMESTAMP, -1, -1)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            timestamp = EARLIEST_TIMESTAMP
        if timestamp < MAX_TIMESTAMP:
            return ListOffsetResult(ErrorCode.invalid_request)
        found = plog.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return ListOffsetResult(ErrorCode.none)
        if (
            isolation_level is not None
            and timestamp != EARLIEST_TIMESTAMP
            and found.offset >= last_fetchable
        ):
            return ListOffsetResult(ErrorCode.none)
        return ListOffsetResult(ErrorCode.none, found.timestamp, found.offset, found.leader_epoch)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _int_config(config: TopicConfig, name: str) -> int | None:
    try:
        value = config.get(name)
    except KeyError:
        return None
    return None if value is None else int(value)


def _str_config(config: TopicConfig, name: str) -> str | None:
    try:
        value = config.get(name)
    except KeyError:
        return None
    return None if value is None else str(value)
