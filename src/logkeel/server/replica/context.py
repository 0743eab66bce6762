"""What the replica manager and its partition table use from the broker."""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass, field

from logkeel.cluster.metadata import MetadataStore
from logkeel.config import BrokerConfig, TopicConfig
from logkeel.server.network.inter_broker import InterBroker, inter_broker
from logkeel.server.replica.isr_manager import IsrProposal
from logkeel.server.replica.isr_rules import IsrConfig
from logkeel.server.replica.replication_quota import ReplicationThrottles
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["IsrChangeRequested", "ReplicaManagerContext", "ReplicationSettings"]

# The leader's hook for an ISR change it wants (an expansion seen on a follower's fetch, or a
# shrink found by the periodic check): in a cluster `IsrManager.submit`, which tells the
# proposal's owner (the partition) how it ended.
IsrChangeRequested = Callable[[IsrProposal], None]


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    """The broker configs of follower fetching and ISR tracking (Kafka's names)."""

    fetch_max_bytes: int = 1_048_576  # replica.fetch.max.bytes
    fetch_response_max_bytes: int = 10_485_760  # replica.fetch.response.max.bytes
    fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    fetch_min_bytes: int = 1  # replica.fetch.min.bytes
    fetch_backoff_ms: int = 1_000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms
    num_fetchers: int = 1  # num.replica.fetchers
    isr: IsrConfig = IsrConfig()
    # Where and how fetchers reach leaders (inter.broker.listener.name and its security).
    inter_broker: InterBroker = InterBroker()
    # The dynamic {leader,follower}.replication.throttled.rate bounds and their rates.
    throttles: ReplicationThrottles = field(default_factory=ReplicationThrottles, compare=False)

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> ReplicationSettings:
        def get(name: str) -> int:
            return int(config.get(name))

        return cls(
            fetch_max_bytes=get("replica.fetch.max.bytes"),
            fetch_response_max_bytes=get("replica.fetch.response.max.bytes"),
            fetch_wait_max_ms=get("replica.fetch.wait.max.ms"),
            fetch_min_bytes=get("replica.fetch.min.bytes"),
            fetch_backoff_ms=get("replica.fetch.backoff.ms"),
            socket_timeout_ms=get("replica.socket.timeout.ms"),
            num_fetchers=max(1, get("num.replica.fetchers")),
            isr=IsrConfig(
                replica_lag_time_max_ms=get("replica.lag.time.max.ms"),
                follower_fetch_pending_reads_insync_enable=bool(
                    config.get("follower.fetch.pending.reads.insync.enable")
                ),
                replica_read_time_insync_factor=float(
                    config.get("replica.read.time.insync.factor")
                ),
                follower_fetch_process_time_max_ms=get("follower.fetch.process.time.max.ms"),
            ),
            inter_broker=inter_broker(config),
        )


@dataclass(frozen=True, slots=True)
class ReplicaManagerContext:
    """What the replica manager uses from the broker."""

    node_id: int
    metadata: MetadataStore
    log_manager: LogManager
    topic_config: Callable[[str], TopicConfig]
    log_config: Callable[[str], LogConfig]
    num_io_threads: int  # num.io.threads
    replication: ReplicationSettings = ReplicationSettings()
    # The controller's seam for ISR changes; None: proposals are only logged.
    isr_change_requested: IsrChangeRequested | None = None
    # Why this broker may not take writes as a leader now (cut off from ZooKeeper), or None.
    write_fence: Callable[[], str | None] | None = None
    # The controller's seam for a leader too slow for its followers (beyond KIP-501); None:
    # a single node, nobody to hand leadership to.
    resign_requested: Callable[[TopicPartition, str], None] | None = None
    # The brokers in a controlled shutdown (KIP-841: a leader never proposes them for its ISR).
    shutting_down: Callable[[], Set[int]] | None = None
    # The registered brokers (a gone one is never proposed for the ISR); None: a single node.
    live_brokers: Callable[[], Set[int]] | None = None
    # Told when a follower's connection to its leader fails: the crash detection probes at
    # once (`CrashDetector.suspect`); None: a single node.
    leader_connection_failed: Callable[[], object] | None = None
