"""What validating a client's batch (Kafka's LogValidator checks) and recompressing it to the
topic's compression.type cost, against appending it as it came.

One partition log; for each kind of batch (uncompressed and each codec, 16 KiB batches of
100-byte records and 1 MiB batches of 1 KiB records; values are text, so they compress as
real payloads do) three ways of appending the same batch, run back to back in each repeat:

- ``as_is``: ``PartitionLog.append_as_leader`` alone (structure, CRC, offsets, indexes, write):
  the append before validation existed;
- ``validated``: the leader's client path, ``prepare_client_batches`` (decompress, decode
  every record, the checks) then the append;
- ``recompressed`` (for the codecs the topic recompresses into): the same with the topic's
  compression.type different from the batch's.

``--decoder python`` forces the pure-Python record decoder (the fallback when the compiled one
is not built). Prints one JSON object: per batch kind, median CPU microseconds per batch and
MB/s (of the batch as produced) of each way, and the median per-repeat ratio of each to
``as_is``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from logkeel.records import columns
from logkeel.records.batch import CompressionType
from logkeel.records.builder import build_batch
from logkeel.server.replica.append_checks import prepare_client_batches
from logkeel.server.replica.topic_settings import TopicSettings
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

SHAPES = {"16KiB": (16 * 1024, 100), "1MiB": (1024 * 1024, 1000)}
WORDS = [bytes(random.Random(i).choices(b"abcdefghijklmnopqrstuvwxyz", k=7)) for i in range(500)]
MAX_BYTES = 4 * 1024 * 1024
TP = TopicPartition("bench", 0)


def make_batch(batch_bytes: int, value_bytes: int, codec: CompressionType) -> bytes:
    rnd = random.Random(batch_bytes + value_bytes)
    count = max(1, batch_bytes // (value_bytes + 20))
    now = int(time.time() * 1000)
    records = []
    for i in range(count):
        value = b" ".join(rnd.choices(WORDS, k=value_bytes // 8))[:value_bytes]
        records.append((now + i, f"key-{i}".encode(), value, ()))
    return build_batch(records, compression=codec)


def run(plog, batch: bytes, settings: TopicSettings | None, count: int) -> float:
    """CPU seconds of this thread for ``count`` appends of ``batch``; ``settings`` None:
    appended as is. CPU time, not wall time: on a shared, loaded machine preemption moves wall
    times by more than the differences measured here."""
    started = time.thread_time()
    if settings is None:
        for _ in range(count):
            plog.append_as_leader(batch, 0)
    else:
        for _ in range(count):
            records, batches = prepare_client_batches(batch, settings, TP, MAX_BYTES)
            plog.append_as_leader(records, 0, batches=batches)
    return time.thread_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=16, help="MiB appended per way and repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--decoder", choices=["auto", "python"], default="auto")
    args = parser.parse_args()
    if args.decoder == "python":
        columns._native = None  # type: ignore[attr-defined]
    workdir = Path(tempfile.mkdtemp(prefix="logkeel-bench-validation-"))
    manager = LogManager([workdir], default_config=LogConfig(max_message_bytes=MAX_BYTES))
    manager.startup(start_background=False)
    plog = manager.get_or_create_log(TP)
    plog.append_as_leader(make_batch(1024, 100, CompressionType.NONE), 0)
    out: dict[str, dict[str, float]] = {}
    try:
        for shape, (size, value_bytes) in SHAPES.items():
            for codec in CompressionType:
                batch = make_batch(size, value_bytes, codec)
                count = max(3, args.mib * 1024 * 1024 // size)
                ways: dict[str, TopicSettings | None] = {
                    "as_is": None,
                    "validated": TopicSettings(),
                }
                if codec == CompressionType.NONE:
                    ways["recompressed_lz4"] = TopicSettings(codec=CompressionType.LZ4)
                    ways["recompressed_zstd"] = TopicSettings(codec=CompressionType.ZSTD)
                    ways["recompressed_gzip"] = TopicSettings(codec=CompressionType.GZIP)
                else:
                    ways["recompressed_none"] = TopicSettings(codec=CompressionType.NONE)
                    if codec != CompressionType.ZSTD:
                        ways["recompressed_zstd"] = TopicSettings(codec=CompressionType.ZSTD)
                times: dict[str, list[float]] = {w: [] for w in ways}
                for _ in range(args.repeats):
                    for way, settings in ways.items():
                        # Each way writes into an emptied log: none pays for another's pages.
                        plog.truncate_fully_and_start_at(plog.log_end_offset)
                        times[way].append(run(plog, batch, settings, count))
                key = f"{shape}/{codec.name.lower()}"
                row: dict[str, float] = {"batch_bytes": len(batch), "records": count}
                for way, secs in times.items():
                    row[f"{way}_us"] = round(statistics.median(secs) / count * 1e6, 1)
                    row[f"{way}_mb_s"] = round(
                        len(batch) * count / statistics.median(secs) / 1e6, 1
                    )
                    if way != "as_is":
                        row[f"{way}_ratio"] = round(
                            statistics.median(
                                s / a for s, a in zip(secs, times["as_is"], strict=True)
                            ),
                            2,
                        )
                row.pop("records")
                out[key] = row
                print(key, json.dumps(row), flush=True)
    finally:
        manager.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"decoder": args.decoder, "native": columns.native_available(), **out}))


if __name__ == "__main__":
    main()
