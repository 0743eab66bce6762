"""The broker: one object that owns the log manager, metadata, replica manager, group coordinator
and the network server, starts them in order and stops them in reverse.

It also registers the API families, each given only what it uses (``register_api_families``);
the few that read several of its parts take the broker through a protocol of just those
(``config``, ``metadata``, ``topic_configs``, ``ensure_topic``, ...).

Cluster id: ``meta.properties`` in the log dirs is the source of truth (it is what Kafka's own
tools read and what ties a dir to its cluster). The id found there is given to the metadata
store; only a brand-new broker takes the metadata store's (or a fresh) id, and the log manager
then writes it into every dir.

Start order: log manager (loading and recovery, in a thread), replica manager, group
coordinator, network server; ``stop`` goes the other way, so no request arrives at a component
that is already gone and the clean-shutdown marker is written last.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from logkeel.cluster.metadata import (
    INTERNAL_TOPICS,
    EmbeddedMetadataStore,
    MetadataError,
    MetadataStore,
    TopicState,
)
from logkeel.cluster.zk_data import EndPoint
from logkeel.config import BrokerConfig, TopicConfig
from logkeel.server.adopt_logs import adopt_stray_logs
from logkeel.server.api import acls as acls_api
from logkeel.server.api import client_quotas as client_quotas_api
from logkeel.server.api import configs as configs_api
from logkeel.server.api import consumer_groups as consumer_groups_api
from logkeel.server.api import elections as elections_api
from logkeel.server.api import fetch as fetch_api
from logkeel.server.api import groups as groups_api
from logkeel.server.api import log_dirs as log_dirs_api
from logkeel.server.api import metadata as metadata_api
from logkeel.server.api import offsets as offsets_api
from logkeel.server.api import produce as produce_api
from logkeel.server.api import producer_id as producer_id_api
from logkeel.server.api import producers as producers_api
from logkeel.server.api import reassignments as reassignments_api
from logkeel.server.api import sasl as sasl_api
from logkeel.server.api import scram_credentials as scram_api
from logkeel.server.api import topic_admin
from logkeel.server.api import topic_partitions as topic_partitions_api
from logkeel.server.api import transactions as transactions_api
from logkeel.server.api import txn_admin as txn_admin_api
from logkeel.server.api import txn_markers as txn_markers_api
from logkeel.server.api import versions as api_versions
from logkeel.server.authorization import RequestAuthorizer, exposed_listeners, refusal
from logkeel.server.cluster_node import ClusterJoinError, ClusterNode
from logkeel.server.group.coordinator import GroupCoordinator
from logkeel.server.group.log import BrokerOffsetsStore, InternalTopic
from logkeel.server.group.records import OFFSETS_TOPIC
from logkeel.server.handlers import HandlerRegistry
from logkeel.server.metrics import BrokerMetrics, MetricsSources
from logkeel.server.network.listeners import ListenerSet
from logkeel.server.network.security import listener_security
from logkeel.server.quota_rates import RateWindow
from logkeel.server.quotas import ClientQuotas
from logkeel.server.replica.context import (
    IsrChangeRequested,
    ReplicaManagerContext,
    ReplicationSettings,
)
from logkeel.server.replica.replica_manager import ReplicaManager
from logkeel.server.replica_reports import ReplicaReports
from logkeel.server.topic_configs import TopicConfigs
from logkeel.server.topic_deletions import finish_topic_deletions
from logkeel.server.txn.coordinator import TransactionCoordinator, TxnSettings
from logkeel.server.txn.markers import TxnMarkers
from logkeel.server.txn.records import TRANSACTION_STATE_TOPIC
from logkeel.storage import descriptors
from logkeel.storage.background_tasks import BackgroundIntervals
from logkeel.storage.log_dir import META_PROPERTIES, MetaProperties, MetaPropertiesError
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition, validate_topic_name

__all__ = ["Broker", "BrokerStartError", "register_api_families"]

log = logging.getLogger(__name__)

# The flusher wakes at most this often, whatever log.flush.scheduler.interval.ms says (its
# default is Long.MAX_VALUE, i.e. "never", which would also starve flush.ms of checks).
_MAX_FLUSH_CHECK_MS = 1_000
_MIN_BACKGROUND_INTERVAL_MS = 100


class BrokerStartError(Exception):
    """The broker could not start (e.g. its port is in use); the message says why."""


class Broker:
    """A Kafka-protocol broker built from a ``BrokerConfig``: a single node, or a member of a
    ZooKeeper cluster when ``zookeeper.connect`` is set.

    Nothing touches the network until ``start()`` (except connecting to ZooKeeper, which
    raises ``BrokerStartError`` when it cannot). ``metrics_port`` (None: off) serves
    Prometheus metrics over HTTP on the listener's host. ``metadata``: a metadata store shared
    by in-process brokers (tests); None means ZooKeeper's or embedded single-node metadata.
    ``isr_change_requested``: where this broker's leaders send the ISR changes they want (the
    controller's AlterPartition; in a cluster, a conditional write of the partition state); it
    must hand the proposal off without blocking.
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        metrics_port: int | None = None,
        metrics_host: str | None = None,
        metadata: MetadataStore | None = None,
        isr_change_requested: IsrChangeRequested | None = None,
    ) -> None:
        self.config = config
        self.node_id: int = config.node_id
        listener = config.listeners[0]
        self.listener_name = listener.name
        self.bind_host = listener.host or "0.0.0.0"
        advertised = next(
            (a for a in config.advertised_listeners if a.name == listener.name),
            config.advertised_listeners[0],
        )
        self._advertised_host = advertised.host or _default_advertised_host(listener.host)
        self._advertised_port = advertised.port
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self.started_at: float | None = None
        self._auto_create_lock = asyncio.Lock()
        self._started = False
        self._stopped = False

        cluster_id = _cluster_id_in_meta_properties(self.log_dirs)
        # A given store is shared by in-process brokers (tests); with zookeeper.connect the
        # broker joins a cluster; otherwise it is a single node with embedded metadata.
        self.cluster: ClusterNode | None = None
        self.metadata: MetadataStore
        if metadata is not None:
            self.metadata = metadata
        elif config.embedded_metadata:
            self.metadata = EmbeddedMetadataStore(
                self.log_dirs,
                self.node_id,
                self._advertised_host,
                self._advertised_port,
                cluster_id=cluster_id,
            )
        else:
            try:
                self.cluster = ClusterNode(config, cluster_id)
            except ClusterJoinError as exc:
                raise BrokerStartError(str(exc)) from exc
            self.metadata = self.cluster.store
            isr_change_requested = isr_change_requested or self.cluster.isr_manager.submit
        self.cluster_id: str = self.metadata.cluster_id
        self.topic_configs = TopicConfigs(config, self.metadata)

        self.log_manager = LogManager(
            self.log_dirs,
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            default_config=self.topic_configs.log_config_from(TopicConfig.from_broker(config)),
            config_for=self.topic_configs.log_config,
            recovery_threads_per_dir=config.num_recovery_threads_per_data_dir,
            intervals=_background_intervals(config),
            startup_validation=config.log_startup_validation,
            validation_rate_bytes_per_sec=config.log_startup_validation_rate_bytes_per_sec,
            recovery_sync_method=config.log_recovery_sync_method,
            alter_log_dirs_rate=config.replica_alter_log_dirs_io_max_bytes_per_second,
        )
        self.log_manager.add_dir_failure_listener(self._on_log_dir_failure)
        self.log_manager.offline_dirs.add_online_listener(self._on_log_dir_online)
        self.log_manager.add_partition_failure_listener(self._on_partition_failure)
        self._replica_reports = ReplicaReports(self.node_id, self.metadata, self.log_manager)

        replication = ReplicationSettings.from_broker_config(config)
        self.replica_manager = ReplicaManager(
            ReplicaManagerContext(
                node_id=self.node_id,
                metadata=self.metadata,
                log_manager=self.log_manager,
                topic_config=self.topic_configs.get,
                log_config=self.topic_configs.log_config,
                num_io_threads=config.num_io_threads,
                replication=replication,
                isr_change_requested=isr_change_requested,
                write_fence=(
                    self.cluster.store.write_fence.why_fenced if self.cluster is not None else None
                ),
                resign_requested=(
                    self.cluster.resign_leadership if self.cluster is not None else None
                ),
                shutting_down=self.cluster.shutting_down if self.cluster is not None else None,
                live_brokers=self.cluster.live_brokers if self.cluster is not None else None,
                leader_connection_failed=(
                    self.cluster.leader_connection_failed if self.cluster is not None else None
                ),
            )
        )
        self.log_manager.add_log_replaced_listener(self.replica_manager.on_log_replaced)
        self.metadata.watch_dynamic_broker_configs(replication.throttles.configure)
        self.group_coordinator = GroupCoordinator(self)
        self.producer_ids = producer_id_api.InitProducerIdApi(
            self.log_manager, self.metadata.reserve_producer_ids
        )
        txn_settings = TxnSettings.from_broker_config(config)
        self.txn_markers = TxnMarkers(
            self.node_id,
            self.metadata,
            self.replica_manager.appends,
            self._on_txn_completed,
            replication.inter_broker,
        )
        self.txn_coordinator = TransactionCoordinator(
            txn_settings,
            BrokerOffsetsStore(self, txn_settings.topic),
            self.metadata,
            self.replica_manager,
            self.producer_ids.next_producer_id,
            self.txn_markers,
        )
        self.producer_ids.txn_coordinator = self.txn_coordinator

        self.authorizer = RequestAuthorizer(config, self.metadata)
        self.quotas = ClientQuotas(
            self.metadata,
            RateWindow(config.quota_window_num, config.quota_window_size_seconds),
        )
        self.registry = HandlerRegistry(
            gate=lambda ctx, request, rule: refusal(self.authorizer, ctx, request, rule),
            meter=self.quotas.request_meter,
        )
        register_api_families(self.registry, self)

        self.server = ListenerSet(
            self.registry, config, lambda name: listener_security(config, name, self.metadata)
        )

        self.metrics = BrokerMetrics(
            MetricsSources(
                served_api_keys=self.registry,
                metadata=self.metadata,
                log_manager=self.log_manager,
                connection_count=lambda: self.server.connection_count,
            )
        )
        self.server.add_observer(self.metrics.observe_request)
        if self.cluster is not None:
            self.cluster.controller.on_truncation = self.metrics.election_truncated
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host or self.bind_host
        self._metrics_server: Any = None

    # -- identity -------------------------------------------------------------------------------

    @property
    def advertised(self) -> tuple[str, int]:
        """(host, port) clients are told to connect to; the bound port if configured as 0."""
        return self.advertised_for(self.listener_name)

    def advertised_for(self, listener_name: str) -> tuple[str, int]:
        """The advertised endpoint of one listener (the listener itself if not advertised)."""
        bound = next(b for b in self.config.listeners if b.name == listener_name)
        advertised = next(
            (a for a in self.config.advertised_listeners if a.name == listener_name), bound
        )
        host = advertised.host or _default_advertised_host(bound.host)
        port = advertised.port
        if port == 0:
            with contextlib.suppress(RuntimeError):  # not bound yet
                port = self.server.port_of(listener_name)
        return host, port

    def _endpoints(self) -> list[EndPoint]:
        """Every advertised endpoint, with its security protocol (the registration's)."""
        out = []
        for listener in self.config.advertised_listeners:
            host, port = self.advertised_for(listener.name)
            out.append(
                EndPoint(listener.name, host, port, self.config.security_protocol(listener.name))
            )
        return out

    @property
    def port(self) -> int:
        """The bound port (after ``start()``)."""
        return self.server.port

    # -- topics ---------------------------------------------------------------------------------

    async def ensure_topic(self, name: str) -> TopicState | None:
        """The topic, auto-created (``num.partitions``, ``default.replication.factor``) when
        ``auto.create.topics.enable`` allows; None if it does not exist and may not be created
        (auto-creation off, an illegal or colliding name, or no log dir to hold it)."""
        state = self.metadata.topic(name)
        if state is not None or not self.config.auto_create_topics_enable:
            return state
        if validate_topic_name(name) is not None or name in INTERNAL_TOPICS:
            # Internal topics are created by their owners, with their own settings.
            return None
        async with self._auto_create_lock:
            state = self.metadata.topic(name)
            if state is not None:
                return state
            try:
                state = await asyncio.to_thread(
                    self.metadata.create_topic,
                    name,
                    self.config.num_partitions,
                    self.config.default_replication_factor,
                    {},
                )
            except MetadataError as exc:
                if exc.error_name == "TOPIC_ALREADY_EXISTS":
                    return self.metadata.topic(name)
                log.warning("cannot auto-create topic %s: %s", name, exc)
                return None
        log.info("auto-created topic %s with %d partition(s)", name, len(state.partitions))
        return state

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Loads the logs, starts the replica manager, group coordinator and listener.

        Raises ``BrokerStartError`` (after undoing what had started) if the listener cannot
        bind; storage failures of single dirs do not stop the start (those dirs are offline).
        """
        if self._started:
            raise RuntimeError("broker already started")
        self.started_at = time.time()
        t0 = time.monotonic()
        budget = self.log_manager.descriptors = descriptors.configure()
        report = await asyncio.to_thread(self.log_manager.startup)
        replicas = len(self.log_manager.logs)
        log.info("%s", budget.describe(replicas))
        refusal = budget.refusal(replicas)
        if refusal is not None:
            await asyncio.to_thread(self.log_manager.shutdown)
            raise BrokerStartError(refusal)
        await asyncio.to_thread(finish_topic_deletions, self.metadata, self.log_manager)
        await asyncio.to_thread(
            adopt_stray_logs,
            self.metadata,
            self.log_manager,
            {
                OFFSETS_TOPIC: InternalTopic.offsets(self.config),
                TRANSACTION_STATE_TOPIC: self.txn_coordinator.settings.topic,
            },
            single_node=self.cluster is None,
        )
        self.metrics.record_startup(report)
        if not self.log_manager.online_dirs:
            await asyncio.to_thread(self.log_manager.shutdown)
            raise BrokerStartError(
                "no log dir is usable: "
                + "; ".join(f"{d}: {why}" for d, why in report.offline_dirs)
            )
        started: list[Callable[[], Any]] = []
        try:
            await self.replica_manager.start()
            started.append(self.replica_manager.stop)
            await self.group_coordinator.start()
            started.append(self.group_coordinator.stop)
            await self.txn_coordinator.start()
            started.append(self.txn_coordinator.stop)
            try:
                await self.server.start()
            except OSError as exc:
                failed = self.server.failed
                raise BrokerStartError(
                    _bind_error(failed.host, failed.requested_port, exc)
                ) from exc
            self._started = True
            for exposed in exposed_listeners(self.config):
                log.warning(
                    "listener %s accepts unauthenticated PLAINTEXT clients from other machines "
                    "and no authorizer is set (authorizer.class.name): anyone who can reach it "
                    "may read, write and delete every topic",
                    exposed,
                )
            cluster = self.cluster
            if cluster is not None:
                self.replica_manager.add_partition_listener(self._on_partitions_changed)
                reports = self._replica_reports
                await cluster.join(
                    *self.advertised,
                    reports.log_dir_ids(),
                    *reports.offline_replicas(),
                    replica_logs=lambda: reports.replica_logs(cluster.store.broker_epoch),
                    endpoints=self._endpoints(),
                )
            if self.metrics_port is not None:
                try:
                    self._metrics_server = self.metrics.serve(self.metrics_host, self.metrics_port)
                except OSError as exc:
                    await self.server.stop()
                    self._started = False
                    raise BrokerStartError(
                        "metrics endpoint: "
                        + _bind_error(self.metrics_host, self.metrics_port, exc)
                    ) from exc
        except BaseException:
            if self.cluster is not None:
                with contextlib.suppress(Exception):
                    await self.cluster.leave()
            for stop in reversed(started):
                with contextlib.suppress(Exception):
                    await stop()
            await asyncio.to_thread(self.log_manager.shutdown)
            self._stopped = True
            raise
        self.metrics.record_started(time.monotonic() - t0)
        host, port = self.advertised
        log.info(
            "logkeel broker %d (cluster %s) listening on %s:%d, advertised as %s:%d; log dirs: %s",
            self.node_id,
            self.cluster_id,
            self.bind_host,
            self.server.port,
            host,
            port,
            ", ".join(str(d) for d in self.log_dirs),
        )

    async def stop(self, timeout: float = 30.0) -> None:
        """Clean shutdown: stop accepting, finish in-flight requests, stop the coordinator and
        replica manager, then flush and checkpoint every log and write the clean-shutdown
        marker. Safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        log.info("shutting down broker %d", self.node_id)
        if self.cluster is not None:
            try:
                await self.cluster.leave()
            except Exception:
                log.exception("error leaving the cluster")
        if self._started:
            # Parked long polls are answered now, or they would hold the stop until their deadline.
            self.replica_manager.prepare_shutdown()
            await self.server.stop(timeout)
        if self._metrics_server is not None:
            await asyncio.to_thread(_close_metrics_server, self._metrics_server)
            self._metrics_server = None
        for name, component in (
            ("transaction coordinator", self.txn_coordinator),
            ("group coordinator", self.group_coordinator),
            ("replica manager", self.replica_manager),
        ):
            try:
                await component.stop()
            except Exception:
                # The logs must still be flushed and marked clean; one component's bug must not
                # cost a full recovery at the next start.
                log.exception("error stopping the %s", name)
        await asyncio.to_thread(self.log_manager.shutdown)
        self._started = False
        log.info("broker %d shut down", self.node_id)

    def _on_txn_completed(
        self, producer_id: int, partitions: list[TopicPartition], committed: bool
    ) -> None:
        """A transaction's markers are written: its offsets in ``__consumer_offsets`` partitions
        become visible (commit) or are dropped (abort)."""
        for tp in partitions:
            if tp.topic == OFFSETS_TOPIC:
                self.group_coordinator.complete_txn(producer_id, tp.partition, committed)

    def _on_partitions_changed(self, tps: list[TopicPartition]) -> None:
        """A partition held here lost its leader: report this replica's log against the new
        state at once, so the controller can elect from it without waiting."""
        assert self.cluster is not None
        for tp in tps:
            p = self.replica_manager.partition(tp)
            if p is not None and p.leader_id < 0:
                self.cluster.report_replica_logs()
                return

    # -- storage failures -----------------------------------------------------------------------

    def _on_partition_failure(self, tp: TopicPartition, reason: str) -> None:
        """One partition's log went offline for an error that is not a device fault (its
        dir keeps serving): it answers KAFKA_STORAGE_ERROR from now on."""
        self.replica_manager.on_partition_failure(tp, reason)

    def _on_log_dir_online(self, log_dir: str, loaded: list[TopicPartition]) -> None:
        """A failed dir is healthy again and loaded (beyond KIP-18, without a restart): its
        partitions serve again; in a cluster the controller is told they can be replicas
        again (they rejoin the ISR once caught up) and gets their logs' report."""
        self.metrics.log_dir_online(log_dir)
        self.replica_manager.on_log_dir_online(log_dir, loaded)
        if self.cluster is not None:
            self.cluster.report_offline(
                *self._replica_reports.offline_replicas(), log_dir=log_dir, online=True,
                reason=f"back online, {len(loaded)} partitions loaded",
            )  # fmt: skip
            self.cluster.report_replica_logs()

    def _on_log_dir_failure(self, log_dir: str, reason: str) -> None:
        """Called by the log manager when a dir goes offline, in the thread that hit the error
        (an IO or metadata thread: the replica manager never lets it happen on the event
        loop); the replica manager makes its partitions answer KAFKA_STORAGE_ERROR (memory
        only; waiting requests are woken through the loop). In a cluster the controller is then
        told through ZooKeeper, so it elects other leaders for them (KIP-18)."""
        self.metrics.log_dir_failed(log_dir)
        self.replica_manager.on_log_dir_failure(log_dir, reason)
        if self.cluster is not None:
            self.cluster.report_offline(
                *self._replica_reports.offline_replicas(), log_dir=log_dir, reason=reason
            )


