"""A cluster at thousands of partitions (issue 19): 3 local brokers, a real ZooKeeper, Kafka's
default 18 s session, one topic of N partitions at RF 3, for each N given:

- create_s: CreateTopics until Metadata shows every partition with a full ISR;
  logs_created_s: until every broker has created its log of every partition (from the same
  start; the phases after it begin then);
- idle_cpu: each broker's CPU share of one core over IDLE_S seconds with no client, in the
  last of IDLE_WINDOWS consecutive windows after every log is created (idle_cpu_first: the
  first, which still holds the followers' first fetches and the new logs' checkpoints);
- metadata_ms: Metadata for every partition (median of 5, from one broker);
- steady (phase): the producer's first STEADY_S seconds, before any fault: librdkafka's
  ProduceRequest round trip to the leaders (the medians over its statistics windows and the
  brokers of each window's p50 and p99: an acks=all request is answered once the followers
  have the records) and each send's delivery time (from produce() to its acknowledgement,
  the producer's own queue included), for the sends of the window. librdkafka sends one
  partition per ProduceRequest (its issue #1700), at most 5 in flight per broker when
  idempotent: a round trip above 3 x 5 / SEND_RATE seconds (30 ms) lets a backlog grow;
- controlled_shutdown_s: SIGTERM of a broker that is not the controller, until no partition is
  led by it in ZooKeeper (the controller's decisions written: polled, so coarse; ..._zk_written_s
  is exact, from the write times ZooKeeper keeps on each partition's state, and
  ..._zk_first_written_s when the first of them was written; ..._zk_written_again: how many
  were written again since, left out of both), and ..._metadata_s until another
  broker's Metadata shows it (librdkafka's list_topics, which asks whichever broker it picks,
  the stopping one included); ..._broker_metadata_s: until each surviving broker's own
  Metadata shows it (one connection to that broker alone: it has applied them); the
  ZooKeeper probe runs from the signal (reading only the partitions not yet moved), the
  Metadata probes once it holds (a broker's Metadata cannot show a leadership ZooKeeper does
  not hold yet, and each probe is a Metadata request for every partition, which kept the
  brokers busy while the new controller worked); then its restart until it is back in every
  ISR in ZooKeeper (rejoin_after_shutdown_s);
  ..._broker_metadata_after_s: when the last probe of each survivor that still saw one
  was sent, or the ZooKeeper figure if its first probe held (the probes are paced at three
  times their own cost, so under load the figure before is coarse by seconds: it lies
  between the two);
- kill_controller_s (and ..._metadata_s, ..._zk_written_s): SIGKILL of the controller's broker, until every
  partition has a live leader; then its restart until it is back in every ISR
  (rejoin_after_kill_s);
- zookeeper: ZooKeeper's own counters (4lw `mntr`) over each failure, from the signal until the
  leaderships have moved: packets received and sent (ZooKeeper 3.8's `mntr` counts no
  bytes);
- descriptors_idle, descriptors_end: each broker's open descriptors after creation and at
  the end (before the producer's last flush);
- producer: an idempotent acks=all producer (confluent-kafka, its default retries and delivery
  timeout) sends to every partition in turn through both failures: acknowledged, failed, and
  still unacknowledged when the run stops waiting (FLUSH_S, or ``--flush-s``: a shorter wait
  leaves the sends a fault delayed past it counted as unacknowledged, not failed);
  failed_sent_at_s: the failed sends by when they were produced (5 s buckets from the
  producer's start), on the clock of ..._at_s (each fault's signal, each restart);
  waiting_after_faults: when sends are still unacknowledged STATS_S * 3 into the last flush,
  librdkafka's own statistics of where they wait (by leader: queued, being sent, in flight)
  and of its broker connections (requests queued and awaiting answers, round trips).

    .venv/bin/python bench/cluster_scale.py --partitions 1000,2000
    .venv/bin/python bench/cluster_scale.py --phases kill --py-spy /tmp/spy   # one phase, profiled

``--phases`` runs a subset (creation, the Metadata latency and the producer always run);
``--py-spy DIR`` records each surviving broker with py-spy for the first PROFILE_S seconds
after each fault, and every broker for PROFILE_S seconds after the idle windows (folded stacks, py-spy's raw format, in DIR, one file per broker and phase;
py-spy on PATH or in the venv).

The last line printed is one JSON object (one entry per partition count).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from logkeel.admin.session import AdminSession
from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_server import ZooKeeperServer, four_letter_word
from logkeel.testing.broker_process import LogkeelBroker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replication import cpu_seconds, start_cluster

TOPIC = "scale"
IDLE_S = 10.0
IDLE_WINDOWS = 3
SEND_RATE = 500  # messages per second, round-robin over the partitions
FAILED_BUCKET_S = 5
STATS_S = 10.0
FLUSH_S = 330.0  # above the producer's default delivery timeout (300 s)
PHASE_TIMEOUT_S = 180.0  # at 2,000 partitions; more in proportion above (--phase-timeout)
PHASES = ("idle", "steady", "shutdown", "kill")
STEADY_S = 40.0
PROFILE_S = 20
# Counters of ZooKeeper's `mntr` that tell its load.
ZK_COUNTERS = ("zk_packets_received", "zk_packets_sent")


def partitions(admin: AdminClient) -> dict[int, Any] | None:
    try:
        t = admin.list_topics(TOPIC, timeout=30).topics.get(TOPIC)
    except confluent_kafka.KafkaException:
        return None  # asked again: a loaded broker, or one that just lost its connection
    return None if t is None or t.error is not None else t.partitions


class View:
    """Metadata as one live broker answers it."""

    def __init__(self, broker: LogkeelBroker) -> None:
        self.admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def all_full(self, n: int, rf: int = 3) -> bool:
        parts = partitions(self.admin)
        return (
            parts is not None and len(parts) == n and all(len(p.isrs) == rf for p in parts.values())
        )

    def none_led_by(self, broker: int, n: int) -> bool:
        parts = partitions(self.admin)
        return (
            parts is not None
            and len(parts) == n
            and all(p.leader not in (broker, -1) for p in parts.values())
        )

    def in_every_isr(self, broker: int, n: int) -> bool:
        parts = partitions(self.admin)
        return (
            parts is not None and len(parts) == n and all(broker in p.isrs for p in parts.values())
        )


class BrokerView:
    """Metadata as one broker answers it, on a connection to that broker alone."""

    def __init__(self, broker: LogkeelBroker) -> None:
        self.bootstrap = broker.bootstrap

    def none_led_by(self, broker: int, n: int) -> bool:
        with AdminSession(self.bootstrap, client_id="cluster-scale", timeout_ms=30_000) as s:
            try:
                [topic] = s.metadata((TOPIC,)).topics
            except Exception:  # noqa: BLE001 - a loaded broker or a dropped connection: again
                return False
        parts = topic.partitions
        return len(parts) == n and all(int(p.leader_id) not in (broker, -1) for p in parts)


class ZkView:
    """The partition states in ZooKeeper, read pipelined: what the controller decided."""

    def __init__(self, zk: KazooClient, n: int, topic: str = TOPIC) -> None:
        self.zk = zk
        self.n = n
        self.topic = topic

    def states(self) -> list[Any]:
        return [state for state, _mtime_ms in self.stamped_states()]

    def stamped_states(self, partitions: Iterable[int] | None = None) -> list[tuple[Any, int]]:
        """Each partition's state (with its znode version) and the time ZooKeeper last wrote
        it (ms since the epoch), of ``partitions`` (every one by default), in their order."""
        ps = range(self.n) if partitions is None else partitions
        pending = [self.zk.get_async(zd.partition_state_path(self.topic, p)) for p in ps]
        out = []
        for r in pending:
            data, stat = r.get()
            out.append((zd.decode_partition_state(data, int(stat.version)), int(stat.mtime)))
        return out

    def moves_written(
        self, before: list[Any], broker: int, signal_wall_s: float
    ) -> tuple[float, float, int] | str:
        """Seconds from the signal until ZooKeeper wrote the first and the last of
        ``broker``'s leaderships (``before``: the states then) to another broker, from the
        znodes' own write times: exact, where the paced probes are coarse. A leadership
        written again since (a second election, a leader's ISR change) keeps only its last
        write's time: those are left out and counted (the third value); "inexact" when that
        is every one."""
        led = [p for p, s in enumerate(before) if s.leader == broker]
        now = self.stamped_states()
        once = [
            p
            for p in led
            if now[p][0].leader_epoch == before[p].leader_epoch + 1
            and now[p][0].zk_version == before[p].zk_version + 1
        ]
        if not once:
            return f"inexact: all {len(led)} written more than once"
        times = [now[p][1] / 1000 - signal_wall_s for p in once]
        return round(min(times), 3), round(max(times), 3), len(led) - len(once)

    def moved_off(self, broker: int, waiting: set[int]) -> bool:
        """Reads only the partitions of ``waiting`` (taking out each one a live broker now
        leads): True once none is left. Read whole at every probe, the states of every
        partition kept ZooKeeper and this process busy while the controller wrote."""
        ps = sorted(waiting)
        for p, (state, _mtime_ms) in zip(ps, self.stamped_states(ps), strict=True):
            if state.leader not in (broker, -1):
                waiting.discard(p)
        return not waiting

    def in_every_isr(self, broker: int) -> bool:
        return all(broker in s.isr for s in self.states())


def phase_timeout(n: int) -> float:
    """PHASE_TIMEOUT_S at up to 2,000 partitions, in proportion above (a phase that waits for
    every partition's state has that many more to wait for)."""
    return PHASE_TIMEOUT_S * max(1.0, n / 2000)


def wait_paced(probe: Callable[[], bool], what: str, timeout: float) -> float | None:
    """Polls ``probe`` until it holds, resting three times as long as each probe took between
    them: a probe is a Metadata request or ZooKeeper read of every partition, and polled every
    50 ms at 10,000 partitions it kept the broker answering it busy (its main thread holding
    the GIL a second per answer), slowing the very work it waited for. Returns when the last
    probe that did not hold was sent (None: the first held): what it waited for came after
    that, and the pacing makes the end coarse by up to three probes under load."""
    deadline = time.monotonic() + timeout
    last_miss = None
    while True:
        started = time.monotonic()
        if probe():
            return last_miss
        last_miss = started
        now = time.monotonic()
        if now >= deadline:
            raise TimeoutError(what)
        time.sleep(min(max(0.05, 3 * (now - started)), max(0.0, deadline - now)))


def timed(
    probe: Callable[[], bool],
    what: str,
    started: float,
    timeout: float = PHASE_TIMEOUT_S,
    misses: list[float] | None = None,
) -> float | str:
    """Seconds from ``started`` until ``probe`` holds; a phase that never ends within
    ``timeout`` is reported as such and the run goes on. ``misses``, if given, gets when the
    last probe that did not hold was sent (seconds from ``started``): the lower bound."""
    try:
        last_miss = wait_paced(probe, what, timeout)
    except TimeoutError:
        print(f"{what}: not within {timeout:.0f}s", file=sys.stderr, flush=True)
        return f">{timeout:.0f}"
    took = round(time.monotonic() - started, 2)
    after = 0.0 if last_miss is None else round(last_miss - started, 2)
    if misses is not None:
        misses.append(after)
    print(f"{what}: {took}s (after {after}s)", file=sys.stderr, flush=True)
    return took


def mntr(zk: ZooKeeperServer) -> dict[str, float]:
    out = {}
    for line in four_letter_word(zk.host, zk.port, "mntr").splitlines():
        key, _, value = line.partition("\t")
        if key in ZK_COUNTERS:
            out[key] = float(value)
    return out


def zk_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before if k in after}


class Sender(threading.Thread):
    def __init__(self, bootstrap: str, n: int, debug: str | None = None) -> None:
        """``debug``: librdkafka's debug contexts (its log to stderr), e.g. "eos,msg"."""
        super().__init__(daemon=True)
        self.n = n
        self.started = time.monotonic()
        # Failed sends by when they were produced, in FAILED_BUCKET_S buckets from ``started``.
        self.failed_sent_at: dict[int, int] = {}
        self.stop = threading.Event()
        self.acked = self.failed = self.sent = 0
        # Sends librdkafka refused at once, its queue of unacknowledged messages full (the
        # acks falling behind the send rate): not sent, so neither acked nor failed.
        self.queue_full = 0
        self.errors: dict[str, int] = {}
        self.failed_partitions: set[int] = set()
        conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}
        # librdkafka's own statistics (every STATS_S): where the unacknowledged sends wait.
        self.stats: dict[str, Any] | None = None
        # Each statistics window's round trips per broker (p50, p99 in ms), and each
        # acknowledged send's (produced, acknowledged) times: the steady phase's figures.
        self.rtt_windows: list[tuple[float, list[tuple[float, float]]]] = []
        self.delivered: list[tuple[float, float]] = []
        self.producer = confluent_kafka.Producer(
            {**conf, **({"debug": debug} if debug else {}),
             "statistics.interval.ms": int(STATS_S * 1000), "stats_cb": self._stats}
        )  # fmt: skip

    def _stats(self, raw: str) -> None:
        self.stats = json.loads(raw)
        rtts = [
            (b["rtt"]["p50"] / 1000, b["rtt"]["p99"] / 1000)
            for b in self.stats.get("brokers", {}).values()
            if b.get("nodeid", -1) >= 0 and (b.get("rtt") or {}).get("cnt")
        ]
        self.rtt_windows.append((time.monotonic(), rtts))

    def steady(self, start: float, end: float) -> dict[str, Any]:
        """The round trips of the statistics windows within [start, end] and the delivery
        times of the sends produced then (see the module's ``steady``)."""
        windows = [r for at, rtts in self.rtt_windows if start + STATS_S <= at <= end for r in rtts]
        taken = sorted(done - sent for sent, done in self.delivered if start <= sent <= end)

        def pct(q: float) -> float | None:
            return (
                round(taken[min(len(taken) - 1, int(q * len(taken)))] * 1000, 1) if taken else None
            )

        return {
            "rtt_p50_ms": round(statistics.median(p50 for p50, _ in windows), 1)
            if windows
            else None,
            "rtt_p99_ms": round(statistics.median(p99 for _, p99 in windows), 1)
            if windows
            else None,
            "acked": len(taken),
            "delivery_p50_ms": pct(0.5),
            "delivery_p99_ms": pct(0.99),
        }

    def waiting(self) -> dict[str, Any]:
        """From the last statistics: the partitions with sends unacknowledged, counted by
        their leader and where the sends are (queued, being sent, in flight), and each
        broker's connection state and requests."""
        stats = self.stats or {}
        where: dict[str, int] = {}
        for p in stats.get("topics", {}).get(TOPIC, {}).get("partitions", {}).values():
            if p.get("partition", -1) < 0 or not (
                p["msgq_cnt"] or p["xmit_msgq_cnt"] or p["msgs_inflight"]
            ):
                continue
            key = (f"leader {p['leader']}: queued {min(p['msgq_cnt'], 1)}, sending "
                   f"{min(p['xmit_msgq_cnt'], 1)}, in flight {min(p['msgs_inflight'], 1)}")  # fmt: skip
            where[key] = where.get(key, 0) + 1
        brokers = {
            name: {
                k: b.get(k) for k in ("nodeid", "state", "outbuf_cnt", "waitresp_cnt", "toppars")
            }
            for name, b in stats.get("brokers", {}).items()
        }
        for name, b in brokers.items():
            b["toppars"] = len(b["toppars"] or {})
            # A request's round trip (acks=all: until replicated), over the last window.
            rtt = stats["brokers"][name].get("rtt") or {}
            b["rtt_ms"] = {q: round(rtt.get(q, 0) / 1000, 1) for q in ("p50", "p99")}
        return {"partitions": where, "brokers": brokers}

    def _done(self, err: Any, msg: Any, sent_at: float) -> None:
        if err is None:
            self.acked += 1
            self.delivered.append((sent_at, time.monotonic()))
        else:
            self.failed += 1
            bucket = int((sent_at - self.started) // FAILED_BUCKET_S) * FAILED_BUCKET_S
            self.failed_sent_at[bucket] = self.failed_sent_at.get(bucket, 0) + 1
            self.failed_partitions.add(msg.partition())
            self.errors[str(err.name())] = self.errors.get(str(err.name()), 0) + 1

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                sent_at = time.monotonic()
                self.producer.produce(
                    TOPIC, b"x" * 100, partition=self.sent % self.n,
                    on_delivery=lambda err, msg, at=sent_at: self._done(err, msg, at),
                )  # fmt: skip
            except BufferError:
                self.queue_full += 1
                self.producer.poll(0.1)
                continue
            self.sent += 1
            self.producer.poll(0)
            self.stop.wait(1 / SEND_RATE)

    def finish(self, flush_s: float = FLUSH_S) -> dict[str, Any]:
        self.stop.set()
        self.join()
        left = self.producer.flush(min(flush_s, STATS_S * 3))
        waiting = self.waiting() if left else None
        if left:
            left = self.producer.flush(flush_s - STATS_S * 3)
        return {"sent": self.sent, "acked": self.acked, "failed": self.failed,
                "unacknowledged_at_end": left, "refused_queue_full": self.queue_full, "errors": self.errors,
                "failed_partitions": len(self.failed_partitions),
                "failed_partitions_first": sorted(self.failed_partitions)[:20],
                "failed_sent_at_s": dict(sorted(self.failed_sent_at.items())),
                "waiting_after_faults": waiting}  # fmt: skip


class Profiler:
    """py-spy on the given brokers for PROFILE_S seconds, if asked for (``out`` set)."""

    def __init__(self, out: Path | None) -> None:
        self.out = out
        self.procs: list[subprocess.Popen[bytes]] = []

    def record(self, phase: str, brokers: dict[int, LogkeelBroker], gil: bool = False) -> None:
        """``gil``: only the samples of the thread holding the GIL (where CPU goes, rather than
        what waits: on a loaded machine threads waiting for the GIL fill the samples)."""
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        venv_spy = Path(sys.executable).with_name("py-spy")
        spy = str(venv_spy) if venv_spy.exists() else shutil.which("py-spy") or "py-spy"
        for i, b in brokers.items():
            target = self.out / f"{phase}-broker{i}.txt"
            self.procs.append(
                subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(b.pid),
                        "--duration",
                        str(PROFILE_S),
                        "--rate",
                        "50",
                        "--threads",
                        "--format",
                        "raw",
                        "--output",
                        str(target),
                        "--nonblocking",
                        *(["--gil"] if gil else []),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

    def wait(self) -> None:
        for p in self.procs:
            p.wait(PROFILE_S + 60)
        self.procs.clear()


def logs_created(brokers: dict[int, LogkeelBroker], n: int) -> bool:
    """Whether every broker has a log dir for each of the topic's partitions (RF 3 on 3
    brokers: every broker holds every partition). Metadata shows full ISRs as soon as the
    controller writes the new states; the brokers create their logs after that."""
    return all(
        sum(1 for d in log_dir.iterdir() if d.name.startswith(f"{TOPIC}-")) >= n
        for b in brokers.values()
        for log_dir in b.log_dirs
    )


def open_descriptors(brokers: dict[int, LogkeelBroker]) -> dict[int, int]:
    """Each live broker's open descriptors (its replicas' files, sockets, the rest)."""
    out = {}
    for i, b in brokers.items():
        try:
            out[i] = len(os.listdir(f"/proc/{b.pid}/fd"))
        except (OSError, TypeError):
            continue  # not running
    return out


def controller_of(zk: KazooClient) -> int:
    return zd.decode_controller(zk.get(zd.CONTROLLER)[0])


def run(
    n: int,
    base: Path,
    phases: tuple[str, ...] = PHASES,
    profile: Path | None = None,
    flush_s: float = FLUSH_S,
    limit: float | None = None,
    rdkafka_debug: str | None = None,
    broker_configs: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``limit``: each phase's timeout (default: phase_timeout(n))."""
    result: dict[str, Any] = {"partitions": n}
    limit = limit or phase_timeout(n)
    # Start-up after a crash recovers every replica's log: longer with more of them.
    start_s = 120 * max(1.0, n / 2000)

    def timed_here(
        probe: Callable[[], bool], what: str, started: float, misses: list[float] | None = None
    ) -> float | str:
        return timed(probe, what, started, limit, misses)

    zk = ZooKeeperServer(base / "zookeeper").start()
    chroot = "/scale"
    brokers: dict[int, LogkeelBroker] = {}
    try:
        root = KazooClient(hosts=zk.connect_string)
        root.start()
        root.ensure_path(chroot)
        root.stop()
        watcher = KazooClient(hosts=zk.connect_string + chroot)
        watcher.start()
        # Under a load of 20-30 on this machine a broker took over 60 s to start listening.
        brokers = start_cluster(
            base, zk.connect_string + chroot,
            {"zookeeper.session.timeout.ms": "18000", **(broker_configs or {})},
            start_timeout=180,
        )  # fmt: skip
        view = {i: View(b) for i, b in brokers.items()}
        admin = view[1].admin
        wait_paced(lambda: watcher.exists(zd.CONTROLLER) is not None, "a controller", 180)

        started = time.monotonic()
        admin.create_topics([NewTopic(TOPIC, n, 3)], operation_timeout=limit)[TOPIC].result(
            limit + 60
        )
        result["create_s"] = timed_here(lambda: view[1].all_full(n), "every ISR full", started)
        result["logs_created_s"] = timed_here(
            lambda: logs_created(brokers, n), "every broker's logs created", started
        )

        if "idle" in phases:
            # Consecutive windows: the first still holds the settling after creation
            # (followers' first fetches, checkpoints of new logs); the last is the steady state.
            windows = []
            for _ in range(IDLE_WINDOWS):
                cpu0 = {i: cpu_seconds(b.pid) for i, b in brokers.items()}
                time.sleep(IDLE_S)  # the measurement window itself, nothing waited for
                windows.append(
                    {
                        i: round((cpu_seconds(b.pid) - cpu0[i]) / IDLE_S, 3)
                        for i, b in brokers.items()
                    }
                )
            result["idle_cpu_first"] = windows[0]
            result["idle_cpu"] = windows[-1]
            # Profiled after the measured windows, so that py-spy's sampling is not counted.
            idle_profile = Profiler(profile)
            idle_profile.record("idle", brokers, gil=True)
            idle_profile.wait()
        result["descriptors_idle"] = open_descriptors(brokers)
        latencies = []
        for _ in range(5):
            t0 = time.perf_counter()
            assert len(partitions(admin) or {}) == n
            latencies.append((time.perf_counter() - t0) * 1000)
        result["metadata_ms"] = round(statistics.median(latencies), 1)

        sender = Sender(",".join(b.bootstrap for b in brokers.values()), n, rdkafka_debug)
        sender.start()
        # Under way before the first fault (acks=all at thousands of partitions is slow here:
        # replication without fetch sessions).
        result["first_100_acks_s"] = timed_here(
            lambda: sender.acked >= 100, "100 acks", time.monotonic()
        )
        if "steady" in phases:
            steady_from, sent_before = time.monotonic(), sender.sent
            time.sleep(STEADY_S)  # the measurement window itself, nothing waited for
            result["steady"] = sender.steady(steady_from, time.monotonic())
            # Produced in the window and not yet acknowledged at its end: the backlog.
            result["steady"]["unacked"] = sender.sent - sent_before - result["steady"]["acked"]
        zkv = ZkView(watcher, n)
        zk_use: dict[str, Any] = {}
        profiler = Profiler(profile)

        def fault(key: str, victim: int, act: Callable[[], None], moved: str) -> float:
            """``act`` on ``victim``, then until no partition is led by it in ZooKeeper, in
            librdkafka's Metadata and in each surviving broker's own (``key``_s,
            ``key``_metadata_s, ``key``_broker_metadata_s), every probe at once from the
            signal; returns its start."""
            other = next(i for i in brokers if i != victim)
            survivors = [i for i in brokers if i != victim]
            pinned = {i: BrokerView(brokers[i]) for i in survivors}
            # A probe's own clients connected before the signal: the first poll's set-up is
            # not counted.
            view[other].none_led_by(victim, n)
            before = mntr(zk)
            states_before = zkv.states()
            started, signal_wall_s = time.monotonic(), time.time()
            result[f"{key}_at_s"] = round(started - sender.started, 1)
            act()
            profiler.record(key, {i: b for i, b in brokers.items() if i != victim})
            found: dict[str, Any] = {}
            lower: dict[str, list[float]] = {}
            waiting = {p for p, s in enumerate(states_before) if s.leader in (victim, -1)}
            probes = {
                "zk": (lambda: zkv.moved_off(victim, waiting), f"{moved} (ZooKeeper)"),
                "metadata": (lambda: view[other].none_led_by(victim, n), f"{moved} (Metadata)"),
                **{
                    f"broker{i}": (
                        lambda i=i: pinned[i].none_led_by(victim, n),
                        f"{moved} (broker {i}'s own Metadata)",
                    )
                    for i in survivors
                },
            }

            zk_done = threading.Event()

            def probe(name: str, check: Callable[[], bool], what: str) -> None:
                if name != "zk":
                    # A broker's Metadata is built from what ZooKeeper holds: it cannot show
                    # every partition led before ZooKeeper does. Polled from the signal, each
                    # probe (a Metadata request for every partition) kept the brokers busy
                    # while the new controller worked in one of them.
                    zk_done.wait()
                try:
                    found[name] = timed_here(check, what, started, lower.setdefault(name, []))
                finally:
                    if name == "zk":
                        zk_use[key] = zk_delta(before, mntr(zk))
                        zk_done.set()

            threads = [
                threading.Thread(target=probe, args=(name, *p), daemon=True)
                for name, p in probes.items()
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            result[f"{key}_s"] = found["zk"]
            written = zkv.moves_written(states_before, victim, signal_wall_s)
            if isinstance(written, str):
                result[f"{key}_zk_written_s"] = written
            else:
                first, last, rewritten = written
                result[f"{key}_zk_first_written_s"], result[f"{key}_zk_written_s"] = first, last
                result[f"{key}_zk_written_again"] = rewritten
            result[f"{key}_metadata_s"] = found["metadata"]
            result[f"{key}_broker_metadata_s"] = {i: found[f"broker{i}"] for i in survivors}
            # The last probe of each survivor that still saw a leadership to move was sent
            # this long after the signal: the figure above lies between the two.
            zk_s = found["zk"] if isinstance(found["zk"], float) else 0.0
            result[f"{key}_broker_metadata_after_s"] = {
                i: max(zk_s, (lower[f"broker{i}"] or [0.0])[0]) for i in survivors
            }
            return started

        if "shutdown" in phases:
            # Controlled shutdown of a broker that is not the controller.
            ctl = controller_of(watcher)
            victim = next(i for i in (3, 2, 1) if i != ctl)
            proc = brokers[victim].proc
            assert proc is not None
            started = fault("controlled_shutdown", victim, proc.terminate, "leaderships moved")
            brokers[victim].stop(120)
            result["shutdown_exit_s"] = round(time.monotonic() - started, 2)
            started = time.monotonic()
            result["restart_after_shutdown_at_s"] = round(started - sender.started, 1)
            brokers[victim].start(start_s)
            result["rejoin_after_shutdown_s"] = timed_here(
                lambda: zkv.in_every_isr(victim), "back in every ISR", started
            )

        if "kill" in phases:
            # SIGKILL of the controller's broker.
            ctl = controller_of(watcher)
            fault("kill_controller", ctl, brokers[ctl].kill, "every partition led")
            started = time.monotonic()
            result["restart_after_kill_at_s"] = round(started - sender.started, 1)
            brokers[ctl].start(start_s)
            result["rejoin_after_kill_s"] = timed_here(
                lambda: zkv.in_every_isr(ctl), "back in every ISR", started
            )
        result["zookeeper"] = zk_use
        result["descriptors_end"] = open_descriptors(brokers)
        result["producer"] = sender.finish(flush_s)
        profiler.wait()
        watcher.stop()
    finally:
        for b in brokers.values():
            b.kill()
        zk.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="2000", help="comma-separated partition counts")
    parser.add_argument(
        "--keep", action="store_true", help="keep each run's directory (broker logs) and print it"
    )
    parser.add_argument(
        "--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}"
    )
    parser.add_argument(
        "--py-spy", type=Path, default=None, metavar="DIR",
        help=f"record the brokers with py-spy for {PROFILE_S}s after the idle windows and each fault",
    )  # fmt: skip
    parser.add_argument(
        "--flush-s", type=float, default=FLUSH_S,
        help="how long the producer's last sends are waited for at the end",
    )  # fmt: skip
    parser.add_argument(
        "--phase-timeout", type=float, default=None, metavar="S",
        help=f"each phase's bound (default {PHASE_TIMEOUT_S:.0f}s per 2,000 partitions)",
    )  # fmt: skip
    parser.add_argument(
        "--rdkafka-debug", default=None, metavar="CONTEXTS",
        help="the producer's librdkafka debug contexts (e.g. eos,msg), logged to stderr",
    )  # fmt: skip
    parser.add_argument(
        "--broker-config", action="append", default=[], metavar="KEY=VALUE",
        help="a broker config for every broker (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    bad = [kv for kv in args.broker_config if "=" not in kv]
    if bad:
        parser.error(f"--broker-config takes KEY=VALUE, not {bad[0]!r}")
    phases = tuple(p for p in args.phases.split(",") if p)
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}: choose from {', '.join(PHASES)}")
    out = []
    for n in (int(x) for x in args.partitions.split(",")):
        base = Path(tempfile.mkdtemp(prefix=f"cluster-scale-{n}-"))
        try:
            out.append(
                run(
                    n,
                    base,
                    phases,
                    args.py_spy,
                    args.flush_s,
                    args.phase_timeout,
                    args.rdkafka_debug,
                )
            )
            print(json.dumps(out[-1]), flush=True)
        finally:
            if args.keep:
                print(f"kept {base}", file=sys.stderr)
            else:
                shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"runs": out}))


if __name__ == "__main__":
    main()
