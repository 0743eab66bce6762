"""A leader's record of its followers: each one's fetch state (Kafka's Replica, KIP-501's
pending fetches), the responses carrying records to them that are still being sent, and how
slow the leader is to serve each of them (beyond KIP-501). The state changes themselves are
``isr_rules``'s pure functions; this module keeps their results, from any thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from logkeel.server.replica import isr_rules
from logkeel.server.replica.disk_time import ReadTime
from logkeel.server.replica.isr_rules import FollowerState, IsrConfig, SlowLeader

__all__ = ["FetchClock", "FollowerTracking"]


class FetchClock:
    """When a follower's fetch session last fetched (wall-clock ms, the fetch's arrival): the
    caught-up time of every partition it answered without reading (`FollowerTracking.unread`).
    Advanced only after the session found those partitions unchanged in that fetch."""

    __slots__ = ("fetched_ms",)

    def __init__(self) -> None:
        self.fetched_ms = 0


class FollowerTracking:
    """The followers of one partition as its leader sees them; every change under one lock.

    ``states`` is replaced on every change of term and may be read without the lock (a single
    attribute load), as the high watermark computation does.
    """

    def __init__(self, node_id: int, config: IsrConfig) -> None:
        self._node_id = node_id
        self.config = config
        self._lock = threading.Lock()
        self.states: dict[int, FollowerState] = {}
        # How slow this leader is to serve each follower, and the reads and responses for
        # them still under way (token -> follower, start ms, whether it is a send, and a
        # dir read's disk time: what it is judged by, not its start).
        self._slow: dict[int, SlowLeader] = {}
        self._unsent: dict[int, tuple[int, int, bool, ReadTime | None]] = {}
        # follower -> (fetch offset, start ms) of its read whose records are being sent: it
        # stays pending (KIP-501) until they are.
        self._reads_unsent: dict[int, tuple[int, int]] = {}
        # follower -> the log start offset its last fetch gave (KIP-392: a consumer is never
        # sent to a follower that has deleted its offset). Written by the fetch, one store.
        self.log_starts: dict[int, int] = {}
        # follower -> the clock of the fetch session that answers this partition without
        # reading it while nothing changes: its state is as of its last read, and each fetch
        # of that session since counts as one at the same log end (`isr_rules.fetched_unchanged`).
        self._unread: dict[int, FetchClock] = {}

    def new_term(self, replicas: Sequence[int], isr: Sequence[int], now_ms: int) -> None:
        """A new leader term: followers start unknown; ISR members count as caught up now, so
        the periodic check gives them replica.lag.time.max.ms to fetch (Kafka does the same)."""
        with self._lock:
            self.states = {
                r: FollowerState(last_caught_up_ms=now_ms if r in isr else 0)
                for r in replicas
                if r != self._node_id
            }
            self.log_starts = {}
            self._unread = {}

    def keep_only(self, replicas: Sequence[int]) -> None:
        with self._lock:
            self.states = {r: f for r, f in self.states.items() if r in replicas}
            self.log_starts = {r: o for r, o in self.log_starts.items() if r in replicas}
            self._unread = {r: c for r, c in self._unread.items() if r in replicas}

    def snapshot(self) -> dict[int, FollowerState]:
        """Per follower: log end offset, last caught-up time, pending fetches (KIP-501)."""
        with self._lock:
            states = dict(self.states)
            for r, clock in self._unread.items():
                state = states.get(r)
                if state is not None:
                    states[r] = isr_rules.fetched_unchanged(state, clock.fetched_ms)
            return states

    def unread(self, replica_id: int, clock: FetchClock) -> None:
        """The follower's fetch session answers this partition without reading it from now on,
        while nothing changes (its last read reached the log end); ``clock`` tells when it
        fetched last. Ends with the next read of it (or `read_again`)."""
        with self._lock:
            if replica_id in self.states:
                self._unread[replica_id] = clock

    def read_again(self, replica_id: int) -> None:
        """The session found this partition changed: its fetches up to now count, later ones
        only as they read it."""
        with self._lock:
            self._settle_unread(replica_id)

    def _settle_unread(self, replica_id: int) -> None:
        clock = self._unread.pop(replica_id, None)
        state = self.states.get(replica_id)
        if clock is not None and state is not None:
            self.states[replica_id] = isr_rules.fetched_unchanged(state, clock.fetched_ms)

    def fetch_started(
        self, replica_id: int, replicas: Sequence[int], fetch_offset: int, now_ms: int
    ) -> None:
        self._update(
            replica_id,
            replicas,
            lambda f: isr_rules.fetch_started(f, fetch_offset, now_ms, self.config),
        )

    def fetch_failed(
        self, replica_id: int, replicas: Sequence[int], fetch_offset: int, now_ms: int
    ) -> None:
        self._update(
            replica_id, replicas, lambda f: isr_rules.fetch_failed(f, fetch_offset, now_ms)
        )

    def fetch_completed(
        self,
        replica_id: int,
        replicas: Sequence[int],
        fetch_offset: int,
        started_ms: int,
        now_ms: int,
        leader_end: int,
        *,
        sending: bool,
    ) -> FollowerState | None:
        """A fetch from ``fetch_offset`` was served: the follower holds everything below it.
        With ``sending``, its records are still to be sent (``read_being_sent``)."""
        return self._update(
            replica_id,
            replicas,
            lambda f: isr_rules.fetch_completed(
                f, fetch_offset, started_ms, now_ms, leader_end, self.config, sending=sending
            ),
        )

    def read_being_sent(self, replica_id: int, fetch_offset: int, started_ms: int) -> None:
        with self._lock:
            self._reads_unsent[replica_id] = (fetch_offset, started_ms)

    def response_started(
        self,
        replica_id: int,
        token: int,
        now_ms: int,
        *,
        sending: bool = False,
        disk: ReadTime | None = None,
    ) -> None:
        """A late read of a dir for a follower (or, ``sending``, a response to it) began.
        ``disk``: the read's partition by partition timing (`disk_time`); with it, the read
        counts as slow only while its dir is busy with one partition for long, and its length
        is the longest partition's, not the time since ``now_ms``."""
        with self._lock:
            self._unsent[token] = (replica_id, now_ms, sending, disk)

    def response_sent(
        self, token: int, now_ms: int, *, leader: bool, leader_slow: bool = False
    ) -> None:
        """A response carrying records to a follower is sent (or dropped); as ``leader``, it
        also counts towards how slow this leader is to serve that follower. ``leader_slow``:
        a read the leader found slow itself (`isr.fetch_sent`)."""
        with self._lock:
            entry = self._unsent.pop(token, None)
            if entry is not None:
                read = self._reads_unsent.pop(entry[0], None)
                if read is not None:
                    offset, read_started = read
                    state = self.states.get(entry[0])
                    if state is not None:
                        self.states[entry[0]] = isr_rules.fetch_sent(
                            state, offset, read_started, now_ms, self.config,
                            leader_slow=leader_slow,
                        )  # fmt: skip
            if entry is not None and leader:
                replica, started, _sending, disk = entry
                served = disk.longest_ms if disk is not None else now_ms - started
                self._slow[replica] = isr_rules.follower_fetch_served(
                    self._slow.get(replica, SlowLeader()), served, now_ms, self.config,
                    read_records=disk.read_records if disk is not None else True,
                )  # fmt: skip

    def read_served(
        self, replica_id: int, served_ms: int, now_ms: int, *, read_records: bool = True
    ) -> None:
        """A read for ``replica_id`` answered in time, its longest partition read
        ``served_ms`` on the disk (``read_records``: whether any returned records): counts
        towards how slow this leader is to serve it."""
        with self._lock:
            self._slow[replica_id] = isr_rules.follower_fetch_served(
                self._slow.get(replica_id, SlowLeader()), served_ms, now_ms, self.config,
                read_records=read_records,
            )  # fmt: skip

    def slow_suspected(self) -> bool:
        """Whether a read or send for a follower is under way or a slow spell is going on: the
        partitions the frequent resignation check looks at (a lock-free look; the check
        itself takes the lock)."""
        return bool(self._unsent) or any(s.slow_since_ms is not None for s in self._slow.values())

    def too_slow_for_all(self, followers: Sequence[int], now_ms: int) -> tuple[bool, str]:
        """Whether this leader has been too slow to serve every one of ``followers`` (one slow
        follower or network is not the leader's fault), and why, follower by follower."""
        verdicts = []
        with self._lock:
            for r in followers:
                reads = [
                    since
                    for f, t, sending, disk in self._unsent.values()
                    if f == r
                    and not sending
                    and (since := t if disk is None else disk.busy_since_ms()) is not None
                ]
                sends = [t for f, t, sending, _disk in self._unsent.values() if f == r and sending]
                self._slow[r], resign, why = isr_rules.slow_leader_check(
                    self._slow.get(r, SlowLeader()), min(reads, default=None), now_ms,
                    self.config, min(sends, default=None),
                )  # fmt: skip
                verdicts.append((resign, f"follower {r}: {why}"))
        return all(v for v, _ in verdicts), "; ".join(w for _, w in verdicts)

    def _update(
        self,
        replica_id: int,
        replicas: Sequence[int],
        change: Callable[[FollowerState], FollowerState],
    ) -> FollowerState | None:
        """Replaces one follower's state with ``change(state)``; None if it is no follower."""
        with self._lock:
            if replica_id == self._node_id or replica_id not in replicas:
                return None
            if self._unread:
                self._settle_unread(replica_id)
            state = change(self.states.get(replica_id, isr_rules.UNKNOWN_FOLLOWER))
            self.states[replica_id] = state
            return state
