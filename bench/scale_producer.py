"""An idempotent acks=all producer over thousands of partitions with no fault (issue 19): 3
brokers, a real ZooKeeper, one topic of N partitions at RF 3; the producer of
``cluster_scale`` (confluent-kafka, round-robin over the partitions at ``--rate`` sends/s) for
``--seconds``, its acknowledgements counted every 10 s; then the latency of single sends, one
at a time to partitions in turn, with acks=1 and acks=all (what an acks=all round trip costs
beside the leader's own append).

    .venv/bin/python bench/scale_producer.py --partitions 5000 --seconds 150

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from logkeel.cluster.zk_server import ZooKeeperServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster_scale
from cluster_scale import TOPIC, Sender, logs_created
from replication import start_cluster

WINDOW_S = 10.0
SINGLE_SENDS = 12


def single_send_ms(bootstrap: str, acks: str, first: int) -> list[float]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": acks})
    out = []
    for partition in range(first, first + SINGLE_SENDS):
        started = time.perf_counter()
        producer.produce(TOPIC, b"y", partition=partition)
        producer.flush(120)
        out.append(round((time.perf_counter() - started) * 1000, 1))
    return out


def run(n: int, seconds: float, rate: int, base: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"partitions": n, "rate": rate}
    zk = ZooKeeperServer(base / "zookeeper").start()
    brokers = {}
    try:
        root = KazooClient(hosts=zk.connect_string)
        root.start()
        root.ensure_path("/scale")
        root.stop()
        brokers = start_cluster(
            base, zk.connect_string + "/scale", {"zookeeper.session.timeout.ms": "18000"},
            start_timeout=180,
        )  # fmt: skip
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        started = time.monotonic()
        admin.create_topics([NewTopic(TOPIC, n, 3)], operation_timeout=300)[TOPIC].result(360)
        while not logs_created(brokers, n):
            time.sleep(1)  # a directory count, paced by its own cost
        result["logs_created_s"] = round(time.monotonic() - started, 1)
        cluster_scale.SEND_RATE = rate
        sender = Sender(bootstrap, n)
        sender.start()
        windows, last, started = [], 0, time.monotonic()
        while time.monotonic() - started < seconds:
            time.sleep(WINDOW_S)  # the counting window itself
            windows.append({"sent": sender.sent, "acked_in_window": sender.acked - last})
            last = sender.acked
            print(windows[-1], flush=True)
        result["windows"] = windows
        result["producer"] = sender.finish(60)
        for acks in ("1", "all"):
            lat = single_send_ms(bootstrap, acks, 100 if acks == "1" else 200)
            result[f"single_send_acks_{acks}_ms"] = lat
            result[f"single_send_acks_{acks}_median_ms"] = statistics.median(lat)
    finally:
        for b in brokers.values():
            b.kill()
        zk.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--rate", type=int, default=cluster_scale.SEND_RATE)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix=f"scale-producer-{args.partitions}-"))
    print(json.dumps(run(args.partitions, args.seconds, args.rate, base)))


if __name__ == "__main__":
    main()