def register_api_families(registry: HandlerRegistry, broker: Broker) -> None:
    """Registers every API family, each given only what it uses."""
    api_versions.register(registry)
    metadata_api.register(registry, broker)
    topic_partitions_api.register(registry, broker)
    topic_admin.register(registry, broker)
    configs_api.register(registry, broker)
    log_dirs_api.register(registry, broker.log_manager)
    elections_api.register(registry, broker.metadata)
    reassignments_api.register(registry, broker.metadata)
    produce_api.register(
        registry,
        broker.metadata,
        broker.replica_manager.appends,
        broker.ensure_topic,
        broker.authorizer,
        broker.txn_coordinator.verify_partition,
        broker.quotas,
    )
    fetch_api.register(
        registry, broker.config, broker.metadata, broker.replica_manager.fetches,
        broker.authorizer, broker.quotas,
    )  # fmt: skip
    offsets_api.register(registry, broker.replica_manager.offsets, broker.authorizer)
    producer_id_api.register(registry, broker.producer_ids)
    groups_api.register(
        registry, broker, broker.group_coordinator, broker.txn_coordinator, broker.authorizer
    )
    consumer_groups_api.register(
        registry, broker.metadata, broker.group_coordinator, broker.authorizer
    )
    transactions_api.register(
        registry,
        broker.metadata,
        broker.txn_coordinator,
        broker.group_coordinator,
        broker.authorizer,
    )
    txn_markers_api.register(registry, broker.txn_markers)
    txn_admin_api.register(registry, broker.txn_coordinator, broker.authorizer)
    producers_api.register(registry, broker.replica_manager, broker.metadata, broker.authorizer)
    sasl_api.register(
        registry,
        broker.config.connection_failed_authentication_delay_ms,
        lambda: broker.metrics.failed_authentications.inc(),
    )
    scram_api.register(registry, broker.metadata)
    acls_api.register(registry, broker.metadata, broker.authorizer)
    client_quotas_api.register(registry, broker.metadata)


