"""Topics and their partitions' state in ZooKeeper: assignments, configs, deletions, and each
partition's leader and ISR, written conditionally on the state znode's version (the partition
epoch) so no concurrent change is lost; ISR-change notifications tell the controller."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_controller import ControllerEpoch, ControllerMoved
from logkeel.cluster.zk_data import LeaderIsr, TopicAssignment
from logkeel.cluster.zk_session import ZkSession, raise_first_failure
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["StalePartitionState", "TopicZnodes"]


class StalePartitionState(Exception):
    """A partition state write was made against an older partition epoch (znode version)."""


class TopicZnodes(ZkSession):
    def topics(self, watch: Callable[[list[str]], None] | None = None) -> list[str]:
        if watch is not None:
            self.zk.ChildrenWatch(zd.TOPICS, lambda names: watch(sorted(names)))
        return sorted(self.zk.get_children(zd.TOPICS))

    def topic_assignment(self, topic: str) -> TopicAssignment | None:
        found = self.versioned_topic_assignment(topic)
        return None if found is None else found[0]

    def versioned_topic_assignment(self, topic: str) -> tuple[TopicAssignment, int] | None:
        """The assignment and its znode version, for a conditional change."""
        try:
            data, stat = self.zk.get(zd.topic_path(topic))
        except NoNodeError:
            return None
        return zd.decode_topic(topic, data), int(stat.version)

    def topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self.zk.get(zd.topic_config_path(topic))
        except NoNodeError:
            return {}
        return zd.decode_topic_config(data)

    def create_topic(self, assignment: TopicAssignment, configs: Mapping[str, str]) -> None:
        """What Kafka's admin path writes: the config, then the assignment the controller
        watches for. Raises NodeExistsError when the topic exists."""
        txn = self.zk.transaction()
        txn.create(zd.topic_config_path(assignment.topic), zd.encode_topic_config(configs))
        txn.create(zd.topic_path(assignment.topic), zd.encode_topic(assignment))
        raise_first_failure(txn.commit(), {})

    def set_topic_assignment(self, assignment: TopicAssignment, expected_version: int) -> bool:
        """CreatePartitions: the assignment with the new partitions added, only over the
        version it was read at (False: another change came first); the controller watches it
        and elects their first leaders."""
        try:
            self.zk.set(
                zd.topic_path(assignment.topic),
                zd.encode_topic(assignment),
                version=expected_version,
            )
        except BadVersionError:
            return False
        return True

    def set_topic_config(self, topic: str, configs: Mapping[str, str]) -> None:
        self.zk.set(zd.topic_config_path(topic), zd.encode_topic_config(configs))

    def request_topic_deletion(self, topic: str) -> None:
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zd.delete_topic_path(topic))

    def topics_to_delete(self) -> list[str]:
        return sorted(self.zk.get_children(zd.DELETE_TOPICS))

    def delete_topic(self, ctl: ControllerEpoch, topic: str) -> None:
        """The controller's last step of a deletion, once every replica is gone."""
        partitions = (
            self.zk.get_children(zd.partitions_path(topic))
            if self.zk.exists(zd.partitions_path(topic))
            else []
        )
        # Pipelined, not a round trip per partition one after the other (the controller's pass,
        # a controlled shutdown's moves among them, waits for the deletion).
        states = {
            p: self.zk.exists_async(zd.partition_state_path(topic, int(p))) for p in partitions
        }
        txn = self.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        for p in partitions:
            if states[p].get() is not None:
                txn.delete(zd.partition_state_path(topic, int(p)))
            txn.delete(zd.partition_path(topic, int(p)))
        if partitions:
            txn.delete(zd.partitions_path(topic))
        txn.delete(zd.topic_path(topic))
        txn.delete(zd.topic_config_path(topic))
        txn.delete(zd.delete_topic_path(topic))
        raise_first_failure(txn.commit(), {0: ControllerMoved})

    def partition_state(self, topic: str, partition: int) -> LeaderIsr | None:
        try:
            data, stat = self.zk.get(zd.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return zd.decode_partition_state(data, stat.version, stat.mzxid)

    def create_partition_states(
        self, ctl: ControllerEpoch, topic: str, states: Mapping[int, LeaderIsr]
    ) -> None:
        """New partitions' first leader and ISR (partition epoch 0)."""
        txn = self.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        if not self.zk.exists(zd.partitions_path(topic)):
            txn.create(zd.partitions_path(topic))
        for p, state in sorted(states.items()):
            txn.create(zd.partition_path(topic, p))
            txn.create(zd.partition_state_path(topic, p), zd.encode_partition_state(state))
        raise_first_failure(txn.commit(), {0: ControllerMoved})

    def update_partition_state(
        self,
        ctl: ControllerEpoch,
        topic: str,
        partition: int,
        state: LeaderIsr,
        expected_version: int,
    ) -> int:
        """Writes ``state`` only if the znode is still at ``expected_version`` (the partition
        epoch the decision was made against) and ``ctl`` is still the controller; returns the
        new version (the new partition epoch)."""
        path = zd.partition_state_path(topic, partition)
        txn = self.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        txn.set_data(path, zd.encode_partition_state(state), version=expected_version)
        results = txn.commit()
        raise_first_failure(results, {0: ControllerMoved, 1: StalePartitionState})
        stat = results[1]
        return int(stat.version) if isinstance(stat, ZnodeStat) else expected_version + 1

    def leader_update_partition_state(
        self, topic: str, partition: int, state: LeaderIsr, expected_version: int
    ) -> int:
        """A leader's own ISR change (Kafka's ZooKeeper-mode AlterPartition): conditional on the
        partition epoch only; the caller then sends an ISR-change notification."""
        [answer] = self.leader_update_partition_states(
            [(TopicPartition(topic, partition), state, expected_version)]
        )
        if isinstance(answer, Exception):
            raise answer
        return answer

    def leader_update_partition_states(
        self, writes: list[tuple[TopicPartition, LeaderIsr, int]]
    ) -> list[int | Exception]:
        """`leader_update_partition_state` for many partitions, every write sent before the
        first answer is awaited: each its new version, or StalePartitionState / NoNodeError /
        the connection's error."""
        pending = [
            self.zk.set_async(
                zd.partition_state_path(tp.topic, tp.partition),
                zd.encode_partition_state(state),
                version=expected,
            )
            for tp, state, expected in writes
        ]
        out: list[int | Exception] = []
        for (tp, _state, expected), answer in zip(writes, pending, strict=True):
            try:
                out.append(int(answer.get().version))
            except BadVersionError:
                out.append(StalePartitionState(f"{tp}: partition epoch {expected} is stale"))
            except Exception as exc:  # noqa: BLE001 - answered per partition
                out.append(exc)
        return out

    def notify_isr_change(self, partitions: Iterable[TopicPartition]) -> str:
        """One notification per ISR_CHANGE_CHUNK partitions (a broker back in thousands of
        ISRs must not write one znode past ZooKeeper's 1 MB); returns the first's path."""
        items = sorted(set(partitions))
        paths = [
            self._notify(
                zd.ISR_CHANGE_NOTIFICATION,
                zd.ISR_CHANGE_PREFIX,
                zd.encode_partitions(items[i : i + zd.ISR_CHANGE_CHUNK]),
            )
            for i in range(0, max(1, len(items)), zd.ISR_CHANGE_CHUNK)
        ]
        return paths[0]

    def take_isr_changes(self) -> set[TopicPartition]:
        changed: set[TopicPartition] = set()
        for tps in self._drain(zd.ISR_CHANGE_NOTIFICATION, zd.decode_partitions):
            changed |= tps
        return changed
