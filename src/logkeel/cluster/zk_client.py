"""Cluster metadata in ZooKeeper through kazoo, in Kafka's znode layout (`zk_data`): one client
per broker session, its operations grouped by the part of the layout they touch.

Every write a controller makes is one ZooKeeper transaction that also checks the version of
/controller_epoch it saw when it was elected (`zk_controller`); partition state writes are
further conditional on the state znode's version (the partition epoch, `zk_topics`), so no
concurrent change is lost. Calls block: from asyncio code run them in a thread.
"""

from __future__ import annotations

from logkeel.cluster.zk_broker_configs import BrokerConfigZnodes
from logkeel.cluster.zk_brokers import BrokerZnodes
from logkeel.cluster.zk_controller import ControllerZnodes
from logkeel.cluster.zk_elections import ElectionZnodes
from logkeel.cluster.zk_group_configs import GroupConfigZnodes
from logkeel.cluster.zk_history import HistoryZnodes
from logkeel.cluster.zk_quotas import QuotaZnodes
from logkeel.cluster.zk_reassignments import ReassignmentZnodes
from logkeel.cluster.zk_security import SecurityZnodes
from logkeel.cluster.zk_topics import TopicZnodes

__all__ = ["ZkMetadataClient"]


class ZkMetadataClient(
    BrokerZnodes,
    ControllerZnodes,
    TopicZnodes,
    ElectionZnodes,
    SecurityZnodes,
    QuotaZnodes,
    GroupConfigZnodes,
    ReassignmentZnodes,
    BrokerConfigZnodes,
    HistoryZnodes,
):
    """One broker's ZooKeeper session with every metadata operation on it (callers hold one
    object per session: the operations share its connection and its ephemeral znodes)."""
