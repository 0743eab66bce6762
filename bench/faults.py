"""Faults on 3 local brokers with a real ZooKeeper, each next to what stock Kafka does:

- disk: broker 1 leads a partition from a log dir on a FUSE mount that starts answering EIO
  while an idempotent acks=all producer (RF 3, min.insync.replicas 2) sends to it: seconds from
  the failure until another replica leads (goal < 5 s), sends that failed after the client's
  retries (goal 0), and seconds from the disk healing until broker 1 is back in the ISR
  (Kafka: the dir stays offline until the broker restarts);
- slow: broker 1 leads SLOW_PARTITIONS partitions from its two log dirs; reads on one of them
  take SLOW_READ_S longer for SLOW_FOR_S, at each replica.lag.time.max.ms of LAG_TIMES_MS
  (10 s, Kafka's default before 2.5, and 30 s): partitions seen offline (goal 0), the smallest
  ISR seen on each dir's partitions (goal: 3 on the healthy dir, >= 2 on the slow one), failed
  acks=all sends (goal 0), leaderships moved off the slow dir (goal: all, after the lag time)
  and off the healthy one (goal: none);
- unclean: the leader of a partition is lost for good after both followers stopped at
  different points; the follower with the shorter log starts first, the longer 1.5 s later;
  with unclean.leader.election.enable, is the replica elected the one with the longest log?
  (goal: every trial; Kafka's ZooKeeper controller elects the first live replica, the shorter)
  and does the controller report the loss from the chosen replica's log end (`logkeel cluster
  status`)?;
- wiped: the last in-sync replica comes back with an empty disk; is it ever elected in the
  next WIPED_WATCH_S seconds? (goal: never; Kafka elects it, and the others truncate to it).

    .venv/bin/python bench/faults.py            # 5 trials of each
    .venv/bin/python bench/faults.py --quick    # 2 trials

Needs root (or /dev/fuse) for the disk scenario, as the tests do. The last line printed is one
JSON object.
"""

from __future__ import annotations

import argparse
import errno
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.cluster.partition_state import ElectionRequest
from logkeel.cluster.zk_client import ZkMetadataClient
from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.broker_process import LogkeelBroker
from logkeel.testing.faulty_fs import FaultyFs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replication import SESSION_TIMEOUT_MS, start_cluster, wait_for

WIPED_WATCH_S = 10.0
SLOW_READ_S = 2.0
SLOW_FOR_S = 30.0
SLOW_PARTITIONS = 6
LAG_TIMES_MS = (10_000, 30_000)


def metadata(brokers: dict[int, LogkeelBroker], topic: str) -> Any:
    live = [b for b in brokers.values() if b.alive()]
    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in live)})
    md = admin.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else t.partitions


def leader(brokers: dict[int, LogkeelBroker], topic: str, p: int = 0) -> int:
    parts = metadata(brokers, topic)
    return -1 if not parts or p not in parts else int(parts[p].leader)


def in_sync(brokers: dict[int, LogkeelBroker], topic: str, n: int) -> bool:
    parts = metadata(brokers, topic)
    return bool(parts) and all(len(p.isrs) == n for p in parts.values())


def produce(brokers: dict[int, LogkeelBroker], topic: str, start: int, count: int) -> None:
    live = [b for b in brokers.values() if b.alive()]
    p = confluent_kafka.Producer({"bootstrap.servers": ",".join(b.bootstrap for b in live),
                                  "acks": "all", "enable.idempotence": True})  # fmt: skip
    for i in range(start, start + count):
        p.produce(topic, str(i).encode(), partition=0)
    assert p.flush(60) == 0


def on_failing_disk(dirs: list[Path], topic: str, partitions: int) -> list[int]:
    """The partitions broker 1 keeps on its first (FUSE) dir, once it has created the logs of
    all of them (a replica is in the ISR before its log exists)."""

    def created() -> dict[Path, list[int]] | None:
        found = {d: sorted(int(x.name.rsplit("-", 1)[1]) for x in d.glob(f"{topic}-*"))
                 for d in dirs}  # fmt: skip
        return found if sum(map(len, found.values())) >= partitions else None

    found = wait_for(created, f"broker 1's {topic} logs", 30)
    if not found[dirs[0]]:
        raise RuntimeError(f"broker 1 placed no {topic} partition on the failing disk: {found}")
    return found[dirs[0]]


