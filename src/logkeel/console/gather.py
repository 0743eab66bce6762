"""One poll of the cluster through the requests the admin commands use too (`admin/`):
`cluster_status.status_of` (brokers, log dirs, partitions; from ZooKeeper the election losses,
the controller's history, the replica to designate), `partition_info` (log end offsets) and
`groups` (each group's lag). Each poll uses an ``AdminSession`` of its own,
bootstrapping from the given list and every broker seen before, so a dead bootstrap broker is
passed over. Errors are the caller's to show: ``BrokerConnectionError``, ``ValueError``."""

from __future__ import annotations

from typing import Any

from logkeel.admin.cluster_status import status_of
from logkeel.admin.groups import group_doc, list_groups
from logkeel.admin.partition_info import LATEST, list_offsets
from logkeel.admin.session import AdminError, AdminSession
from logkeel.server.network.client import BrokerConnectionError, ClientSecurity
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["poll_cluster", "poll_groups"]

_CLIENT_ID = "logkeel-console"


def _admin(addresses: list[str], security: ClientSecurity, timeout_ms: int) -> AdminSession:
    unique = list(dict.fromkeys(addresses))
    return AdminSession(
        ",".join(unique), client_id=_CLIENT_ID, timeout_ms=timeout_ms, security=security
    )


def poll_cluster(
    addresses: list[str], security: ClientSecurity, *, with_losses: bool, timeout_ms: int = 5000
) -> dict[str, Any]:
    """`cluster status`'s data plus each partition's log end offset and size (its largest
    replica, from DescribeLogDirs)."""
    with _admin(addresses, security, timeout_ms) as admin:
        status = status_of(admin, with_losses=with_losses)
        leaders = {
            TopicPartition(p["topic"], p["partition"]): p["leader"] for p in status["partitions"]
        }
        ends = list_offsets(admin, leaders, LATEST)
    sizes: dict[str, int] = {}
    for b in status["brokers"]:
        for d in b["log_dirs"]:
            for name, size in d["replicas"].items():
                sizes[name] = max(size, sizes.get(name, 0))
    for p in status["partitions"]:
        p["log_end_offset"] = ends.get(TopicPartition(p["topic"], p["partition"]))
        p["size_bytes"] = sizes.get(f"{p['topic']}-{p['partition']}")
    for b in status["brokers"]:
        for d in b["log_dirs"]:
            del d["replicas"]  # per replica: the partitions view has them
    return status


def poll_groups(
    addresses: list[str], security: ClientSecurity, timeout_ms: int = 5000
) -> list[dict[str, Any]]:
    """`groups --describe --all-groups`'s documents; a group that could not be described has
    an ``error`` instead of its offsets (its coordinator down, say)."""
    docs = []
    with _admin(addresses, security, timeout_ms) as admin:
        for group, (state, _) in sorted(list_groups(admin).items()):
            try:
                docs.append(group_doc(admin, group))
            except BrokerConnectionError as exc:
                docs.append({"group": group, "state": state, "error": str(exc)})
            except AdminError as exc:
                docs.append({"group": group, "state": state, "error": str(exc)})
    return docs
