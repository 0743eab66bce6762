"""The follower's side of a fetch session, without sockets: what each request sends and
forgets, and when it falls back to a full request."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from logkeel.server.fetch_sessions import FetchParams
from logkeel.server.replica.fetcher_session import FetcherSession, FetchPlan, SessionKey

T = uuid.uuid4()


def wanted(offsets: dict[int, int]) -> dict[SessionKey, FetchParams]:
    return {(T, p): FetchParams(o, 1024, current_leader_epoch=3) for p, o in offsets.items()}


class Fetcher:
    """Names what changed since its previous plan, as the fetcher's followed partitions do."""

    def __init__(self) -> None:
        self.session = FetcherSession()
        self.previous: dict[SessionKey, FetchParams] = {}

    def plan(self, now: Mapping[SessionKey, FetchParams]) -> FetchPlan:
        changed = {
            k for k in self.previous.keys() | now.keys() if self.previous.get(k) != now.get(k)
        }
        self.previous = dict(now)
        return self.session.plan(now, changed)


def test_full_then_only_changes_then_forgotten() -> None:
    f = Fetcher()
    s = f.session
    plan = f.plan(wanted({0: 5, 1: 5, 2: 5}))
    assert plan.full and (plan.session_id, plan.epoch) == (0, 0) and len(plan.send) == 3
    s.answered(plan, ErrorCode.none, 42)

    plan = f.plan(wanted({0: 5, 1: 5, 2: 5}))
    assert (plan.session_id, plan.epoch, plan.send, plan.forget) == (42, 1, {}, [])
    s.answered(plan, ErrorCode.none, 42)

    # Partition 1 advanced, 2 left the fetcher, 3 joined.
    plan = f.plan(wanted({0: 5, 1: 9, 3: 0}))
    assert plan.epoch == 2 and not plan.full
    assert set(plan.send) == {(T, 1), (T, 3)} and plan.forget == [(T, 2)]
    s.answered(plan, ErrorCode.none, 42)
    assert f.plan(wanted({0: 5, 1: 9, 3: 0})).send == {}


def test_session_errors_and_failures_fall_back_to_a_full_request() -> None:
    f = Fetcher()
    s = f.session
    s.answered(f.plan(wanted({0: 1})), ErrorCode.none, 7)
    plan = f.plan(wanted({0: 1}))
    s.answered(plan, ErrorCode.fetch_session_id_not_found, 0)
    plan = f.plan(wanted({0: 1}))
    assert plan.full and plan.session_id == 0 and set(plan.send) == {(T, 0)}
    s.answered(plan, ErrorCode.none, 8)

    s.answered(f.plan(wanted({0: 1})), ErrorCode.invalid_fetch_session_epoch, 8)
    assert f.plan(wanted({0: 1})).full

    # A round that failed (connection lost): full again, closing the session it names.
    s.answered(f.plan(wanted({0: 1})), ErrorCode.none, 9)
    s.reset()
    plan = f.plan(wanted({0: 1}))
    assert plan.full and plan.session_id == 9 and plan.epoch == 0


def test_a_leader_that_declines_sessions_gets_full_requests() -> None:
    f = Fetcher()
    s = f.session
    for i in range(3):
        w = wanted({0: i, 1: 1})
        plan = f.plan(w)
        assert plan.full and len(plan.send) == 2
        s.answered(plan, ErrorCode.none, 0)
        # Nothing told, but what its answer was read with is known: its records are appended.
        assert s.asked(plan, (T, 0)) == w[(T, 0)]


def test_what_an_incremental_answer_was_read_with() -> None:
    f = Fetcher()
    s = f.session
    s.answered(f.plan(wanted({0: 1, 1: 1})), ErrorCode.none, 42)
    plan = f.plan(wanted({0: 1, 1: 4}))
    s.answered(plan, ErrorCode.none, 42)
    assert s.asked(plan, (T, 0)) == wanted({0: 1})[(T, 0)]  # held by the session
    assert s.asked(plan, (T, 1)) == wanted({1: 4})[(T, 1)]  # sent
    assert s.asked(plan, (T, 2)) is None


def test_an_answer_for_another_session_is_not_trusted() -> None:
    f = Fetcher()
    s = f.session
    s.answered(f.plan(wanted({0: 1})), ErrorCode.none, 5)
    s.answered(f.plan(wanted({0: 1})), ErrorCode.none, 6)
    plan = f.plan(wanted({0: 1}))
    assert plan.full and plan.session_id == 0


def test_only_the_keys_named_changed_are_looked_at() -> None:
    """An incremental plan costs what changed: a key not named is not compared (the caller's
    duty, which `followed` fulfils), one named is sent if it differs from what was told."""
    s = FetcherSession()
    w = wanted({0: 5, 1: 5})
    s.answered(s.plan(w, w.keys()), ErrorCode.none, 42)
    w = wanted({0: 6, 1: 6})
    plan = s.plan(w, [(T, 1)])
    assert plan.send == {(T, 1): w[(T, 1)]} and plan.forget == []
    # Named but equal to what was told: not sent; named and gone: forgotten.
    s.answered(plan, ErrorCode.none, 42)
    plan = s.plan({(T, 1): w[(T, 1)]}, [(T, 0), (T, 1)])
    assert plan.send == {} and plan.forget == [(T, 0)]
    s.answered(plan, ErrorCode.none, 42)
    assert s.told((T, 0)) is None and s.told((T, 1)) == w[(T, 1)]


def test_told_follows_wanted_through_random_changes_and_failures() -> None:
    """Whatever happens, once a plan is answered the leader's session (as told) holds exactly
    what was wanted, and an incremental plan sends exactly what differs from it: the diff of
    the changed keys equals a diff over every key."""
    rng = random.Random(19)
    f = Fetcher()
    s = f.session
    offsets: dict[int, int] = {}
    for _ in range(2000):
        for _ in range(rng.randrange(4)):
            p = rng.randrange(40)
            if rng.random() < 0.2:
                offsets.pop(p, None)
            else:
                offsets[p] = offsets.get(p, 0) + rng.randrange(3)
        now = wanted(offsets)
        told_before = {k: s.told(k) for k in now.keys() | f.previous.keys()}
        plan = f.plan(now)
        if plan.full:
            assert plan.send == now and plan.forget == []
        else:
            assert plan.send == {k: p for k, p in now.items() if told_before[k] != p}
            assert set(plan.forget) == {
                k for k, p in told_before.items() if p is not None and k not in now
            }
        outcome = rng.random()
        if outcome < 0.05:
            s.reset()  # the round failed
        elif outcome < 0.08:
            s.answered(plan, ErrorCode.fetch_session_id_not_found, 0)
        else:
            s.answered(plan, ErrorCode.none, plan.session_id or 42)
            assert all(s.told(k) == p for k, p in now.items())
            assert all(s.told(k) is None for k in f.previous.keys() - now.keys())
