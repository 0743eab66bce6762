"""Elections in ZooKeeper: the queue of elections operators ask the controller for (with their
results), Kafka's preferred-replica election request, and the record of elections after which
replicas lost records; why each offline partition waits."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.partition_state import ElectionRequest
from logkeel.cluster.zk_session import ZkSession
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ElectionZnodes"]


class ElectionZnodes(ZkSession):
    def submit_election(self, request: ElectionRequest) -> str:
        """Queues an election for the controller; returns the znode to read the results from."""
        return str(
            self.zk.create(
                f"{zd.ELECTIONS}/{zd.ELECTION_PREFIX}",
                zd.encode_election(request),
                sequence=True,
                makepath=True,
            )
        )

    def run_election(
        self, request: ElectionRequest, timeout_s: float
    ) -> dict[TopicPartition, tuple[str | None, str]]:
        """Queues ``request`` for the controller and waits up to ``timeout_s`` for its results;
        named partitions it has not answered by then get REQUEST_TIMED_OUT."""
        path = self.submit_election(request)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                done = self.election(path)
                if done is not None and done.results is not None:
                    return dict(done.results)
                time.sleep(0.05)
        finally:
            self.delete_election(path)
        why = f"the controller did not finish the election within {timeout_s:.0f}s"
        return {tp: ("REQUEST_TIMED_OUT", why) for tp in request.partitions or ()}

    def election(self, path: str) -> ElectionRequest | None:
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return zd.decode_election(data)

    def delete_election(self, path: str) -> None:
        with contextlib.suppress(NoNodeError):
            self.zk.delete(path)

    def elections(self) -> list[tuple[str, ElectionRequest | None, float]]:
        """Every queued election in order: (znode, request or None if unreadable, age in s)."""
        out = []
        now = time.time()
        for child in sorted(self.zk.get_children(zd.ELECTIONS)):
            path = f"{zd.ELECTIONS}/{child}"
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue
            try:
                request: ElectionRequest | None = zd.decode_election(data)
            except (ValueError, KeyError, TypeError):
                request = None
            out.append((path, request, now - stat.mtime / 1000))
        return out

    def set_election_results(self, path: str, request: ElectionRequest) -> None:
        with contextlib.suppress(NoNodeError):  # the requester gave up and deleted it
            self.zk.set(path, zd.encode_election(request))

    def request_preferred_election(self, partitions: Iterable[TopicPartition]) -> None:
        """Raises NodeExistsError while an earlier request is still pending, as Kafka does."""
        self.zk.create(
            zd.PREFERRED_REPLICA_ELECTION, zd.encode_partitions(partitions), makepath=True
        )

    def take_preferred_election(self) -> set[TopicPartition]:
        try:
            data, _ = self.zk.get(zd.PREFERRED_REPLICA_ELECTION)
            self.zk.delete(zd.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return set()
        return zd.decode_partitions(data)

    def record_election_loss(self, loss: zd.ElectionLoss) -> None:
        self.zk.create(f"{zd.ELECTION_LOSSES}/{zd.ELECTION_LOSS_PREFIX}",
                       zd.encode_election_loss(loss), sequence=True, makepath=True)  # fmt: skip

    def election_losses(self) -> list[zd.ElectionLoss]:
        """Every election loss the controllers recorded, oldest first."""
        try:
            children = sorted(self.zk.get_children(zd.ELECTION_LOSSES))
        except NoNodeError:
            return []
        out = []
        for child in children:
            with contextlib.suppress(NoNodeError):
                out.append(zd.decode_election_loss(self.zk.get(f"{zd.ELECTION_LOSSES}/{child}")[0]))
        return out

    def set_offline_reasons(self, reasons: Mapping[TopicPartition, str | None]) -> None:
        """Records why each partition is offline (None: it leads again, the record goes),
        pipelined: a pass that takes hundreds offline (the last in-sync replica shut down)
        waits for one round trip or two, not for three per partition."""
        if any(r is not None for r in reasons.values()):
            self.zk.ensure_path(zd.OFFLINE_REASONS)
        sent: list[tuple[str, bytes | None, Any]] = []
        for tp, reason in reasons.items():
            path = zd.offline_reason_path(tp)
            if reason is None:
                sent.append((path, None, self.zk.delete_async(path)))
            else:
                sent.append((path, reason.encode(), self.zk.set_async(path, reason.encode())))
        created: list[Any] = []
        for path, data, pending in sent:
            try:
                pending.get()
            except NoNodeError:
                if data is not None:
                    created.append(self.zk.create_async(path, data))
        for pending in created:
            with contextlib.suppress(NodeExistsError):  # another controller wrote it meanwhile
                pending.get()

    def offline_reasons(self) -> dict[TopicPartition, str]:
        """Each offline partition's reason, as the controller last decided it."""
        try:
            children = self.zk.get_children(zd.OFFLINE_REASONS)
        except NoNodeError:
            return {}
        out = {}
        for child in children:
            topic, _, partition = child.rpartition("-")
            with contextlib.suppress(NoNodeError, ValueError):
                data = self.zk.get(f"{zd.OFFLINE_REASONS}/{child}")[0]
                out[TopicPartition(topic, int(partition))] = data.decode(errors="replace")
        return out