def designate(connect: str, topic: str, p: int, replica: int) -> None:
    zk = ZkMetadataClient(connect).start()
    try:
        zk.run_election(ElectionRequest("designated", frozenset({TopicPartition(topic, p)}),
                                        replica), 30)  # fmt: skip
    finally:
        zk.close()


def disk_trial(zk: ZooKeeperServer, work: Path) -> dict[str, Any]:
    chroot = f"/faults-{uuid.uuid4().hex[:8]}"
    with FaultyFs(work / "backing", work / "mnt") as fs:
        dirs = {1: [fs.mountpoint / "logs", work / "b1-healthy"]}
        connect = zk.connect_string + chroot
        brokers = start_cluster(work, connect, {"log.dir.recovery.check.interval.ms": "500"}, dirs)
        try:
            topic = "disk"
            admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
            admin.create_topics([NewTopic(topic, 4, 3, config={"min.insync.replicas": "2"})])[
                topic
            ].result(30)
            wait_for(lambda: in_sync(brokers, topic, 3), "all in sync")
            p = on_failing_disk(dirs[1], topic, 4)[0]
            designate(connect, topic, p, 1)
            wait_for(lambda: leader(brokers, topic, p) == 1, "broker 1 leads")
            acked, failed = [0], [0]
            stop = threading.Event()

            def send() -> None:
                prod = confluent_kafka.Producer(
                    {
                        "bootstrap.servers": brokers[2].bootstrap,
                        "acks": "all",
                        "enable.idempotence": True,
                        "linger.ms": 5,
                    }  # fmt: skip
                )

                def done(err: Any, _m: Any) -> None:
                    (failed if err else acked)[0] += 1

                while not stop.is_set():
                    prod.produce(topic, b"x", partition=p, on_delivery=done)
                    prod.poll(0)
                    time.sleep(0.002)
                prod.flush(60)

            sender = threading.Thread(target=send)
            sender.start()
            wait_for(lambda: acked[0] > 200, "first acks")
            fs.fail(errno.EIO, ops={"write", "fsync"})
            failed_at = time.monotonic()
            wait_for(lambda: leader(brokers, topic, p) not in (1, -1), "a new leader", 60)
            moved_s = time.monotonic() - failed_at
            time.sleep(2)
            fs.heal()
            healed_at = time.monotonic()
            wait_for(lambda: in_sync(brokers, topic, 3), "broker 1 back in sync", 120)
            back_s = time.monotonic() - healed_at
            stop.set()
            sender.join(90)
            return {"leader_moved_s": round(moved_s, 2), "failed_sends": failed[0],
                    "acked_sends": acked[0], "back_in_isr_after_heal_s": round(back_s, 2)}  # fmt: skip
        finally:
            for b in brokers.values():
                b.kill()


