"""What brokers publish about themselves in ZooKeeper: their registrations, controlled
shutdowns, replicas that cannot serve, failed log dirs, reports of their replicas' logs, and
the producer id blocks they reserve."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_data import BrokerRegistration
from logkeel.cluster.zk_session import ZkSession, raise_first_failure
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["BrokerIdInUse", "BrokerZnodes"]


# A report's transactions stay well under ZooKeeper's 1 MB request limit (jute.maxbuffer).
_REPORT_TXN_BYTES = 256 * 1024


def _batches(
    ops: list[tuple[str, str, bytes]], limit: int
) -> Iterable[list[tuple[str, str, bytes]]]:
    batch: list[tuple[str, str, bytes]] = []
    size = 0
    for op in ops:
        if batch and size + len(op[2]) + len(op[1]) > limit:
            yield batch
            batch, size = [], 0
        batch.append(op)
        size += len(op[2]) + len(op[1])
    if batch:
        yield batch


class BrokerIdInUse(Exception):
    """Another live broker is registered with this broker.id."""


class BrokerZnodes(ZkSession):
    def register_broker(self, reg: BrokerRegistration) -> int:
        """Creates the broker's ephemeral registration and returns its broker epoch."""
        path = zd.broker_path(reg.broker_id)
        self._fence_crash_verdicts(reg.broker_id)
        try:
            self.zk.create(path, zd.encode_broker(reg), ephemeral=True)
        except NodeExistsError as e:
            # Ours when this session created it already (as Kafka's checked ephemeral create):
            # a create whose answer a dropped connection lost, or a second request to register
            # after a session expiry (the old registration's watch asks too). Refusing it made
            # the metadata worker retry forever, its view of the cluster frozen meanwhile.
            try:
                _, stat = self.zk.get(path)
            except NoNodeError:
                raise BrokerIdInUse(f"broker.id {reg.broker_id} registration vanished") from e
            session = self.zk.client_id
            if session is not None and stat.ephemeralOwner == session[0]:
                return int(stat.czxid)
            raise BrokerIdInUse(f"broker.id {reg.broker_id} is already registered at {path}") from e
        _, stat = self.zk.get(path)
        return int(stat.czxid)

    def _fence_crash_verdicts(self, broker_id: int) -> None:
        """Moves this broker id's crash verdict znode to a new version (rewriting what it
        holds) before registering: a declaration that this id's earlier registration crashed,
        checked by another broker before that registration went (its session expired, or a
        declaration was first) and committed only now, is conditional on the old version and
        fails, instead of deleting the registration made here (`crash_detection`)."""
        path = zd.crash_verdict_path(broker_id)
        try:
            data, _ = self.zk.get(path)
            self.zk.set(path, data)
        except NoNodeError:
            # Created meanwhile by a declaration: that moved it on as well.
            with contextlib.suppress(NodeExistsError):
                self.zk.create(path, zd.encode_crash_verdict(-1, broker_id))

    def update_broker(self, reg: BrokerRegistration) -> None:
        """Rewrites this broker's own registration (e.g. a log dir went offline)."""
        self.zk.set(zd.broker_path(reg.broker_id), zd.encode_broker(reg))

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        try:
            data, stat = self.zk.get(zd.broker_path(broker_id))
        except NoNodeError:
            return None
        return zd.decode_broker(broker_id, data, stat.czxid)

    def brokers(
        self, watch: Callable[[list[int]], None] | None = None
    ) -> dict[int, BrokerRegistration]:
        """Live brokers; with ``watch``, it is called with the live ids on every change."""
        if watch is not None:
            self.zk.ChildrenWatch(zd.BROKER_IDS, lambda ids: watch(sorted(int(i) for i in ids)))
        found = {}
        for child in self.zk.get_children(zd.BROKER_IDS):
            reg = self.broker(int(child))
            if reg is not None:
                found[reg.broker_id] = reg
        return found

    def request_controlled_shutdown(
        self, broker_id: int, broker_epoch: int, answered: Callable[[int, int | None], None]
    ) -> None:
        """Asks the controller to move this incarnation's leaderships away; ``answered(epoch,
        remaining)`` on kazoo's thread with each answer the controller writes (and at once with
        the request itself, unanswered). Ephemeral, so a broker that dies mid-shutdown leaves
        no stale request behind; one left by an earlier incarnation whose session lives on is
        overwritten (its answer is not this one's)."""
        path = zd.controlled_shutdown_path(broker_id)
        data = zd.encode_controlled_shutdown(broker_epoch)
        try:
            self.zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            self.zk.set(path, data)

        def fired(data: bytes | None, _stat: object) -> bool:
            if data is None:
                return False  # the session ended
            answered(*zd.decode_controlled_shutdown(data))
            return True

        self.zk.DataWatch(path, fired)

    def answer_controlled_shutdown_after(
        self, broker_id: int, broker_epoch: int, checks: Iterable[tuple[str, int]]
    ) -> Any:
        """Answers 0 (nothing left to move) in one transaction that first checks each
        (path, version): sent right behind the writes that give those versions, it applies
        after them or not at all. Returns the pending transaction (kazoo's async result)."""
        txn = self.zk.transaction()
        for path, version in checks:
            txn.check(path, version)
        txn.set_data(
            zd.controlled_shutdown_path(broker_id), zd.encode_controlled_shutdown(broker_epoch, 0)
        )
        return txn.commit_async()

    def answer_controlled_shutdowns(self, answers: Mapping[int, tuple[int, int]]) -> None:
        """The controller's answers to controlled shutdowns, pipelined: broker -> (its epoch,
        how many of its leaderships could still move; 0: done)."""
        sent = [
            self.zk.set_async(
                zd.controlled_shutdown_path(broker), zd.encode_controlled_shutdown(epoch, left)
            )
            for broker, (epoch, left) in answers.items()
        ]
        for pending in sent:
            with contextlib.suppress(NoNodeError):  # the broker is gone
                pending.get()

    def shutting_down(self, watch: Callable[[set[int]], None] | None = None) -> set[int]:
        """Brokers with a controlled shutdown under way."""
        if watch is not None:
            self.zk.ChildrenWatch(zd.CONTROLLED_SHUTDOWN, lambda ids: watch({int(i) for i in ids}))
        return {int(i) for i in self.zk.get_children(zd.CONTROLLED_SHUTDOWN)}

    def set_offline_replicas(self, broker_id: int, partitions: Iterable[TopicPartition]) -> None:
        """This broker's replicas that cannot serve (ephemeral: they go with the broker)."""
        path = zd.offline_replicas_path(broker_id)
        data = zd.encode_partitions(partitions)
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, ephemeral=True)

    def offline_replicas(self) -> dict[int, set[TopicPartition]]:
        """Every live broker's replicas that cannot serve."""
        return self._by_broker(zd.OFFLINE_REPLICAS, zd.decode_partitions)

    def notify_log_dir_failure(self, event: zd.LogDirEvent) -> str:
        """A log dir failed or came back (Kafka's notification, both ways: the controller
        reads the broker's offline replicas again)."""
        return self._notify(
            zd.LOG_DIR_EVENT_NOTIFICATION,
            zd.LOG_DIR_EVENT_PREFIX,
            zd.encode_log_dir_event(event),
        )

    def take_log_dir_failures(self) -> list[zd.LogDirEvent]:
        """Log dir notifications, in the order the brokers wrote them."""
        return self._drain(zd.LOG_DIR_EVENT_NOTIFICATION, zd.decode_log_dir_event)

    # The parts of this session's last report as written (None: not known, the next report
    # writes every part and removes those it no longer has).
    _report_parts: dict[str, bytes] | None = None
    _report_generation: int | None = None
    # The reports those parts were encoded from: an unchanged report is not encoded again
    # (every 5 s, each part's JSON was built only to find it unchanged).
    _report_logs: dict[TopicPartition, zd.ReplicaLogReport] | None = None

    def set_replica_logs(
        self, broker_id: int, generation: int, logs: Mapping[TopicPartition, zd.ReplicaLogReport]
    ) -> int:
        """This broker's report of its replicas' logs: the parts (`zd.replica_log_chunks`) that
        changed since its last report, then the report znode itself (the generation, and what
        the controller's watch hears), in transactions of bounded size; nothing when nothing
        changed. Returns the number of znodes written. Persistent: the last report of a broker
        that is gone still says whether a partition held data."""
        if (
            self._report_parts is not None
            and self._report_generation == generation
            and self._report_logs == logs
        ):
            return 0
        path = zd.replica_logs_path(broker_id)
        head = zd.encode_replica_logs(generation, {})
        parts = {
            name: zd.encode_replica_logs(0, chunk)
            for name, chunk in zd.replica_log_chunks(logs).items()
        }
        written = self._report_parts
        if written is None:
            try:
                names = self.zk.get_children(path)
            except NoNodeError:
                self.zk.create(path, head, makepath=True)
                names = []
            written = dict.fromkeys(names, b"")
        ops: list[tuple[str, str, bytes]] = [
            ("set" if name in written else "create", f"{path}/{name}", data)
            for name, data in sorted(parts.items())
            if written.get(name) != data
        ]
        ops += [("delete", f"{path}/{name}", b"") for name in sorted(written.keys() - parts.keys())]
        if not ops and self._report_generation == generation:
            return 0
        ops.append(("set", path, head))
        self._report_parts = None  # unknown until every transaction below went through
        self._report_logs = None
        for batch in _batches(ops, _REPORT_TXN_BYTES):
            txn = self.zk.transaction()
            for kind, znode, data in batch:
                if kind == "create":
                    txn.create(znode, data)
                elif kind == "set":
                    txn.set_data(znode, data)
                else:
                    txn.delete(znode)
            raise_first_failure(txn.commit(), {})
        self._report_parts = parts
        self._report_generation = generation
        self._report_logs = dict(logs)
        return len(ops)

    def replica_logs(
        self,
    ) -> dict[int, tuple[int, dict[TopicPartition, zd.ReplicaLogReport]]]:
        """Every broker's last report (gone brokers' too): broker -> (generation, logs)."""
        out = {}
        for child in self.zk.get_children(zd.REPLICA_LOGS):
            found = self.replica_logs_of(int(child))
            if found is not None:
                out[int(child)] = found
        return out

    def replica_logs_of(
        self, broker_id: int
    ) -> tuple[int, dict[TopicPartition, zd.ReplicaLogReport]] | None:
        """One broker's last report, its parts read together (None: it never reported)."""
        path = zd.replica_logs_path(broker_id)
        try:
            generation, logs = zd.decode_replica_logs(self.zk.get(path)[0])
            names = self.zk.get_children(path)
        except NoNodeError:
            return None
        for pending in [self.zk.get_async(f"{path}/{name}") for name in names]:
            try:
                logs.update(zd.decode_replica_logs(pending.get()[0])[1])
            except NoNodeError:
                continue  # removed by a report written meanwhile
        return generation, logs

    def replica_log_request(self, watch: Callable[[int], None] | None = None) -> int:
        """The generation of reports the controller last asked for (0: never)."""

        def parse(data: bytes | None) -> int:
            return int(data or b"0")

        if watch is not None:
            self.zk.DataWatch(zd.REPLICA_LOG_REQUEST, lambda data, _stat: watch(parse(data)))
        try:
            data, _ = self.zk.get(zd.REPLICA_LOG_REQUEST)
        except NoNodeError:
            return 0
        return parse(data)

    def request_replica_logs(self) -> int:
        """Asks every broker for a fresh report; returns the generation to wait for."""
        generation = self.replica_log_request() + 1
        data = str(generation).encode()
        try:
            self.zk.set(zd.REPLICA_LOG_REQUEST, data)
        except NoNodeError:
            self.zk.create(zd.REPLICA_LOG_REQUEST, data, makepath=True)
        return generation

    def reserve_producer_ids(self, broker_id: int, size: int) -> tuple[int, int]:
        """The next block of ``size`` producer ids for this broker, [start, end): a
        conditional write of /latest_producer_id_block, retried when another broker won."""
        while True:
            try:
                data, stat = self.zk.get(zd.PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self.zk.create(
                        zd.PRODUCER_ID_BLOCK, zd.encode_producer_id_block(broker_id, 0, size - 1)
                    )
                    return 0, size
                except NodeExistsError:
                    continue
            start = zd.decode_producer_id_block_end(data) + 1
            try:
                self.zk.set(
                    zd.PRODUCER_ID_BLOCK,
                    zd.encode_producer_id_block(broker_id, start, start + size - 1),
                    version=stat.version,
                )
            except BadVersionError:
                continue
            return start, start + size
