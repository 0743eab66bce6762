"""Dynamic broker configs in ZooKeeper, in Kafka's layout: /config/brokers/<id> and
/config/brokers/<default>, each ``{"version":1,"config":{name: value}}``, changed by
compare-and-set and watched by the broker they concern (`dynamic_broker_configs`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from logkeel.cluster.zk_session import ZkSession

__all__ = ["BROKER_CONFIGS", "BrokerConfigZnodes"]

BROKER_CONFIGS = "/config/brokers"


def _decode(data: bytes | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()} if data else {}


def _encode(configs: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(configs)}, separators=(",", ":")).encode()


class BrokerConfigZnodes(ZkSession):
    def watch_broker_configs(self, entity: str, watch: Callable[[dict[str, str]], None]) -> None:
        """Calls ``watch`` with the entity's (a broker id or <default>) configs now and after
        every change."""
        self.zk.DataWatch(f"{BROKER_CONFIGS}/{entity}", lambda data, _s: watch(_decode(data)))

    def alter_broker_configs(
        self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> None:
        """Writes ``change(current)`` over what another writer left."""
        self._compare_and_set(
            f"{BROKER_CONFIGS}/{entity}", lambda data: _encode(change(_decode(data)))
        )
