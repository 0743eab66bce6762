"""A broker that stopped between a transaction's PREPARE_COMMIT/PREPARE_ABORT record and its
markers completes the transaction at the next start: the decision in ``__transaction_state``
is carried out on every partition, never half.

The state "prepared, no markers yet" is made by writing the PREPARE record offline, with the
storage engine, into the log of a stopped broker whose transaction was open: exactly what a
kill -9 right after the coordinator's write would leave behind."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTP
from kio.schema.errors import ErrorCode

from logkeel.records.walk import iter_headers
from logkeel.server.group.log import build_records_batch, read_partition_records
from logkeel.server.group.records import partition_for
from logkeel.server.protocol import ApiKey
from logkeel.server.txn.records import (
    TRANSACTION_STATE_TOPIC,
    TxnStatus,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition
from logkeel.testing.faulty_fs import FaultyFs
from tests.brokerproc import BrokerProcess
from tests.server.test_fetch_api import list_offsets
from tests.server.test_produce_api import (
    RawClient,
    batch,
    init_producer_id,
    metadata_topic_id,
    schema_module,
)
from tests.server.test_transactions_wire import OVERRIDES, add_partitions, fetch, txn_produce
from tests.waiting import wait_until

TXN = "prepared-txn"


def write_prepare(log_dir: Path, status: TxnStatus) -> None:
    """Turns the id's last (ONGOING) state into ``status``, as the coordinator would."""
    manager = LogManager([log_dir])
    manager.startup(start_background=False)
    try:
        n = int(OVERRIDES["transaction.state.log.num.partitions"])
        plog = manager.get_log(TopicPartition(TRANSACTION_STATE_TOPIC, partition_for(TXN, n)))
        assert plog is not None
        values = [
            decode_txn_value(v)
            for k, v in read_partition_records(plog)
            if v is not None and decode_txn_key(k) == TXN
        ]
        assert values[-1].status == TxnStatus.ONGOING
        prepared = dataclasses.replace(values[-1], status=status)
        record = (encode_txn_key(TXN), encode_txn_value(prepared))
        plog.append_as_leader(build_records_batch([record], 0), 0, origin_is_client=False)
    finally:
        manager.shutdown()


@pytest.mark.parametrize("status", [TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT])
def test_prepared_transaction_is_completed_at_start(tmp_path: Path, status: TxnStatus) -> None:
    broker = BrokerProcess(tmp_path / "b", overrides=OVERRIDES)
    broker.start()
    try:
        with RawClient(broker.port) as c:
            init = init_producer_id(c, 4, transactional_id=TXN)
            pid, epoch = init.producer_id, init.producer_epoch
            for topic in ("a", "b"):
                metadata_topic_id(c, topic)  # auto-creates it
                assert add_partitions(c, TXN, pid, epoch, topic) == ErrorCode.none
                records = batch(
                    [b"x", b"y"],
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=0,
                    is_transactional=True,
                )
                assert txn_produce(c, TXN, topic, records).error_code == ErrorCode.none
            assert list_offsets(c, 5, "a", -1, isolation_level=1).offset == 0
        broker.kill()
        write_prepare(broker.log_dirs[0], status)
        broker.start()
        with RawClient(broker.port) as c:
            for topic in ("a", "b"):
                # The marker is at offset 2: the transaction is complete on both partitions.
                # The coordinator writes the markers once its partition is loaded, as Kafka's
                # does: not before the broker answers fetches.
                wait_until(
                    lambda t=topic: fetch(c, t, 1).last_stable_offset == 3,
                    timeout=30,
                    what=f"the marker of {topic}-0",
                )
                p = fetch(c, topic, 1)
                assert (p.high_watermark, p.last_stable_offset) == (3, 3), topic
                aborted = [t.first_offset for t in p.aborted_transactions or ()]
                assert aborted == ([0] if status == TxnStatus.PREPARE_ABORT else []), topic
            # The id is usable again, with its epoch bumped.
            again = init_producer_id(c, 4, transactional_id=TXN)
            assert (again.error_code, again.producer_id) == (ErrorCode.none, pid)
            assert again.producer_epoch == epoch + 1
    finally:
        broker.kill()


def test_broker_killed_between_end_txn_and_its_markers(tmp_path: Path, faulty_fs: FaultyFs) -> None:
    """The same, for real: a transactional producer commits; the broker writes PREPARE_COMMIT
    and starts on the markers, but writes to partition ``late``'s segment hang (a FUSE disk);
    the broker is SIGKILLed in that state, then started again on the same files (without the
    hanging disk). The transaction is completed on every partition: read_committed readers see
    all of it, nothing is left open, and the id goes on at the next epoch."""
    broker = BrokerProcess(
        tmp_path / "b", overrides=OVERRIDES, log_dirs=[faulty_fs.mountpoint / "logs"]
    )
    broker.start()
    try:
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "transactional.id": TXN, "linger.ms": 1}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        for topic in ("early", "late"):
            for i in range(5):
                producer.produce(topic, b"%s-%d" % (topic.encode(), i), partition=0)
        assert producer.flush(30) == 0
        # From now on the marker's write to late-0 never reaches the disk.
        faulty_fs.delay(3600, ops={"write"}, path_glob="*late-0/*.log")
        committing = threading.Thread(target=producer.commit_transaction, args=(60,), daemon=True)
        committing.start()
        with RawClient(broker.port) as c:
            # The decision is durable, the markers are not all written (the one of late-0
            # cannot be): the transaction is half-done.
            wait_until(lambda: describe_state(c) == "PrepareCommit", 30, "PrepareCommit")
    finally:
        # SIGKILL first: a process blocked in a FUSE write dies only once the filesystem
        # answers, which it does when unmounted (the hanging write dies with the FUSE
        # process and never reaches the files).
        if broker.alive():
            os.kill(broker.pid, signal.SIGKILL)
        faulty_fs.unmount()
        broker.kill()
    # What the kill left: late-0 has the transaction's records and no marker.
    assert control_batches(faulty_fs.source / "logs" / "late-0") == (5, 0)
    broker.log_dirs = [faulty_fs.source / "logs"]
    broker.start()
    try:
        with RawClient(broker.port) as c:
            wait_until(lambda: describe_state(c) == "CompleteCommit", 30, "CompleteCommit")
            for topic in ("early", "late"):
                p = fetch(c, topic, 1)
                assert p.last_stable_offset == p.high_watermark >= 6, topic
                assert not p.aborted_transactions, topic
        for topic in ("early", "late"):
            assert read_committed(broker.bootstrap, topic) == [
                b"%s-%d" % (topic.encode(), i) for i in range(5)
            ]
        again = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": TXN})
        again.init_transactions(30)
        again.begin_transaction()
        again.produce("late", b"next", partition=0)
        again.commit_transaction(30)
        assert read_committed(broker.bootstrap, "late")[-1] == b"next"
    finally:
        broker.kill()


def control_batches(partition_dir: Path) -> tuple[int, int]:
    """(data records, control batches) in the segments of ``partition_dir``."""
    records = controls = 0
    for segment in sorted(partition_dir.glob("*.log")):
        for _, header in iter_headers(segment.read_bytes()):
            if header.is_control:
                controls += 1
            else:
                records += header.last_offset_delta + 1
    return records, controls


def describe_state(c: RawClient) -> str:
    describe = schema_module(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    r = c.call(describe.DescribeTransactionsRequest(transactional_ids=(TXN,)))
    return r.transaction_states[0].transaction_state


def read_committed(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([KafkaTP(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                return out
            out.append(m.value())
    finally:
        consumer.close()
    raise AssertionError(f"{topic} not read to its end; got {out}")
