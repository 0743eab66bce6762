"""Consume-transform-produce with confluent-kafka through a SIGKILL of the *application*: a
child process runs the loop (read_committed consumer, transactional producer, the consumed
offsets sent to each transaction); it is killed with records of an open transaction already in
the output topic, then started again with the same transactional.id. Downstream, a
read_committed reader sees every input record transformed exactly once, in order per partition.

Run as a module, this file is the application:
    python -m tests.server.test_transactions_app_kill BOOTSTRAP TOTAL [PAUSE_AT]
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.brokerproc import BrokerProcess

IN, OUT, PARTITIONS = "ctp-in", "ctp-out", 2
GROUP, TXN_ID = "ctp-app", "ctp-app-txn"
BATCH = 10
TIMEOUT = 30.0
REPO = Path(__file__).resolve().parents[2]


# -- the application (child process) ---------------------------------------------------------


def run_app(bootstrap: str, total: int, pause_at: int | None) -> None:
    """Processes input until the group's committed offsets cover ``total`` records. With
    ``pause_at``, transaction number ``pause_at`` stops after its records are in the log
    (flushed, not committed), prints "paused" and waits to be killed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    # Assigned, not subscribed: the positions start at the group's committed (stable) offsets.
    consumer.assign([TopicPartition(IN, p) for p in range(PARTITIONS)])
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": TXN_ID,
            "transaction.timeout.ms": 60_000,
            "linger.ms": 1,
        }
    )
    producer.init_transactions(TIMEOUT)
    done = sum(max(tp.offset, 0) for tp in consumer.committed(consumer.assignment(), TIMEOUT))
    print(f"started at {done}", flush=True)
    txn = 0
    while done < total:
        messages = [m for m in consumer.consume(BATCH, 1.0) if m.error() is None]
        if not messages:
            continue
        txn += 1
        producer.begin_transaction()
        for m in messages:
            producer.produce(OUT, m.value().upper(), partition=m.partition())
        if txn == pause_at:
            assert producer.flush(TIMEOUT) == 0
            print("paused", flush=True)
            time.sleep(120)
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), TIMEOUT)
        producer.commit_transaction(TIMEOUT)
        done = sum(max(tp.offset, 0) for tp in positions)
        print(f"committed {done}", flush=True)
    consumer.close()


# -- the test ----------------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path / "b",
        overrides={
            "num.partitions": str(PARTITIONS),
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
        },
    )
    b.start()
    try:
        yield b
    finally:
        b.kill()


class App:
    """The application as a child process; its stdout lines arrive through a reader thread."""

    def __init__(self, bootstrap: str, total: int, pause_at: int | None) -> None:
        args = [sys.executable, "-m", "tests.server.test_transactions_app_kill", bootstrap]
        args += [str(total)] + ([str(pause_at)] if pause_at is not None else [])
        self.proc = subprocess.Popen(
            args,
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.strip())
        self._queue.put(None)

    def wait_for(self, prefix: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no {prefix!r} from the application; it said {self.lines[-5:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)


def read_all(bootstrap: str, isolation: str) -> dict[int, list[bytes]]:
    """Every value of OUT per partition, up to the end (LSO under read_committed)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4()}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    c.assign([TopicPartition(OUT, p, 0) for p in range(PARTITIONS)])
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    eof: set[int] = set()
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                    continue
                eof.discard(m.partition())
                out[m.partition()].append(m.value())
    finally:
        c.close()
    assert len(eof) == PARTITIONS, f"{OUT} not read to its end within {TIMEOUT} s"
    return out


def test_application_killed_mid_transaction_loses_and_duplicates_nothing(
    broker: BrokerProcess,
) -> None:
    total = 400
    source = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(total):
        source.produce(IN, b"m%d" % i, partition=i % PARTITIONS)
        expected[i % PARTITIONS].append(b"M%d" % i)
    assert source.flush(TIMEOUT) == 0

    starts = []
    for pause_at in (3, 5):
        app = App(broker.bootstrap, total, pause_at)
        try:
            starts.append(app.wait_for("started"))
            app.wait_for("paused")
        finally:
            app.kill()  # SIGKILL, with the transaction's records in the log
        # The open transaction's records are there, not visible to read_committed readers.
        uncommitted = read_all(broker.bootstrap, "read_uncommitted")
        committed = read_all(broker.bootstrap, "read_committed")
        assert sum(map(len, uncommitted.values())) > sum(map(len, committed.values()))
    app = App(broker.bootstrap, total, None)
    try:
        starts.append(app.wait_for("started"))
        app.wait_for(f"committed {total}", 120)
        assert app.proc.wait(TIMEOUT) == 0
    finally:
        app.kill()
    # Each incarnation went on from where the last committed transaction left off.
    at = [int(line.split()[-1]) for line in starts]
    assert at[0] == 0 and at[0] < at[1] < at[2] < total, starts

    assert read_all(broker.bootstrap, "read_committed") == expected
    # The killed incarnations' transactions were written and aborted, not lost or kept.
    uncommitted = read_all(broker.bootstrap, "read_uncommitted")
    assert sum(map(len, uncommitted.values())) > total


if __name__ == "__main__":
    run_app(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
