"""The partitions this broker holds, kept in line with cluster metadata.

Applying a topic's metadata creates, updates or deletes its ``Partition`` objects and their
logs; it runs in the thread that changed the metadata (or on the IO threads at start-up),
never on the event loop. Leadership changes from a controller land here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from logkeel.cluster.metadata import TopicState
from logkeel.server.replica.context import ReplicaManagerContext
from logkeel.server.replica.isr_manager import IsrProposal
from logkeel.server.replica.partition import Partition
from logkeel.server.replica.topic_settings import TopicSettings
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["PartitionTable"]

log = logging.getLogger(__name__)

# New partitions' logs are created (and then served) this many at a time: one dir sync each.
CREATE_BATCH = 256
# Told each batch of new partitions once their logs exist (`apply_topic`).
Progress = Callable[[list[TopicPartition]], None]

# How the offline reason of a partition whose topic configs do not resolve begins.
_CONFIG_OFFLINE = "the configs of topic"


class PartitionTable:
    """One ``Partition`` per partition with a replica here; the map is read without a lock
    (single dict lookups) and changed under ``_lock``, never held across IO."""

    def __init__(self, ctx: ReplicaManagerContext) -> None:
        self._ctx = ctx
        self._partitions: dict[TopicPartition, Partition] = {}
        # The same partitions by topic and partition number (changed with ``_partitions``): a
        # publish of a 10,000-partition topic with a few moves went over every partition of
        # every topic and built a TopicPartition for each of its own.
        self._of_topic: dict[str, dict[int, Partition]] = {}
        self._lock = threading.RLock()
        # Serialises applying metadata changes (which create and delete logs).
        self._metadata_lock = threading.RLock()
        # After start-up, a partition missing from the map is new and gets an empty log.
        self.started = False
        # Each topic's configs as last applied to its partitions.
        self._applied_configs: dict[str, dict[str, str]] = {}

    def get(self, tp: TopicPartition) -> Partition | None:
        return self._partitions.get(tp)

    def all(self) -> list[Partition]:
        with self._lock:
            return list(self._partitions.values())

    def _settings(self, topic: str) -> TopicSettings | str:
        """The topic's settings, or why they cannot be resolved (its partitions go offline
        then: falling back to defaults would weaken them, min.insync.replicas=1 for one)."""
        try:
            return TopicSettings.from_topic_config(self._ctx.topic_config(topic))
        except Exception as exc:
            log.exception(
                "reading the configs of topic %s failed; its partitions go offline", topic
            )
            return f"{_CONFIG_OFFLINE} {topic} cannot be resolved: {exc}"

    def sync_all(self) -> None:
        """Builds every partition from metadata over the loaded logs (at start-up)."""
        for name, state in self._ctx.metadata.topics().items():
            self.apply_topic(name, state)
        lm = self._ctx.log_manager
        known = set(self._partitions)
        strays = [tp for tp in list(lm.logs) if tp not in known]
        for tp in strays:
            # Kept, not deleted: without a controller history we cannot tell a deleted topic
            # from metadata that was lost.
            log.warning("log %s has no topic in the metadata; it is not served", tp)

    def apply_topic(
        self, name: str, state: TopicState | None, progress: Progress | None = None
    ) -> list[TopicPartition]:
        """Brings this topic's partitions in line with ``state`` (None: deleted); returns the
        partitions it changed. ``progress``: told each batch of new partitions as soon as
        their logs are created (and then not returned), so that thousands of new partitions
        start serving batch by batch rather than after the last one."""
        with self._metadata_lock:
            return self._apply_topic_locked(name, state, progress)

    def _create_logs(self, batch: list[Partition], config: LogConfig | None) -> None:
        """The logs of ``batch``'s new partitions, created together (one dir sync for all);
        a partition whose log cannot be created goes offline with the reason."""
        lm = self._ctx.log_manager
        made = lm.create_logs([p.tp for p in batch], lambda _tp: config)
        failed_dirs: dict[str, KafkaStorageError] = {}
        for p in batch:
            plog = made[p.tp]
            if isinstance(plog, KafkaStorageError):
                p.offline_reason = str(plog)
                if plog.log_dir:
                    failed_dirs.setdefault(str(plog.log_dir), plog)
                continue
            p.log = plog
            p.become_leader_or_follower()
        for exc in failed_dirs.values():
            lm.handle_dir_failure(exc)

    def _apply_topic_locked(
        self, name: str, state: TopicState | None, progress: Progress | None
    ) -> list[TopicPartition]:
        lm = self._ctx.log_manager
        changed: list[TopicPartition] = []
        with self._lock:
            existing = self._of_topic.get(name, {})
            for part, gone in list(existing.items()):
                if state is None or part not in state.partitions:
                    self._partitions.pop(gone.tp, None)
                    del existing[part]
                    changed.append(gone.tp)
            if not existing:
                self._of_topic.pop(name, None)
        if state is None:
            self._applied_configs.pop(name, None)
            for tp in changed:
                try:
                    lm.delete_log(tp, checkpoint=False)
                except KafkaStorageError as exc:
                    lm.handle_dir_failure(exc)
                except Exception:
                    log.exception("deleting the log of %s failed", tp)
            if changed:
                lm.checkpoint_all()
                log.info("topic %s deleted: removed %d partition log(s)", name, len(changed))
            return changed

        config = None
        # Partitions new here: their logs are created together after the loop (``_create_logs``).
        to_create: list[Partition] = []
        settings = self._settings(name)
        # A controller moving hundreds of leaderships publishes the topic many times over, a
        # few partitions changed each time: only those are applied (and woken) again.
        same_configs = self._applied_configs.get(name) == state.configs
        known = self._of_topic.get(name, {})
        for part, pstate in state.partitions.items():
            p = known.get(part)
            if (
                same_configs
                and p is not None
                and p.log is not None
                and p.topic_id == state.topic_id
                # The same object first: a publish keeps each unchanged partition's state as it
                # was, and a dataclass's == builds two tuples (15 ms a publish at 10,000).
                and (p.applied is pstate or p.applied == pstate)
            ):
                continue
            tp = pstate.tp
            with self._lock:
                p = self._partitions.get(tp)
                # New: created while we run. A partition known at start-up whose log is
                # missing may have it in a dir that is offline: never replace it with an
                # empty log then (Kafka refuses to as well).
                is_new = self.started and p is None
                if p is None or p.topic_id != state.topic_id:
                    p = Partition(
                        tp,
                        state.topic_id,
                        self._ctx.node_id,
                        self._ctx.replication.isr,
                        self._ctx.isr_change_requested or _log_isr_request,
                    )
                    self._partitions[tp] = p
                    self._of_topic.setdefault(name, {})[tp.partition] = p
            moved = p.apply_state(pstate)
            p.resign_requested = self._ctx.resign_requested
            if self._ctx.shutting_down is not None:
                p.shutting_down = self._ctx.shutting_down
            p.live_brokers = self._ctx.live_brokers
            if self._ctx.node_id not in pstate.replicas:
                self._drop_removed_replica(p)
                changed.append(tp)
                continue
            if isinstance(settings, str):
                if p.offline_reason is None:
                    p.offline_reason = settings
                    p.log = None
                changed.append(tp)
                continue
            p.settings = settings
            if p.offline_reason is not None and p.offline_reason.startswith(_CONFIG_OFFLINE):
                p.offline_reason = None  # the configs resolve again: the log is opened below
            if p.log is None and p.offline_reason is None:
                reason = lm.offline_partitions.get(tp)
                offline_dirs = [str(d.path) for d in lm.dirs if not d.online]
                if reason is not None:
                    p.offline_reason = reason
                elif not is_new and lm.get_log(tp) is None and offline_dirs:
                    p.offline_reason = (
                        f"no log found, and log dir(s) {', '.join(offline_dirs)} are offline"
                    )
                else:
                    if config is None:
                        config = self._ctx.log_config(name)
                    to_create.append(p)
                    continue
            if p.log is not None and (moved or p.log.high_watermark < p.log.log_end_offset):
                p.become_leader_or_follower()
            changed.append(tp)
        for i in range(0, len(to_create), CREATE_BATCH):
            batch = to_create[i : i + CREATE_BATCH]
            self._create_logs(batch, config)
            if progress is None:
                changed += [p.tp for p in batch]
            else:
                progress([p.tp for p in batch])
        if isinstance(settings, str) or (same_configs and config is None):
            return changed
        # Config changes (or new logs): every log of the topic takes the settings.
        try:
            lm.update_config(name, config or self._ctx.log_config(name))
        except Exception:
            log.exception("applying the configs of topic %s failed", name)
        else:
            self._applied_configs[name] = dict(state.configs)
        return changed

    def _drop_removed_replica(self, p: Partition) -> None:
        """A replica reassigned away from this broker (KIP-455: the move completed or was
        cancelled) stops and its log is deleted, as Kafka's StopReplica with deletion; the
        assignment, the controller's, is what says it is no longer a replica."""
        lm = self._ctx.log_manager
        if p.log is None and lm.get_log(p.tp) is None:
            return
        p.log = None
        try:
            lm.delete_log(p.tp)
        except KafkaStorageError as exc:
            lm.handle_dir_failure(exc)
            return
        log.info("%s: no longer a replica here (reassigned): its log is deleted", p.tp)

    def check_isr_shrinks(self, now_ms: int) -> None:
        """Each leader proposes an ISR without the followers that fell behind (the hook), and
        asks to hand leadership over when it is too slow for them (beyond KIP-501)."""
        for p in self.all():
            try:
                p.maybe_shrink_isr(now_ms)
                p.maybe_resign(now_ms)
            except Exception:
                log.exception("checking the ISR of %s failed", p.tp)

    def check_resignations(self, now_ms: int) -> None:
        """The slow-leader check alone, for the leaders with a slow spell or a follower read
        under way: run every second so a slow leadership moves soon after it has been slow
        for replica.lag.time.max.ms, not up to half of that later (the full check's period)."""
        for p in self.all():
            try:
                if p.is_leader and p.followers.slow_suspected():
                    p.maybe_resign(now_ms)
            except Exception:
                log.exception("checking whether %s should hand leadership over failed", p.tp)

    def take_dir_online(self, log_dir: str, loaded: list[TopicPartition]) -> list[TopicPartition]:
        """A failed dir is back: the partitions that went offline with it (or found no log
        at start-up while it was offline) serve again from the log it now holds, or from a
        new log that catches up. Returns them."""
        back = set(loaded)
        with self._lock:
            returning = [
                p for p in self._partitions.values()
                if p.offline_reason is not None and (
                    p.tp in back
                    or p.offline_reason.startswith(f"log dir {log_dir} is offline")
                    or (p.offline_reason.startswith("no log found") and log_dir in p.offline_reason)
                )
            ]  # fmt: skip
            for p in returning:
                p.offline_reason = None
                p.log = None
        changed: list[TopicPartition] = []
        for name in sorted({p.tp.topic for p in returning}):
            changed += self.apply_topic(name, self._ctx.metadata.topic(name))
        for p in returning:
            if p.log is not None:
                p.become_leader_or_follower()
        return changed

    def take_dir_offline(self, log_dir: str, reason: str) -> list[TopicPartition]:
        """The partitions of a failed log dir answer KAFKA_STORAGE_ERROR from now on; returns
        them. In-memory only, so safe on any thread."""
        lm = self._ctx.log_manager
        failed: list[TopicPartition] = []
        with self._lock:
            for p in self._partitions.values():
                if p.offline_reason is not None:
                    continue
                in_dir = p.log is not None and str(p.log.log_dir) == log_dir
                if in_dir or p.tp in lm.offline_partitions:
                    p.offline_reason = f"log dir {log_dir} is offline: {reason}"
                    p.log = None
                    failed.append(p.tp)
        if failed:
            log.error(
                "%d partition(s) in %s are offline and answer KAFKA_STORAGE_ERROR: %s",
                len(failed),
                log_dir,
                ", ".join(str(tp) for tp in failed[:20]) + (" ..." if len(failed) > 20 else ""),
            )
        return failed


def _log_isr_request(proposal: IsrProposal) -> None:
    """Without a controller, an ISR change the leader wants is only reported."""
    log.info("%s: ISR change wanted (no controller to apply it): %s", proposal.tp, proposal.reason)
