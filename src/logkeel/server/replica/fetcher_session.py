"""The follower's side of a fetch session (KIP-227): Kafka's FetchSessionHandler, no IO.

The first Fetch to a leader is full (every partition, session epoch 0); once the leader answers
with a session id, each next Fetch carries only the partitions whose fetch parameters (offset,
epochs, log start) changed since the leader last heard them, and forgets the ones the fetcher no
longer fetches. In an incremental response an omitted partition has not changed. A session error
(FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH), any other failure of a round, or a
leader that declines sessions (session id 0) sends the next request in full.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
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
    """One request: its session id and epoch, what it sends and what it forgets."""

    session_id: int
    epoch: int
    send: dict[SessionKey, FetchParams]
    forget: list[SessionKey]
    wanted: dict[SessionKey, FetchParams]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetcherSession:
    """What the leader's session holds, as this fetcher last told it."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._told: dict[SessionKey, FetchParams] = {}

    def plan(self, wanted: Mapping[SessionKey, FetchParams]) -> FetchPlan:
        wanted = dict(wanted)
        if self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH:
            return FetchPlan(self.session_id, INITIAL_EPOCH, wanted, [], wanted)
        send = {k: p for k, p in wanted.items() if self._told.get(k) != p}
        forget = [k for k in self._told if k not in wanted]
        return FetchPlan(self.session_id, self.epoch, send, forget, wanted)

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
        self._told = plan.wanted

    def reset(self) -> None:
        """The next request is full (a round failed: what the leader holds is unknown). A
        session id kept is closed by that request."""
        self.epoch = INITIAL_EPOCH
        self._told = {}
