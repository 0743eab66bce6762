"""A broker's partition table over a log manager, without the rest of a broker: what the
in-process benches and tests of applying metadata to partitions drive."""

from __future__ import annotations

from pathlib import Path

from logkeel.config import BrokerConfig, TopicConfig
from logkeel.server.replica.context import ReplicaManagerContext
from logkeel.server.replica.partition_table import PartitionTable
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager

__all__ = ["partition_table_over"]


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
