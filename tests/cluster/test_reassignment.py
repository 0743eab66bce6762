"""Partition reassignment's steps (KIP-455), as pure functions: no ZooKeeper, no sockets."""

from __future__ import annotations

from dataclasses import replace

from logkeel.cluster.partition_state import (
    NO_LEADER,
    PartitionRegistration,
    ReplicaView,
    Views,
)
from logkeel.cluster.reassignment import (
    Assignment,
    cancel,
    complete,
    moving_to,
    retarget,
    target_error,
)


def views(live: set[int], shutting_down: set[int] = frozenset()) -> Views:  # type: ignore[assignment]
    return {b: ReplicaView(live=b in live, shutting_down=b in shutting_down) for b in range(1, 8)}


def reg(a: Assignment, leader: int, isr: tuple[int, ...]) -> PartitionRegistration:
    return PartitionRegistration(a.replicas, leader, 4, isr, 9, a.removing, a.adding)


ALL = {1, 2, 3, 4, 5, 6}


def test_a_target_is_checked_against_the_registered_brokers() -> None:
    assert target_error((1, 2), {1, 2, 3}) is None
    assert "empty" in (target_error((), {1}) or "")
    assert "twice" in (target_error((1, 1), {1}) or "")
    assert "[9]" in (target_error((1, 9), {1, 2}) or "")


def test_a_move_keeps_the_target_first_then_the_leaving_replicas() -> None:
    a = moving_to((1, 2, 3), (4, 2, 5))
    assert a == Assignment((4, 2, 5, 1, 3), adding=(4, 5), removing=(1, 3))
    assert (a.original, a.target) == ((2, 1, 3), (4, 2, 5))


def test_starting_a_move_changes_only_the_assignment() -> None:
    before = Assignment((1, 2, 3))
    r = reg(before, 1, (1, 2, 3))
    step = retarget(before, r, (2, 3, 4), views(ALL))
    assert step.error is None
    assert step.assignment == Assignment((2, 3, 4, 1), adding=(4,), removing=(1,))
    # Leader, epochs and ISR stay: the new replica joins the ISR by catching up.
    assert (step.state.leader, step.state.leader_epoch, step.state.isr) == (1, 4, (1, 2, 3))
    assert step.state.partition_epoch == r.partition_epoch


def test_a_reorder_alone_is_no_move() -> None:
    before = Assignment((1, 2, 3))
    step = retarget(before, reg(before, 1, (1, 2, 3)), (3, 1, 2), views(ALL))
    assert step.assignment == Assignment((3, 1, 2))
    assert not step.assignment.moving


def test_a_move_completes_only_when_every_target_replica_is_in_sync() -> None:
    moving = Assignment((2, 3, 4, 1), adding=(4,), removing=(1,))
    assert complete(moving, reg(moving, 1, (1, 2, 3)), views(ALL)) is None
    done = complete(moving, reg(moving, 1, (1, 2, 3, 4)), views(ALL))
    assert done is not None and done.error is None
    assert done.assignment == Assignment((2, 3, 4))
    # The removed leader hands over to the first target replica in sync: a new term.
    assert (done.state.leader, done.state.leader_epoch, done.state.isr) == (2, 5, (2, 3, 4))
    assert done.state.partition_epoch == 10


def test_a_leader_that_stays_keeps_its_term_and_the_isr_loses_the_removed() -> None:
    moving = Assignment((2, 4, 1), adding=(4,), removing=(1,))
    done = complete(moving, reg(moving, 2, (2, 1, 4)), views(ALL))
    assert done is not None
    assert (done.state.leader, done.state.leader_epoch, done.state.isr) == (2, 4, (2, 4))


def test_completion_waits_for_a_target_replica_that_may_lead() -> None:
    moving = Assignment((4, 5, 1), adding=(4, 5), removing=(1,))
    r = reg(moving, 1, (1, 4, 5))
    assert complete(moving, r, views(ALL - {4, 5})) is None  # in the ISR, but gone
    assert complete(moving, r, views(ALL, shutting_down={4})).state.leader == 5  # type: ignore[union-attr]
    assert complete(moving, replace(r, leader=NO_LEADER), views(ALL)) is None


def test_cancelling_reverts_to_the_original_replicas() -> None:
    moving = Assignment((4, 5, 1, 2), adding=(4, 5), removing=(1, 2))
    step = cancel(moving, reg(moving, 1, (1, 2, 4)), views(ALL))
    assert step.error is None
    assert step.assignment == Assignment((1, 2))
    assert (step.state.leader, step.state.isr) == (1, (1, 2))


def test_cancelling_moves_leadership_off_an_adding_replica() -> None:
    moving = Assignment((4, 1, 2), adding=(4,), removing=(1, 2))
    step = cancel(moving, reg(moving, 4, (4, 1, 2)), views(ALL))
    assert (step.state.leader, step.state.leader_epoch, step.state.isr) == (1, 5, (1, 2))


def test_cancelling_is_refused_when_no_original_replica_could_lead() -> None:
    moving = Assignment((4, 1), adding=(4,), removing=(1,))
    step = cancel(moving, reg(moving, 4, (4,)), views(ALL))
    assert step.error == "LEADER_NOT_AVAILABLE"
    assert step.assignment == moving
    assert cancel(Assignment((1, 2)), reg(Assignment((1, 2)), 1, (1, 2)), views(ALL)).error == (
        "NO_REASSIGNMENT_IN_PROGRESS"
    )


def test_a_new_target_replaces_a_move_in_progress_from_the_same_original() -> None:
    moving = Assignment((4, 1), adding=(4,), removing=(1,))
    # 4 had joined the ISR; the new target drops it: it leaves the replicas and the ISR.
    step = retarget(moving, reg(moving, 1, (1, 4)), (5,), views(ALL))
    assert step.assignment == Assignment((5, 1), adding=(5,), removing=(1,))
    assert step.state.isr == (1,)
    back = retarget(moving, reg(moving, 1, (1, 4)), (1,), views(ALL))
    assert back.assignment == Assignment((1,))
