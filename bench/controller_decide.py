"""What the controller's decisions cost when a broker asks for a controlled shutdown (issue
19): N partitions at RF 3 on 3 brokers (every one holds a replica of the leaving broker), each
with a replica-log report from every broker, decided in-process with the pure `decide` and
stamped, as a controller pass does; no ZooKeeper. Prints the milliseconds per pass over all N
partitions (median of the rounds) and how many changed (every one: a leadership moved or the
leaving follower left the ISR).

    .venv/bin/python bench/controller_decide.py --partitions 2000

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from logkeel.cluster.controller_decisions import LiveBrokers, decide
from logkeel.cluster.partition_state import PartitionRegistration
from logkeel.cluster.zk_data import ReplicaLogReport
from logkeel.storage.topic_partition import TopicPartition

EPOCHS = {1: 101, 2: 102, 3: 103}
TOPIC_ID = "topic-id"


def partitions(
    n: int,
) -> tuple[
    dict[TopicPartition, PartitionRegistration], dict[int, dict[TopicPartition, ReplicaLogReport]]
]:
    regs = {}
    logs: dict[int, dict[TopicPartition, ReplicaLogReport]] = {b: {} for b in EPOCHS}
    for p in range(n):
        replicas = tuple((p + i) % 3 + 1 for i in range(3))
        tp = TopicPartition("scale", p)
        regs[tp] = PartitionRegistration(
            replicas, replicas[0], 0, replicas, 3,
            leader_broker_epoch=EPOCHS[replicas[0]], isr_since=tuple((r, 50) for r in replicas),
        )  # fmt: skip
        for b, epoch in EPOCHS.items():
            logs[b][tp] = ReplicaLogReport(TOPIC_ID, 0, 10, 3, epoch, 10)
    return regs, logs


def one_pass(regs: dict[TopicPartition, PartitionRegistration], cluster: LiveBrokers) -> int:
    changed = 0
    for tp, reg in regs.items():
        d = decide(tp, reg, cluster, unclean=False, preferred=False, topic_id=TOPIC_ID)
        changed += cluster.stamp(d.state, reg) != reg
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    regs, logs = partitions(args.partitions)
    times, changed = [], 0
    for _ in range(args.rounds):
        # A pass builds its LiveBrokers anew from the context (what it memoises lasts a pass).
        cluster = LiveBrokers(frozenset(EPOCHS), frozenset({3}), {}, logs, EPOCHS, {})
        started = time.perf_counter()
        changed = one_pass(regs, cluster)
        times.append((time.perf_counter() - started) * 1000)
    print(json.dumps({"partitions": args.partitions, "changed": changed,
                      "pass_ms": round(statistics.median(times), 1)}))  # fmt: skip


if __name__ == "__main__":
    main()
