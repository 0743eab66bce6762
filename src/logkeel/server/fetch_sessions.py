"""Incremental fetch sessions (KIP-227): Kafka's FetchSessionCache and FetchManager, no IO.

A fetcher (consumer or follower) sends its whole partition set once (session epoch 0) and is
given a random non-zero session id; from then on (epochs 1, 2, ...) it sends only the
partitions whose fetch parameters changed and ``forgotten_topics_data`` for the ones it drops,
and the broker answers only the partitions that changed: records returned, an error, or a new
high watermark, last stable offset or log start offset (a preferred read replica or a
diverging epoch too). Epoch -1 closes the session and fetches without one.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. A new session
when it is full may evict (Kafka's tryEvict): the least recently used session if it was idle
longer than ``EVICTION_MS`` (Kafka's constant MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS);
otherwise the least valuable one by (privileged, partitions, id): follower sessions
(privileged) evict consumer sessions, and a session with more partitions evicts a smaller one
of its kind that is older than ``EVICTION_MS``. With no slot the request is answered without a
session (session id 0), which every client handles by sending full requests.

Partitions are keyed by (topic id, index) from Fetch v13 and by (topic name, index) below it;
a session keeps the kind it was created with (FETCH_SESSION_TOPIC_ID_ERROR otherwise). A
session belongs to its owner (the principal and whether it is a follower), as an opaque value:
another owner naming its id is told FETCH_SESSION_ID_NOT_FOUND and cannot close it. Sessions
are not tied to a connection, as in Kafka. Memory is bounded by the slots and by
``MAX_SESSION_PARTITIONS`` per session (a full request above it is answered sessionless; an
incremental one growing a session past it closes the session: FETCH_SESSION_ID_NOT_FOUND, and
the fetcher falls back to full requests).

Single-threaded: the broker calls it on its event loop only.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from kio.schema.errors import ErrorCode

__all__ = [
    "EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "MAX_SESSION_PARTITIONS",
    "ContextKind",
    "FetchContext",
    "FetchParams",
    "FetchSession",
    "FetchSessionCache",
    "PartitionKey",
    "PartitionOutcome",
    "SessionAnswer",
    "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000
MAX_SESSION_PARTITIONS = 100_000
_INT32_MAX = (1 << 31) - 1

# (topic id text, or topic name below Fetch v13; partition index)
PartitionKey = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch: wraps to 1, never 0)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


@dataclass(frozen=True, slots=True)
class FetchParams:
    """What a fetcher asks of one partition."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What a fetch answered for one partition: what decides whether an incremental response
    must carry it."""

    records_size: int = 0
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    preferred_read_replica: int = -1
    diverging: bool = False


@dataclass(slots=True)
class _Cached:
    """A partition of a session: the fetcher's parameters and what it was last told."""

    params: FetchParams
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(self, o: PartitionOutcome) -> bool:
        """Whether the outcome goes in the response; what it tells is remembered."""
        changed = (
            o.records_size > 0
            or o.error != ErrorCode.none
            or o.preferred_read_replica >= 0
            or o.diverging
            or o.high_watermark != self.high_watermark
            or o.last_stable_offset != self.last_stable_offset
            or o.log_start_offset != self.log_start_offset
        )
        # After an error the offsets are forgotten, so the partition is sent again when the
        # error clears even if they did not move (Kafka sets the high watermark to -1).
        self.high_watermark = -1 if o.error != ErrorCode.none else o.high_watermark
        self.last_stable_offset = o.last_stable_offset
        self.log_start_offset = o.log_start_offset
        return changed


@dataclass(slots=True, eq=False)
class FetchSession:
    id: int
    privileged: bool
    owner: Hashable
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int  # the epoch the next request must carry
    partitions: dict[PartitionKey, _Cached] = field(default_factory=dict)
    # What the data path keeps of the session between its Fetches (its partitions answered
    # without a read: `replica.session_reads`); opaque here.
    reads: object = None

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, len(self.partitions), self.id)


class ContextKind(Enum):
    ERROR = "error"  # a session error: answered with no partitions
    SESSIONLESS = "sessionless"  # epoch -1 (or a session emptied): no session
    FULL = "full"  # epoch 0: a session is created when the response is made, if it can be
    INCREMENTAL = "incremental"


