"""Idle replication with and without fetch sessions (KIP-227, issue 19): 3 local brokers
(``--brokers``), a real ZooKeeper, one topic of N partitions at RF 3 (``--replication-factor``),
for each N given, once with sessions (`max.incremental.fetch.session.cache.slots` at Kafka's
1000) and once without (0, as Kafka's switch-off). Once every ISR is full and no client is connected, over WINDOWS windows of
WINDOW_S seconds each (the figures are the medians over the windows):

- fetch_request_bytes / fetch_response_bytes: bytes per Fetch request and response, from the
  brokers' own counters (the metrics endpoint: logkeel_bytes_in/out and logkeel_requests for
  the Fetch API, summed over the brokers: followers are the only fetchers);
- fetches_per_s: Fetch requests per second, all brokers;
- cpu: CPU seconds per second of each broker (`/proc/<pid>/stat`), and their sum.

    .venv/bin/python bench/fetch_sessions.py --partitions 2000,10000

The last line printed is one JSON object: per partition count, both cases and the ratios
(without / with sessions) taken within this run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.ports import free_port
from logkeel.testing.broker_process import LogkeelBroker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster_scale import TOPIC, View
from replication import cpu_seconds, wait_for

SETUP_TIMEOUT_S = 600.0


def fetch_counters(metrics_port: int) -> tuple[float, float, float]:
    """(Fetch requests, request bytes, response bytes) a broker has counted so far."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    for attempt in range(5):
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                text = response.read().decode()
            break
        except OSError as exc:  # a broker starved by the machine's load answers late
            print(f"metrics of :{metrics_port}: {exc}", file=sys.stderr, flush=True)
            if attempt == 4:
                raise
    requests = bytes_in = bytes_out = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("api") != "Fetch":
                continue
            if s.name == "logkeel_requests_total":
                requests += s.value
            elif s.name == "logkeel_bytes_in_total":
                bytes_in += s.value
            elif s.name == "logkeel_bytes_out_total":
                bytes_out += s.value
    return requests, bytes_in, bytes_out


def start_brokers(
    base: Path, connect: str, slots: int, count: int = 3
) -> tuple[dict[int, LogkeelBroker], dict[int, int]]:
    metrics = {i: free_port() for i in range(1, count + 1)}
    brokers = {
        i: LogkeelBroker(
            base / f"b{i}",
            overrides={
                "zookeeper.connect": connect,
                "zookeeper.session.timeout.ms": "18000",
                "max.incremental.fetch.session.cache.slots": str(slots),
            },
            extra_args=["--node-id", str(i), "--metrics-port", str(metrics[i])],
        )  # fmt: skip
        for i in metrics
    }
    threads = [threading.Thread(target=b.start, args=(120,)) for b in brokers.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return brokers, metrics


def measure(
    n: int, rf: int, count: int, sessions: bool, base: Path, windows: int, window_s: float
) -> dict[str, Any]:
    zk = ZooKeeperServer(base / "zookeeper").start()
    chroot = "/fetch-sessions"
    brokers: dict[int, LogkeelBroker] = {}
    try:
        root = KazooClient(hosts=zk.connect_string)
        root.start()
        root.ensure_path(chroot)
        brokers, metrics = start_brokers(
            base, zk.connect_string + chroot, 1000 if sessions else 0, count
        )
        wait_for(lambda: root.exists(chroot + zd.CONTROLLER), "a controller", 120)
        root.stop()
        admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
        started = time.monotonic()
        admin.create_topics([NewTopic(TOPIC, n, rf)], operation_timeout=300)[TOPIC].result(600)
        wait_for(lambda: View(brokers[1]).all_full(n, rf), "every ISR full", SETUP_TIMEOUT_S)
        create_s = round(time.monotonic() - started, 1)
        print(f"{n} partitions, sessions={sessions}: ISRs full in {create_s}s", file=sys.stderr)
        del admin  # no client connected while measuring
        # A new topic's ISR is full from the start: wait until every broker serves its
        # followers' fetches, then one window of warm-up that is not counted.
        wait_for(
            lambda: all(fetch_counters(metrics[i])[0] >= 10 for i in brokers),
            "followers fetching",
            SETUP_TIMEOUT_S,
        )
        time.sleep(window_s)
        rows: list[dict[str, Any]] = []
        for _ in range(windows):
            c0 = [fetch_counters(metrics[i]) for i in brokers]
            cpu0 = {i: cpu_seconds(b.pid) for i, b in brokers.items()}
            time.sleep(window_s)  # the measurement window itself, nothing waited for
            cpu = {i: (cpu_seconds(b.pid) - cpu0[i]) / window_s for i, b in brokers.items()}
            c1 = [fetch_counters(metrics[i]) for i in brokers]
            requests = sum(b[0] - a[0] for a, b in zip(c0, c1, strict=True))
            bytes_in = sum(b[1] - a[1] for a, b in zip(c0, c1, strict=True))
            bytes_out = sum(b[2] - a[2] for a, b in zip(c0, c1, strict=True))
            rows.append(
                {
                    "fetches_per_s": requests / window_s,
                    "fetch_request_bytes": bytes_in / requests if requests else 0.0,
                    "fetch_response_bytes": bytes_out / requests if requests else 0.0,
                    "cpu_total": sum(cpu.values()),
                    "cpu_busiest": max(cpu.values()),
                }
            )
            print(f"  window: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
        out: dict[str, Any] = {"create_s": create_s}
        for key in rows[0]:
            out[key] = round(statistics.median(r[key] for r in rows), 3)
        return out
    finally:
        for b in brokers.values():
            b.kill()  # nothing after the windows is measured; a clean stop of 10,000 logs is slow
        zk.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="2000,10000")
    # Each replica holds three descriptors (segment, offset and time index): this machine's
    # hard limit of 20,000 open files is ~6,600 replicas per broker. 10,000 partitions at RF 2
    # fit on 4 brokers.
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--window-s", type=float, default=5.0)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "windows": args.windows,
        "window_s": args.window_s,
        "replication_factor": args.replication_factor,
        "brokers": args.brokers,
    }
    for n in (int(x) for x in args.partitions.split(",")):
        entry: dict[str, Any] = {}
        for sessions in (True, False):
            base = Path(tempfile.mkdtemp(prefix="fetch-sessions-"))
            try:
                entry["sessions" if sessions else "no_sessions"] = measure(
                    n,
                    args.replication_factor,
                    args.brokers,
                    sessions,
                    base,
                    args.windows,
                    args.window_s,
                )
            finally:
                shutil.rmtree(base, ignore_errors=True)
        on, off = entry["sessions"], entry["no_sessions"]
        entry["ratio_without_to_with"] = {
            key: round(off[key] / on[key], 1) if on[key] else None
            for key in ("fetch_request_bytes", "fetch_response_bytes", "cpu_total", "cpu_busiest")
        }
        result[str(n)] = entry
        print(json.dumps({str(n): entry}), file=sys.stderr, flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
