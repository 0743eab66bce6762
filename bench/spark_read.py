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
  the reader does, run in this process without Spark (what one Spark task does per core).

MB/s counts key + value bytes for the record readers and file bytes for the raw read; the
segment reader's ``file_mb_s`` counts file bytes too, for a like-for-like ratio.
Prints one line per measurement and, last, one JSON object. Medians over --repeats.

    .venv/bin/python bench/spark_read.py                # 1,000,000 records of 100 bytes, 4 partitions
    .venv/bin/python bench/spark_read.py --records 200000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from logkeel.records.record import decode_records  # noqa: E402
from logkeel.spark.segment_scan import (  # noqa: E402
    ValidBatch,
    find_partitions,
    list_segments,
    scan_segment,
)
from logkeel.testing.broker_process import LogkeelBroker  # noqa: E402


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


def scan_decode(log_dir: str, topic: str) -> tuple[int, int, float]:
    """What one logkeel-segments task does, minus Spark: scan, CRC-check and decode."""
    started = time.perf_counter()
    n = nbytes = 0
    for replica in find_partitions([log_dir]):
        if replica.topic_partition.topic != topic:
            continue
        for seg in list_segments(replica):
            for item in scan_segment(seg, with_data=True):
                if isinstance(item, ValidBatch) and item.data is not None:
                    _, records = decode_records(item.data, verify_crc=False)
                    n += len(records)
                    nbytes += sum(len(r.key or b"") + len(r.value or b"") for r in records)
    return n, nbytes, time.perf_counter() - started


def rate(n: int, nbytes: int, seconds: float) -> dict[str, float]:
    return {
        "rows_s": round(n / seconds),
        "mb_s": round(nbytes / seconds / 1e6, 1),
        "seconds": round(seconds, 3),
    }


def median_rate(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--log-dir", help="that broker's log dir, for the segment reader")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    broker = None
    workdir = Path(tempfile.mkdtemp(prefix="spark-read-bench-"))
    if args.bootstrap:
        bootstrap, log_dir = args.bootstrap, args.log_dir
    else:
        broker = LogkeelBroker(workdir / "broker").start()
        bootstrap, log_dir = broker.bootstrap, str(broker.log_dirs[0])
    try:
        topic = f"bench-{time.time_ns()}"
        log(f"producing {args.records} records of {args.value_bytes} bytes to {topic} ...")
        produce(bootstrap, topic, args.partitions, args.records, args.value_bytes)

        from logkeel.spark.session import spark_session

        spark = spark_session(
            args.master,
            "logkeel spark_read bench",
            {"spark.ui.enabled": "false", "spark.log.level": "ERROR"},
        )
        source = (
            spark.read.format("logkeel")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
        )
        spark_action(source)  # warm-up: Python workers, JIT, page cache

        procs = min(args.partitions, os.cpu_count() or 1)
        results: dict[str, list[dict[str, float]]] = {
            "consumer": [],
            f"consumers_x{procs}": [],
            "source": [],
            "raw_file": [],
            "scan_decode": [],
            "segments": [],
        }
        segments = None
        if log_dir:
            paths = [
                s.path
                for r in find_partitions([log_dir])
                if r.topic_partition.topic == topic
                for s in list_segments(r)
            ]
            segments = (
                spark.read.format("logkeel-segments").option("subscribe", topic).load(log_dir)
            )
            spark_action(segments)
        for i in range(args.repeats):
            n, nbytes, s = plain_consumer(bootstrap, topic, args.partitions)
            assert n == args.records, n
            results["consumer"].append(rate(n, nbytes, s))
            n, _, s = parallel_consumers(bootstrap, topic, args.partitions, procs)
            assert n == args.records, n
            results[f"consumers_x{procs}"].append(rate(n, nbytes, s))
            s = spark_action(source)
            results["source"].append(rate(args.records, nbytes, s))
            log(
                f"[{i}] consumer {results['consumer'][-1]}  x{procs} "
                f"{results[f'consumers_x{procs}'][-1]}  source {results['source'][-1]}"
            )
            if segments is not None:
                total, s = raw_read(paths)
                results["raw_file"].append(rate(args.records, total, s))
                n2, nb2, s = scan_decode(log_dir, topic)
                assert n2 == args.records, n2
                results["scan_decode"].append(rate(n2, nb2, s))
                s = spark_action(segments)
                results["segments"].append(
                    rate(args.records, nbytes, s) | {"file_mb_s": round(total / s / 1e6, 1)}
                )
                log(
                    f"[{i}] raw file {results['raw_file'][-1]}  scan+decode "
                    f"{results['scan_decode'][-1]}  segments {results['segments'][-1]}"
                )
        spark.stop()
        summary: dict[str, object] = {
            "records": args.records,
            "value_bytes": args.value_bytes,
            "partitions": args.partitions,
            "master": args.master,
            "cpus": os.cpu_count(),
        }
        for name, samples in results.items():
            if samples:
                summary[name] = median_rate(samples)
        consumer, source_rate = summary["consumer"], summary["source"]
        summary["source_to_consumer"] = round(source_rate["rows_s"] / consumer["rows_s"], 2)  # type: ignore[index]
        summary[f"source_to_consumers_x{procs}"] = round(
            source_rate["rows_s"] / summary[f"consumers_x{procs}"]["rows_s"],
            2,  # type: ignore[index]
        )
        if results["segments"]:
            summary["segments_to_scan_decode"] = round(
                summary["segments"]["rows_s"] / summary["scan_decode"]["rows_s"],
                2,  # type: ignore[index]
            )
            summary["segments_file_mb_s_to_raw_file"] = round(
                summary["segments"]["file_mb_s"] / summary["raw_file"]["mb_s"],
                4,  # type: ignore[index]
            )
        print(json.dumps(summary))
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
