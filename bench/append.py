"""Append and read throughput of one partition log against plain file IO, in one run.

For each batch size (1 KiB, 16 KiB, 1 MiB) the same bytes are written once through
`PartitionLog.append_as_leader` (CRC check, offset assignment, indexing, producer state)
and once with `os.write` to a plain file; then read back as a consumer would, in fetches of
up to 1 MiB (Kafka's max.partition.fetch.bytes default), once through `PartitionLog.read`
and once with `os.pread` of the same byte ranges from the plain file. Neither side fsyncs:
the log's durability comes from the background flush, like Kafka's.

Prints one line per measurement and, last, one JSON object:
  {"append": {"1KiB": {"mb_s": x, "ratio_to_raw": r, "cpu_ratio_to_raw": c}, ...}, "read": {...}}
Throughputs are medians of --repeats runs; each ratio is the median of the per-repeat
ratios (log and raw run back to back in every repeat). ``cpu_ratio_to_raw`` compares the
appending thread's CPU time instead of wall time: on a loaded machine preemption stretches
the longer log loop more than the raw one, and this figure does not move with it.
The log is created, and one batch appended (a leader's first append of an epoch fsyncs the
leader-epoch checkpoint), before the clock starts; the raw file is opened off the clock too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from logkeel.records.builder import build_batch
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

SIZES = {"1KiB": 1024, "16KiB": 16 * 1024, "1MiB": 1024 * 1024}
FETCH_BYTES = 1024 * 1024
RECORD_VALUE = 1000  # bytes per record value; a batch holds as many as fit its size


def make_batch(batch_bytes: int) -> bytes:
    records = max(1, batch_bytes // (RECORD_VALUE + 20))
    value = os.urandom(min(RECORD_VALUE, batch_bytes - 80))
    ts = int(time.time() * 1000)
    return build_batch([(ts, None, value, ()) for _ in range(records)])


def bench_log(workdir: Path, batch: bytes, count: int) -> tuple[float, float, float]:
    """(append seconds, read seconds, append CPU seconds) through the storage engine."""
    d = workdir / "log"
    m = LogManager([d], default_config=LogConfig(max_message_bytes=2 * 1024 * 1024))
    m.startup(start_background=False)
    plog = m.get_or_create_log(TopicPartition("bench", 0))
    # A leader's first append in an epoch records the epoch (leader-epoch-checkpoint, fsynced):
    # once per leadership, not per batch, so it stays off the clock like opening the file.
    plog.append_as_leader(batch, 0)
    started, cpu = time.perf_counter(), time.thread_time()
    for _ in range(count):
        plog.append_as_leader(batch, 0)
    append_s, append_cpu = time.perf_counter() - started, time.thread_time() - cpu
    plog.high_watermark = plog.log_end_offset
    started = time.perf_counter()
    offset, total = 0, 0
    per_batch = plog.log_end_offset // (count + 1)
    while offset < plog.log_end_offset:
        info = plog.read(offset, FETCH_BYTES, max_offset=plog.high_watermark)
        size = len(info.read_bytes())
        total += size
        offset += per_batch * (size // len(batch))
    read_s = time.perf_counter() - started
    assert total == len(batch) * (count + 1), (total, len(batch) * (count + 1))
    m.shutdown()
    shutil.rmtree(d)
    return append_s, read_s, append_cpu


def bench_raw(workdir: Path, batch: bytes, count: int) -> tuple[float, float, float]:
    """The same bytes with plain os.write / os.pread."""
    path = workdir / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    started, cpu = time.perf_counter(), time.thread_time()
    for _ in range(count):
        os.write(fd, batch)
    append_s, append_cpu = time.perf_counter() - started, time.thread_time() - cpu
    os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    started = time.perf_counter()
    # the same ranges a fetch returns: whole batches, up to FETCH_BYTES (at least one batch)
    per_fetch = max(1, FETCH_BYTES // len(batch)) * len(batch)
    pos, total, end = 0, 0, len(batch) * count
    while pos < end:
        n = len(os.pread(fd, min(per_fetch, end - pos), pos))
        total += n
        pos += n
    read_s = time.perf_counter() - started
    os.close(fd)
    assert total == len(batch) * count
    path.unlink()
    return append_s, read_s, append_cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="small volumes: finishes in well under 30 s"
    )
    parser.add_argument("--mib", type=int, default=None, help="MiB written per size and run")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    mib = args.mib or (64 if args.quick else 256)
    repeats = args.repeats or (7 if args.quick else 9)
    workdir = Path(tempfile.mkdtemp(prefix="logkeel-bench-", dir=args.dir))
    result: dict[str, dict[str, dict[str, float]]] = {"append": {}, "read": {}}
    try:
        for name, size in SIZES.items():
            batch = make_batch(size)
            count = max(1, mib * 1024 * 1024 // len(batch))
            mb = len(batch) * count / 1e6
            runs = {"log": [], "raw": []}
            for _ in range(repeats):
                runs["raw"].append(bench_raw(workdir, batch, count))
                runs["log"].append(bench_log(workdir, batch, count))
            for i, kind in enumerate(("append", "read")):
                log_mb_s = statistics.median(mb / r[i] for r in runs["log"])
                raw_mb_s = statistics.median(mb / r[i] for r in runs["raw"])
                # Each repeat runs raw and log back to back; the median of those paired
                # ratios resists the machine's noise better than a ratio of medians.
                ratio = statistics.median(
                    raw[i] / log[i] for log, raw in zip(runs["log"], runs["raw"], strict=True)
                )
                result[kind][name] = {
                    "mb_s": round(log_mb_s, 1),
                    "raw_mb_s": round(raw_mb_s, 1),
                    "ratio_to_raw": round(ratio, 3),
                }
                if kind == "append":
                    # CPU time of the appending thread: what a loaded machine's preemption
                    # (which hits the longer log loop more often) does not move.
                    result[kind][name]["cpu_ratio_to_raw"] = round(
                        statistics.median(
                            raw[2] / log[2]
                            for log, raw in zip(runs["log"], runs["raw"], strict=True)
                        ),
                        3,
                    )
                cpu = result[kind][name].get("cpu_ratio_to_raw")
                print(
                    f"{kind:6} {name:>6}: log {log_mb_s:8.1f} MB/s  raw {raw_mb_s:8.1f} MB/s  "
                    f"ratio {ratio:.3f}"
                    + (f"  cpu ratio {cpu:.3f}" if cpu else "")
                    + f"  ({count} batches of {len(batch)} B)",
                    flush=True,
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
