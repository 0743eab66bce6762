"""`logkeel serve` on a log dir written as Apache Kafka leaves one (batches by kafka-python's
record builder, an independent encoder): the topics its partition dirs hold are adopted and
served, stay adopted across restarts, and leftovers of deletions are never adopted."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient

from tests.brokerproc import BrokerProcess
from tests.kafka_dirs import write_meta, write_partition

ORDERS_ID = "3Zbq1mK4RZ2u5nZ2wVZ5Jg"


def values(topic: str, partition: int, n: int) -> list[bytes]:
    return [f"{topic}-{partition}-{i}".encode() for i in range(n)]


def consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> dict[int, list[bytes]]:
    """Every record of ``topic`` from offset 0, by partition (bounded wait)."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                assert msg.error() is None, msg.error()
                assert msg.offset() == len(got[msg.partition()])
                got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


def topics(bootstrap: str) -> dict[str, tuple[int, str]]:
    """name -> (partition count, topic id) as a client sees them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=10).topics if not t.startswith("__")]
    if not names:
        return {}
    described = confluent_kafka.TopicCollection(names)
    out = {}
    for name, future in admin.describe_topics(described).items():
        d = future.result(timeout=10)
        out[name] = (len(d.partitions), str(d.topic_id))
    return out


def run_output(broker: BrokerProcess, since: int) -> str:
    """What the broker wrote since ``since`` characters of its log (all runs append to it)."""
    return broker.log_path.read_text(errors="replace")[since:]


def test_serve_adopts_a_kafka_written_dir_and_never_a_deletion_leftover(tmp_path: Path) -> None:
    logs = tmp_path / "b" / "logs"
    written = {
        ("orders", 0): values("orders", 0, 2500),
        ("orders", 1): values("orders", 1, 1200),
        ("orders", 2): values("orders", 2, 7),
        # No partition.metadata, and partition 1 missing (held by another broker).
        ("sparse", 0): values("sparse", 0, 300),
        ("sparse", 2): values("sparse", 2, 40),
    }
    ends = {}
    for (topic, p), vals in written.items():
        ends[f"{topic}-{p}"] = write_partition(
            logs / f"{topic}-{p}", vals, topic_id=ORDERS_ID if topic == "orders" else None
        )
    # Deletion leftovers as Kafka leaves them: a replica renamed for deletion and a segment
    # file renamed for deletion inside a live partition.
    write_partition(
        logs / "gone-0.abcdef0123456789abcdef0123456789-delete", values("gone", 0, 5), topic_id=None
    )
    (logs / "orders-1" / f"{99999:020d}.log.deleted").write_bytes(b"\x00" * 100)
    write_meta(logs, ends)
    kept_sparse = shutil.copytree(logs / "sparse-0", tmp_path / "sparse-0-copy")

    broker = BrokerProcess(tmp_path / "b")
    broker.start()
    try:
        assert topics(broker.bootstrap) == {
            "orders": (3, ORDERS_ID),
            "sparse": (3, topics(broker.bootstrap)["sparse"][1]),
        }
        got = consume_all(broker.bootstrap, "orders", 3, 2500 + 1200 + 7)
        assert got == {p: written[("orders", p)] for p in range(3)}
        got = consume_all(broker.bootstrap, "sparse", 3, 340)
        assert got == {0: written[("sparse", 0)], 1: [], 2: written[("sparse", 2)]}
        out = broker.output()
        assert (
            f"adopted topic 'orders' from its logs: 3 partition(s) [0, 1, 2], topic id {ORDERS_ID} (from partition.metadata)"
            in out
        )
        assert "adopted topic 'sparse' from its logs: 3 partition(s) [0, 2]" in out
        assert "partitions [1] have no log here and start empty" in out
        assert "'gone'" not in out

        # A restart keeps the adopted topics (now in the metadata: nothing adopted again).
        sparse_id = topics(broker.bootstrap)["sparse"][1]
        assert broker.stop() == 0
        mark = len(run_output(broker, 0))
        broker.start()
        assert topics(broker.bootstrap) == {"orders": (3, ORDERS_ID), "sparse": (3, sparse_id)}
        got = consume_all(broker.bootstrap, "orders", 3, 2500 + 1200 + 7)
        assert got == {p: written[("orders", p)] for p in range(3)}
        assert "adopted topic" not in run_output(broker, mark)

        # A deleted topic's dir that turns up again (a log dir offline while the deletion ran)
        # is not adopted.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics(["sparse"])["sparse"].result(timeout=30)
        assert broker.stop() == 0
        broker.start()  # the deletion is recorded as done at this start
        assert broker.stop() == 0
        shutil.copytree(kept_sparse, logs / "sparse-0")
        mark = len(run_output(broker, 0))
        broker.start()
        assert topics(broker.bootstrap) == {"orders": (3, ORDERS_ID)}
        out = run_output(broker, mark)
        assert "not adopting the logs of 'sparse' (partitions [0]): the topic was deleted" in out
        assert "adopted topic" not in out
    finally:
        broker.stop()