def slow_trial(zk: ZooKeeperServer, work: Path, lag_ms: int) -> dict[str, Any]:
    """Reads on one of broker 1's two log dirs delayed by SLOW_READ_S for SLOW_FOR_S while it
    leads all SLOW_PARTITIONS partitions (some on the slow dir, the others on its healthy one)
    and an idempotent acks=all producer writes to all of them, at ``replica.lag.time.max.ms``
    ``lag_ms``: offline observations, the smallest ISR seen on each dir's partitions, failed
    sends, how many leaderships moved off the slow dir (and when the last did), and how many
    moved off the healthy one (goal: none)."""
    chroot = f"/faults-{uuid.uuid4().hex[:8]}"
    with FaultyFs(work / "backing", work / "mnt") as fs:
        dirs = {1: [fs.mountpoint / "logs", work / "b1-healthy"]}
        connect = zk.connect_string + chroot
        overrides = {
            "auto.leader.rebalance.enable": "false",
            "replica.lag.time.max.ms": str(lag_ms),
        }
        brokers = start_cluster(work, connect, overrides, dirs)
        try:
            topic = "av"
            n = SLOW_PARTITIONS
            admin = AdminClient({"bootstrap.servers": brokers[2].bootstrap})
            admin.create_topics([NewTopic(topic, n, 3, config={"min.insync.replicas": "2"})])[
                topic
            ].result(30)
            wait_for(lambda: in_sync(brokers, topic, 3), "all in sync")
            slow = on_failing_disk(dirs[1], topic, n)
            healthy = [p for p in range(n) if p not in slow]
            for p in range(n):
                designate(connect, topic, p, 1)
            wait_for(
                lambda: all(leader(brokers, topic, p) == 1 for p in range(n)), "broker 1 leads"
            )
            acked, failed = [0], [0]
            prod = confluent_kafka.Producer({"bootstrap.servers": brokers[2].bootstrap,
                                             "acks": "all", "enable.idempotence": True,
                                             "linger.ms": 5})  # fmt: skip

            def done(err: Any, _m: Any) -> None:
                (failed if err else acked)[0] += 1

            fs.delay(SLOW_READ_S, ops={"read"})
            started = time.monotonic()
            offline_seen = 0
            smallest = dict.fromkeys(range(n), 3)
            smallest_led = dict.fromkeys(range(n), 3)
            moved_at: dict[int, float] = {}
            while time.monotonic() - started < SLOW_FOR_S:
                for _ in range(10):
                    for p in range(n):
                        prod.produce(topic, b"x" * 1000, partition=p, on_delivery=done)
                    prod.poll(0)
                    time.sleep(0.02)
                parts = metadata(brokers, topic)
                for p, part in parts.items():
                    offline_seen += part.leader < 0
                    smallest[p] = min(smallest[p], len(part.isrs))
                    if part.leader == 1:  # the ISR of the slow leader itself (KIP-501's case)
                        smallest_led[p] = min(smallest_led[p], len(part.isrs))
                    if part.leader not in (1, -1) and p not in moved_at:
                        moved_at[p] = round(time.monotonic() - started, 1)
            fs.heal()
            assert prod.flush(120) == 0
            moved_slow = [moved_at[p] for p in slow if p in moved_at]
            return {"lag_ms": lag_ms, "slow_dir_partitions": len(slow),
                    "healthy_dir_partitions": len(healthy),
                    "offline_observations": offline_seen,
                    "smallest_isr_healthy_dir": min(smallest[p] for p in healthy) if healthy else None,
                    "smallest_isr_slow_dir": min(smallest[p] for p in slow),
                    "smallest_isr_slow_dir_led_by_slow_broker": min(smallest_led[p] for p in slow),
                    "failed_sends": failed[0], "acked_sends": acked[0],
                    "slow_dir_leaderships_moved": len(moved_slow),
                    "last_slow_dir_leadership_moved_after_s": max(moved_slow, default=None),
                    "healthy_dir_leaderships_moved": sum(p in moved_at for p in healthy)}  # fmt: skip
        finally:
            for b in brokers.values():
                b.kill()


def unclean_trial(zk: ZooKeeperServer, work: Path) -> dict[str, Any]:
    connect = zk.connect_string + f"/faults-{uuid.uuid4().hex[:8]}"
    brokers = start_cluster(work, connect, {"unclean.leader.election.enable": "true"})
    try:
        topic = "unclean"
        admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
        wait_for(lambda: in_sync(brokers, topic, 3), "all in sync")
        lead = leader(brokers, topic)
        shorter, longer = (b for b in (1, 2, 3) if b != lead)
        produce(brokers, topic, 0, 1000)
        brokers[shorter].stop()
        produce(brokers, topic, 1000, 1000)
        brokers[longer].stop()
        produce(brokers, topic, 2000, 500)
        brokers[lead].kill()
        time.sleep(SESSION_TIMEOUT_MS / 1000 + 1)
        brokers[shorter].start(60)
        time.sleep(1.5)
        started = time.monotonic()
        brokers[longer].start(60)
        chosen = wait_for(lambda: (x := leader(brokers, topic)) not in (-1, lead) and x, "a leader")
        elected_s = round(time.monotonic() - started, 2)
        # What the controller reported lost (`logkeel cluster status`): every record from the
        # chosen replica's log end, 2000 (longer) or 1000 (shorter), of the 2500 acked.
        zk = ZkMetadataClient(connect).start()
        try:
            reported = [x.from_offset for x in zk.election_losses() if x.tp.topic == topic]
        finally:
            zk.close()
        return {"chosen_longest": chosen == longer, "elected_after_longer_started_s": elected_s,
                "acked_lost": 2500 - (2000 if chosen == longer else 1000),
                "loss_reported_from": reported[-1] if reported else None,
                "loss_report_exact": reported[-1:] == [2000 if chosen == longer else 1000]}  # fmt: skip
    finally:
        for b in brokers.values():
            b.kill()


