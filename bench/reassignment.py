"""Partition reassignment on 3 local brokers with a real ZooKeeper: how a replication throttle
holds a move's catch-up to its rate, and what producers keep meanwhile.

A topic of --data-mb MiB on broker 1 alone is moved to [1, 3] (broker 3 catches up from
nothing), with and without a throttle of --rate-mb MiB/s (leader.replication.throttled.rate on
broker 1, follower.replication.throttled.rate on broker 3, the topic's throttled-replica lists
naming the move's replicas, as `kafka-reassign-partitions --throttle` sets them). Meanwhile an
acks=all producer writes --messages x 1 KiB to another topic on [1, 2]; its throughput is
compared with the same producer while nothing moves. Each case runs --repeats times (the move
is undone in between); medians.

    .venv/bin/python bench/reassignment.py            # 128 MiB, 16 MiB/s, 3 repeats
    .venv/bin/python bench/reassignment.py --quick    # 32 MiB, 8 MiB/s, 2 repeats

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTP
from kafka.admin import NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from logkeel.cluster.zk_server import ZooKeeperServer
from replication import produce, start_cluster, wait_for

MOVING, LIVE = "moving", "live"


def set_configs(admin: AdminClient, kind: ResourceType, name: str, values: dict[str, Any]) -> None:
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None
                    else AlterConfigOpType.DELETE)
        for k, v in values.items()
    ]  # fmt: skip
    resource = ConfigResource(kind, name, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)


def throttle(admin: AdminClient, rate: int | None) -> None:
    value = None if rate is None else str(rate)
    set_configs(admin, ResourceType.BROKER, "1", {"leader.replication.throttled.rate": value})
    set_configs(admin, ResourceType.BROKER, "3", {"follower.replication.throttled.rate": value})


def fill(bootstrap: str, mib: int) -> None:
    produce(bootstrap, MOVING, mib * 1024, "1")


def move(kadmin: KafkaAdminClient, replicas: list[int]) -> None:
    answer = kadmin.alter_partition_reassignments({KTP(MOVING, 0): replicas})
    assert answer == {KTP(MOVING, 0): None}, answer


def moved(kadmin: KafkaAdminClient) -> bool:
    return KTP(MOVING, 0) not in kadmin.list_partition_reassignments()


def one_move(
    kadmin: KafkaAdminClient, bootstrap: str, messages: int, data_mib: int, target: Any
) -> dict[str, float]:
    """Moves MOVING to [1, 3] while producing to LIVE: the move's MiB/s, the producer's MB/s."""
    result: dict[str, float] = {}

    def producing() -> None:
        result["producer_mb_s"] = produce(bootstrap, LIVE, messages, "all")

    writer = threading.Thread(target=producing)
    started = time.monotonic()
    move(kadmin, [1, 3])
    writer.start()
    wait_for(lambda: moved(kadmin), "the move", 600)
    result["move_mib_s"] = data_mib / (time.monotonic() - started)
    writer.join()
    move(kadmin, [1])  # undone at once: nothing to catch up; broker 3 deletes its copy
    wait_for(lambda: moved(kadmin), "the move back", 60)
    # The next move must copy everything again.
    wait_for(lambda: not any((d / f"{MOVING}-0").exists() for d in target.log_dirs),
             "broker 3's copy deleted", 60)  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-mb", type=int, default=128)
    parser.add_argument("--rate-mb", type=int, default=16)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.data_mb, args.rate_mb, args.repeats, args.messages = 32, 8, 2, 20_000
    rate = args.rate_mb * 1024 * 1024
    work = Path(tempfile.mkdtemp(prefix="logkeel-bench-reassignment-"))
    out: dict[str, Any] = {"settings": vars(args)}
    with ZooKeeperServer(work / "zk") as zk:
        brokers = start_cluster(work, zk.connect_string + "/bench")
        try:
            bootstrap = ",".join(b.bootstrap for b in brokers.values())
            admin = AdminClient({"bootstrap.servers": bootstrap})
            kadmin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
            kadmin.create_topics([
                NewTopic(MOVING, -1, -1, {0: [1]}, {
                    "leader.replication.throttled.replicas": "0:1",
                    "follower.replication.throttled.replicas": "0:3"}),
                NewTopic(LIVE, -1, -1, {0: [1, 2]}, {"min.insync.replicas": "2"}),
            ])  # fmt: skip
            wait_for(lambda: moved(kadmin), "the topics", 30)
            fill(bootstrap, args.data_mb)
            cases: dict[str, list[dict[str, float]]] = {"no_move": [], "unthrottled": [],
                                                        "throttled": []}  # fmt: skip
            for r in range(args.repeats):
                cases["no_move"].append({"producer_mb_s": produce(bootstrap, LIVE,
                                                                  args.messages, "all")})  # fmt: skip
                throttle(admin, None)
                cases["unthrottled"].append(one_move(kadmin, bootstrap, args.messages,
                                                     args.data_mb, brokers[3]))  # fmt: skip
                throttle(admin, rate)
                cases["throttled"].append(one_move(kadmin, bootstrap, args.messages,
                                                   args.data_mb, brokers[3]))  # fmt: skip
                throttle(admin, None)
                print(f"repeat {r + 1}: {json.dumps(cases)}", flush=True)
            for case, runs in cases.items():
                out[case] = {
                    k: round(statistics.median(run[k] for run in runs), 2) for k in runs[0]
                }
            out["throttled"]["rate_mib_s"] = args.rate_mb
            out["throttled"]["move_to_rate"] = round(
                out["throttled"]["move_mib_s"] / args.rate_mb, 2
            )
            for case in ("unthrottled", "throttled"):
                out[case]["producer_to_no_move"] = round(
                    out[case]["producer_mb_s"] / out["no_move"]["producer_mb_s"], 2
                )
            kadmin.close()
        finally:
            for b in brokers.values():
                b.kill()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
