"""Start-up time against the number of segments: lazy vs eager, clean vs unclean.

    .venv/bin/python bench/startup.py            # 1k, 10k and 100k segments, then 1k vs 100k
    .venv/bin/python bench/startup.py --quick    # 1k and 10k, one run each, no comparison

Each size is one log dir of P partitions x 50 segments (64 KiB segments of 16 KiB batches,
written by bench/loggen.py). A run is ``LogManager.startup()`` on a fresh manager, timed by
the manager itself (``elapsed_ms``; ``cpu_ms`` is the process's CPU time meanwhile, a figure
less sensitive to other load on the machine); the dir is shut down cleanly between runs.
``--compare`` (on unless --quick) starts the same 1,000 partitions holding 1,000 segments
(one each) and 100,000 segments (100 each), clean and lazy: start-up should not grow with
the segments (``ratio``; goal <= 1.5). Scenarios:

- ``lazy`` / ``eager``: after a clean shutdown, log.startup.validation=lazy (only active
  segments opened) or eager (every segment CRC-checked and its indexes verified);
- ``unclean``: no clean-shutdown marker, every partition's recovery point 64 KiB behind its
  log end (lazy validation of the rest).

The page cache is warm (the files were just written, and inactive segments are hard links
shared between partitions): the best case for eager. Goals (issue 14): 100k segments in
2,000 partitions < 0.5 s clean (lazy), < 2 s unclean; 1k vs 100k segments in the same 1,000
partitions within 1.5x (issue 3's: 10k segments in 200 partitions >= 20x faster than eager).
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loggen import PartitionShape, write_checkpoints, write_log_dir
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.engine.producer_snapshot import snapshot_path, write_snapshot
from logkeel.storage.log_dir import CLEAN_SHUTDOWN_FILE
from logkeel.storage.log_manager import LogManager

SEGMENTS_PER_PARTITION = 50


def run_once(log_dir: Path, validation: str, threads: int) -> dict[str, object]:
    m = LogManager(
        [log_dir],
        default_config=LogConfig(),
        startup_validation=validation,
        recovery_threads_per_dir=threads,
        validation_rate_bytes_per_sec=0,
    )
    t0 = time.perf_counter()
    c0 = time.process_time()
    report = m.startup(start_background=False)
    cpu = (time.process_time() - c0) * 1000
    wall = (time.perf_counter() - t0) * 1000
    result = {
        "elapsed_ms": round(report.elapsed_ms, 1),
        "wall_ms": round(wall, 1),
        "cpu_ms": round(cpu, 1),
        "partitions": report.partitions,
        "segments": report.segments,
        "segments_opened": report.segments_opened,
        "segments_recovered": report.segments_recovered,
        "bytes_scanned": report.bytes_scanned,
        "clean": report.clean,
        "offline": len(report.offline),
    }
    m.shutdown()
    return result


def make_unclean(log_dir: Path, written, lag_bytes: int) -> None:
    """A kill -9 after the broker's last background flush: no marker, each recovery point
    ``lag_bytes`` behind the log end, with the producer snapshot that flush wrote there, and
    the active segment's indexes at their preallocated size (``segment.index.bytes``, sparse
    past the entries), as a running broker leaves them."""
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    points = {}
    max_index = LogConfig().segment_index_bytes
    for tp, w in written.items():
        lag_batches = max(1, lag_bytes // w.batch_size)
        points[tp] = w.log_end - lag_batches * w.records_per_batch
        part = log_dir / tp.dir_name
        for f in part.glob("*.snapshot"):
            f.unlink()
        write_snapshot(snapshot_path(part, points[tp]), [])
        active = max(part.glob("*.log")).with_suffix("")
        for suffix, entry in ((".index", 8), (".timeindex", 12)):
            os.truncate(f"{active}{suffix}", max_index // entry * entry)
    write_checkpoints(log_dir, points)


def bench_size(
    root: Path, segments: int, runs: int, threads: int, lag: int, eager: bool
) -> dict[str, object]:
    partitions = segments // SEGMENTS_PER_PARTITION
    shape = PartitionShape(segments=SEGMENTS_PER_PARTITION, segment_bytes=64 * 1024)
    log_dir = root / f"s{segments}"
    t0 = time.perf_counter()
    written = write_log_dir(log_dir, partitions, shape, link=True)
    gen_s = time.perf_counter() - t0
    out: dict[str, object] = {
        "segments": segments,
        "partitions": partitions,
        "generate_s": round(gen_s, 1),
    }
    modes = ["lazy", "eager"] if eager else ["lazy"]
    # A broker's clean shutdown leaves the start-up manifest; loggen's files come without.
    run_once(log_dir, "lazy", threads)
    for mode in modes:
        samples = [run_once(log_dir, mode, threads) for _ in range(runs)]
        out[mode] = samples[-1] | {
            "median_ms": statistics.median(s["elapsed_ms"] for s in samples),
            "median_cpu_ms": statistics.median(s["cpu_ms"] for s in samples),
        }
        print(json.dumps({"segments": segments, "mode": mode} | out[mode]), flush=True)
    samples = []
    for _ in range(runs):
        make_unclean(log_dir, written, lag)
        samples.append(run_once(log_dir, "lazy", threads))
    out["unclean"] = samples[-1] | {
        "median_ms": statistics.median(s["elapsed_ms"] for s in samples),
        "median_cpu_ms": statistics.median(s["cpu_ms"] for s in samples),
        "lag_bytes": lag,
    }
    print(json.dumps({"segments": segments, "mode": "unclean"} | out["unclean"]), flush=True)
    if eager:
        out["eager_over_lazy"] = round(
            out["eager"]["median_ms"] / max(out["lazy"]["median_ms"], 1e-3), 1
        )
    return out


def bench_compare(root: Path, partitions: int, runs: int, threads: int) -> dict[str, object]:
    """The same partitions with 1 and with 100 segments each, clean lazy starts."""
    out: dict[str, object] = {"partitions": partitions}
    for per in (1, 100):
        shape = PartitionShape(segments=per, segment_bytes=64 * 1024)
        log_dir = root / f"flat{per}"
        write_log_dir(log_dir, partitions, shape, link=True)
        run_once(log_dir, "lazy", threads)  # the first start writes the start-up manifest
        samples = [run_once(log_dir, "lazy", threads) for _ in range(runs)]
        key = f"segments_{partitions * per}"
        out[key] = samples[-1] | {
            "median_ms": statistics.median(s["elapsed_ms"] for s in samples),
            "median_cpu_ms": statistics.median(s["cpu_ms"] for s in samples),
        }
        print(json.dumps({"compare": key} | out[key]), flush=True)
        shutil.rmtree(log_dir)
    few, many = out[f"segments_{partitions}"], out[f"segments_{partitions * 100}"]
    out["ratio"] = round(many["median_ms"] / max(few["median_ms"], 1e-3), 2)
    out["cpu_ratio"] = round(many["median_cpu_ms"] / max(few["median_cpu_ms"], 1e-3), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="1k and 10k segments, one run each")
    ap.add_argument("--sizes", default=None, help="comma-separated segment counts")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="num.recovery.threads.per.data.dir")
    ap.add_argument("--lag-bytes", type=int, default=64 * 1024, help="unclean: recovery-point lag")
    ap.add_argument("--eager-at-100k", action="store_true", help="also run eager at 100k segments")
    ap.add_argument("--dir", default=None, help="where to write the log dirs (default: a temp dir)")
    ap.add_argument(
        "--compare",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="1,000 partitions with 1,000 vs 100,000 segments (default: on unless --quick)",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([1000, 10000] if args.quick else [1000, 10000, 100000])
    )
    runs = 1 if args.quick else args.runs
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = [
            bench_size(
                Path(tmp),
                n,
                runs,
                args.threads,
                args.lag_bytes,
                eager=n < 100000 or args.eager_at_100k,
            )
            for n in sizes
        ]
        compare = not args.quick if args.compare is None else args.compare
        comparison = bench_compare(Path(tmp), 1000, runs, args.threads) if compare else None
    summary = {
        "bench": "startup",
        "runs": runs,
        "threads": args.threads,
        "results": results,
        "compare": comparison,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
