"""kazoo's stock handler against `zk_handler.PollingHandler` in a busy process: the time of
N pipelined reads (one `get_async` per znode, then every answer) from a real ZooKeeper while
SPINNERS threads keep the GIL busy, as a broker's event loop and IO threads do. Rounds
alternate the two handlers; the last line is one JSON object with each handler's times and
medians.

    .venv/bin/python bench/zk_select.py --reads 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler

from logkeel.cluster.zk_handler import PollingHandler
from logkeel.cluster.zk_server import ZooKeeperServer

SPINNERS = 2


def read_all(connect: str, handler: SequentialThreadingHandler, n: int) -> float:
    client = KazooClient(hosts=connect, handler=handler)
    client.start()
    try:
        started = time.perf_counter()
        for answer in [client.get_async(f"/b/n{i}") for i in range(n)]:
            answer.get()
        return time.perf_counter() - started
    finally:
        client.stop()
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"stock": [], "poll": []}
    with ZooKeeperServer(Path(tempfile.mkdtemp(prefix="zk-select-"))) as zk:
        setup = KazooClient(hosts=zk.connect_string)
        setup.start()
        setup.ensure_path("/b")
        for created in [setup.create_async(f"/b/n{i}", b"x" * 120) for i in range(args.reads)]:
            created.get()
        setup.stop()
        setup.close()
        stop = threading.Event()

        def spin() -> None:
            while not stop.is_set():
                sum(range(1000))

        for t in [threading.Thread(target=spin, daemon=True) for _ in range(SPINNERS)]:
            t.start()
        try:
            for _ in range(args.rounds):
                times["stock"].append(
                    read_all(zk.connect_string, SequentialThreadingHandler(), args.reads)
                )
                times["poll"].append(read_all(zk.connect_string, PollingHandler(), args.reads))
        finally:
            stop.set()
    out = {
        "reads": args.reads,
        "spinners": SPINNERS,
        **{f"{k}_s": [round(x, 3) for x in v] for k, v in times.items()},
        **{f"{k}_median_s": round(statistics.median(v), 3) for k, v in times.items()},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
