"""The data path's request and result types: what Produce, Fetch and ListOffsets hand to the
replica manager and get back, and the file region a fetch result sends with ``sendfile``."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from logkeel.records.batch import NO_TIMESTAMP
from logkeel.storage.engine.txn_index import AbortedTxn
from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "CONSUMER_REPLICA_ID",
    "DEBUGGING_CONSUMER_ID",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_PENDING_UPLOAD_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "FetchPartitionRequest",
    "FetchPartitionResult",
    "ListOffsetResult",
    "PartitionAppendResult",
    "RegionRecords",
    "close_records",
]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
# ListOffsets special timestamps beyond storage's -1/-2/-3 (KIP-405, KIP-1005, KIP-1023).
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
# Replica ids of fetchers that are not followers (Kafka's FetchRequest constants).
CONSUMER_REPLICA_ID = -1
DEBUGGING_CONSUMER_ID = -2


@dataclass(slots=True)
class PartitionAppendResult:
    """What Produce reports for one partition (Kafka's PartitionResponse)."""

    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    # (batch_index, message) of the records a refused batch was refused for (Produce v8+).
    record_errors: tuple[tuple[int, str], ...] = ()
    duplicate: bool = False
    # For NOT_LEADER_OR_FOLLOWER: who leads now, if known (Produce v10+ current_leader).
    leader_id: int = -1
    leader_epoch: int = -1


class RegionRecords:
    """Records to send straight from a segment file: ``size`` bytes at ``position`` of ``fd``.

    ``fd`` is a duplicate of the segment's descriptor, taken under the log's lock, so the region
    stays readable (and never names another file) even if the segment is closed, deleted or its
    dir fails before the bytes are sent. It is closed by ``close()`` or, as a safety net, when
    the object is collected.
    """

    __slots__ = ("fd", "position", "size", "_finalizer", "__weakref__")

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd = fd
        self.position = position
        self.size = size
        self._finalizer = weakref.finalize(self, _close_fd, fd)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"RegionRecords(fd={self.fd}, position={self.position}, size={self.size})"

    def read_bytes(self) -> bytes:
        """The region's bytes (one copy, through ``os.pread``)."""
        chunks = []
        pos, remaining = self.position, self.size
        while remaining > 0:
            chunk = os.pread(self.fd, remaining, pos)
            if not chunk:
                raise EOFError(f"file region ended {remaining} bytes early (truncated segment)")
            chunks.append(chunk)
            pos += len(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


def _close_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


class MemoryRecords(bytes):
    """Records read into memory (a follower's read from a slow dir: sending them must not wait
    on the disk); the same interface as ``RegionRecords``."""

    @property
    def size(self) -> int:
        return len(self)

    def read_bytes(self) -> bytes:
        return bytes(self)

    def close(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class FetchPartitionRequest:
    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's own log start offset
    # A consumer that may be sent to, and served by, a follower (KIP-392: Fetch v11+ to a
    # broker with replica.selector.class): its client.rack ("" when it gave none). None: the
    # leader only.
    client_rack: str | None = None


@dataclass(slots=True)
class FetchPartitionResult:
    tp: TopicPartition
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: RegionRecords | MemoryRecords | None = None
    aborted_transactions: tuple[AbortedTxn, ...] | None = None
    # (epoch, end offset) when the fetcher's last fetched epoch diverges from this log.
    diverging_epoch: tuple[int, int] | None = None
    preferred_read_replica: int = -1
    leader_id: int = -1
    leader_epoch: int = -1
    # Read for an earlier fetch of the follower, whose serving was timed then (`dir_reads`).
    read_earlier: bool = False
    # Left empty: a follower's replica over leader.replication.throttled.rate.
    throttled: bool = False

    @property
    def size(self) -> int:
        return self.records.size if self.records is not None else 0


@dataclass(frozen=True, slots=True)
class ListOffsetResult:
    error: ErrorCode = ErrorCode.none
    timestamp: int = NO_TIMESTAMP
    offset: int = -1
    leader_epoch: int = -1


def close_records(results: Iterable[FetchPartitionResult]) -> None:
    """Releases the file descriptors held by fetch results that will not be sent."""
    for r in results:
        if r.records is not None:
            r.records.close()
