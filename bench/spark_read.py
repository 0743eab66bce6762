"""Reading a topic through logkeel's Spark data sources, against plain reads, in one run.

Two comparisons, each on the same data in the same run:

- **Kafka-protocol source** (`format("logkeel")`, a Spark job on `--master`) against one plain
  confluent-kafka consumer in one process reading every partition of the topic from a `logkeel
  serve` broker, and against one such consumer per core (processes splitting the partitions),
  which is the parallelism the Spark job has. The Spark side is timed from the action to its end (planning, Python workers,
  Arrow transfer, a `noop` sink that materialises every row), after a warm-up read; session
  start-up is not counted.
- **Segment reader** (`format("logkeel-segments")` over the broker's log dir, no broker) against
  raw reads of the same segment files (`os.read` in 8 MiB chunks), and against the scan + decode
  + Arrow batches the reader does, run in this process without Spark (what one Spark task does
  per core). Both with each record decoder (``decoder`` option): ``native`` (the compiled one,
  the default when built) and ``python`` (the pure-Python fallback, what the reader ran before).

MB/s counts key + value bytes for the record readers and file bytes for the raw read; the
segment reader's ``file_mb_s`` counts file bytes too, for a like-for-like ratio.
Prints one line per measurement and, last, one JSON object. Medians over --repeats.

    .venv/bin/python bench/spark_read.py                # 1,000,000 records of 100 bytes, 4 partitions
    .venv/bin/python bench/spark_read.py --records 200000 --repeats 3
    .venv/bin/python bench/spark_read.py --segments-only  # no topic source or consumers
    mkdir /tmp/base && git archive main src | tar -x -C /tmp/base && \\
      .venv/bin/python bench/spark_read.py --segments-only --baseline-src /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from logkeel.spark.schema import arrow_schema, segment_schema  # noqa: E402
from logkeel.spark.segment_scan import find_partitions, list_segments  # noqa: E402
from logkeel.spark.segments import PERMISSIVE, read_segments  # noqa: E402
from logkeel.testing.broker_process import LogkeelBroker  # noqa: E402

DECODERS = ("native", "python")  # the compiled record decoder, and the pure-Python fallback


def log(msg: str) -> None:
    print(msg, flush=True)


def produce(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = os.urandom(value_bytes)
    for i in range(records):
        key = b"key-%08d" % i
        while True:
            try:
                p.produce(topic, value, key, i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return records * (value_bytes + len(b"key-00000000"))


def plain_consumer(
    bootstrap: str, topic: str, partitions: int, only: list[int] | None = None
) -> tuple[int, int, float]:
    """(records, key+value bytes, seconds) for one consumer reading the whole topic (or the
    partitions in ``only``)."""
    assigned = list(range(partitions)) if only is None else only
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.time_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # As the Spark source (and Spark's own Kafka connector) reads.
            "isolation.level": "read_uncommitted",
        }
    )
    c.assign([KafkaTP(topic, p, 0) for p in assigned])
    started = time.perf_counter()
    n = nbytes = 0
    done: set[int] = set()
    while len(done) < len(assigned):
        for m in c.consume(10_000, 1.0):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition())
                    continue
                raise RuntimeError(err)
            # Touch what a reader would: the key, the value, the offset and the timestamp.
            k, v = m.key(), m.value()
            m.offset()
            m.timestamp()
            n += 1
            nbytes += len(k) + len(v)
    elapsed = time.perf_counter() - started
    c.close()
    return n, nbytes, elapsed


def _consumer_process(args: tuple, ready, go, results) -> None:
    ready.release()
    go.wait()
    results.put(plain_consumer(*args)[:2])


def parallel_consumers(
    bootstrap: str, topic: str, partitions: int, procs: int
) -> tuple[int, int, float]:
    """``procs`` consumer processes splitting the partitions, timed from a common start."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # librdkafka's threads do not survive fork
    ready, go, results = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(
            target=_consumer_process,
            args=(
                (bootstrap, topic, partitions, list(range(i, partitions, procs))),
                ready,
                go,
                results,
            ),
        )
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.acquire()
    started = time.perf_counter()
    go.set()
    parts = [results.get() for _ in workers]
    elapsed = time.perf_counter() - started
    for w in workers:
        w.join()
    return sum(p[0] for p in parts), sum(p[1] for p in parts), elapsed


