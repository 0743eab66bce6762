"""The first fetch from an inactive segment after a clean start, against a validated one.

    .venv/bin/python bench/first_read.py            # 128 MiB and 1 GiB segments, 5 runs each
    .venv/bin/python bench/first_read.py --quick    # 128 MiB only, 3 runs

For each size one partition is written through ``PartitionLog`` (16 KiB batches of 1 KiB
records) so that a segment of that size is inactive (a roll follows it), and shut down
cleanly. Each run loads the dir afresh with log.startup.validation=lazy and no background
validator, then fetches up to 1 MiB (max.partition.fetch.bytes) from an offset of the
inactive segment (a different one each run), and times:

- ``unvalidated_ms``: that first fetch (``PartitionLog.read`` and the read of its bytes);
- ``validated_ms``: the same fetch size from another offset of the same segment once it has
  been validated whole (``LogManager.validate_all``);
- ``whole_validation_ms``: that validation, which is what a first fetch cost before reads
  checked only what they serve.

The files were just written, so the page cache is warm for all three. Goal (issue 14): the
first fetch no slower than a validated one (within 50 ms) whatever the segment's size.
The last line printed is one JSON object with every figure (medians).
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

TP = TopicPartition("first-read", 0)
FETCH_BYTES = 1024 * 1024
RECORD = 1000
RECORDS_PER_BATCH = 16


def write(log_dir: Path, segment_bytes: int) -> tuple[int, int]:
    """One full inactive segment of ``segment_bytes`` then a roll; its [base, end) offsets."""
    config = LogConfig(segment_bytes=segment_bytes + 1024 * 1024)
    m = LogManager([log_dir], default_config=config)
    m.startup(start_background=False)
    plog = m.get_or_create_log(TP)
    ts = int(time.time() * 1000)
    value = os.urandom(RECORD)
    batch = build_batch([(ts, None, value, ())] * RECORDS_PER_BATCH)
    while plog.active_segment.size + len(batch) <= segment_bytes:
        plog.append_as_leader(batch, 0)
    end = plog.log_end_offset
    plog.roll()
    plog.append_as_leader(batch, 0)
    plog.high_watermark = plog.log_end_offset
    m.shutdown()
    return 0, end


def timed_fetch(m: LogManager, offset: int) -> float:
    plog = m.get_log(TP)
    started = time.perf_counter()
    info = plog.read(offset, FETCH_BYTES, max_offset=plog.high_watermark)
    data = info.read_bytes()
    elapsed = (time.perf_counter() - started) * 1000
    assert len(data) > FETCH_BYTES // 2, len(data)
    return elapsed


def run(log_dir: Path, base: int, end: int, run_no: int, runs: int) -> dict[str, float]:
    m = LogManager(
        [log_dir],
        default_config=LogConfig(),
        startup_validation="lazy",
        validation_rate_bytes_per_sec=0,
    )
    m.startup(start_background=False)
    segment = m.get_log(TP).segments[0]
    assert segment.needs_validation
    span = end - base
    # A different place in the segment each run: beginning, middle, end and between.
    first = base + span * run_no // (runs + 1)
    unvalidated = timed_fetch(m, first)
    assert segment.needs_validation  # the fetch checked its own bytes only
    started = time.perf_counter()
    m.validate_all()
    whole = (time.perf_counter() - started) * 1000
    assert not segment.needs_validation
    validated = timed_fetch(m, base + span * (run_no + 1) // (runs + 1))
    m.shutdown()
    return {"unvalidated_ms": unvalidated, "validated_ms": validated, "whole_validation_ms": whole}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="128 MiB only, 3 runs")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    sizes = {"128MiB": 128 << 20} if args.quick else {"128MiB": 128 << 20, "1GiB": 1 << 30}
    runs = args.runs or (3 if args.quick else 5)
    result: dict[str, dict[str, float]] = {}
    for name, size in sizes.items():
        workdir = Path(tempfile.mkdtemp(prefix="logkeel-first-read-", dir=args.dir))
        try:
            base, end = write(workdir / "logs", size)
            rows = [run(workdir / "logs", base, end, i, runs) for i in range(runs)]
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        med = {k: round(statistics.median(r[k] for r in rows), 2) for k in rows[0]}
        med["difference_ms"] = round(med["unvalidated_ms"] - med["validated_ms"], 2)
        med["runs"] = runs
        result[name] = med
        print(
            f"{name}: first fetch {med['unvalidated_ms']} ms unvalidated, "
            f"{med['validated_ms']} ms validated; whole-segment validation "
            f"{med['whole_validation_ms']} ms",
            flush=True,
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
