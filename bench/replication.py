"""Replication on 3 local brokers with a real ZooKeeper, in one run:

- produce throughput, acks=all to RF 3 (min.insync.replicas 2) against acks=1 to RF 1
  (goal >= 0.5x), alternating, medians of the per-repeat ratios;
- follower catch-up: a replica whose partition dir was wiped while its broker was down, behind
  DATA_MB of data, timed from its broker listening again until it is back in the ISR
  (goal >= 200 MB/s);
- failover: an idempotent acks=all producer sends continuously; the leader is SIGKILLed (goal:
  a send made after the kill is acknowledged within zookeeper.session.timeout.ms + 1 s) or
  SIGTERMed (goal < 1 s), timed from the signal to the first acknowledgement of a send made after it;
- latency on the idle cluster, one send at a time, p50/p99: an acks=all send to RF 3 until its
  acknowledgement (goal p99 < 5 ms) beside an acks=1 send's (the leader alone), and from an
  acks=1 send's acknowledgement until the leader's high watermark (ListOffsets latest, polled)
  covers its offset.

    .venv/bin/python bench/replication.py            # 100k x 1 KiB per run, 5 repeats, 1 GiB
    .venv/bin/python bench/replication.py --quick    # 50k, 3 repeats, 256 MiB
    .venv/bin/python bench/replication.py --only latency --sends 2000

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.testing.broker_process import LogkeelBroker

MESSAGE = 1024
SESSION_TIMEOUT_MS = 6000


def start_cluster(
    work: Path,
    connect: str,
    overrides: dict[str, str] | None = None,
    log_dirs: dict[int, list[Path]] | None = None,
    start_timeout: float = 60,
) -> dict[int, LogkeelBroker]:
    """Brokers 1-3 on ``connect``, started side by side (``log_dirs``: a broker's own)."""
    brokers = {
        i: LogkeelBroker(
            work / f"b{i}",
            log_dirs=(log_dirs or {}).get(i),
            overrides={
                "zookeeper.connect": connect,
                "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                **(overrides or {}),
            },
            extra_args=["--node-id", str(i)],
        )  # fmt: skip
        for i in (1, 2, 3)
    }
    threads = [threading.Thread(target=b.start, args=(start_timeout,)) for b in brokers.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return brokers


def wait_for(probe: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(what)


def partition(admin: AdminClient, topic: str, p: int = 0) -> Any:
    md = admin.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else t.partitions.get(p)


def create(admin: AdminClient, topic: str, rf: int, **config: str) -> None:
    admin.create_topics([NewTopic(topic, 1, rf, config=config)])[topic].result(30)
    wait_for(lambda: (p := partition(admin, topic)) is not None and p.leader > 0, "a leader")


def produce(bootstrap: str, topic: str, count: int, acks: str, idempotent: bool = False) -> float:
    """MB/s of ``count`` messages from one producer, timed from the first send to the last
    acknowledgement. The producer is warmed up first (connections, metadata and, when
    idempotent, its producer id; librdkafka takes ~0.5 s for that), so every case times only
    the data path. Settings other than ``acks`` are the same in every case, with Kafka's
    default of 5 requests in flight; an idempotent producer is librdkafka's, which keeps one
    request in flight per partition once a batch holds more than 5 messages (it counts
    messages in flight against the 5), so it is reported apart."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1048576,
        "enable.idempotence": idempotent, "max.in.flight.requests.per.connection": 5,
        "queue.buffering.max.kbytes": 1048576,
    })  # fmt: skip
    value = b"x" * MESSAGE
    errors: list[Any] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, value, partition=0, on_delivery=done)
    producer.flush(60)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} failed sends, first: {errors[0]}")
    return count * MESSAGE / elapsed / 1e6


# case -> (replication factor, acks, idempotent)
CASES = {
    "rf3_acks_all": (3, "all", False),
    "rf1_acks_1": (1, "1", False),
    "rf3_acks_all_idempotent": (3, "all", True),
}


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process so far (Linux)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(
    brokers: dict[int, LogkeelBroker], admin: AdminClient, messages: int, repeats: int
) -> dict[str, Any]:
    """Every case once per repeat, in an order rotated each repeat; the ratios are taken
    within a repeat and their median reported. Next to MB/s, the CPU time the three brokers
    spent per MB: unlike throughput, it hardly depends on what else runs on the machine."""
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    rows: dict[str, list[float]] = {case: [] for case in CASES}
    cpu: dict[str, list[float]] = {case: [] for case in CASES}
    ratios: dict[str, list[float]] = {"ratio": [], "ratio_idempotent": []}
    names = list(CASES)
    for r in range(repeats):
        got = {}
        for case in names[r % len(names) :] + names[: r % len(names)]:
            rf, acks, idempotent = CASES[case]
            topic = f"tp-{uuid.uuid4().hex[:8]}"
            create(admin, topic, rf, **({"min.insync.replicas": "2"} if rf == 3 else {}))
            before = sum(cpu_seconds(b.pid) for b in brokers.values())
            got[case] = produce(bootstrap, topic, messages, acks, idempotent)
            spent = sum(cpu_seconds(b.pid) for b in brokers.values()) - before
            cpu[case].append(spent * 1000 / (messages * MESSAGE / 1e6))
            rows[case].append(got[case])
            admin.delete_topics([topic])[topic].result(30)
        ratios["ratio"].append(got["rf3_acks_all"] / got["rf1_acks_1"])
        ratios["ratio_idempotent"].append(got["rf3_acks_all_idempotent"] / got["rf1_acks_1"])
        print(f"repeat {r}: " + ", ".join(f"{c} {v:.0f} MB/s" for c, v in got.items()), flush=True)
    return {
        **{
            k: {
                "mb_s_median": statistics.median(v),
                "runs": v,
                "broker_cpu_ms_per_mb_median": statistics.median(cpu[k]),
            }
            for k, v in rows.items()
        },  # fmt: skip
        "ratio_median": statistics.median(ratios["ratio"]),
        "ratio_idempotent_median": statistics.median(ratios["ratio_idempotent"]),
        "ratios": ratios,
        "goal_ratio": 0.5,
    }


def catch_up(brokers: dict[int, LogkeelBroker], admin: AdminClient, data_mb: int) -> dict[str, Any]:
    topic = f"catchup-{uuid.uuid4().hex[:8]}"
    create(admin, topic, 3, **{"min.insync.replicas": "1"})
    leader = partition(admin, topic).leader
    follower = next(i for i in brokers if i != leader)
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    produce(bootstrap, topic, data_mb * 1024, "all")
    victim = brokers[follower]
    victim.kill()
    shutil.rmtree(victim.workdir / "logs" / f"{topic}-0")
    wait_for(lambda: follower not in partition(admin, topic).isrs, "ISR shrink", 60)
    victim.start(60)
    started = time.monotonic()
    wait_for(lambda: follower in partition(admin, topic).isrs, "back in the ISR", 600)
    elapsed = time.monotonic() - started
    rate = data_mb * 1024 * 1024 / elapsed / 1e6
    print(f"catch-up: {data_mb} MiB in {elapsed:.1f}s = {rate:.0f} MB/s", flush=True)
    return {"mib": data_mb, "seconds": elapsed, "mb_s": rate, "goal_mb_s": 200}


def failover(
    brokers: dict[int, LogkeelBroker], admin: AdminClient, how: str
) -> tuple[float, float | None]:
    """(seconds from the signal to the first acknowledgement of a later send, and after
    SIGTERM seconds until the old process exited)."""
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    create(admin, topic, 3, **{"min.insync.replicas": "2"})
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 1, "delivery.timeout.ms": 120000,
    })  # fmt: skip
    sent_at: dict[int, float] = {}
    acked: list[tuple[float, float]] = []  # (sent, acked)
    stop = threading.Event()

    def run() -> None:
        seq = 0
        while not stop.is_set():
            sent_at[seq] = time.monotonic()
            producer.produce(
                topic,
                b"x" * 100,
                partition=0,
                on_delivery=lambda err, _m, s=seq: (
                    acked.append((sent_at[s], time.monotonic())) if err is None else None
                ),
            )
            seq += 1
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(120)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_for(lambda: len(acked) > 200, "first acks")
        victim = brokers[partition(admin, topic).leader]
        signalled = time.monotonic()
        stopper = None
        exited: list[float] = []
        if how == "kill":
            victim.kill()
        else:

            def stop_victim() -> None:
                victim.stop(60)
                exited.append(time.monotonic())

            stopper = threading.Thread(target=stop_victim)
            stopper.start()
        first = wait_for(
            lambda: next((a for s, a in list(acked) if s > signalled), None), "an ack", 120
        )
    finally:
        stop.set()
        thread.join(150)
    if stopper is not None:
        # Restarting before the old process is gone would find its log dir still locked.
        stopper.join(90)
    victim.start(60)
    wait_for(lambda: len(partition(admin, topic).isrs) == 3, "ISR whole again", 120)
    return float(first - signalled), (exited[0] - signalled if exited else None)


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def latency(brokers: dict[int, LogkeelBroker], admin: AdminClient, sends: int) -> dict[str, Any]:
    """One send at a time on an idle cluster: acks=all until acknowledged; acks=1 from the
    acknowledgement until ListOffsets(latest) on the leader (its high watermark) covers it."""
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    topic = f"latency-{uuid.uuid4().hex[:8]}"
    create(admin, topic, 3, **{"min.insync.replicas": "2"})
    wait_for(lambda: len(partition(admin, topic).isrs) == 3, "a full ISR")
    result: dict[str, Any] = {"sends": sends}
    acked: list[Any] = []
    for acks in ("all", "1"):
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0}
        )
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"lat-{uuid.uuid4().hex[:6]}"}
        )
        tp = confluent_kafka.TopicPartition(topic, 0)
        ack_s: list[float] = []
        hw_s: list[float] = []
        for i in range(sends + 50):  # the first 50 warm up
            acked.clear()
            sent = time.perf_counter()
            producer.produce(topic, b"x" * 100, partition=0,
                             on_delivery=lambda err, msg: acked.append((err, msg)))  # fmt: skip
            while not acked:
                producer.poll(1.0)
            done = time.perf_counter()
            err, msg = acked[0]
            if err is not None:
                raise RuntimeError(f"send failed: {err}")
            if acks == "1":
                # ListOffsets(latest) answers the high watermark, on the leader.
                deadline = done + 10
                while (
                    consumer.get_watermark_offsets(tp, timeout=5, cached=False)[1] <= msg.offset()
                ):
                    if time.perf_counter() > deadline:
                        raise TimeoutError("high watermark")
                covered = time.perf_counter()
                if i >= 50:
                    hw_s.append(covered - done)
            if i >= 50:
                ack_s.append(done - sent)
        consumer.close()
        if acks == "all":
            result["acks_all_produce"] = {**percentiles(ack_s), "goal_p99_ms": 5}
        else:
            # The baseline in the same run: the leader's own part of a send, no follower in it.
            result["acks_1_produce"] = percentiles(ack_s)
            result["acks_1_ack_to_high_watermark"] = percentiles(hw_s)
    admin.delete_topics([topic])[topic].result(30)
    print(f"latency: {result}", flush=True)
    return result


def failovers(brokers: dict[int, LogkeelBroker], admin: AdminClient) -> dict[str, Any]:
    kills = [failover(brokers, admin, "kill")[0] for _ in range(3)]
    stops = [failover(brokers, admin, "stop") for _ in range(3)]
    terms = [t for t, _ in stops]
    print(f"failover: SIGKILL {kills}, SIGTERM {terms}, SIGTERMed broker exited after "
          f"{[e for _, e in stops]}", flush=True)  # fmt: skip
    return {
        "sigkill": kills, "sigkill_median": statistics.median(kills),
        "goal_sigkill": SESSION_TIMEOUT_MS / 1000 + 1,
        "sigterm": terms, "sigterm_median": statistics.median(terms), "goal_sigterm": 1.0,
        "sigterm_exit_s": [e for _, e in stops],
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-mb", type=int, default=1024)
    parser.add_argument("--sends", type=int, default=2000, help="latency: sends per case")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only",
        choices=("produce", "catch-up", "failover", "latency"),
        help="measure one figure only",
    )
    args = parser.parse_args()
    if args.quick:
        args.messages, args.repeats, args.data_mb = 50_000, 3, 256
    work = Path(tempfile.mkdtemp(prefix="logkeel-bench-replication-"))
    result: dict[str, Any] = {"settings": {**vars(args), "message_bytes": MESSAGE,
                                           "session_timeout_ms": SESSION_TIMEOUT_MS}}  # fmt: skip
    with ZooKeeperServer(work / "zk") as zk:
        brokers = start_cluster(work, zk.connect_string + "/bench")
        try:
            bootstrap = ",".join(b.bootstrap for b in brokers.values())
            admin = AdminClient({"bootstrap.servers": bootstrap})
            if args.only in (None, "produce"):
                result["produce"] = throughput(brokers, admin, args.messages, args.repeats)
            if args.only in (None, "catch-up"):
                result["catch_up"] = catch_up(brokers, admin, args.data_mb)
            if args.only in (None, "latency"):
                result["latency"] = latency(brokers, admin, args.sends)
            if args.only in (None, "failover"):
                result["failover_s"] = failovers(brokers, admin)
        finally:
            for b in brokers.values():
                if b.alive():
                    b.kill()
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
