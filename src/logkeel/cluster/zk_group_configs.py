"""The groups' config overrides in ZooKeeper: one document of every group's overrides, changed
by compare-and-set and watched by every broker, as the client quotas are (`zk_quotas`), so the
coordinator of a group reads the same overrides wherever the group moves. (Kafka keeps group
configs in its KRaft metadata log only; ZooKeeper-era Kafka had none.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from logkeel.cluster.keyed_overrides import replaced_overrides
from logkeel.cluster.zk_session import ZkSession

__all__ = ["GROUP_CONFIGS", "GroupConfigZnodes"]

# {"version": 1, "groups": {"my-group": {"consumer.session.timeout.ms": "50000"}}}
GROUP_CONFIGS = "/logkeel/group_configs"


def decode_group_configs(data: bytes | None) -> dict[str, dict[str, str]]:
    return dict(json.loads(data).get("groups", {})) if data else {}


def encode_group_configs(groups: Mapping[str, Mapping[str, str]]) -> bytes:
    return json.dumps({"version": 1, "groups": groups}, separators=(",", ":")).encode()


class GroupConfigZnodes(ZkSession):
    def group_configs(self, watch: Callable[[dict[str, dict[str, str]]], None]) -> None:
        """Calls ``watch`` with every group's overrides now and after every change."""
        self.zk.DataWatch(GROUP_CONFIGS, lambda data, _stat: watch(decode_group_configs(data)))

    def alter_group_configs(self, changes: Mapping[str, Mapping[str, str]]) -> None:
        """Replaces the overrides of each group in ``changes``, over what another broker wrote."""
        self._compare_and_set(
            GROUP_CONFIGS,
            lambda data: encode_group_configs(
                replaced_overrides(decode_group_configs(data), changes)
            ),
        )
