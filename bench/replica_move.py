"""A replica move between two log dirs (KIP-113) against copying the partition dir with
``shutil.copytree``, in one run, with a writer appending throughout.

For --mib MiB of 16 KiB batches in one partition: the raw reference copies the partition's
dir (files, no parsing); the move (``ReplicaMoves``, unthrottled) reads and re-appends every
batch as a follower does and swaps the new log in. A writer thread appends a 1 KiB batch every
millisecond during the move, as an appending leader would, and times each append: its longest
append includes the swap's hold of the log's lock. Both dirs are on the same filesystem (the
temp dir), so this measures logkeel's cost, not two disks.

Prints one line per repeat and, last, one JSON object:
  {"mib": n, "move_mb_s": x, "copytree_mb_s": y, "ratio_to_copytree": r,
   "append_p50_ms": a, "append_max_ms": m}
each the median over --repeats runs (the ratio: median of the per-repeat ratios).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from logkeel.records.builder import build_batch
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

TP = TopicPartition("move", 0)
BATCH = [(0, None, b"v" * 1000, ())] * 16  # ~16 KiB


def one_run(root: Path, mib: int) -> dict[str, float]:
    a, b = root / "a", root / "b"
    m = LogManager([a, b], default_config=LogConfig(file_delete_delay_ms=0))
    m.startup(start_background=False)
    plog = m.get_or_create_log(TP)
    source = m.dir_of(TP)
    assert source is not None
    target = b if source.path == a else a
    batch = build_batch(BATCH)
    while plog.size_in_bytes < mib * 1024 * 1024:
        plog.append_as_leader(batch, 0)
    plog.flush()
    size = plog.size_in_bytes

    started = time.monotonic()
    shutil.copytree(plog.dir, root / "copy")
    copytree_s = time.monotonic() - started

    latencies: list[float] = []
    done = threading.Event()
    small = build_batch([(0, None, b"w" * 1000, ())])

    def write() -> None:
        while not done.is_set():
            t = time.monotonic()
            current = m.get_log(TP)
            assert current is not None
            with current.lock:
                if m.get_log(TP) is current:
                    current.append_as_leader(small, 0)
            latencies.append((time.monotonic() - t) * 1000)
            done.wait(0.001)

    writer = threading.Thread(target=write)
    writer.start()
    started = time.monotonic()
    m.moves.start(TP, str(target))
    while m.dir_of(TP) is source:
        time.sleep(0.001)
    move_s = time.monotonic() - started
    done.set()
    writer.join()
    m.shutdown()
    return {
        "move_mb_s": size / move_s / 1e6,
        "copytree_mb_s": size / copytree_s / 1e6,
        "ratio_to_copytree": copytree_s / move_s,
        "append_p50_ms": statistics.median(latencies),
        "append_max_ms": max(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="logkeel-move-") as tmp:
            run = one_run(Path(tmp), args.mib)
        print(f"repeat {i}: " + ", ".join(f"{k}={v:.2f}" for k, v in run.items()), flush=True)
        runs.append(run)
    result: dict[str, float] = {"mib": args.mib}
    for key in runs[0]:
        result[key] = round(statistics.median(r[key] for r in runs), 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
