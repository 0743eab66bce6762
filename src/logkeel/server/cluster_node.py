"""A broker's membership of a ZooKeeper cluster: its metadata cache (`ZkMetadataStore`), its
registration, and the `Controller` every broker runs (one of them active).

Order matters at both ends: the cache is loaded before the partitions are built from it; the
registration is written once the listener is bound (others may route clients here from then
on) and only then does the broker stand for controller. At shutdown (`leave`):

1. the controlled-shutdown request (ZooKeeper's /admin/controlled_shutdown/<id>, with this
   broker's epoch, which every broker watches: KIP-841, no leader proposes this broker for an
   ISR from then on) and the wait until this broker's own view shows its leaderships moved
   (after the controller answered that none is left to move, those no live replica outside
   the shutdown could take are not waited for); ISR writes still go out;
2. the periodic replica-log report is cancelled and the controller stops (resigns);
3. the ISR manager stops: proposals made after this are answered STOPPED, never written;
4. the report writer's executor shuts down (a report asked for later is skipped);
5. the metadata worker stops, the partition-state watches close, the ZooKeeper session ends.

Nothing is submitted to an executor after it stopped: the ISR manager has its own thread and
refuses work once stopped; report and resign submissions after step 4 are skipped. The broker's
whole order is in ARCHITECTURE.md ("Shutdown order").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from logkeel.cluster.controller import Controller
from logkeel.cluster.metadata import MetadataError, PartitionState, TopicState
from logkeel.cluster.partition_state import ElectionRequest
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_data import EndPoint, LogDirEvent, ReplicaLogReport
from logkeel.cluster.zk_session import ZooKeeperUnavailable
from logkeel.cluster.zk_store import ZkMetadataStore
from logkeel.config import BrokerConfig
from logkeel.server.replica import isr_rules
from logkeel.server.replica.isr_manager import IsrManager, IsrProposal, IsrRefused
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["ClusterNode", "ClusterJoinError"]

log = logging.getLogger(__name__)

# What this broker's replicas' logs hold, per partition (for the controller's elections).
ReplicaLogs = Callable[[], Mapping[TopicPartition, ReplicaLogReport]]
# Besides on request and when a partition goes offline, reports are refreshed this often.
_REPORT_INTERVAL_S = 5.0


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
            client,
            config.node_id,
            unclean_leader_election=config.unclean_leader_election_enable,
            unclean_wait_ms=config.unclean_leader_election_wait_ms,
            rebalance_interval_s=(
                config.leader_imbalance_check_interval_seconds
                if config.auto_leader_rebalance_enable
                else None
            ),
            imbalance_percentage=config.leader_imbalance_per_broker_percentage,
        )
        self.controller.on_states_written = self.store.states_written
        self.store.hold_state_reads = lambda: self.controller.writing
        self.controller.crash_detector.listener = config.inter_broker_listener
        self._joined = False
        self._left = False
        # This broker's leaders' ISR changes, written in batches on a thread of their own.
        self.isr_manager = IsrManager(self._write_isrs)
        # KIP-841: the brokers in a controlled shutdown, as the ZooKeeper watch last saw them.
        self._shutting_down: frozenset[int] = frozenset()
        # One thread for this broker's other writes to ZooKeeper that must not wait on the
        # event loop: replica-log reports, requests to resign a leadership.
        self._isr_writer = ThreadPoolExecutor(1, thread_name_prefix="zk-writer")
        self._replica_logs: ReplicaLogs | None = None
        self._report_generation = 0
        self._report_task: asyncio.Task[None] | None = None

    async def join(
        self,
        host: str,
        port: int,
        log_dir_ids: Iterable[str],
        offline: Iterable[TopicPartition] = (),
        offline_dir_ids: Iterable[str] = (),
        replica_logs: ReplicaLogs | None = None,
        endpoints: Sequence[EndPoint] = (),
    ) -> None:
        """Registers this broker (listeners bound; every one of ``endpoints``, so that the
        others find its inter-broker listener and clients the one they came in on), reports
        the replicas it could not load and (``replica_logs``) what its replicas' logs hold,
        and starts its controller."""
        offline = list(offline)
        await asyncio.to_thread(
            functools.partial(
                self.store.register, host, port, list(log_dir_ids), endpoints=endpoints
            )
        )
        await asyncio.to_thread(self.store.client.shutting_down, self._on_shutting_down)
        self.isr_manager.start()
        if offline:
            await asyncio.to_thread(self.report_offline, offline, offline_dir_ids)
        if replica_logs is not None:
            self._replica_logs = replica_logs
            # The watch fires at once: the first report goes out before the controller starts.
            await asyncio.to_thread(self.store.client.replica_log_request, self._on_report_request)
            self._report_task = asyncio.get_running_loop().create_task(self._report_regularly())
        self.controller.start()
        self._joined = True

    # -- replica-log reports (what unclean and designated elections rank replicas by) ----------

    def _on_report_request(self, generation: int) -> None:
        self._report_generation = max(self._report_generation, generation)
        self.report_replica_logs()

    def report_replica_logs(self) -> None:
        """Writes this broker's report soon, on the writer thread (any thread may call it)."""
        with contextlib.suppress(RuntimeError):  # leaving the cluster: the writer is shut down
            self._isr_writer.submit(self._write_report)

    def _write_report(self) -> None:
        if self._replica_logs is None or self._left:
            return
        try:
            self.store.client.set_replica_logs(
                self.config.node_id, self._report_generation, self._replica_logs()
            )
        except Exception:
            log.exception("could not report this broker's replica logs")

    async def _report_regularly(self) -> None:
        # Reports outlive their broker: the last one says whether a partition ever held data,
        # which is how a replica that comes back empty is recognised as wiped.
        while True:
            await asyncio.sleep(_REPORT_INTERVAL_S)
            self.report_replica_logs()

    def _on_shutting_down(self, ids: set[int]) -> None:
        self._shutting_down = frozenset(ids)

    def shutting_down(self) -> frozenset[int]:
        """The brokers in a controlled shutdown (KIP-841: never proposed for an ISR)."""
        return self._shutting_down

    def leader_connection_failed(self) -> None:
        """A follower's connection to its leader failed: the crash detection probes now."""
        self.controller.crash_detector.suspect()

    def live_brokers(self) -> frozenset[int]:
        """The registered brokers (one gone is never proposed for an ISR)."""
        return frozenset(b.node_id for b in self.store.brokers())

    def _write_isrs(self, proposals: list[IsrProposal]) -> list[BaseException | None]:
        """The ISR manager's write of a batch of leaders' proposals: each checked by the
        AlterPartition rules against the state and brokers this broker knows
        (`isr.validate_isr_write`), then all written at once, each conditional on the
        partition epoch it was made against (AlterPartition semantics: the state it asks for
        is the next one). Each answered None (written) or IsrRefused (dropped) or the error."""
        out: list[BaseException | None] = [None] * len(proposals)
        live = self.live_brokers()
        topics = self.store.topics()
        to_write: list[tuple[int, PartitionState]] = []
        for i, proposal in enumerate(proposals):
            try:
                to_write.append((i, self._checked_isr(proposal, topics, live)))
            except IsrRefused as exc:
                out[i] = exc
        answers = self.store.update_partitions([state for _i, state in to_write])
        for (i, _state), answer in zip(to_write, answers, strict=True):
            if isinstance(answer, MetadataError) and answer.error_name == "INVALID_UPDATE_VERSION":
                out[i] = IsrRefused(str(answer), stale=True)
            else:
                out[i] = answer
        return out

    def _checked_isr(
        self, proposal: IsrProposal, topics: Mapping[str, TopicState], live: frozenset[int]
    ) -> PartitionState:
        """The state to write for ``proposal``; IsrRefused when the rules drop it."""
        tp = proposal.tp
        topic = topics.get(tp.topic)
        current = topic.partitions.get(tp.partition) if topic is not None else None
        if current is None:
            raise IsrRefused(f"{tp} is not in the metadata", stale=True)
        decision = isr_rules.validate_isr_write(
            current.registration(), proposal.state, self.config.node_id,
            live=live, shutting_down=self._shutting_down,
        )  # fmt: skip
        if not decision.changed:
            stale = decision.error in ("INVALID_UPDATE_VERSION", "FENCED_LEADER_EPOCH")
            raise IsrRefused(decision.reason, stale=stale)
        p = proposal.state
        return PartitionState(
            tp.topic, tp.partition, list(p.replicas), p.leader, p.leader_epoch, list(p.isr),
            p.partition_epoch + 1,
        )  # fmt: skip

    def resign_leadership(self, tp: TopicPartition, reason: str) -> None:
        """This broker, leading ``tp``, is too slow for its followers (beyond KIP-501): the
        controller hands leadership to an in-sync follower (any thread; written on the writer
        thread)."""
        with contextlib.suppress(RuntimeError):  # leaving the cluster
            self._isr_writer.submit(self._resign, tp, reason)

    def _resign(self, tp: TopicPartition, reason: str) -> None:
        request = ElectionRequest("resign", frozenset({tp}), self.config.node_id, reason=reason)
        try:
            error, why = self.store.client.run_election(request, 10.0).get(
                tp, ("REQUEST_TIMED_OUT", "no answer")
            )
        except Exception:
            log.exception("%s: asking to resign the leadership failed", tp)
            return
        if error is None:
            log.warning("%s: leadership handed over (%s): %s", tp, reason, why)
        else:
            log.warning("%s: could not hand leadership over: %s (%s)", tp, error, why)

    def report_offline(
        self,
        partitions: Iterable[TopicPartition],
        dir_ids: Iterable[str],
        *,
        log_dir: str | None = None,
        online: bool = False,
        reason: str = "",
    ) -> None:
        """Replicas this broker cannot serve (blocking: from the IO thread that hit the error,
        or in a thread), after ``log_dir`` failed or (``online``) came back."""
        event = LogDirEvent(self.config.node_id, log_dir, online, reason, int(time.time() * 1000))
        try:
            self.store.report_offline_replicas(partitions, dir_ids, event)
        except Exception:
            log.exception("could not report offline replicas to the controller")

    async def leave(self) -> None:
        """Controlled shutdown (when enabled), resignation, end of the session. Idempotent.
        Bounded with ZooKeeper out of reach: no step waits for it to come back, and a step
        that fails does not keep the others (the session's end above all) from running."""
        if self._left:
            return
        self._left = True
        self.store.client.leaving()
        steps: list[tuple[str, float]] = []
        started = time.monotonic()

        async def step(name: str, fn: Callable[[], object]) -> object:
            nonlocal started
            try:
                return await asyncio.to_thread(fn)
            except Exception:
                log.exception("leaving the cluster: %s failed", name)
                return None
            finally:
                now = time.monotonic()
                steps.append((name, now - started))
                started = now

        if self._joined and self.config.controlled_shutdown_enable:
            timeout_s = self.config.zookeeper_session_timeout_ms / 1000
            moved = await step(
                "controlled shutdown",
                lambda: self.store.controlled_shutdown(timeout_s, self.shutting_down),
            )
            if moved:
                log.info("controlled shutdown: leaderships moved to other brokers")
            else:
                log.warning(
                    "controlled shutdown: leaderships not all moved within %.0fs", timeout_s
                )
        if self._report_task is not None:
            self._report_task.cancel()
        if self._joined:
            await step("controller", self.controller.stop)

        def stop_isr_writes() -> None:
            self.isr_manager.stop()
            self._isr_writer.shutdown(wait=True, cancel_futures=True)

        await step("ISR and report writers", stop_isr_writes)
        await step("session", self.store.close)
        log.info("left the cluster: %s", ", ".join(f"{name} {took:.3f}s" for name, took in steps))
