"""What the log's appends, reads and timestamp lookups return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from logkeel.storage.engine.file_records import FileRegion
from logkeel.storage.engine.txn_index import AbortedTxn

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


class AppendInfo(NamedTuple):
    """What an append did (a NamedTuple: one is made per produce request and partition)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records: int
    valid_bytes: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """What a read returns: whole batches as a file region, ready for sendfile."""

    fetch_offset: int
    region: FileRegion | None
    aborted_transactions: tuple[AbortedTxn, ...] = ()

    @property
    def size(self) -> int:
        return self.region.size if self.region else 0

    def read_bytes(self) -> bytes:
        return self.region.read_bytes() if self.region else b""


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int
