"""Transactional produce against idempotent produce on one local broker, in the same run:

- throughput: one confluent-kafka producer sends MESSAGES x 1 KiB (no key, round-robin over the
  topic's partitions, acks=all as idempotence requires) to a fresh topic, either idempotent
  (the baseline: one flush() at the end), or transactional, committing once 100 ms have passed
  since the transaction began (the way Kafka Streams' exactly-once commits with
  commit.interval.ms=100): goal >= 0.7x. A third mode, idempotent with a flush() every 100 ms
  (``paced``), drains the pipeline as often as the commits do: transactional / paced is the cost
  of the transactions alone (AddPartitionsToTxn, EndTxn, markers);
- commit latency: each commit_transaction() of the transactional runs, timed after an explicit
  flush(), so that it measures EndTxn -> markers -> completion and not the records' delivery
  (the flush is what commit_transaction() would otherwise do first). p50 and p99 over every
  commit of every repeat.

    .venv/bin/python bench/transactions.py            # 200k x 1 KiB, 5 repeats, 1 and 8 partitions
    .venv/bin/python bench/transactions.py --quick    # 60k, 3 repeats

The modes take turns (the order rotates every repeat); figures are medians, the ratios are the
medians of the per-repeat ratios (transactional / idempotent, transactional / paced). The last line printed is one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer, libversion
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.testing.broker_process import LogkeelBroker

MESSAGE = 1024
COMMIT_INTERVAL_S = 0.100
PRODUCER_SETTINGS: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1024 * 1024,
    "compression.type": "none",
    "enable.idempotence": True,
    "queue.buffering.max.kbytes": 1024 * 1024,
    "log_level": 3,
}


def create(admin: AdminClient, partitions: int) -> str:
    topic = f"txb-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        ready = t is not None and t.error is None and len(t.partitions) == partitions
        if ready and all(p.leader >= 0 for p in t.partitions.values()):
            return topic
        time.sleep(0.05)
    raise TimeoutError(f"no leaders for {topic}")


def send(producer: Producer, topic: str, partition: int, value: bytes, errors: list[Any]) -> None:
    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    while True:
        try:
            producer.produce(topic, value, partition=partition, on_delivery=done)
            return
        except BufferError:
            producer.poll(0.01)


def idempotent(
    bootstrap: str, topic: str, partitions: int, count: int, paced: bool = False
) -> dict[str, Any]:
    """``paced``: flush() whenever 100 ms have passed, as the transactional run commits, so
    that the ratio against it is the cost of the transactions alone."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS})
    producer.list_topics(topic, timeout=10)  # connected, metadata known: not timed
    value, errors = b"x" * MESSAGE, []
    started = time.perf_counter()
    began = started
    for i in range(count):
        send(producer, topic, i % partitions, value, errors)
        if paced and i % 256 == 255 and time.perf_counter() - began >= COMMIT_INTERVAL_S:
            producer.flush(300)
            began = time.perf_counter()
    producer.flush(300)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} failed sends, first: {errors[0]}")
    return {"mb_s": count * MESSAGE / elapsed / 1e6, "seconds": elapsed}


def transactional(bootstrap: str, topic: str, partitions: int, count: int) -> dict[str, Any]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}", **PRODUCER_SETTINGS}
    )
    producer.init_transactions(60)  # not timed: once per application
    producer.list_topics(topic, timeout=10)
    value, errors = b"x" * MESSAGE, []
    commits: list[float] = []
    flushes: list[float] = []
    started = time.perf_counter()
    producer.begin_transaction()
    began = started
    for i in range(count):
        send(producer, topic, i % partitions, value, errors)
        due = i % 256 == 255 and time.perf_counter() - began >= COMMIT_INTERVAL_S
        if due or i == count - 1:
            t0 = time.perf_counter()
            producer.flush(300)
            t1 = time.perf_counter()
            producer.commit_transaction(60)
            t2 = time.perf_counter()
            flushes.append(t1 - t0)
            commits.append(t2 - t1)
            if i != count - 1:
                producer.begin_transaction()
                began = t2
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} failed sends, first: {errors[0]}")
    return {
        "mb_s": count * MESSAGE / elapsed / 1e6,
        "seconds": elapsed,
        "transactions": len(commits),
        "commit_s": commits,
        "flush_s_median": statistics.median(flushes),
    }


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def workload(
    bootstrap: str, admin: AdminClient, partitions: int, count: int, repeats: int
) -> dict[str, Any]:
    modes = {
        "idempotent": idempotent,
        "idempotent_paced": lambda *a: idempotent(*a, paced=True),
        "transactional": transactional,
    }
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {"idempotent": [], "idempotent_paced": []}
    for r in range(repeats):
        got = {}
        # The order rotates, so that no mode always runs first (or right after another).
        order = list(modes)[r % 3 :] + list(modes)[: r % 3]
        for mode in order:
            topic = create(admin, partitions)
            got[mode] = modes[mode](bootstrap, topic, partitions, count)
            runs[mode].append(got[mode])
            admin.delete_topics([topic])[topic].result(30)
        for base in ratios:
            ratios[base].append(got["transactional"]["mb_s"] / got[base]["mb_s"])
        t = got["transactional"]
        print(
            f"{partitions}p repeat {r}: idempotent {got['idempotent']['mb_s']:.1f} MB/s, "
            f"paced {got['idempotent_paced']['mb_s']:.1f} MB/s, transactional "
            f"{t['mb_s']:.1f} MB/s ({t['transactions']} commits, median "
            f"{statistics.median(t['commit_s']) * 1000:.1f} ms)",
            flush=True,
        )
    commits = [c for t in runs["transactional"] for c in t["commit_s"]]
    return {
        **{f"{m}_mb_s_median": statistics.median(r["mb_s"] for r in runs[m]) for m in modes},
        "ratio_median": statistics.median(ratios["idempotent"]),
        "ratio_to_paced_median": statistics.median(ratios["idempotent_paced"]),
        "ratios": ratios,
        "goal_ratio": 0.7,
        "transactions_per_run": [t["transactions"] for t in runs["transactional"]],
        "flush_before_commit_ms_median": 1000
        * statistics.median(t["flush_s_median"] for t in runs["transactional"]),
        "commit_ms": {
            "p50": 1000 * percentile(commits, 50),
            "p99": 1000 * percentile(commits, 99),
            "max": 1000 * max(commits),
            "count": len(commits),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--partitions", default="1,8", help="comma-separated partition counts")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.repeats = 60_000, 3
    work = Path(tempfile.mkdtemp(prefix="logkeel-bench-txn-"))
    result: dict[str, Any] = {
        "settings": {
            **vars(args),
            "message_bytes": MESSAGE,
            "commit_interval_ms": COMMIT_INTERVAL_S * 1000,
            "producer": PRODUCER_SETTINGS,
            "librdkafka": libversion()[0],
        }
    }
    broker = LogkeelBroker(work / "broker")
    broker.start(60)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for n in (int(p) for p in args.partitions.split(",")):
            result[f"{n}p"] = workload(broker.bootstrap, admin, n, args.messages, args.repeats)
    finally:
        broker.kill()
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