def wiped_trial(zk: ZooKeeperServer, work: Path) -> dict[str, Any]:
    connect = zk.connect_string + f"/faults-{uuid.uuid4().hex[:8]}"
    brokers = start_cluster(work, connect)
    try:
        topic = "wiped"
        admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
        wait_for(lambda: in_sync(brokers, topic, 3), "all in sync")
        lead = leader(brokers, topic)
        followers = [b for b in (1, 2, 3) if b != lead]
        produce(brokers, topic, 0, 1000)
        time.sleep(6)  # the brokers' periodic reports record that the partition holds data
        for f in followers:
            brokers[f].stop()
        produce(brokers, topic, 1000, 100)
        brokers[lead].stop()
        for d in brokers[lead].log_dirs:
            shutil.rmtree(d)
        brokers[lead].start(60)
        deadline = time.monotonic() + WIPED_WATCH_S
        elected = False
        while time.monotonic() < deadline:
            elected = elected or leader(brokers, topic) == lead
            time.sleep(0.25)
        return {"wiped_replica_elected": elected}
    finally:
        for b in brokers.values():
            b.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int)
    parser.add_argument(
        "--only", choices=("disk", "slow", "slow_10s", "slow_30s", "unclean", "wiped")
    )
    args = parser.parse_args()
    trials = args.trials or (2 if args.quick else 5)
    result: dict[str, Any] = {"trials": trials}
    base = Path(tempfile.mkdtemp(prefix="logkeel-faults-"))
    zk = ZooKeeperServer(base / "zookeeper")
    zk.start()
    try:
        scenarios: list[tuple[str, Any]] = [("disk", disk_trial)]
        scenarios += [(f"slow_{lag // 1000}s", lambda z, w, lag=lag: slow_trial(z, w, lag))
                      for lag in LAG_TIMES_MS]  # fmt: skip
        scenarios += [("unclean", unclean_trial), ("wiped", wiped_trial)]
        for name, trial in scenarios:
            if args.only and not name.startswith(args.only):
                continue
            runs = []
            for i in range(trials):
                runs.append(trial(zk, base / f"{name}-{i}"))
                print(name, i, json.dumps(runs[-1]), flush=True)
            result[name] = runs
        if "disk" in result:
            d = result["disk"]
            result["disk_summary"] = {
                "leader_moved_s_median": statistics.median(r["leader_moved_s"] for r in d),
                "failed_sends_total": sum(r["failed_sends"] for r in d),
                "back_in_isr_after_heal_s_median": statistics.median(
                    r["back_in_isr_after_heal_s"] for r in d
                ),
                "kafka": "dir offline until a broker restart; leadership moves via LeaderAndIsr",
            }
        for lag in LAG_TIMES_MS:
            sl = result.get(f"slow_{lag // 1000}s")
            if not sl:
                continue
            healthy = [r["smallest_isr_healthy_dir"] for r in sl if r["smallest_isr_healthy_dir"]]
            result[f"slow_{lag // 1000}s_summary"] = {
                "offline_observations_total": sum(r["offline_observations"] for r in sl),
                "smallest_isr_healthy_dir": min(healthy, default=None),
                "smallest_isr_slow_dir": min(r["smallest_isr_slow_dir"] for r in sl),
                "smallest_isr_slow_dir_led_by_slow_broker": min(
                    r["smallest_isr_slow_dir_led_by_slow_broker"] for r in sl
                ),
                "failed_sends_total": sum(r["failed_sends"] for r in sl),
                "slow_dir_leaderships_moved": [
                    f"{r['slow_dir_leaderships_moved']}/{r['slow_dir_partitions']}" for r in sl
                ],
                "last_slow_leadership_moved_after_s": [
                    r["last_slow_dir_leadership_moved_after_s"] for r in sl
                ],
                "healthy_dir_leaderships_moved_total": sum(
                    r["healthy_dir_leaderships_moved"] for r in sl
                ),
                "kafka": "KIP-501: followers of a leader with slow reads drop out of the ISR "
                "(below min.insync.replicas: acks=all fails); the slow leader keeps leading",
            }
        if "unclean" in result:
            result["unclean_summary"] = {
                "chose_longest": f"{sum(r['chosen_longest'] for r in result['unclean'])}/{trials}",
                "loss_reported_exactly": f"{sum(r['loss_report_exact'] for r in result['unclean'])}"
                f"/{trials}",
                "kafka": "first live replica in assignment order (here: the shorter log)",
            }
        if "wiped" in result:
            result["wiped_summary"] = {
                "elected": f"{sum(r['wiped_replica_elected'] for r in result['wiped'])}/{trials}",
                "kafka": "the restarted last ISR member leads again with its empty log",
            }
    finally:
        zk.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
