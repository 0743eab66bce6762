"""The cluster's ACL bindings and SCRAM credentials in ZooKeeper, each one document changed by
compare-and-set so concurrent changes on two brokers both land."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kazoo.exceptions import NodeExistsError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.acls import AclBinding, changed_bindings, decode_bindings, encode_bindings
from logkeel.cluster.zk_session import ZkSession

__all__ = ["SecurityZnodes"]


class SecurityZnodes(ZkSession):
    def acls(self, watch: Callable[[tuple[AclBinding, ...]], None]) -> None:
        """Calls ``watch`` with the cluster's ACL bindings now and after every change."""
        self.zk.DataWatch(zd.ACLS, lambda data, _stat: watch(decode_bindings(data)))

    def alter_acls(self, add: Iterable[AclBinding], remove: Iterable[AclBinding]) -> None:
        add, remove = list(add), list(remove)
        self._compare_and_set(
            zd.ACLS,
            lambda data: encode_bindings(changed_bindings(decode_bindings(data), add, remove)),
        )

    def scram_credentials(self, watch: Callable[[dict[str, dict[str, Any]]], None]) -> None:
        """Calls ``watch`` with every user's SCRAM credentials now and after every change."""
        self.zk.DataWatch(
            zd.SCRAM_CREDENTIALS, lambda data, _stat: watch(zd.decode_scram_credentials(data))
        )

    def scram_secret(self) -> bytes:
        """The cluster's decoy-credential secret, created by the first broker that asks."""
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zd.SCRAM_SECRET, secrets.token_bytes(32), makepath=True)
        data, _ = self.zk.get(zd.SCRAM_SECRET)
        return bytes(data)

    def set_scram_credentials(
        self, user: str, credentials: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Replaces ``user``'s credentials (empty: removes the user), over whatever another
        broker wrote meanwhile."""

        def change(data: bytes | None) -> bytes:
            users = zd.decode_scram_credentials(data)
            users.pop(user, None)
            if credentials:
                users[user] = {mech: dict(doc) for mech, doc in credentials.items()}
            return zd.encode_scram_credentials(users)

        self._compare_and_set(zd.SCRAM_CREDENTIALS, change)
