"""Partition reassignment (KIP-455), pure: what a partition's assignment becomes when a new
target is asked for or a move is cancelled, when a move is complete, and the partition state
that goes with each step. `reassignment_driver` feeds these from the controller's context and
writes what they return; nothing here does IO.

As Kafka keeps it in /brokers/topics/<t>: while a move runs, ``replicas`` is the full set, the
target first and then the original replicas leaving; ``adding`` are the target replicas not in
the original set, ``removing`` the original ones not in the target. The adding replicas fetch
as followers and join the ISR through the leader; once every target replica is in the ISR the
move completes: the replicas become the target, the ISR keeps only target replicas, and a
leader being removed hands over to the first eligible target replica in the ISR.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, replace

from logkeel.cluster.partition_state import (
    NO_LEADER,
    PartitionRegistration,
    Views,
    lost_for_certain,
    view_of,
)
from logkeel.cluster.zk_data import TopicAssignment

__all__ = [
    "Assignment",
    "Step",
    "assignment_of",
    "cancel",
    "complete",
    "moving_to",
    "restrict",
    "retarget",
    "target_error",
]


@dataclass(frozen=True, slots=True)
class Assignment:
    """One partition's replica assignment with its move in progress, if any."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)


def assignment_of(a: TopicAssignment, partition: int) -> Assignment | None:
    """A partition's assignment as /brokers/topics/<t> holds it (None: no such partition)."""
    replicas = a.partitions.get(partition)
    if replicas is None:
        return None
    return Assignment(
        replicas, a.adding_replicas.get(partition, ()), a.removing_replicas.get(partition, ())
    )


@dataclass(frozen=True, slots=True)
class Step:
    """A step of a move: the assignment and partition state to write together, or why it is
    refused (Kafka's error name and a message; ``assignment`` is then the current one)."""

    assignment: Assignment
    state: PartitionRegistration
    error: str | None = None
    message: str | None = None


def target_error(target: Iterable[int], registered: Set[int]) -> str | None:
    """Why ``target`` cannot be a partition's replica set (INVALID_REPLICA_ASSIGNMENT), or None."""
    replicas = list(target)
    if not replicas:
        return "the replica list is empty"
    if len(set(replicas)) != len(replicas):
        return f"the replica list {replicas} names a broker twice"
    unknown = sorted(set(replicas) - set(registered))
    if unknown:
        return f"broker(s) {unknown} are not registered"
    return None


def moving_to(original: tuple[int, ...], target: tuple[int, ...]) -> Assignment:
    """The assignment while moving from ``original`` to ``target``: the target first (its
    first replica is the preferred leader once done), then the original replicas leaving."""
    leaving = tuple(r for r in original if r not in target)
    adding = tuple(r for r in target if r not in original)
    return Assignment(target + leaving, adding, leaving)


def retarget(
    current: Assignment, reg: PartitionRegistration, target: tuple[int, ...], views: Views
) -> Step:
    """A new reassignment of a partition (replacing any in progress: the original replicas
    stay those from before the first). Adding replicas of an earlier target that the new one
    drops leave the replica set, and the ISR, at once."""
    wanted = moving_to(current.original, target)
    if not wanted.moving:  # same replicas: at most a new order, nothing to move
        wanted = Assignment(target)
    return restrict(wanted, reg, views)


def cancel(current: Assignment, reg: PartitionRegistration, views: Views) -> Step:
    """A cancelled move reverts to the original replicas (the adding ones leave), in their
    order in the full set: as in Kafka, the assignment does not keep the original order."""
    if not current.moving:
        return Step(current, reg, "NO_REASSIGNMENT_IN_PROGRESS", "no reassignment in progress")
    return restrict(Assignment(current.original), reg, views)


def complete(current: Assignment, reg: PartitionRegistration, views: Views) -> Step | None:
    """The completion of a move once every target replica is in the ISR under a live leader;
    None while it is not done (or cannot hand leadership to a target replica yet)."""
    if not current.moving or reg.leader == NO_LEADER:
        return None
    if not set(current.target) <= set(reg.isr):
        return None
    step = restrict(Assignment(current.target), reg, views)
    return None if step.error is not None else step


def restrict(wanted: Assignment, reg: PartitionRegistration, views: Views) -> Step:
    """The partition state for replica set ``wanted.replicas``: the ISR keeps only those
    replicas, and a leader outside them hands over to the first of them (in assignment order)
    in the ISR that may lead -- never to one not in sync, so nothing acknowledged is lost. A
    partition with no such replica keeps its state and the step is refused."""
    members = set(wanted.replicas)
    isr = tuple(r for r in reg.isr if r in members)
    state = replace(reg, replicas=wanted.replicas, adding_replicas=wanted.adding,
                    removing_replicas=wanted.removing)  # fmt: skip
    if not isr and reg.isr:
        return _refused(reg, f"no in-sync replica (ISR {list(reg.isr)}) would remain among "
                             f"{list(wanted.replicas)}; retry once one has caught up")  # fmt: skip
    if reg.leader == NO_LEADER or reg.leader in members:
        return Step(wanted, state.with_isr(isr) if isr != reg.isr else state)
    for candidate in wanted.replicas:
        v = view_of(views, candidate)
        if (
            candidate in isr
            and v.can_lead
            and not lost_for_certain(views, candidate, partition_had_data=False, acked=0)
        ):
            return Step(wanted, state.with_leader(candidate, isr))
    return _refused(
        reg,
        f"leader {reg.leader} leaves the replicas, and none of {list(wanted.replicas)} is an "
        f"in-sync replica that may lead (ISR {list(reg.isr)}); retry once one has caught up",
    )


def _refused(reg: PartitionRegistration, message: str) -> Step:
    current = Assignment(reg.replicas, reg.adding_replicas, reg.removing_replicas)
    return Step(current, reg, "LEADER_NOT_AVAILABLE", message)
