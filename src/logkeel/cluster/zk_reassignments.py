"""Partition reassignments in ZooKeeper: the queue of AlterPartitionReassignments requests the
controller applies and answers (/logkeel/reassignments), and the controller's write of one
step of a move: a topic's assignment and its partitions' states in one transaction, checked
against the controller epoch and the versions they were decided on."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping

from kazoo.exceptions import NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_controller import ControllerEpoch, ControllerMoved
from logkeel.cluster.zk_data import LeaderIsr, TopicAssignment
from logkeel.cluster.zk_session import ZkSession, raise_first_failure
from logkeel.cluster.zk_topics import StalePartitionState
from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "ReassignmentRequest",
    "ReassignmentResults",
    "ReassignmentZnodes",
    "decode_request",
    "encode_request",
]

# Per partition: the target replicas, or None to cancel its move.
ReassignmentRequest = Mapping[TopicPartition, tuple[int, ...] | None]
# Per partition: Kafka's error name (None: done) and a message.
ReassignmentResults = dict[TopicPartition, tuple[str | None, str | None]]


def encode_request(request: ReassignmentRequest, results: ReassignmentResults | None) -> bytes:
    obj: dict[str, object] = {
        "version": 1,
        "partitions": [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "replicas": None if r is None else list(r),
            }
            for tp, r in sorted(request.items())
        ],  # fmt: skip
    }
    if results is not None:
        obj["results"] = [
            {"topic": tp.topic, "partition": tp.partition, "error": e, "message": m}
            for tp, (e, m) in sorted(results.items())
        ]
    return json.dumps(obj, separators=(",", ":")).encode()


def decode_request(data: bytes) -> tuple[ReassignmentRequest, ReassignmentResults | None]:
    obj = json.loads(data)
    request = {
        TopicPartition(str(p["topic"]), int(p["partition"])): (
            None if p["replicas"] is None else tuple(int(r) for r in p["replicas"])
        )
        for p in obj["partitions"]
    }
    results = None
    if "results" in obj:
        results = {
            TopicPartition(str(r["topic"]), int(r["partition"])): (r["error"], r["message"])
            for r in obj["results"]
        }
    return request, results


class ReassignmentZnodes(ZkSession):
    def run_reassignment(
        self, request: ReassignmentRequest, timeout_s: float
    ) -> ReassignmentResults:
        """Queues ``request`` for the controller and waits up to ``timeout_s`` for its answer;
        partitions it has not answered by then get REQUEST_TIMED_OUT."""
        path = str(
            self.zk.create(
                f"{zd.REASSIGNMENTS}/{zd.REASSIGNMENT_PREFIX}",
                encode_request(request, None),
                sequence=True,
                makepath=True,
            )
        )
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                try:
                    _, results = decode_request(self.zk.get(path)[0])
                except NoNodeError:
                    break
                if results is not None:
                    return results
                time.sleep(0.05)
        finally:
            self.delete_reassignment(path)
        why = f"the controller did not answer within {timeout_s:.0f}s"
        return {tp: ("REQUEST_TIMED_OUT", why) for tp in request}

    def reassignment_requests(self) -> list[tuple[str, bytes, float]]:
        """Every queued request, oldest first: (znode, its data, seconds since written)."""
        out = []
        now = time.time()
        for child in sorted(self.zk.get_children(zd.REASSIGNMENTS)):
            path = f"{zd.REASSIGNMENTS}/{child}"
            with contextlib.suppress(NoNodeError):
                data, stat = self.zk.get(path)
                out.append((path, data, now - stat.mtime / 1000))
        return out

    def delete_reassignment(self, path: str) -> None:
        with contextlib.suppress(NoNodeError):
            self.zk.delete(path)

    def answer_reassignment(
        self, path: str, request: ReassignmentRequest, results: ReassignmentResults
    ) -> None:
        with contextlib.suppress(NoNodeError):  # the requester gave up and deleted it
            self.zk.set(path, encode_request(request, results))

    def write_move(
        self,
        ctl: ControllerEpoch,
        assignment: TopicAssignment,
        assignment_version: int,
        states: Mapping[int, tuple[LeaderIsr, int]],
    ) -> dict[int, int]:
        """One step of a move: the topic's assignment and the states (each with the version
        it was decided on) in one transaction; returns each state's new version. Raises
        StalePartitionState if any changed meanwhile (decide again), ControllerMoved."""
        txn = self.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        txn.set_data(
            zd.topic_path(assignment.topic), zd.encode_topic(assignment), version=assignment_version
        )
        ordered = sorted(states.items())
        for p, (state, version) in ordered:
            txn.set_data(
                zd.partition_state_path(assignment.topic, p),
                zd.encode_partition_state(state),
                version=version,
            )
        results = txn.commit()
        stale = {i: StalePartitionState for i in range(1, len(results))}
        raise_first_failure(results, {0: ControllerMoved, **stale})
        return {p: int(stat.version) for (p, _), stat in zip(ordered, results[2:], strict=True)}
