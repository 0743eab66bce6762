"""The cluster's client quotas in ZooKeeper: one document of every entity's quotas, changed by
compare-and-set (like the ACLs and SCRAM credentials), watched by every broker.

Kafka keeps them as one znode per entity under /config/users and /config/clients with change
notifications under /config/changes; one document watched whole gives every broker the same
view with a single watch, at the price of Kafka's layout (Kafka's tools cannot read it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from logkeel.cluster.keyed_overrides import replaced_overrides
from logkeel.cluster.zk_session import ZkSession

__all__ = ["CLIENT_QUOTAS", "QuotaZnodes"]

# {"version": 1, "entities": {"users/alice/clients/<default>": {"producer_byte_rate": 1e6}}}
CLIENT_QUOTAS = "/logkeel/client_quotas"


def decode_quotas(data: bytes | None) -> dict[str, dict[str, float]]:
    return dict(json.loads(data).get("entities", {})) if data else {}


def encode_quotas(entities: Mapping[str, Mapping[str, float]]) -> bytes:
    return json.dumps({"version": 1, "entities": entities}, separators=(",", ":")).encode()


class QuotaZnodes(ZkSession):
    def client_quotas(self, watch: Callable[[dict[str, dict[str, float]]], None]) -> None:
        """Calls ``watch`` with every entity's quotas now and after every change."""
        self.zk.DataWatch(CLIENT_QUOTAS, lambda data, _stat: watch(decode_quotas(data)))

    def alter_client_quotas(self, changes: Mapping[str, Mapping[str, float]]) -> None:
        """Replaces the quotas of each entity in ``changes``, over what another broker wrote."""
        self._compare_and_set(
            CLIENT_QUOTAS,
            lambda data: encode_quotas(replaced_overrides(decode_quotas(data), changes)),
        )
