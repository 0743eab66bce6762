"""Leader elections an operator asks for, shared by `logkeel elect` and `logkeel console`:
Kafka's ElectLeaders (preferred, unclean) and a designated replica, which ElectLeaders has no
field for, handed to the controller through ZooKeeper (/logkeel/elections)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from logkeel.admin.session import nested
from logkeel.cluster.partition_state import ElectionRequest
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.server.protocol import ApiKey, request_schema
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["Results", "designated_election", "elect_leaders_request", "election_results"]

_ELECTION_TYPE = {"preferred": 0, "unclean": 1}

Results = dict[TopicPartition, tuple[str | None, str]]


def elect_leaders_request(kind: str, wanted: list[TopicPartition] | None, timeout: float) -> Any:
    """ElectLeaders v2 of ``kind`` (preferred, unclean) for ``wanted`` (None: every partition)."""
    Request = request_schema(ApiKey.ELECT_LEADERS, 2)
    assert Request is not None
    TopicPartitions = nested(Request, "TopicPartitions")
    return Request(
        election_type=i8(_ELECTION_TYPE[kind]),
        topic_partitions=None
        if wanted is None
        else tuple(
            TopicPartitions(topic=tp.topic, partitions=(i32(tp.partition),)) for tp in wanted
        ),
        timeout=datetime.timedelta(seconds=timeout),
    )


def election_results(response: Any) -> Results:
    """Each partition's (error name or None, message) of an ElectLeaders answer."""
    return {
        TopicPartition(str(r.topic), int(p.partition_id)): (
            None if p.error_code == ErrorCode.none else p.error_code.name.upper(),
            p.error_message or "",
        )
        for r in response.replica_election_results
        for p in r.partition_result
    }


def designated_election(
    connect: str, tp: TopicPartition, replica: int, force: bool, timeout: float
) -> Results:
    """``replica`` made the leader of ``tp`` by the controller of the cluster at ZooKeeper
    ``connect`` (``ZooKeeperUnavailable`` if it cannot be reached); the results it wrote."""
    client = ZkMetadataClient(connect, session_timeout_ms=10_000)
    client.start()
    try:
        request = ElectionRequest("designated", frozenset({tp}), replica, force)
        return client.run_election(request, timeout)
    finally:
        client.close()
