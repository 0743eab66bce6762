"""A broker's ZooKeeper session through kazoo, and the znode access patterns the operations on
Kafka's layout share: compare-and-set, sequential notifications, one child per broker.

Calls block: from asyncio code run them in a thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Self, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_handler import GivingUpClient, PollingHandler

__all__ = ["ZkSession", "ZooKeeperUnavailable", "raise_first_failure"]

T = TypeVar("T")

# The longest pause between two attempts to reach ZooKeeper again. kazoo doubles its pause after
# each failed attempt up to an hour: after ZooKeeper was away for ~6 s under load, a broker came
# back up to 9 s after it (a failover test missed its bound); ZooKeeper's Java client tries
# again within a second.
_RECONNECT_MAX_DELAY_S = 1.0


class ZooKeeperUnavailable(Exception):
    """ZooKeeper could not be reached within zookeeper.connection.timeout.ms."""


def raise_first_failure(results: list[object], path_errors: Mapping[int, type[Exception]]) -> None:
    """A kazoo transaction returns per-operation results; the failing one holds its error and
    the others RolledBackError. Map the failing operation to our exception."""
    for index, result in enumerate(results):
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            raise path_errors.get(index, type(result))(
                str(result) or type(result).__name__
            ) from result


class ZkSession:
    """One broker's ZooKeeper session. ``connect`` is Kafka's zookeeper.connect
    (`host:port[,host:port...][/chroot]`)."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18_000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self._handler = handler = PollingHandler()
        self.zk = GivingUpClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            handler=handler,
            connection_retry=KazooRetry(
                max_tries=-1, max_delay=_RECONNECT_MAX_DELAY_S, sleep_func=handler.sleep_func
            ),
        )

    def start(self) -> Self:
        try:
            self.zk.start(timeout=self.connection_timeout_ms / 1000)
        except KazooTimeoutError as e:
            self.zk.stop()
            self.zk.close()
            raise ZooKeeperUnavailable(
                f"could not connect to ZooKeeper at {self.connect} within "
                f"zookeeper.connection.timeout.ms={self.connection_timeout_ms}"
            ) from e
        for path in zd.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        return self

    def leaving(self) -> None:
        """From now on no call waits for a connection that is down: it fails with
        `zk_handler.GaveUp`, the calls already waiting included (a broker stopping while ZooKeeper
        is out of reach must still stop)."""
        self._handler.give_up_when(lambda: not self.zk.connected)

    def close(self) -> None:
        """Ends the session: every ephemeral node of it (registration, controller) goes."""
        self.zk.stop()
        self.zk.close()

    def add_session_listener(self, fn: Callable[[str], None]) -> None:
        """``fn`` gets "CONNECTED", "SUSPENDED" (connection lost, session may live on) or
        "LOST" (session expired: ephemeral nodes are gone). Called on kazoo's thread. After
        LOST kazoo connects again with a new session, in which the broker must register anew
        (and a controller must be elected again)."""
        self.zk.add_listener(lambda state: fn(str(state)))

    def cluster_id(self, proposed: str) -> str:
        """The cluster's id from /cluster/id, created with ``proposed`` by the first broker."""
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zd.CLUSTER_ID, zd.encode_cluster_id(proposed), makepath=True)
        data, _ = self.zk.get(zd.CLUSTER_ID)
        return zd.decode_cluster_id(data)

    def _compare_and_set(self, path: str, change: Callable[[bytes | None], bytes]) -> None:
        """Writes ``change(current data)`` (None: no znode yet) over the version it read; if
        another broker wrote first, the change is applied again to theirs."""
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                data, stat = None, None
            new = change(data)
            try:
                if stat is None:
                    self.zk.create(path, new, makepath=True)
                else:
                    self.zk.set(path, new, version=stat.version)
                return
            except (NodeExistsError, BadVersionError):
                continue

    def _notify(self, parent: str, prefix: str, data: bytes) -> str:
        return str(self.zk.create(f"{parent}/{prefix}", data, sequence=True))

    def _drain(self, parent: str, decode: Callable[[bytes], T]) -> list[T]:
        """Reads every notification under ``parent`` in sequence order, deleting each."""
        out: list[T] = []
        for child in sorted(self.zk.get_children(parent)):
            path = f"{parent}/{child}"
            try:
                data, _ = self.zk.get(path)
                self.zk.delete(path)
            except NoNodeError:
                continue  # another reader (an old controller) took it
            out.append(decode(data))
        return out

    def _by_broker(self, parent: str, decode: Callable[[bytes], T]) -> dict[int, T]:
        """The children of ``parent``, each named by a broker id, decoded."""
        out: dict[int, T] = {}
        for child in self.zk.get_children(parent):
            try:
                data, _ = self.zk.get(f"{parent}/{child}")
            except NoNodeError:
                continue
            out[int(child)] = decode(data)
        return out
