"""Produce and consume throughput over PLAINTEXT (records leave by sendfile) against SSL and
SASL_SSL (read and encrypted in the broker) on the same broker, in one run.

    .venv/bin/python bench/tls.py            # 100k x 1 KiB messages, 5 repeats
    .venv/bin/python bench/tls.py --quick    # 50k messages, 3 repeats

One `logkeel serve` with three listeners (PLAINTEXT, SSL, SASL_SSL with SCRAM-SHA-256 user)
and certificates made for the run. Each repeat produces a fresh single-partition topic through
each listener, then consumes it from the beginning through each listener (partition assigned,
no group), the listener order rotating between repeats. confluent-kafka on loopback, TLS 1.3.

The last line printed is one JSON object:
  {"settings": {...}, "produce": {"PLAINTEXT": {"mb_s": x}, "SSL": {...}, "SASL_SSL": {...},
   "ratio_ssl": r, "ratio_sasl_ssl": r}, "consume": {...}}
Ratios are against PLAINTEXT: the medians of the per-repeat ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from logkeel.testing.broker_process import LogkeelBroker, free_port
from logkeel.testing.certs import make_certificates

MESSAGE = 1024
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
PASSWORD = "bench-secret"


def client_conf(listener: str, ports: dict[str, int], ca: Path) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{ports[listener]}"}
    if listener != "PLAINTEXT":
        conf.update({"security.protocol": listener, "ssl.ca.location": str(ca)})
    if listener == "SASL_SSL":
        conf.update(
            {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench", "sasl.password": PASSWORD}
        )
    return conf


def produce(conf: dict[str, Any], topic: str, count: int) -> float:
    producer = confluent_kafka.Producer(
        {
            **conf,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 1048576,
            "queue.buffering.max.kbytes": 1048576,
        }
    )
    value = bytes(MESSAGE)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return count * MESSAGE / 1e6 / (time.perf_counter() - started)


def consume(conf: dict[str, Any], topic: str, count: int) -> float:
    consumer = confluent_kafka.Consumer(
        {**conf, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800}
    )
    consumer.list_topics(topic, timeout=30)  # connection and metadata set up first
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count}")
    return count * MESSAGE / 1e6 / elapsed


def run_args(doc: str, quick_messages: int) -> argparse.Namespace:
    """--messages (100k), --repeats (5), --quick (``quick_messages``, 3 repeats)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.repeats = quick_messages, 3
    return args


def main() -> None:
    args = run_args(__doc__, 50_000)
    work = Path(tempfile.mkdtemp(prefix="logkeel-bench-tls-"))
    certs = make_certificates(work / "certs")
    ports = {name: free_port() for name in LISTENERS}
    broker = LogkeelBroker(
        work,
        port=ports["PLAINTEXT"],
        overrides={
            "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "ssl.keystore.location": str(certs.server),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        },
    ).start()
    results: dict[str, dict[str, list[float]]] = {
        phase: {name: [] for name in LISTENERS} for phase in ("produce", "consume")
    }
    try:
        subprocess.run(
            [sys.executable, "-m", "logkeel", "users", "add", "bench", "--password", PASSWORD,
             "--mechanism", "SCRAM-SHA-256", "--bootstrap-server", f"127.0.0.1:{ports['PLAINTEXT']}"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
        for repeat in range(args.repeats):
            order = LISTENERS[repeat % 3 :] + LISTENERS[: repeat % 3]
            for listener in order:
                topic = f"bench-{uuid.uuid4().hex[:8]}"
                for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
                    f.result(30)
                conf = client_conf(listener, ports, certs.ca)
                results["produce"][listener].append(produce(conf, topic, args.messages))
                results["consume"][listener].append(consume(conf, topic, args.messages))
                for f in admin.delete_topics([topic]).values():
                    f.result(30)
                print(
                    f"repeat {repeat} {listener}: produce {results['produce'][listener][-1]:.0f}"
                    f" MB/s, consume {results['consume'][listener][-1]:.0f} MB/s",
                    flush=True,
                )
    finally:
        broker.stop()
    summary: dict[str, Any] = {
        "settings": {"messages": args.messages, "message_bytes": MESSAGE, "repeats": args.repeats,
                     "librdkafka": confluent_kafka.libversion()[0], "tls": "TLSv1.3"},
    }  # fmt: skip
    for phase, by_listener in results.items():
        plain = by_listener["PLAINTEXT"]
        summary[phase] = {
            name: {"mb_s": round(statistics.median(values), 1)}
            for name, values in by_listener.items()
        }
        for name in ("SSL", "SASL_SSL"):
            ratios = [s / p for s, p in zip(by_listener[name], plain, strict=True)]
            summary[phase][f"ratio_{name.lower()}"] = round(statistics.median(ratios), 2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
