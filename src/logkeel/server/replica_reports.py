"""What this broker tells the controller about the replicas it holds: the ids of its log dirs
and which are offline, the replicas that cannot serve, and what each replica's log holds (for
elections that must not pick a replica whose storage was wiped)."""

from __future__ import annotations

from logkeel.cluster.metadata import MetadataStore
from logkeel.cluster.zk_data import ReplicaLogReport
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ReplicaReports"]


class ReplicaReports:
    """Reports read from the log manager and the metadata; thread-safe reads."""

    def __init__(self, node_id: int, metadata: MetadataStore, log_manager: LogManager) -> None:
        self._node_id = node_id
        self._metadata = metadata
        self._log_manager = log_manager

    def log_dir_ids(self, *, offline: bool = False) -> list[str]:
        """The ids of this broker's log dirs (with ``offline``, of those offline)."""
        return [
            d.meta.directory_id
            for d in self._log_manager.dirs
            if d.meta is not None and (not offline or not d.online)
        ]

    def offline_replicas(self) -> tuple[list[TopicPartition], list[str]]:
        """The replicas here that cannot serve, and the ids of the offline log dirs."""
        return list(self._log_manager.offline_partitions), self.log_dir_ids(offline=True)

    def replica_logs(self, broker_epoch: int) -> dict[TopicPartition, ReplicaLogReport]:
        """What each replica held here has in its log, against the partition state seen now
        (thread-safe reads: called on the cluster's writer thread). A replica with no log here
        is reported empty -- a wiped disk looks exactly like that -- unless a log dir is
        offline (its log may be there): then it is not reported, and cannot lead."""
        out = {}
        dirs_online = all(d.online for d in self._log_manager.dirs)
        for topic in list(self._metadata.topics().values()):
            for state in list(topic.partitions.values()):
                if self._node_id not in state.replicas:
                    continue
                plog = self._log_manager.get_log(state.tp)
                if plog is None:
                    if dirs_online and state.tp not in self._log_manager.offline_partitions:
                        out[state.tp] = ReplicaLogReport(
                            topic.topic_id, -1, 0, state.partition_epoch, broker_epoch
                        )
                    continue
                epoch = plog.leader_epochs.latest_epoch
                out[state.tp] = ReplicaLogReport(
                    topic.topic_id,
                    -1 if epoch is None else epoch,
                    plog.log_end_offset,
                    state.partition_epoch,
                    broker_epoch,
                    plog.high_watermark,
                    unflushed_lost=plog.unflushed_lost,
                )
        return out
