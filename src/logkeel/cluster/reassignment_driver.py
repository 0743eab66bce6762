"""The controller's part of partition reassignment (KIP-455): applies the queued
AlterPartitionReassignments requests and completes moves whose target replicas have all joined
the ISR, with the pure steps of `reassignment`.

Every step is read from ZooKeeper, decided, and written as one transaction (the topic's
assignment and the partition states it changes, conditional on the controller epoch and on the
versions read), so a move's whole state is always in ZooKeeper: a controller that takes over
mid-move finds the adding/removing replicas in the assignments and goes on, and a step refused
because something changed meanwhile is decided again on the new state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from kazoo.exceptions import NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.controller_context import ControllerContext
from logkeel.cluster.partition_state import PartitionRegistration, Views
from logkeel.cluster.reassignment import (
    Assignment,
    Step,
    assignment_of,
    cancel,
    complete,
    retarget,
    target_error,
)
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_controller import ControllerEpoch
from logkeel.cluster.zk_data import LeaderIsr
from logkeel.cluster.zk_reassignments import ReassignmentResults, decode_request
from logkeel.cluster.zk_topics import StalePartitionState
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ReassignmentDriver"]

log = logging.getLogger(__name__)

# A step refused because the topic or a state changed meanwhile is decided again this often.
_ATTEMPTS = 5
# An answered request whose requester never deleted it is removed after this.
_RESULT_TTL_S = 300.0

# (partition, its assignment, its registration, views) -> the step, or None: nothing to do.
Decide = Callable[[TopicPartition, Assignment, PartitionRegistration, Views], Step | None]


class ReassignmentDriver:
    def __init__(self, client: ZkMetadataClient) -> None:
        self.client = client

    def take_requests(self, ctl: ControllerEpoch, ctx: ControllerContext) -> None:
        """Applies and answers every queued request (an unreadable one is dropped)."""
        for path, data, age_s in self.client.reassignment_requests():
            try:
                request, results = decode_request(data)
            except (ValueError, KeyError, TypeError):
                log.warning("dropping unreadable reassignment request %s", path)
                self.client.delete_reassignment(path)
                continue
            if results is None:
                self.client.answer_reassignment(path, request, self.apply(ctl, ctx, request))
            elif age_s > _RESULT_TTL_S:
                self.client.delete_reassignment(path)  # its requester never came back for it

    def apply(
        self,
        ctl: ControllerEpoch,
        ctx: ControllerContext,
        request: Mapping[TopicPartition, tuple[int, ...] | None],
    ) -> ReassignmentResults:
        with ctx.lock:
            registered = frozenset(ctx.brokers)
        results: ReassignmentResults = {}
        by_topic: dict[str, dict[int, tuple[int, ...] | None]] = {}
        for tp, target in request.items():
            if target is not None and (why := target_error(target, registered)) is not None:
                results[tp] = ("INVALID_REPLICA_ASSIGNMENT", why)
            else:
                by_topic.setdefault(tp.topic, {})[tp.partition] = target

        for topic, targets in sorted(by_topic.items()):

            def step(
                tp: TopicPartition,
                current: Assignment,
                reg: PartitionRegistration,
                views: Views,
                targets: dict[int, tuple[int, ...] | None] = targets,
            ) -> Step:
                target = targets[tp.partition]
                if target is None:
                    return cancel(current, reg, views)
                return retarget(current, reg, target, views)

            results.update(self._steps(ctl, ctx, topic, set(targets), step, "reassignment"))
        return results

    def progress(
        self, ctl: ControllerEpoch, ctx: ControllerContext, touched: Iterable[TopicPartition]
    ) -> None:
        """Completes the moves among ``touched`` whose target replicas are all in the ISR."""
        ready: dict[str, set[int]] = {}
        with ctx.lock:
            cluster = ctx.live_brokers()
            for tp in touched:
                a = ctx.assignments.get(tp.topic)
                current = assignment_of(a, tp.partition) if a is not None else None
                state = ctx.states.get(tp)
                if current is None or not current.moving or state is None:
                    continue
                reg = _registration(current, state)
                views = cluster.views(tp, reg, shutdown=True, topic_id=a.topic_id if a else None)
                if complete(current, reg, views) is not None:
                    ready.setdefault(tp.topic, set()).add(tp.partition)

        def finish(
            _tp: TopicPartition, current: Assignment, reg: PartitionRegistration, views: Views
        ) -> Step | None:
            return complete(current, reg, views)

        for topic, partitions in sorted(ready.items()):
            self._steps(ctl, ctx, topic, partitions, finish, "reassignment completed")

    def _steps(
        self,
        ctl: ControllerEpoch,
        ctx: ControllerContext,
        topic: str,
        partitions: set[int],
        decide: Decide,
        what: str,
    ) -> ReassignmentResults:
        """Decides ``partitions`` of ``topic`` on what ZooKeeper holds and writes the steps in
        one transaction; decided again when something changed meanwhile."""
        results: ReassignmentResults = {}
        for _ in range(_ATTEMPTS):
            found = self.client.versioned_topic_assignment(topic)
            if found is None:
                why = f"topic {topic} does not exist"
                return {TopicPartition(topic, p): ("UNKNOWN_TOPIC_OR_PARTITION", why)
                        for p in partitions}  # fmt: skip
            a, version = found
            with ctx.lock:
                cluster = ctx.live_brokers()
            replicas = dict(a.partitions)
            adding, removing = dict(a.adding_replicas), dict(a.removing_replicas)
            writes: dict[int, tuple[LeaderIsr, int]] = {}
            done: list[tuple[TopicPartition, Step, PartitionRegistration]] = []
            results = {}
            for p in sorted(partitions):
                tp = TopicPartition(topic, p)
                current = assignment_of(a, p)
                state = self.client.partition_state(topic, p)
                if current is None or state is None:
                    results[tp] = ("UNKNOWN_TOPIC_OR_PARTITION", f"{tp} does not exist (yet)")
                    continue
                reg = _registration(current, state)
                views = cluster.views(tp, reg, shutdown=True, topic_id=a.topic_id)
                s = decide(tp, current, reg, views)
                if s is None:
                    continue
                results[tp] = (s.error, s.message)
                if s.error is not None:
                    continue
                replicas[p] = s.assignment.replicas
                for field_, value in ((adding, s.assignment.adding),
                                      (removing, s.assignment.removing)):  # fmt: skip
                    if value:
                        field_[p] = value
                    else:
                        field_.pop(p, None)
                if _state_changed(s.state, reg):
                    written = zd.leader_isr_of(cluster.stamp(s.state, reg), ctl.epoch)
                    writes[p] = (written, state.zk_version)
                done.append((tp, s, reg))
            new = replace(
                a, partitions=replicas, adding_replicas=adding, removing_replicas=removing
            )
            if new == a and not writes:
                return results
            try:
                versions = self.client.write_move(ctl, new, version, writes)
            except StalePartitionState:
                continue
            except NoNodeError:
                continue
            for p, v in versions.items():
                ctx.state_written(TopicPartition(topic, p), replace(writes[p][0], zk_version=v))
            for tp, s, reg in done:
                log.info(
                    "%s: %s: replicas %s -> %s (adding %s, removing %s), leader %d -> %d, "
                    "ISR %s -> %s", tp, what, list(reg.replicas), list(s.assignment.replicas),
                    list(s.assignment.adding), list(s.assignment.removing), reg.leader,
                    s.state.leader, list(reg.isr), list(s.state.isr),
                )  # fmt: skip
            return results
        why = f"{topic}: the partition states kept changing; try again"
        return {TopicPartition(topic, p): ("REQUEST_TIMED_OUT", why) for p in partitions}


def _registration(current: Assignment, state: LeaderIsr) -> PartitionRegistration:
    return replace(
        zd.registration_of(current.replicas, state),
        adding_replicas=current.adding,
        removing_replicas=current.removing,
    )


def _state_changed(after: PartitionRegistration, before: PartitionRegistration) -> bool:
    return (after.leader, after.leader_epoch, after.isr) != (
        before.leader,
        before.leader_epoch,
        before.isr,
    )
