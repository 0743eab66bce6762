"""A broker's partition table over a log manager, without the rest of a broker: what the
in-process benches and tests of applying metadata to partitions drive."""

from __future__ import annotations

from pathlib import Path

from logkeel.cluster.metadata import PartitionState
from logkeel.config import BrokerConfig, TopicConfig
from logkeel.server.replica.context import ReplicaManagerContext
from logkeel.server.replica.isr_rules import IsrConfig
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.partition_table import PartitionTable
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["follower_partitions", "partition_table_over"]


def partition_table_over(logs: LogManager, log_dir: Path) -> PartitionTable:
    """Broker 1's partition table over ``logs`` (started), topic and log configs the defaults."""
    config = TopicConfig.from_broker(BrokerConfig({"node.id": "1", "log.dirs": str(log_dir)}), {})
    ctx = ReplicaManagerContext(
        node_id=1, metadata=None, log_manager=logs,  # type: ignore[arg-type]
        topic_config=lambda _n: config, log_config=lambda _n: LogConfig(), num_io_threads=1,
    )  # fmt: skip
    table = PartitionTable(ctx)
    table.started = True
    return table


def follower_partitions(
    logs: LogManager, topic: str, topic_id: str, n: int, *, node_id: int = 1, leader: int = 3
) -> list[Partition]:
    """``n`` partitions of ``topic`` that broker ``node_id`` follows from ``leader`` in leader
    epoch 0 (replicas and ISR 1, 2, 3), over new logs of ``logs`` (started)."""
    out = []
    for i in range(n):
        tp = TopicPartition(topic, i)
        p = Partition(tp, topic_id, node_id, IsrConfig(), lambda _proposal: None)
        p.shutting_down = frozenset
        p.log = logs.get_or_create_log(tp)
        p.apply_state(PartitionState(topic, i, [1, 2, 3], leader, 0, [1, 2, 3], 0))
        p.become_leader_or_follower()
        out.append(p)
    return out
