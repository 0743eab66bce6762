"""Real-client helpers for the admin hardening tests: confluent-kafka's AdminClient, Producer
and Consumer against a `logkeel serve` process, plus what its log dirs hold."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka.admin import KafkaAdminClient

TIMEOUT = 15


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def outcome(future: Any) -> str:
    """The outcome "OK", or the Kafka error name a per-resource future ended with."""
    try:
        future.result(TIMEOUT)
    except KafkaException as exc:
        err: KafkaError = exc.args[0]
        return err.name()
    return "OK"


def set_topic_config(client: AdminClient, topic: str, key: str, value: str) -> str:
    """IncrementalAlterConfigs SET of one topic config; its outcome."""
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    [future] = client.incremental_alter_configs([resource]).values()
    return outcome(future)


def produce(
    bootstrap: str, topic: str, partition: int, values: list[bytes], *, separately: bool = False
) -> list[str]:
    """Sends ``values`` (each keyed by itself) and returns each delivery's outcome;
    ``separately`` sends each in its own batch (so small segments roll)."""
    results: list[str] = []

    def report(err: KafkaError | None, _msg: Any) -> None:
        results.append("OK" if err is None else err.name())

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.timeout.ms": 10_000,
            "retries": 2,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    for v in values:
        p.produce(topic, value=v, key=v, partition=partition, on_delivery=report)
        if separately:
            p.flush(TIMEOUT)
    assert p.flush(TIMEOUT) == 0, "deliveries still pending"
    return results


def read_partition(bootstrap: str, topic: str, partition: int) -> tuple[int, list[bytes]]:
    """(log start offset, every value from log start to the end)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "hardening-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), TIMEOUT)
        values: list[bytes] = []
        if high > low:
            c.assign([TopicPartition(topic, partition, low)])
            deadline = time.monotonic() + TIMEOUT
            while len(values) < high - low and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        break
                    raise KafkaException(msg.error())
                values.append(msg.value())
        return low, values
    finally:
        c.close()


def offline_log_dirs(bootstrap: str) -> list[str]:
    """The log dirs DescribeLogDirs reports with an error (kafka-python's admin client)."""
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        brokers = client.describe_log_dirs()
    finally:
        client.close()
    dirs = [d for b in brokers for d in b["log_dirs"]]
    assert dirs, "DescribeLogDirs named no log dir"
    return [d["log_dir"] for d in dirs if d["error_code"] != 0]


def partition_dirs(log_dir: Path, topic: str) -> list[str]:
    """Every dir of ``log_dir`` that holds or held (``-delete``) a partition of ``topic``;
    deletion dirs of long names hold a cut topic, so they are matched by its start."""
    head = topic[:150]
    return sorted(p.name for p in log_dir.iterdir() if p.is_dir() and p.name.startswith(head))


def read_all(
    bootstrap: str, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, list[bytes]]]:
    """``read_partition`` for many partitions with one consumer."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "hardening-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        out: dict[tuple[str, int], tuple[int, list[bytes]]] = {}
        wanted: dict[tuple[str, int], int] = {}
        starts = []
        for topic, p in partitions:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)
            out[(topic, p)] = (low, [])
            if high > low:
                wanted[(topic, p)] = high - low
                starts.append(TopicPartition(topic, p, low))
        if starts:
            c.assign(starts)
        deadline = time.monotonic() + TIMEOUT
        while any(len(out[k][1]) < n for k, n in wanted.items()) and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out[(msg.topic(), msg.partition())][1].append(msg.value())
        return out
    finally:
        c.close()
