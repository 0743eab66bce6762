"""Unclean recovery time against unflushed bytes, and full-rebuild throughput.

    .venv/bin/python bench/recovery.py            # an 800 MiB partition
    .venv/bin/python bench/recovery.py --quick    # 200 MiB

One partition of ``--mib`` MiB in 16 KiB batches, in one active segment (Kafka's default
segment.bytes is 1 GiB), written by bench/loggen.py. For each lag L the dir is made to look
like a kill -9 (no clean-shutdown marker) whose recovery point lags the log end by L bytes,
with the producer snapshot the broker writes with each background flush at the recovery
point, and ``LogManager.startup()`` is timed. ``full_rebuild`` deletes every index, snapshot
and checkpoint first, so the whole partition is rescanned (CRC-32C of every batch, indexes
rebuilt). Runs are with a warm page cache, and cold too when the cache can be dropped (root).

Goals (issue 3): 800 MiB with a few MiB unflushed loads in < 1 s; full scan >= 500 MB/s.
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loggen import (
    PartitionShape,
    drop_page_cache,
    write_checkpoints,
    write_log_dir,
)
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.producer_snapshot import snapshot_path, write_snapshot
from logkeel.storage.log_dir import CLEAN_SHUTDOWN_FILE, STARTUP_MANIFEST
from logkeel.storage.log_manager import LogManager

MIB = 1024 * 1024


def prepare(log_dir: Path, tp, written, lag_bytes: int | None) -> None:
    """Crash state: no marker, recovery point ``lag_bytes`` behind (None: no checkpoint,
    no index, no snapshot: a full rebuild)."""
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    (log_dir / STARTUP_MANIFEST).unlink(missing_ok=True)
    part = log_dir / tp.dir_name
    for f in part.iterdir():
        if f.suffix == ".snapshot":
            f.unlink()
    if lag_bytes is None:
        for f in part.iterdir():
            if f.suffix in (".index", ".timeindex", ".txnindex"):
                f.unlink()
        (log_dir / "recovery-point-offset-checkpoint").unlink(missing_ok=True)
        return
    lag_batches = -(-lag_bytes // written.batch_size)
    point = written.log_end - lag_batches * written.records_per_batch
    write_checkpoints(log_dir, {tp: point})
    write_snapshot(snapshot_path(part, point), [])


def load(log_dir: Path) -> dict[str, object]:
    m = LogManager([log_dir], default_config=LogConfig(), validation_rate_bytes_per_sec=0)
    t0 = time.perf_counter()
    report = m.startup(start_background=False)
    wall = time.perf_counter() - t0
    m.shutdown()
    return {
        "elapsed_ms": round(report.elapsed_ms, 1),
        "wall_ms": round(wall * 1000, 1),
        "bytes_scanned": report.bytes_scanned,
        "segments_recovered": report.segments_recovered,
        "replayed_batches": report.replayed_batches,
        "truncations": len(report.truncations),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mib", type=int, default=800)
    ap.add_argument("--quick", action="store_true", help="200 MiB, fewer lags")
    ap.add_argument("--lags", default="0,1,4,16,64", help="recovery-point lags in MiB")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    mib = 200 if args.quick else args.mib
    lags = [0, 4] if args.quick else [float(x) for x in args.lags.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        log_dir = Path(tmp) / "logs"
        shape = PartitionShape(segments=1, segment_bytes=mib * MIB, batch_bytes=16 * 1024)
        t0 = time.perf_counter()
        written_all = write_log_dir(log_dir, 1, shape, link=False)
        gen_s = time.perf_counter() - t0
        [(tp, written)] = written_all.items()
        results: dict[str, object] = {
            "bench": "recovery",
            "partition_bytes": written.bytes,
            "batch_bytes": written.batch_size,
            "generate_s": round(gen_s, 1),
        }
        can_drop = drop_page_cache()
        for cache in ("warm", "cold") if can_drop else ("warm",):
            by_lag = []
            for lag in lags:
                prepare(log_dir, tp, written, int(lag * MIB))
                if cache == "cold":
                    drop_page_cache()
                else:
                    load(log_dir)  # warms the cache (and checks the run is repeatable)
                    prepare(log_dir, tp, written, int(lag * MIB))
                r = {"lag_mib": lag} | load(log_dir)
                by_lag.append(r)
                print(json.dumps({"cache": cache} | r), flush=True)
            prepare(log_dir, tp, written, None)
            if cache == "cold":
                drop_page_cache()
            full = load(log_dir)
            full["mb_per_s"] = round(full["bytes_scanned"] / 1e6 / (full["elapsed_ms"] / 1000), 1)
            print(json.dumps({"cache": cache, "full_rebuild": full}), flush=True)
            results[cache] = {"by_lag": by_lag, "full_rebuild": full}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