@dataclass(slots=True)
class FetchContext:
    """One request's view of its session: the partitions to read, in order."""

    kind: ContextKind
    partitions: list[tuple[PartitionKey, FetchParams]]
    error: ErrorCode = ErrorCode.none
    privileged: bool = False
    owner: Hashable = None
    uses_topic_ids: bool = False
    session: FetchSession | None = None
    request_epoch: int = FINAL_EPOCH


@dataclass(frozen=True, slots=True)
class SessionAnswer:
    """The response's session id and error, and which partitions (of the context's, in order)
    it carries."""

    session_id: int
    error: ErrorCode
    include: list[bool]


class FetchSessionCache:
    """Kafka's FetchSessionCache: sessions by id, least recently used first."""

    def __init__(
        self,
        max_slots: int,
        *,
        eviction_ms: int = EVICTION_MS,
        max_session_partitions: int = MAX_SESSION_PARTITIONS,
        rng: random.Random | None = None,
        on_removed: Callable[[FetchSession], None] | None = None,
    ) -> None:
        """``on_removed``: told of each session that leaves the cache (closed, evicted)."""
        self.max_slots = max_slots
        self._on_removed = on_removed
        self.eviction_ms = eviction_ms
        self.max_session_partitions = max_session_partitions
        self._rng = rng or random.SystemRandom()
        # Insertion order is use order: a touch moves a session to the end.
        self._sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    # -- a request ----------------------------------------------------------------------------

    def new_context(
        self,
        session_id: int,
        epoch: int,
        partitions: Sequence[tuple[PartitionKey, FetchParams]],
        forgotten: Iterable[PartitionKey],
        *,
        privileged: bool,
        owner: Hashable,
        uses_topic_ids: bool,
        now_ms: int,
        listed: bool = True,
    ) -> FetchContext:
        """Kafka's FetchManager.newContext: closes, checks or updates the session a request
        names. An incremental request's session advances to its next epoch here. Not
        ``listed``: an incremental context's partitions are left empty for the caller to set
        (``partitions_of``: the session's, or only those it reads)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            old = self._sessions.get(session_id) if session_id != INVALID_SESSION_ID else None
            if old is not None and old.owner == owner:
                self._remove(old)
            kind = ContextKind.FULL if epoch == INITIAL_EPOCH else ContextKind.SESSIONLESS
            return FetchContext(
                kind,
                list(partitions),
                privileged=privileged,
                owner=owner,
                uses_topic_ids=uses_topic_ids,
                request_epoch=epoch,
            )
        session = self._sessions.get(session_id)
        if session is None or session.owner != owner:
            return FetchContext(ContextKind.ERROR, [], ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext(ContextKind.ERROR, [], ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(ContextKind.ERROR, [], ErrorCode.fetch_session_topic_id_error)
        cached = session.partitions
        forgotten = [k for k in forgotten if k in cached]
        added = {k for k, _ in partitions if k not in cached}
        if len(cached) + len(added) - len(forgotten) > self.max_session_partitions:
            self._remove(session)
            return FetchContext(ContextKind.ERROR, [], ErrorCode.fetch_session_id_not_found)
        for key, params in partitions:
            entry = cached.get(key)
            if entry is None:
                cached[key] = _Cached(params)
            else:
                entry.params = params
        for key in forgotten:
            cached.pop(key, None)
        if not cached:
            # Everything forgotten: the session ends and the request stands alone.
            self._remove(session)
            return FetchContext(ContextKind.SESSIONLESS, list(partitions), request_epoch=epoch)
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(
            ContextKind.INCREMENTAL,
            [(k, c.params) for k, c in cached.items()] if listed else [],
            privileged=session.privileged,
            owner=owner,
            uses_topic_ids=uses_topic_ids,
            session=session,
            request_epoch=epoch,
        )

    def answer(
        self,
        context: FetchContext,
        outcomes: Sequence[PartitionOutcome | None],
        now_ms: int,
        *,
        throttled: bool = False,
    ) -> SessionAnswer:
        """The response's session id and partitions for the context's ``outcomes`` (one per
        context partition). A full request's session is created here (with what the response
        tells each partition); an incremental response carries only what changed, and None
        (an incremental request's partition the broker knows unchanged without reading it)
        is not carried. A throttled response carries nothing and creates no session, as in
        Kafka."""
        n = len(context.partitions)
        if context.kind is ContextKind.ERROR:
            return SessionAnswer(INVALID_SESSION_ID, context.error, [])
        if context.kind is ContextKind.SESSIONLESS:
            return SessionAnswer(INVALID_SESSION_ID, ErrorCode.none, [not throttled] * n)
        if context.kind is ContextKind.FULL:
            if throttled:
                return SessionAnswer(INVALID_SESSION_ID, ErrorCode.none, [False] * n)
            session_id = self._maybe_create(context, outcomes, now_ms)
            return SessionAnswer(session_id, ErrorCode.none, [True] * n)
        session = context.session
        assert session is not None
        if session.epoch != next_epoch(context.request_epoch):
            # Another request of this session came between (a duplicate): Kafka's check.
            return SessionAnswer(session.id, ErrorCode.invalid_fetch_session_epoch, [])
        if throttled:
            return SessionAnswer(session.id, ErrorCode.none, [False] * n)
        include = []
        sent_records = []
        for (key, _), outcome in zip(context.partitions, outcomes, strict=True):
            if outcome is None:
                include.append(False)
                continue
            entry = session.partitions.get(key)
            respond = entry is None or entry.must_respond(outcome)
            include.append(respond)
            if outcome.records_size > 0 and entry is not None:
                sent_records.append(key)
        # A partition that returned records goes to the back, so the next responses' byte
        # budget reaches the others first (Kafka's round robin).
        for key in sent_records:
            session.partitions[key] = session.partitions.pop(key)
        return SessionAnswer(session.id, ErrorCode.none, include)

    @staticmethod
    def partitions_of(
        context: FetchContext, keys: Iterable[PartitionKey] | None = None
    ) -> list[tuple[PartitionKey, FetchParams]]:
        """An incremental context's session's partitions (``keys``: only these of them, in
        that order), with their parameters. Answering only some of them is the caller's
        promise that the others would not be carried: unread and unchanged."""
        assert context.session is not None
        cached = context.session.partitions
        if keys is None:
            return [(k, c.params) for k, c in cached.items()]
        return [(k, cached[k].params) for k in keys if k in cached]

    # -- the cache ----------------------------------------------------------------------------

    def _maybe_create(
        self, context: FetchContext, outcomes: Sequence[PartitionOutcome | None], now_ms: int
    ) -> int:
        size = len(context.partitions)
        if self.max_slots <= 0 or size > self.max_session_partitions:
            return INVALID_SESSION_ID
        if len(self._sessions) >= self.max_slots and not self._try_evict(
            context.privileged, size, now_ms
        ):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        session = FetchSession(
            session_id,
            context.privileged,
            context.owner,
            context.uses_topic_ids,
            created_ms=now_ms,
            last_used_ms=now_ms,
            epoch=next_epoch(INITIAL_EPOCH),
        )
        for (key, params), outcome in zip(context.partitions, outcomes, strict=True):
            entry = _Cached(params)
            if outcome is not None:
                entry.must_respond(outcome)
            session.partitions[key] = entry
        self._sessions[session_id] = session
        return session_id

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _INT32_MAX)
            if session_id not in self._sessions:
                return session_id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's tryEvict: a stale session first, else the least valuable one the new session
        (``privileged``, ``size`` partitions) outranks."""
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        # Young sessions are safe from sessions of their own kind; a follower's new session
        # may still evict a young consumer session.
        candidates = [
            s
            for s in self._sessions.values()
            if now_ms - s.created_ms > self.eviction_ms or (privileged and not s.privileged)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < victim.evictable_key():
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        self._remove(session)
        self.evictions += 1

    def _remove(self, session: FetchSession) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
            if self._on_removed is not None:
                self._on_removed(session)

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        self._sessions[session.id] = self._sessions.pop(session.id)
