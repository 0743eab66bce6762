"""The write fence of a leader cut off from ZooKeeper, driven with a hand-moved clock."""

from __future__ import annotations

from logkeel.cluster.session_fence import SessionFence


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_short_disconnection_does_not_fence() -> None:
    clock = Clock()
    fence = SessionFence(6000, clock)
    fence.on_state("SUSPENDED")  # kazoo: 4 of the 6 seconds without a word have passed
    clock.now += 1.9
    assert fence.why_fenced() is None
    fence.on_state("CONNECTED")  # the same session
    clock.now += 10
    assert fence.why_fenced() is None


def test_disconnected_past_the_session_timeout_fences_until_connected_again() -> None:
    clock = Clock()
    fence = SessionFence(6000, clock)
    fence.on_state("SUSPENDED")
    clock.now += 2.0
    assert "cut off from ZooKeeper" in (fence.why_fenced() or "")
    fence.on_state("SUSPENDED")  # repeated: the clock does not restart
    assert fence.why_fenced() is not None
    fence.on_state("CONNECTED")  # the session turned out alive
    assert fence.why_fenced() is None


def test_an_expired_session_fences_until_registered_again() -> None:
    clock = Clock()
    fence = SessionFence(6000, clock)
    fence.on_state("SUSPENDED")
    fence.on_state("LOST")
    fence.on_state("CONNECTED")  # a new session, but not registered in it yet
    assert "session expired" in (fence.why_fenced() or "")
    fence.registered()
    assert fence.why_fenced() is None


def test_a_broker_whose_controlled_shutdown_is_done_takes_no_more_writes() -> None:
    """The controller's answer may come before this broker applied every move: a write it took
    as a leader it no longer is would be truncated away."""
    fence = SessionFence(6000, Clock())
    fence.left()
    assert "shutting down" in (fence.why_fenced() or "")
    fence.on_state("CONNECTED")
    fence.registered()
    assert fence.why_fenced() is not None
