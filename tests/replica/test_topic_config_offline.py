"""A topic whose configs cannot be resolved: its partitions go offline with the reason, not
served on defaults (min.insync.replicas=1 would silently weaken acks=all), and serve again once
the configs resolve."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from logkeel.cluster.metadata import PartitionState, TopicState
from logkeel.config import BrokerConfig, TopicConfig
from logkeel.server.replica.context import ReplicaManagerContext
from logkeel.server.replica.partition_table import PartitionTable
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition


def test_unresolvable_configs_take_the_partitions_offline(tmp_path: Path) -> None:
    logs = LogManager([tmp_path])
    logs.startup(start_background=False)
    broken = [True]
    broker = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)})

    def topic_config(name: str) -> TopicConfig:
        if broken[0]:
            raise ValueError("min.insync.replicas: 'two' is not an integer")
        return TopicConfig.from_broker(broker, {"min.insync.replicas": "2"})

    ctx = ReplicaManagerContext(
        node_id=1, metadata=None, log_manager=logs, topic_config=topic_config,  # type: ignore[arg-type]
        log_config=lambda _name: LogConfig(), num_io_threads=1,
    )  # fmt: skip
    table = PartitionTable(ctx)
    table.started = True
    state = TopicState("t", "id", {0: PartitionState("t", 0, [1, 2], 1, 0, [1, 2], 0)})
    try:
        table.apply_topic("t", state)
        p = table.get(TopicPartition("t", 0))
        assert p is not None
        assert p.state_error() == ErrorCode.kafka_storage_error
        assert p.offline_reason is not None and "'two' is not an integer" in p.offline_reason
        broken[0] = False
        table.apply_topic("t", state)
        assert p.state_error() is None and p.log is not None
        assert p.settings.min_insync_replicas == 2
    finally:
        logs.shutdown()