def _cluster_id_in_meta_properties(log_dirs: list[Path]) -> str | None:
    for d in log_dirs:
        try:
            return MetaProperties.parse((d / META_PROPERTIES).read_text()).cluster_id
        except (OSError, MetaPropertiesError, UnicodeDecodeError):
            continue
    return None


def _background_intervals(config: BrokerConfig) -> BackgroundIntervals:
    def bounded(ms: int) -> int:
        return max(_MIN_BACKGROUND_INTERVAL_MS, ms)

    return BackgroundIntervals(
        flush_check_ms=bounded(min(config.log_flush_scheduler_interval_ms, _MAX_FLUSH_CHECK_MS)),
        recovery_checkpoint_ms=bounded(config.log_flush_offset_checkpoint_interval_ms),
        retention_check_ms=bounded(config.log_retention_check_interval_ms),
        recovery_flush_ms=bounded(config.log_recovery_checkpoint_interval_ms),
        # 0 (probing off) stays 0.
        dir_recovery_check_ms=config.log_dir_recovery_check_interval_ms
        and bounded(config.log_dir_recovery_check_interval_ms),
    )


def _default_advertised_host(bind_host: str | None) -> str:
    """Kafka advertises the machine's canonical host name for a wildcard listener; loopback is
    the one answer that always works for a local broker, so use that when bound to all."""
    if bind_host in (None, "", "0.0.0.0", "::"):
        return "127.0.0.1"
    return bind_host


def _bind_error(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"cannot listen on {host}:{port}: the address is already in use"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def _close_metrics_server(server: Any) -> None:
    httpd, thread = server
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)
