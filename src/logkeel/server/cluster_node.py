"""A broker's membership of a ZooKeeper cluster: its metadata cache (`ZkMetadataStore`), its
registration, and the `Controller` every broker runs (one of them active).

Order matters at both ends: the cache is loaded before the partitions are built from it; the
registration is written once the listener is bound (others may route clients here from then
on) and only then does the broker stand for controller; at shutdown the controller first moves
this broker's leaderships away, then this broker resigns as controller, and the session ends last.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from logkeel.cluster.controller import Controller
from logkeel.cluster.metadata import MetadataError, PartitionState
from logkeel.cluster.partition_state import PartitionRegistration
from logkeel.cluster.zk_client import ZkMetadataClient, ZooKeeperUnavailable
from logkeel.cluster.zk_store import ZkMetadataStore
from logkeel.config import BrokerConfig
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ClusterNode", "ClusterJoinError"]

log = logging.getLogger(__name__)


class ClusterJoinError(Exception):
    """ZooKeeper is unreachable, or holds another cluster than the log dirs belong to."""


class ClusterNode:
    def __init__(self, config: BrokerConfig, cluster_id: str | None) -> None:
        """Connects to ZooKeeper and loads the metadata cache (blocking: call before the event
        loop runs, or in a thread)."""
        self.config = config
        client = ZkMetadataClient(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            # Unset: the session timeout (ZkMetadataClient's default).
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
        )
        self.store = ZkMetadataStore(
            client, config.node_id, rack=config.broker_rack, cluster_id=cluster_id
        )
        try:
            self.store.start()
        except (ZooKeeperUnavailable, MetadataError) as exc:
            raise ClusterJoinError(str(exc)) from exc
        self.controller = Controller(
            client, config.node_id,
            unclean_leader_election=config.unclean_leader_election_enable,
            rebalance_interval_s=(
                config.leader_imbalance_check_interval_seconds
                if config.auto_leader_rebalance_enable
                else None
            ),
            imbalance_percentage=config.leader_imbalance_per_broker_percentage,
        )
        self._joined = False
        self._left = False
        self._isr_writer = ThreadPoolExecutor(1, thread_name_prefix="isr-writer")

    async def join(
        self, host: str, port: int, log_dir_ids: Iterable[str],
        offline: Iterable[TopicPartition] = (), offline_dir_ids: Iterable[str] = (),
    ) -> None:
        """Registers this broker (listener bound), reports the replicas it could not load, and
        starts its controller."""
        offline = list(offline)
        await asyncio.to_thread(self.store.register, host, port, list(log_dir_ids))
        if offline:
            await asyncio.to_thread(self.report_offline, offline, offline_dir_ids)
        self.controller.start()
        self._joined = True

    def isr_change_requested(
        self, tp: TopicPartition, proposal: PartitionRegistration, reason: str
    ) -> None:
        """A leader's ISR change (the replica manager's hook; may be called on the event loop):
        written to ZooKeeper on a thread of its own, conditional on the partition epoch."""
        self._isr_writer.submit(self._write_isr, tp, proposal, reason)

    def _write_isr(self, tp: TopicPartition, proposal: PartitionRegistration, reason: str) -> None:
        # AlterPartition semantics: the proposal carries the partition epoch it was made
        # against; the state it asks for is the next one.
        state = PartitionState(
            tp.topic, tp.partition, list(proposal.replicas), proposal.leader,
            proposal.leader_epoch, list(proposal.isr), proposal.partition_epoch + 1,
        )
        try:
            self.store.update_partition(state)
            log.info("%s: ISR -> %s (%s)", tp, list(proposal.isr), reason)
        except MetadataError as exc:
            # Stale: the state moved on meanwhile; the leader decides again from the new one.
            log.info("%s: ISR change %s refused: %s", tp, list(proposal.isr), exc)
        except Exception:  # noqa: BLE001 - ZooKeeper trouble must not take the broker down
            log.exception("%s: writing the ISR change failed", tp)

    def report_offline(self, partitions: Iterable[TopicPartition], dir_ids: Iterable[str]) -> None:
        """Replicas this broker cannot serve (blocking: from the IO thread that hit the error,
        or in a thread)."""
        try:
            self.store.report_offline_replicas(partitions, dir_ids)
        except Exception:  # noqa: BLE001 - ZooKeeper trouble must not take the broker down
            log.exception("could not report offline replicas to the controller")

    async def leave(self) -> None:
        """Controlled shutdown (when enabled), resignation, end of the session. Idempotent."""
        if self._left:
            return
        self._left = True
        if self._joined and self.config.controlled_shutdown_enable:
            timeout_s = self.config.zookeeper_session_timeout_ms / 1000
            moved = await asyncio.to_thread(self.store.controlled_shutdown, timeout_s)
            if moved:
                log.info("controlled shutdown: leaderships moved to other brokers")
            else:
                log.warning(
                    "controlled shutdown: leaderships not all moved within %.0fs", timeout_s
                )
        if self._joined:
            await asyncio.to_thread(self.controller.stop)
        await asyncio.to_thread(self._isr_writer.shutdown, wait=True, cancel_futures=True)
        await asyncio.to_thread(self.store.close)
