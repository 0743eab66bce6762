"""What the replica manager and its partition table use from the broker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from logkeel.cluster.metadata import MetadataStore
from logkeel.config import TopicConfig
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager

__all__ = ["ReplicaManagerContext"]


@dataclass(frozen=True, slots=True)
class ReplicaManagerContext:
    """What the replica manager uses from the broker."""

    node_id: int
    metadata: MetadataStore
    log_manager: LogManager
    topic_config: Callable[[str], TopicConfig]
    log_config: Callable[[str], LogConfig]
    num_io_threads: int  # num.io.threads
