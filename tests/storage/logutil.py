"""Helpers shared by the storage tests: build batches, open managers, read a log back."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

from logkeel.records.builder import build_batch
from logkeel.records.record import Record, iter_records
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def open_fds() -> int:
    """This process's open descriptors, after a collection: garbage an earlier test left (an
    unclosed file in a cycle) would otherwise close its descriptor whenever the collector
    happens to run, in the middle of a test that counts them."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(
    n: int = 1, *, value_size: int = 10, ts: int | None = None, key: bytes = b"k", **opts
) -> bytes:
    ts = now_ms() if ts is None else ts
    return build_batch([(ts + i, key, b"v" * value_size, ()) for i in range(n)], **opts)


def open_manager(path: Path, config: LogConfig | None = None, **kwargs) -> LogManager:
    m = LogManager([path], default_config=config or LogConfig(), **kwargs)
    m.startup(start_background=False)
    return m


def all_records(plog: PartitionLog) -> list[Record]:
    """Every record from log start to log end, read through the public read path."""
    out: list[Record] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20)
        data = info.read_bytes()
        assert data, f"no data at offset {offset} below log end {plog.log_end_offset}"
        records = [r for r in iter_records(data) if r.offset >= offset]
        out.extend(records)
        offset = records[-1].offset + 1
    return out
