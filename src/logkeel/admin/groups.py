"""Consumer groups as `logkeel groups` and `logkeel console` ask for them: the groups of every
broker (ListGroups), a group's coordinator (FindCoordinator, waiting while it is chosen), its
members (DescribeGroups), committed offsets (OffsetFetch) and lag against each partition's log
end (ListOffsets). A refusal is ``AdminError``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.admin.group_offsets import assigned_partitions, offset_rows
from logkeel.admin.partition_info import LATEST, list_offsets, topics
from logkeel.admin.session import AdminError, AdminSession
from logkeel.server.network.client import BrokerConnectionError
from logkeel.server.protocol import ApiKey, request_schema
from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "committed",
    "coordinator",
    "describe_group",
    "group_doc",
    "partition_leaders",
    "list_groups",
    "request_type",
]

_COORDINATOR_WAIT_S = 15.0  # the first FindCoordinator may wait for __consumer_offsets


def request_type(api: ApiKey, version: int) -> Any:
    Request = request_schema(api, version)
    assert Request is not None
    return Request


def list_groups(
    session: AdminSession, skipped: Callable[[int, str], None] | None = None
) -> dict[str, tuple[str, str]]:
    """Every group of every live broker: (state, protocol type) by group id; a broker that
    cannot be reached is left out (``skipped`` is told)."""
    Request = request_type(ApiKey.LIST_GROUPS, 4)
    found = {}
    for node in sorted(session.brokers()):
        try:
            answer = session.send_to_node(node, Request(states_filter=()), missing_ok=True)
        except BrokerConnectionError as exc:
            if skipped is not None:
                skipped(node, str(exc))
            continue
        if answer.error_code != ErrorCode.none:
            raise AdminError(f"broker {node} refused ListGroups: {answer.error_code.name.upper()}")
        for g in answer.groups:
            found[str(g.group_id)] = (str(g.group_state), str(g.protocol_type))
    return found


def coordinator(session: AdminSession, group: str) -> str:
    """The address of the group's coordinator, waiting while it is being chosen (a first
    FindCoordinator creates __consumer_offsets)."""
    Request = request_type(ApiKey.FIND_COORDINATOR, 4)
    deadline = time.monotonic() + _COORDINATOR_WAIT_S
    while True:
        answer = session.send(Request(key_type=0, coordinator_keys=(group,)))
        found = answer.coordinators[0]
        if found.error_code == ErrorCode.none:
            return f"{found.host}:{int(found.port)}"
        retriable = found.error_code in (
            ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress
        )  # fmt: skip
        if not retriable or time.monotonic() > deadline:
            raise AdminError(f"{group}: no coordinator: {found.error_code.name.upper()}")
        time.sleep(0.2)


def describe_group(session: AdminSession, coordinator: str, group: str) -> Any:
    Request = request_type(ApiKey.DESCRIBE_GROUPS, 5)
    answer = session.send_to(
        coordinator, Request(groups=(group,), include_authorized_operations=False)
    ).groups[0]
    if answer.error_code != ErrorCode.none:
        raise AdminError(f"{group}: {answer.error_code.name.upper()}")
    return answer


def committed(session: AdminSession, coordinator: str, group: str) -> dict[TopicPartition, int]:
    Request = request_type(ApiKey.OFFSET_FETCH, 7)
    answer = session.send_to(
        coordinator, Request(group_id=group, topics=None, require_stable=False)
    )
    if answer.error_code != ErrorCode.none:
        raise AdminError(f"{group}: OffsetFetch: {answer.error_code.name.upper()}")
    return {
        TopicPartition(str(t.name), int(p.partition_index)): int(p.committed_offset)
        for t in answer.topics
        for p in t.partitions
        if p.error_code == ErrorCode.none and int(p.committed_offset) >= 0
    }


def partition_leaders(session: AdminSession, names: set[str]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(t.name, p.partition): p.leader
        for t in topics(session, tuple(sorted(names))).values()
        for p in t.partitions
    }


def group_doc(session: AdminSession, group: str) -> dict[str, Any]:
    address = coordinator(session, group)
    described = describe_group(session, address, group)
    if str(described.group_state) == "Dead":
        raise AdminError(f"consumer group {group!r} does not exist")
    assignments = {}
    member_docs = []
    for m in described.members:
        parts = (
            assigned_partitions(bytes(m.member_assignment))
            if described.protocol_type == "consumer" else None
        ) or []  # fmt: skip
        assignments[str(m.member_id)] = parts
        member_docs.append({
            "member_id": str(m.member_id), "group_instance_id": m.group_instance_id,
            "client_id": str(m.client_id), "host": str(m.client_host),
            "assignment": [str(tp) for tp in sorted(parts)],
        })  # fmt: skip
    offsets = committed(session, address, group)
    wanted = set(offsets) | {tp for parts in assignments.values() for tp in parts}
    leaders = {
        tp: leader for tp, leader in partition_leaders(session, {tp.topic for tp in wanted}).items()
        if tp in wanted
    }  # fmt: skip
    log_ends = list_offsets(session, leaders, LATEST)
    rows = offset_rows(offsets, assignments, log_ends)
    return {
        "group": group,
        "coordinator": address,
        "state": str(described.group_state),
        "protocol_type": str(described.protocol_type),
        "assignment_strategy": str(described.protocol_data),
        "members": member_docs,
        "offsets": [
            {
                "topic": r.tp.topic,
                "partition": r.tp.partition,
                "current_offset": r.current,
                "log_end_offset": r.log_end,
                "lag": r.lag,
                "member_id": r.member,
            }
            for r in rows
        ],  # fmt: skip
    }
