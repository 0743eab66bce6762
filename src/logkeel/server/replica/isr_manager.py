"""The one way a leader's ISR changes reach the cluster (Kafka's AlterPartitionManager role).

Every partition this broker leads hands its proposals here; one thread of the manager's own
writes them, so no proposal ever meets a stopped executor. The thread takes every queued
proposal at once (a batch; a newer proposal for the same partition supersedes an older one that
was not written yet), writes the batch in one go (pipelined: a broker back in hundreds of ISRs
waits for one round trip, not one per partition) and tells each proposal's owner how it ended:

- ``WRITTEN``: the partition keeps it pending until the metadata brings the new state;
- ``STALE``: the state moved on (another partition epoch): dropped, never resent; the owner
  makes no proposal in that partition epoch and derives the next from the state it has next;
- ``REFUSED`` (the rules refused it: a replica shutting down, not live yet, not assigned) and
  ``FAILED`` (ZooKeeper could not be written; the outcome may be unknown): the owner clears its
  pending proposal and, after a backoff that doubles per failure of the partition in a row
  (reset by a write), derives a proposal again from its state then (``rederive_isr``);
- ``SUPERSEDED`` / ``STOPPED``: a newer proposal replaced it, or the manager stopped.

Owners are told on the manager's thread, and must not block there.
"""

from __future__ import annotations

import enum
import heapq
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from logkeel.cluster.partition_state import PartitionRegistration
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["IsrManager", "IsrOutcome", "IsrOwner", "IsrProposal", "IsrRefused", "IsrWrite"]

log = logging.getLogger(__name__)


class IsrOutcome(enum.Enum):
    WRITTEN = "written"
    STALE = "stale"
    REFUSED = "refused"
    FAILED = "failed"
    SUPERSEDED = "superseded"
    STOPPED = "stopped"


class IsrOwner(Protocol):
    """The partition a proposal came from."""

    def isr_write_done(self, proposal: IsrProposal, outcome: IsrOutcome) -> None: ...

    def rederive_isr(self, now_ms: int) -> None: ...


@dataclass(frozen=True, slots=True, eq=False)
class IsrProposal:
    """An ISR a leader asks for, made against ``state.partition_epoch`` (the write makes the
    next one)."""

    tp: TopicPartition
    state: PartitionRegistration
    reason: str
    owner: IsrOwner | None = field(default=None, repr=False)


class IsrRefused(Exception):
    """The write was refused for good: ``stale`` when made against another partition epoch."""

    def __init__(self, why: str, *, stale: bool) -> None:
        super().__init__(why)
        self.stale = stale


# Writes a batch of proposals; for each, in order, None when written, IsrRefused when it must
# be dropped, any other exception when it failed.
IsrWrite = Callable[[list[IsrProposal]], list[BaseException | None]]

_FIRST_BACKOFF_MS = 100
_LOGGED_WRITES = 20
_MAX_BACKOFF_MS = 5_000


