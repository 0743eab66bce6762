"""The follower's side of a fetch session (KIP-227): Kafka's FetchSessionHandler, no IO.

The first Fetch to a leader is full (every partition, session epoch 0); once the leader answers
with a session id, each next Fetch carries only the partitions whose fetch parameters (offset,
epochs, log start) changed since the leader last heard them, and forgets the ones the fetcher no
longer fetches. The caller names the partitions that may have changed (``followed``), so an
incremental request costs what changed, not what the fetcher follows. In an incremental response an omitted partition has not changed. A session error
(FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH), any other failure of a round, or a
leader that declines sessions (session id 0) sends the next request in full.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from logkeel.server.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchParams,
    next_epoch,
)

__all__ = ["FetchPlan", "FetcherSession", "SessionKey"]

# (topic id, partition index): what a Fetch v13+ names a partition by.
SessionKey = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """One request: its session id and epoch, what it sends and what it forgets (a full request
    sends every partition wanted)."""

    session_id: int
    epoch: int
    send: dict[SessionKey, FetchParams]
    forget: list[SessionKey]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetcherSession:
    """What the leader's session holds, as this fetcher last told it."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._told: dict[SessionKey, FetchParams] = {}

    def plan(
        self, wanted: Mapping[SessionKey, FetchParams], changed: Iterable[SessionKey]
    ) -> FetchPlan:
        """The next request for ``wanted``; ``changed``: every key whose entry in ``wanted``
        may differ (added, updated or dropped) from the last plan's ``wanted``. An incremental
        request looks at those keys only, so a key left out of them is never sent: the caller
        names every change since its previous plan, answered or not."""
        if self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH:
            return FetchPlan(self.session_id, INITIAL_EPOCH, dict(wanted), [])
        told = self._told
        send: dict[SessionKey, FetchParams] = {}
        forget: list[SessionKey] = []
        for k in changed:
            p = wanted.get(k)
            if p is None:
                if k in told:
                    forget.append(k)
            elif told.get(k) != p:
                send[k] = p
        return FetchPlan(self.session_id, self.epoch, send, forget)

    def told(self, key: SessionKey) -> FetchParams | None:
        """What the leader's session holds for ``key``, as last told."""
        return self._told.get(key)

    def asked(self, plan: FetchPlan, key: SessionKey) -> FetchParams | None:
        """What the leader read ``key`` with to answer ``plan``: what the plan sent, else what
        its session held (a leader without a session is sent everything)."""
        sent = plan.send.get(key)
        return sent if sent is not None else self._told.get(key)

    def answered(self, plan: FetchPlan, error: ErrorCode, session_id: int) -> None:
        """The leader answered ``plan`` with this top-level error and session id."""
        if error != ErrorCode.none:
            # A session error loses the session; any other error may have left the leader's
            # session behind ours: start over in full, closing it if it still exists.
            if error in (
                ErrorCode.fetch_session_id_not_found,
                ErrorCode.invalid_fetch_session_epoch,
            ):
                self.session_id = INVALID_SESSION_ID
            self.reset()
            return
        if session_id == INVALID_SESSION_ID or (not plan.full and session_id != plan.session_id):
            # Declined, closed (every partition forgotten), or not ours: full next time.
            self.session_id = INVALID_SESSION_ID
            self.reset()
            return
        self.session_id = session_id
        self.epoch = next_epoch(INITIAL_EPOCH if plan.full else plan.epoch)
        if plan.full:
            self._told = dict(plan.send)
            return
        self._told.update(plan.send)
        for k in plan.forget:
            del self._told[k]

    def reset(self) -> None:
        """The next request is full (a round failed: what the leader holds is unknown). A
        session id kept is closed by that request."""
        self.epoch = INITIAL_EPOCH
        self._told = {}