def spark_action(df) -> float:
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


_TICKS = os.sysconf("SC_CLK_TCK")
NOT_SPARK: set[int] = set()  # children that are not Spark's (the broker), left out of its CPU


def spark_cpu_seconds() -> float:
    """CPU time so far of this process's descendants: Spark's JVM and its Python workers
    (reused across tasks; those that exited are counted in their parent's children time)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # utime, stime, cutime, cstime
        children.setdefault(int(fields[1]), []).append((int(entry), sum(map(int, fields[11:15]))))
    total, stack = 0, [os.getpid()]
    while stack:
        for pid, ticks in children.get(stack.pop(), []):
            if pid not in NOT_SPARK:
                total += ticks
                stack.append(pid)
    return total / _TICKS


def timed_action(df, records: int, nbytes: int, file_bytes: int) -> dict[str, float]:
    """Wall-clock rate of a Spark action, and rows per CPU-second Spark spent on it: on a
    shared machine the wall clock measures the neighbours too, CPU time much less so."""
    cpu = spark_cpu_seconds()
    seconds = spark_action(df)
    cpu = spark_cpu_seconds() - cpu
    return rate(records, nbytes, seconds) | {
        "file_mb_s": round(file_bytes / seconds / 1e6, 1),
        "cpu_s": round(cpu, 2),
        "rows_per_cpu_s": round(records / cpu) if cpu else 0,
    }


class FloorSource:
    """``format("bench-floor")``: the segment reader's schema and rows, but each task yields
    Arrow batches it built in an earlier action (cached in the reused Python worker), so an
    action costs only what Spark itself spends per row: the floor for this schema."""

    @staticmethod
    def register(spark) -> None:
        from pyspark.sql.datasource import DataSource, DataSourceReader

        from logkeel.spark.segments import SegmentReader

        class Reader(DataSourceReader):
            def __init__(self, options: dict[str, str], schema) -> None:
                self.inner = SegmentReader(options, schema)

            def partitions(self):
                return self.inner.partitions()

            def read(self, partition):
                cache = sys.__dict__.setdefault("_logkeel_bench_floor", {})
                key = tuple(s.path for s in partition.segments)
                if key not in cache:
                    cache[key] = list(self.inner.read(partition))
                yield from cache[key]

        class Floor(DataSource):
            @classmethod
            def name(cls) -> str:
                return "bench-floor"

            def schema(self):
                from logkeel.spark.schema import segment_schema

                return segment_schema(False)

            def reader(self, schema):
                return Reader(dict(self.options), schema)

        spark.dataSource.register(Floor)


def raw_read(paths: list[str]) -> tuple[int, float]:
    started = time.perf_counter()
    total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            while chunk := os.read(fd, 8 * 1024 * 1024):
                total += len(chunk)
        finally:
            os.close(fd)
    return total, time.perf_counter() - started


def scan_decode(log_dir: str, topic: str, decoder: str) -> tuple[int, int, float]:
    """What one logkeel-segments task does, minus Spark: scan, CRC-check, decode, Arrow."""
    started = time.perf_counter()
    segments = [
        s
        for r in find_partitions([log_dir])
        if r.topic_partition.topic == topic
        for s in list_segments(r)
    ]
    n = nbytes = 0
    for batch in read_segments(segments, arrow_schema(segment_schema()), PERMISSIVE, decoder):
        n += batch.num_rows
        nbytes += sum(len(c.buffers()[2] or b"") for c in (batch["key"], batch["value"]))
    return n, nbytes, time.perf_counter() - started


def rate(n: int, nbytes: int, seconds: float) -> dict[str, float]:
    return {
        "rows_s": round(n / seconds),
        "mb_s": round(nbytes / seconds / 1e6, 1),
        "seconds": round(seconds, 3),
    }


def median_rate(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def measure_segments(args: argparse.Namespace) -> None:
    """The segment reader of whichever logkeel is on the path (--baseline-src's), as a child
    process: prints its samples as one JSON line."""
    from logkeel.spark.session import spark_session

    spark = spark_session(
        args.master, "baseline", {"spark.ui.enabled": "false", "spark.log.level": "ERROR"}
    )
    paths = [
        s.path
        for r in find_partitions([args.measure_segments])
        if r.topic_partition.topic == args.topic
        for s in list_segments(r)
    ]
    nbytes = args.records * (args.value_bytes + len(b"key-00000000"))
    total = sum(os.path.getsize(p) for p in paths)
    df = spark.read.format("logkeel-segments").option("subscribe", args.topic)
    df = df.load(args.measure_segments)
    spark_action(df)
    samples = [timed_action(df, args.records, nbytes, total) for _ in range(args.repeats)]
    spark.stop()
    print(json.dumps(samples))


def baseline_samples(args: argparse.Namespace, log_dir: str, topic: str) -> list[dict]:
    import subprocess

    src = str(Path(args.baseline_src).resolve() / "src")
    env = dict(os.environ, PYTHONPATH=src, PYSPARK_PYTHON=sys.executable)
    out = subprocess.run(
        [sys.executable, __file__, "--measure-segments", log_dir, "--topic", topic]
        + ["--records", str(args.records), "--value-bytes", str(args.value_bytes)]
        + ["--repeats", str(args.repeats), "--master", args.master],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--log-dir", help="that broker's log dir, for the segment reader")
    parser.add_argument(
        "--segments-only",
        action="store_true",
        help="measure only the segment reader (no topic source, no consumers)",
    )
    parser.add_argument(
        "--baseline-src",
        help="a logkeel source tree (e.g. `git archive main src | tar -x -C DIR`) whose segment reader "
        "is measured too, on the same files, after the others (reported as segments_baseline)",
    )
    parser.add_argument("--measure-segments", help=argparse.SUPPRESS)  # LOG_DIR: the baseline run
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_segments:
        measure_segments(args)
        return

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    broker = None
    workdir = Path(tempfile.mkdtemp(prefix="spark-read-bench-"))
    if args.bootstrap:
        bootstrap, log_dir = args.bootstrap, args.log_dir
    else:
        broker = LogkeelBroker(workdir / "broker").start()
        bootstrap, log_dir = broker.bootstrap, str(broker.log_dirs[0])
        if broker.pid is not None:
            NOT_SPARK.add(broker.pid)
    try:
        topic = f"bench-{time.time_ns()}"
        log(f"producing {args.records} records of {args.value_bytes} bytes to {topic} ...")
        nbytes = produce(bootstrap, topic, args.partitions, args.records, args.value_bytes)

        from logkeel.spark.session import spark_session

        spark = spark_session(
            args.master,
            "logkeel spark_read bench",
            {"spark.ui.enabled": "false", "spark.log.level": "ERROR"},
        )
        procs = min(args.partitions, os.cpu_count() or 1)
        results: dict[str, list[dict[str, float]]] = {}
        source = None
        if not args.segments_only:
            source = (
                spark.read.format("logkeel")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .load()
            )
            spark_action(source)  # warm-up: Python workers, JIT, page cache
        readers = {}
        paths: list[str] = []
        if log_dir:
            paths = [
                s.path
                for r in find_partitions([log_dir])
                if r.topic_partition.topic == topic
                for s in list_segments(r)
            ]
            FloorSource.register(spark)
            readers["floor"] = (
                spark.read.format("bench-floor").option("subscribe", topic).load(log_dir)
            )
            for decoder in DECODERS:
                readers[decoder] = (
                    spark.read.format("logkeel-segments")
                    .option("subscribe", topic)
                    .option("decoder", decoder)
                    .load(log_dir)
                )
            for reader in readers.values():
                spark_action(reader)  # warm-up (and the floor's cache)

        def record(name: str, sample: dict[str, float]) -> dict[str, float]:
            results.setdefault(name, []).append(sample)
            return sample

        for i in range(args.repeats):
            if source is not None:
                n, nbytes, s = plain_consumer(bootstrap, topic, args.partitions)
                assert n == args.records, n
                c1 = record("consumer", rate(n, nbytes, s))
                n, _, s = parallel_consumers(bootstrap, topic, args.partitions, procs)
                assert n == args.records, n
                c2 = record(f"consumers_x{procs}", rate(n, nbytes, s))
                src = record("source", rate(args.records, nbytes, spark_action(source)))
                log(f"[{i}] consumer {c1}  x{procs} {c2}  source {src}")
            if readers:
                total, s = raw_read(paths)
                raw = record("raw_file", rate(args.records, total, s))
                log(f"[{i}] raw file {raw}")
                floor = record(
                    "spark_floor", timed_action(readers["floor"], args.records, nbytes, total)
                )
                log(f"[{i}] Spark floor (prebuilt batches) {floor}")
                for decoder in DECODERS:
                    n2, nb2, s = scan_decode(log_dir, topic, decoder)
                    assert n2 == args.records, n2
                    sd = record(f"scan_decode_{decoder}", rate(n2, nb2, s))
                    seg = record(
                        f"segments_{decoder}",
                        timed_action(readers[decoder], args.records, nbytes, total),
                    )
                    log(f"[{i}] {decoder}: scan+decode {sd}  segments {seg}")
        spark.stop()
        if args.baseline_src and log_dir:
            log(f"baseline: the segment reader of {args.baseline_src} ...")
            results["segments_baseline"] = baseline_samples(args, log_dir, topic)
            log(f"baseline {results['segments_baseline']}")
        summary: dict[str, Any] = {
            "records": args.records,
            "value_bytes": args.value_bytes,
            "partitions": args.partitions,
            "master": args.master,
            "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(),
        }
        for name, samples in results.items():
            summary[name] = median_rate(samples)
        if source is not None:
            source_rate = summary["source"]["rows_s"]
            summary["source_to_consumer"] = round(source_rate / summary["consumer"]["rows_s"], 2)
            summary[f"source_to_consumers_x{procs}"] = round(
                source_rate / summary[f"consumers_x{procs}"]["rows_s"], 2
            )
        if readers:
            raw_mb_s = summary["raw_file"]["mb_s"]
            for decoder in DECODERS:
                seg = summary[f"segments_{decoder}"]
                summary[f"segments_{decoder}_to_scan_decode"] = round(
                    seg["rows_s"] / summary[f"scan_decode_{decoder}"]["rows_s"], 2
                )
                summary[f"segments_{decoder}_file_mb_s_to_raw_file"] = round(
                    seg["file_mb_s"] / raw_mb_s, 4
                )
            native = summary["segments_native"]
            summary["segments_native_to_python"] = round(
                native["rows_s"] / summary["segments_python"]["rows_s"], 2
            )
            if "segments_baseline" in summary:
                base = summary["segments_baseline"]
                summary["segments_native_to_baseline"] = round(native["rows_s"] / base["rows_s"], 2)
                summary["segments_native_to_baseline_per_cpu_s"] = round(
                    native["rows_per_cpu_s"] / base["rows_per_cpu_s"], 2
                )
            summary["segments_native_to_spark_floor"] = round(
                native["rows_s"] / summary["spark_floor"]["rows_s"], 2
            )
            # What 2 idle cores would give: Spark's CPU per row, JVM and Python workers.
            summary["segments_native_2_cores_rows_s"] = 2 * native["rows_per_cpu_s"]
            summary["spark_floor_2_cores_rows_s"] = 2 * summary["spark_floor"]["rows_per_cpu_s"]
        print(json.dumps(summary))
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