class IsrManager:
    def __init__(
        self,
        write: IsrWrite,
        *,
        first_backoff_ms: int = _FIRST_BACKOFF_MS,
        max_backoff_ms: int = _MAX_BACKOFF_MS,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._write = write
        self._first_backoff_ms = first_backoff_ms
        self._max_backoff_ms = max_backoff_ms
        self._clock_ms = clock_ms
        self._cond = threading.Condition()
        self._queued: dict[TopicPartition, IsrProposal] = {}
        # Partitions to derive a proposal again after a failed write: (due ms, seq, owner).
        self._retries: list[tuple[int, int, TopicPartition, IsrOwner]] = []
        self._seq = 0
        self._backoff_ms: dict[TopicPartition, int] = {}
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> IsrManager:
        self._thread = threading.Thread(target=self._run, name="isr-manager", daemon=True)
        self._thread.start()
        return self

    def submit(self, proposal: IsrProposal) -> None:
        """Queues ``proposal`` (any thread, never blocks on ZooKeeper). After ``stop`` it is
        answered STOPPED at once."""
        superseded: IsrProposal | None
        with self._cond:
            if self._stopped:
                superseded, outcome = proposal, IsrOutcome.STOPPED
            else:
                superseded = self._queued.pop(proposal.tp, None)
                outcome = IsrOutcome.SUPERSEDED
                self._queued[proposal.tp] = proposal
                self._cond.notify()
        if superseded is not None:
            _tell(superseded, outcome)

    def stop(self) -> None:
        """Writes nothing more: what is queued is answered STOPPED; a write under way ends
        first. Idempotent."""
        with self._cond:
            self._stopped = True
            dropped = list(self._queued.values())
            self._queued.clear()
            self._retries.clear()
            self._cond.notify_all()
        for p in dropped:
            _tell(p, IsrOutcome.STOPPED)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def run_once(self, timeout_s: float | None = 0.0) -> int:
        """Writes what is queued and runs the retries that are due, waiting up to
        ``timeout_s`` for work; how many proposals it handled (the thread's loop; tests call
        it directly)."""
        with self._cond:
            if not self._queued and not self._due() and not self._stopped:
                self._cond.wait(timeout_s if timeout_s is not None else self._until_next_s())
            if self._stopped:
                return 0
            batch = list(self._queued.values())
            self._queued.clear()
            due = self._pop_due()
        if batch:
            try:
                outcomes = self._write(batch)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble must not stop the manager
                outcomes = [exc] * len(batch)
            logged = len(batch) <= _LOGGED_WRITES
            for p, outcome in zip(batch, outcomes, strict=True):
                self._settle(p, outcome, logged=logged)
            if not logged:
                written = sum(1 for o in outcomes if o is None)
                log.info("ISR changes: %d of %d written", written, len(batch))
        now = self._clock_ms()
        for tp, owner in due:
            try:
                owner.rederive_isr(now)
            except Exception:
                log.exception("%s: deriving the ISR again failed", tp)
        return len(batch)

    def _run(self) -> None:
        while not self._stopped:
            self.run_once(None)

    def _settle(self, p: IsrProposal, exc: BaseException | None, *, logged: bool) -> None:
        if isinstance(exc, IsrRefused):
            if exc.stale:
                # Dropped: the partition decides again from the state the metadata brings.
                log.info("%s: ISR change %s dropped: %s", p.tp, list(p.state.isr), exc)
                self._backoff_ms.pop(p.tp, None)
                _tell(p, IsrOutcome.STALE)
                return
            # Dropped too, but what refused it may pass (a broker not seen live yet): the
            # partition derives a proposal again after the backoff.
            backoff = self._next_backoff(p.tp)
            log.info(
                "%s: ISR change %s refused: %s; deriving it again in %d ms",
                p.tp, list(p.state.isr), exc, backoff,
            )  # fmt: skip
            _tell(p, IsrOutcome.REFUSED)
            self._retry_later(p, backoff)
            return
        if exc is not None:
            backoff = self._next_backoff(p.tp)
            log.warning(
                "%s: writing the ISR change %s failed (%s); deriving it again in %d ms",
                p.tp, list(p.state.isr), exc, backoff,
            )  # fmt: skip
            _tell(p, IsrOutcome.FAILED)
            self._retry_later(p, backoff)
            return
        self._backoff_ms.pop(p.tp, None)
        # A line per partition costs seconds when a broker rejoins thousands of ISRs: a large
        # batch logs its count instead, each partition at DEBUG.
        log.log(
            logging.INFO if logged else logging.DEBUG,
            "%s: ISR -> %s (%s)", p.tp, list(p.state.isr), p.reason,
        )  # fmt: skip
        _tell(p, IsrOutcome.WRITTEN)

    def _next_backoff(self, tp: TopicPartition) -> int:
        """Doubles per failure of ``tp`` in a row, from first_backoff_ms up to max_backoff_ms."""
        backoff = self._backoff_ms.get(tp, self._first_backoff_ms // 2) * 2
        backoff = min(self._max_backoff_ms, max(self._first_backoff_ms, backoff))
        self._backoff_ms[tp] = backoff
        return backoff

    def _retry_later(self, p: IsrProposal, backoff_ms: int) -> None:
        if p.owner is None:
            return
        with self._cond:
            if not self._stopped:
                self._seq += 1
                due = self._clock_ms() + backoff_ms
                heapq.heappush(self._retries, (due, self._seq, p.tp, p.owner))

    def _due(self) -> bool:
        return bool(self._retries) and self._retries[0][0] <= self._clock_ms()

    def _pop_due(self) -> list[tuple[TopicPartition, IsrOwner]]:
        now = self._clock_ms()
        out = []
        while self._retries and self._retries[0][0] <= now:
            _, _, tp, owner = heapq.heappop(self._retries)
            out.append((tp, owner))
        return out

    def _until_next_s(self) -> float | None:
        if not self._retries:
            return None
        return max(0.0, (self._retries[0][0] - self._clock_ms()) / 1000)

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._queued)

    @property
    def retries_pending(self) -> int:
        with self._cond:
            return len(self._retries)


def _tell(p: IsrProposal, outcome: IsrOutcome) -> None:
    if p.owner is None:
        return
    try:
        p.owner.isr_write_done(p, outcome)
    except Exception:
        log.exception("%s: handling the ISR write's outcome failed", p.tp)
