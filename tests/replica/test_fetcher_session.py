"""The follower's side of a fetch session, without sockets: what each request sends and
forgets, and when it falls back to a full request."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from logkeel.server.fetch_sessions import FetchParams
from logkeel.server.replica.fetcher_session import FetcherSession, SessionKey

T = uuid.uuid4()


def wanted(offsets: dict[int, int]) -> dict[SessionKey, FetchParams]:
    return {(T, p): FetchParams(o, 1024, current_leader_epoch=3) for p, o in offsets.items()}


def test_full_then_only_changes_then_forgotten() -> None:
    s = FetcherSession()
    plan = s.plan(wanted({0: 5, 1: 5, 2: 5}))
    assert plan.full and (plan.session_id, plan.epoch) == (0, 0) and len(plan.send) == 3
    s.answered(plan, ErrorCode.none, 42)

    plan = s.plan(wanted({0: 5, 1: 5, 2: 5}))
    assert (plan.session_id, plan.epoch, plan.send, plan.forget) == (42, 1, {}, [])
    s.answered(plan, ErrorCode.none, 42)

    # Partition 1 advanced, 2 left the fetcher, 3 joined.
    plan = s.plan(wanted({0: 5, 1: 9, 3: 0}))
    assert plan.epoch == 2 and not plan.full
    assert set(plan.send) == {(T, 1), (T, 3)} and plan.forget == [(T, 2)]
    s.answered(plan, ErrorCode.none, 42)
    assert s.plan(wanted({0: 5, 1: 9, 3: 0})).send == {}


def test_session_errors_and_failures_fall_back_to_a_full_request() -> None:
    s = FetcherSession()
    s.answered(s.plan(wanted({0: 1})), ErrorCode.none, 7)
    plan = s.plan(wanted({0: 1}))
    s.answered(plan, ErrorCode.fetch_session_id_not_found, 0)
    plan = s.plan(wanted({0: 1}))
    assert plan.full and plan.session_id == 0 and set(plan.send) == {(T, 0)}
    s.answered(plan, ErrorCode.none, 8)

    s.answered(s.plan(wanted({0: 1})), ErrorCode.invalid_fetch_session_epoch, 8)
    assert s.plan(wanted({0: 1})).full

    # A round that failed (connection lost): full again, closing the session it names.
    s.answered(s.plan(wanted({0: 1})), ErrorCode.none, 9)
    s.reset()
    plan = s.plan(wanted({0: 1}))
    assert plan.full and plan.session_id == 9 and plan.epoch == 0


def test_a_leader_that_declines_sessions_gets_full_requests() -> None:
    s = FetcherSession()
    for _ in range(3):
        plan = s.plan(wanted({0: 1, 1: 1}))
        assert plan.full and len(plan.send) == 2
        s.answered(plan, ErrorCode.none, 0)


def test_an_answer_for_another_session_is_not_trusted() -> None:
    s = FetcherSession()
    s.answered(s.plan(wanted({0: 1})), ErrorCode.none, 5)
    s.answered(s.plan(wanted({0: 1})), ErrorCode.none, 6)
    plan = s.plan(wanted({0: 1}))
    assert plan.full and plan.session_id == 0
