"""The message browser: records of one partition from its leader (Fetch v12,
``read_committed``: the leader stops at the last stable offset and names the aborted
transactions, whose records are left out here as a consumer leaves them out), decoded by the
project's record codec. Read-only: a Fetch as a consumer without a group."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i64

from logkeel.admin.partition_info import EARLIEST, list_offsets, topics
from logkeel.admin.session import AdminSession, nested
from logkeel.records.batch import BatchHeader
from logkeel.records.control import ControlRecordType, decode_control_key
from logkeel.records.record import Record, iter_batches
from logkeel.server.protocol import ApiKey, request_schema
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["BrowseError", "committed_records", "read_partition", "shown_bytes"]

_READ_COMMITTED = 1
_MAX_BYTES = 1024 * 1024


class BrowseError(ValueError):
    """What the page is told instead of records (unknown partition, no leader, ...)."""


def shown_bytes(data: bytes | None) -> dict[str, Any] | None:
    """Bytes as the page shows them: UTF-8 text when they are that, and hex always."""
    if data is None:
        return None
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"text": text, "hex": data.hex(), "size": len(data)}


def committed_records(
    batches: Iterable[tuple[BatchHeader, list[Record]]], aborted: Iterable[tuple[int, int]]
) -> list[Record]:
    """The records a read_committed consumer returns: no control records, and no record of a
    transaction the leader lists as aborted ((producer id, first offset)) up to its abort
    marker."""
    pending = sorted(aborted, key=lambda a: a[1])
    open_aborts: set[int] = set()
    kept: list[Record] = []
    for header, records in batches:
        while pending and pending[0][1] <= header.last_offset:
            open_aborts.add(pending.pop(0)[0])
        if header.is_control:
            if records and decode_control_key(records[0].key) == ControlRecordType.ABORT:
                open_aborts.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in open_aborts:
            continue
        kept.extend(records)
    return kept


def read_partition(
    admin: AdminSession,
    topic: str,
    partition: int,
    *,
    offset: int | None = None,
    timestamp_ms: int | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """Up to ``limit`` committed records of ``topic``-``partition`` from ``offset`` (or the
    first at or after ``timestamp_ms``; neither: the earliest)."""
    found = topics(admin, (topic,)).get(topic)
    part = next((p for p in found.partitions if p.partition == partition), None) if found else None
    if part is None:
        raise BrowseError(f"{topic}-{partition} does not exist")
    if part.leader < 0 or part.leader not in admin.brokers():
        raise BrowseError(f"{topic}-{partition} has no live leader now")
    tp = TopicPartition(topic, partition)
    start = offset
    if start is None:
        at = EARLIEST if timestamp_ms is None else timestamp_ms
        start = list_offsets(admin, {tp: part.leader}, at)[tp]
        if start is None:
            return {"topic": topic, "partition": partition, "leader": part.leader,
                    "records": [], "note": "no record at or after that time"}  # fmt: skip
    Request = request_schema(ApiKey.FETCH, 12)
    assert Request is not None
    Topic, Partition = nested(Request, "FetchTopic"), nested(Request, "FetchPartition")
    answer = admin.send_to_node(
        part.leader,
        Request(
            max_wait=datetime.timedelta(0), min_bytes=i32(0), max_bytes=i32(_MAX_BYTES),
            isolation_level=i8(_READ_COMMITTED), forgotten_topics_data=(),
            topics=(Topic(topic=topic, partitions=(Partition(
                partition=i32(partition), fetch_offset=i64(start),
                partition_max_bytes=i32(_MAX_BYTES),
            ),)),),
        ),
        missing_ok=True,
    )  # fmt: skip
    if answer.error_code != ErrorCode.none:
        raise BrowseError(f"Fetch refused: {answer.error_code.name.upper()}")
    data = answer.responses[0].partitions[0]
    if data.error_code != ErrorCode.none:
        raise BrowseError(f"{topic}-{partition}: {data.error_code.name.upper()}")
    raw = bytes(data.records or b"")
    aborted = [(int(a.producer_id), int(a.first_offset)) for a in data.aborted_transactions or ()]
    records = [
        r
        for r in committed_records(((h, rs) for _, h, rs in iter_batches(raw)), aborted)
        if r.offset >= start
    ][:limit]
    return {
        "topic": topic,
        "partition": partition,
        "leader": part.leader,
        "from_offset": start,
        "high_watermark": int(data.high_watermark),
        "last_stable_offset": int(data.last_stable_offset),
        "isolation_level": "read_committed",
        "records": [
            {
                "offset": r.offset,
                "timestamp_ms": r.timestamp,
                "key": shown_bytes(r.key),
                "value": shown_bytes(r.value),
                "headers": [{"key": k, "value": shown_bytes(v)} for k, v in r.headers],
            }
            for r in records
        ],
    }
