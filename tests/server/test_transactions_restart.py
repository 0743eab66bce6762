"""A broker that stopped between a transaction's PREPARE_COMMIT/PREPARE_ABORT record and its
markers completes the transaction at the next start: the decision in ``__transaction_state``
is carried out on every partition, never half.

The state "prepared, no markers yet" is made by writing the PREPARE record offline, with the
storage engine, into the log of a stopped broker whose transaction was open: exactly what a
kill -9 right after the coordinator's write would leave behind."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from logkeel.server.group.log import build_records_batch, read_partition_records
from logkeel.server.group.records import partition_for
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
from tests.brokerproc import BrokerProcess
from tests.server.test_fetch_api import list_offsets
from tests.server.test_produce_api import RawClient, batch, init_producer_id, metadata_topic_id
from tests.server.test_transactions_wire import OVERRIDES, add_partitions, fetch, txn_produce

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
