"""The partitions one follower fetcher holds and what its next Fetch asks of each, kept up to date
by what changed rather than recomputed over every followed partition each round (issue 19).

An acks=all ack waits for two follower fetch rounds, and at 10,000 partitions RF 3 each of a
broker's fetchers follows ~3,333: reading every position and comparing every partition with what
the leader's fetch session holds made each round cost O(followed). Here each partition's fetch
parameters are kept between rounds and recomputed only for the partitions marked *dirty*, so a
round costs O(what changed). Whatever may move a partition's position, or whether it is fetched
at all, marks it:

- added or removed (a new leader or leader epoch hands a partition over afresh);
- handled in a round: truncated, or named in a fetch answer (records appended, a high watermark
  or log start taken, an error backing it off, a diverging epoch, out of range);
- its log moved without this fetcher: truncated (a validation cut), its log start moved
  (retention, DeleteRecords reaching it through the leader) -- the log's ``position_listener``,
  registered on each recompute, so a log replaced is listened to from its first recompute;
- its log replaced (moved to another log dir), its metadata or topic configs changed (the ISR
  and ``follower.replication.throttled.replicas`` decide whether it is throttled): the fetcher
  manager touches it;
- its back-off or throttle delay ended (a heap of due times).

When in doubt a partition is marked: a recompute that finds nothing new costs one position read.
No IO; the event loop's only (the fetcher brings the log listeners' calls onto the loop).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from logkeel.cluster.metadata import topic_uuid
from logkeel.server.fetch_sessions import FetchParams
from logkeel.server.replica.fetcher_session import SessionKey
from logkeel.server.replica.partition import Partition
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["FetchState", "FollowedPartitions"]


@dataclass(slots=True)
class FetchState:
    """One partition in a fetcher, for one leader epoch."""

    partition: Partition
    leader_epoch: int
    key: SessionKey
    truncating: bool = True
    delayed_until: float = 0.0
    # How many Fetches were planned when this state was made: an answer to one planned
    # before is not about it.
    since: int = 0


class FollowedPartitions:
    """``wanted``: the fetch parameters of every partition a Fetch now asks for (neither
    delayed nor truncating); ``truncating``: the partitions due to truncate; ``throttled``:
    those that ``is_throttled`` said were, at their last recompute. All as of the last
    ``refresh``."""

    def __init__(
        self,
        max_bytes: int,
        backoff_s: float,
        is_throttled: Callable[[TopicPartition, Partition], bool],
        listener: Callable[[TopicPartition], Callable[[], None]],
    ) -> None:
        """``listener(tp)``: what ``tp``'s log calls when its position moves (from any
        thread); it must bring a ``touch(tp)`` onto the event loop."""
        self._max_bytes = max_bytes
        self._backoff_s = backoff_s
        self._is_throttled = is_throttled
        self._listener = listener
        self._listeners: dict[TopicPartition, Callable[[], None]] = {}
        self.states: dict[TopicPartition, FetchState] = {}
        self.wanted: dict[SessionKey, FetchParams] = {}
        self.truncating: set[TopicPartition] = set()
        self.throttled: set[TopicPartition] = set()
        self.planned = 0  # Fetches planned so far
        self._dirty: set[TopicPartition] = set()
        self._in_wanted: dict[TopicPartition, SessionKey] = {}
        self._by_key: dict[SessionKey, TopicPartition] = {}
        self._due: list[tuple[float, int, TopicPartition]] = []
        self._pushed = 0
        # Keys whose entry in ``wanted`` changed since the last ``take_changed`` (kept across
        # rounds that plan no Fetch, and across a refresh that failed half way).
        self._unplanned: set[SessionKey] = set()

    def add(self, partition: Partition, leader_epoch: int) -> FetchState:
        """Starts (or restarts, truncating first) following ``partition`` in ``leader_epoch``."""
        tp = partition.tp
        key = (topic_uuid(partition.topic_id), tp.partition)
        self.states[tp] = s = FetchState(partition, leader_epoch, key, since=self.planned)
        self._dirty.add(tp)
        return s

    def remove(self, tp: TopicPartition) -> bool:
        s = self.states.pop(tp, None)
        if s is None:
            return False
        self._dirty.add(tp)
        plog = s.partition.log
        mine = self._listeners.pop(tp, None)
        if plog is not None and mine is not None and plog.position_listener is mine:
            plog.position_listener = None
        return True

    def touch(self, tp: TopicPartition) -> None:
        """``tp``'s position, or whether it is fetched, may have changed."""
        self._dirty.add(tp)

    def back_off(self, states: Iterable[FetchState], until: float | None, now: float) -> None:
        """Leaves ``states`` out of the Fetches until ``until`` (None: the back-off from now)."""
        if until is None:
            until = now + self._backoff_s
        for s in states:
            s.delayed_until = until
            tp = s.partition.tp
            self._pushed += 1
            heapq.heappush(self._due, (until, self._pushed, tp))
            self._dirty.add(tp)

    def tp_of(self, key: SessionKey) -> TopicPartition | None:
        """The partition a Fetch asks for under ``key``."""
        return self._by_key.get(key)

    def current(self, tp: TopicPartition, fetch: int) -> FetchState | None:
        """``tp``'s state if an answer to Fetch number ``fetch`` (as ``planned`` counted it)
        concerns it: neither removed nor handed over afresh since."""
        s = self.states.get(tp)
        return s if s is not None and s.since < fetch else None

    def ready(self) -> list[FetchState]:
        """The states a round now works on: truncating or fetched."""
        tps = [*self.truncating, *self._in_wanted]
        return [self.states[tp] for tp in tps if tp in self.states]

    def next_due(self, now: float) -> float | None:
        """Seconds until a delay ends (None: none pending)."""
        return max(0.0, self._due[0][0] - now) if self._due else None

    def refresh(self, now: float) -> set[SessionKey]:
        """Recomputes the dirty partitions and those whose delay ended; the session keys whose
        entry in ``wanted`` this may have changed (added, updated or dropped), which are also
        kept for ``take_changed``."""
        due = self._due
        while due and due[0][0] <= now:
            self._dirty.add(heapq.heappop(due)[2])
        changed: set[SessionKey] = set()
        dirty, self._dirty = self._dirty, set()
        try:
            while dirty:
                tp = next(iter(dirty))
                self._recompute(tp, now, changed)
                dirty.discard(tp)
        finally:
            self._dirty |= dirty  # an error half way: the rest next time
            self._unplanned |= changed
        return changed

    def take_changed(self) -> set[SessionKey]:
        """The keys whose entry in ``wanted`` changed since the last call: what the next
        Fetch's plan must look at (``FetcherSession.plan``)."""
        changed, self._unplanned = self._unplanned, set()
        return changed

    def _recompute(self, tp: TopicPartition, now: float, changed: set[SessionKey]) -> None:
        old = self._in_wanted.pop(tp, None)
        if old is not None:
            del self.wanted[old]
            del self._by_key[old]
            changed.add(old)
        self.truncating.discard(tp)
        self.throttled.discard(tp)
        s = self.states.get(tp)
        if s is None:
            return
        p = s.partition
        plog = p.log
        if plog is not None:
            # Listened to before the position is read: a move after the read is told.
            listener = self._listeners.get(tp)
            if listener is None:
                listener = self._listeners[tp] = self._listener(tp)
            plog.position_listener = listener
        if self._is_throttled(tp, p):
            self.throttled.add(tp)
        if s.delayed_until > now:
            return
        if s.truncating:
            self.truncating.add(tp)
            return
        position = p.fetch_position()
        if position is None:
            self.back_off([s], None, now)
            self._dirty.discard(tp)  # its due time brings it back
            return
        log_end, latest_epoch, log_start = position
        self.wanted[s.key] = FetchParams(
            log_end,
            self._max_bytes,
            current_leader_epoch=s.leader_epoch,
            last_fetched_epoch=latest_epoch,
            log_start_offset=log_start,
        )
        self._in_wanted[tp] = s.key
        self._by_key[s.key] = tp
        changed.add(s.key)
