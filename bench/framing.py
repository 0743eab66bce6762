"""The receive path of large request frames: FrameDecoder fed as asyncio's BufferedProtocol
feeds it (get_buffer, a recv_into-sized copy, buffer_updated), without sockets, so the cost of
the decoder itself (buffer allocation, growth copies) is measured apart from a loaded machine.

    .venv/bin/python bench/framing.py                       # this tree's decoder
    .venv/bin/python bench/framing.py --base-src OLD/src    # and another tree's, side by side

A stream of frames of each size (64 KiB, 1 MiB, 16 MiB; 64 MiB of frames per round) is received
in reads of at most --read-bytes (256 KiB by default); the CPU time of a round (process_time)
gives MB/s. Figures are medians over --repeats rounds; `ratio` is this tree / base. The last
line printed is one JSON object: {"settings": {...}, "<size>": {"this": mb_s, "base": mb_s,
"ratio": r}, ...}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import struct
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from logkeel.server.network import framing

SIZES = {"64KiB": 64 * 1024, "1MiB": 1024 * 1024, "16MiB": 16 * 1024 * 1024}
ROUND_BYTES = 64 * 1024 * 1024


def load_framing(src: Path) -> ModuleType:
    path = src / "logkeel" / "server" / "network" / "framing.py"
    spec = importlib.util.spec_from_file_location("base_framing", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_round(module: ModuleType, stream: memoryview, read_bytes: int) -> tuple[float, int]:
    decoder: Any = module.FrameDecoder(2**31 - 1)
    frames = 0
    pos = 0
    start = time.process_time()
    while pos < len(stream):
        buf = decoder.get_buffer()
        n = min(len(buf), read_bytes, len(stream) - pos)
        buf[:n] = stream[pos : pos + n]  # the kernel's copy in recv_into
        del buf
        pos += n
        frames += len(decoder.buffer_updated(n))
    return time.process_time() - start, frames


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-src", type=Path, help="the src/ dir of a tree to compare with")
    ap.add_argument("--read-bytes", type=int, default=256 * 1024)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    impls = {"this": framing}
    if args.base_src is not None:
        impls["base"] = load_framing(args.base_src)
    result: dict[str, Any] = {
        "settings": {
            "read_bytes": args.read_bytes,
            "repeats": args.repeats,
            "round_bytes": ROUND_BYTES,
        }
    }
    for label, size in SIZES.items():
        count = max(1, ROUND_BYTES // size)
        stream = memoryview(b"".join(struct.pack(">i", size) + bytes(size) for _ in range(count)))
        samples: dict[str, list[float]] = {name: [] for name in impls}
        for _ in range(args.repeats):
            for name, module in impls.items():  # interleaved, so drift hits both alike
                seconds, frames = one_round(module, stream, args.read_bytes)
                assert frames == count
                samples[name].append(len(stream) / 1e6 / seconds)
        entry: dict[str, Any] = {
            name: round(statistics.median(s), 1) for name, s in samples.items()
        }
        if "base" in impls:
            ratios = [a / b for a, b in zip(samples["this"], samples["base"], strict=True)]
            entry["ratio"] = round(statistics.median(ratios), 3)
        result[label] = entry
        print(label, entry, flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
