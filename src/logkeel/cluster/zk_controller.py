"""The controller's office in ZooKeeper: /controller (who holds it) and /controller_epoch,
whose znode version every write of a controller checks, so a controller that lost its office
cannot change anything (Kafka's controller-epoch zkVersion check)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_session import ZkSession, raise_first_failure

__all__ = ["ControllerEpoch", "ControllerMoved", "ControllerZnodes"]


class ControllerMoved(Exception):
    """The write was made by a controller whose epoch is no longer current."""


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """What a controller proves its office with: its epoch and the /controller_epoch znode
    version that every one of its writes checks."""

    broker_id: int
    epoch: int
    zk_version: int


class ControllerZnodes(ZkSession):
    def controller(self, watch: Callable[[int | None], None] | None = None) -> int | None:
        if watch is not None:
            self.zk.DataWatch(
                zd.CONTROLLER,
                lambda data, _stat: watch(None if data is None else zd.decode_controller(data)),
            )
        try:
            data, _ = self.zk.get(zd.CONTROLLER)
        except NoNodeError:
            return None
        return zd.decode_controller(data)

    def controller_epoch(self) -> tuple[int, int]:
        """(epoch, znode version); (0, -1) before any controller was elected."""
        try:
            data, stat = self.zk.get(zd.CONTROLLER_EPOCH)
        except NoNodeError:
            return 0, -1
        return zd.decode_controller_epoch(data), int(stat.version)

    def try_become_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Creates the ephemeral /controller and increments /controller_epoch in one transaction;
        None when another broker is controller (or won the race)."""
        if not self.zk.exists(zd.CONTROLLER_EPOCH):
            with contextlib.suppress(NodeExistsError):
                self.zk.create(zd.CONTROLLER_EPOCH, zd.encode_controller_epoch(0))
        epoch, version = self.controller_epoch()
        txn = self.zk.transaction()
        txn.create(
            zd.CONTROLLER, zd.encode_controller(broker_id, int(time.time() * 1000)), ephemeral=True
        )
        txn.set_data(zd.CONTROLLER_EPOCH, zd.encode_controller_epoch(epoch + 1), version=version)
        results = txn.commit()
        if any(isinstance(r, (NodeExistsError, BadVersionError)) for r in results):
            return None
        raise_first_failure(results, {})
        return ControllerEpoch(broker_id, epoch + 1, version + 1)

    def resign_controller(self, ctl: ControllerEpoch) -> None:
        txn = self.zk.transaction()
        txn.check(zd.CONTROLLER_EPOCH, ctl.zk_version)
        txn.delete(zd.CONTROLLER)
        raise_first_failure(txn.commit(), {0: ControllerMoved})
