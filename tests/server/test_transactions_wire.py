"""Transactions on the wire: Kafka's error codes for bad input (nothing written), ListOffsets
and Fetch with isolation levels while a transaction is open, and the markers' effect on the
last stable offset and the aborted-transaction list."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from logkeel.server.protocol import ApiKey
from tests.brokerproc import BrokerProcess
from tests.server.test_fetch_api import list_offsets
from tests.server.test_produce_api import (
    RawClient,
    _fill,
    batch,
    fetch_request,
    init_producer_id,
    produce_one,
    produce_request,
    schema_module,
)
from tests.waiting import wait_until

OVERRIDES = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.num.partitions": "2",
}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[RawClient]:
    broker = BrokerProcess(tmp_path / "b", overrides=OVERRIDES)
    broker.start()
    try:
        with RawClient(broker.port) as c:
            yield c
    finally:
        broker.kill()


def add_partitions(
    c: RawClient, txn: str, pid: int, epoch: int, topic: str, version: int = 3
) -> ErrorCode:
    mod = schema_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    r = c.call(
        mod.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(mod.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),),
        )
    )
    (t,) = r.results_by_topic_v3_and_below
    (p,) = t.results_by_partition
    return ErrorCode(p.partition_error_code)


def end_txn(c: RawClient, txn: str, pid: int, epoch: int, commit: bool, version: int = 3) -> Any:
    mod = schema_module(ApiKey.END_TXN, version)
    r = c.call(
        mod.EndTxnRequest(
            transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=commit
        )
    )
    return r.error_code


def txn_offset_commit(c: RawClient, txn: str, pid: int, epoch: int, topic: str) -> ErrorCode:
    mod = schema_module(ApiKey.TXN_OFFSET_COMMIT, 3)
    part = mod.TxnOffsetCommitRequestPartition(
        partition_index=0, committed_offset=1, committed_metadata=None
    )
    r = c.call(
        mod.TxnOffsetCommitRequest(
            transactional_id=txn,
            group_id="g",
            producer_id=pid,
            producer_epoch=epoch,
            topics=(mod.TxnOffsetCommitRequestTopic(name=topic, partitions=(part,)),),
        )
    )
    return ErrorCode(r.topics[0].partitions[0].error_code)


def txn_produce(c: RawClient, txn: str, topic: str, records: bytes) -> Any:
    request = produce_request(9, topic, {0: records})
    request = _fill(
        type(request),
        transactional_id=txn,
        acks=request.acks,
        timeout=request.timeout,
        topic_data=request.topic_data,
    )
    (t,) = c.call(request).responses
    return t.partition_responses[0]


def fetch(c: RawClient, topic: str, isolation: int) -> Any:
    return (
        c.call(fetch_request(12, topic, {0: 0}, isolation_level=isolation))
        .responses[0]
        .partitions[0]
    )


def open_transaction(c: RawClient, txn: str, topic: str) -> tuple[int, int]:
    """One plain record in ``topic``, then two in an open transaction of ``txn``: (pid, epoch)."""
    assert produce_one(c, 9, topic, 0, batch([b"before"])).error_code == ErrorCode.none
    init = init_producer_id(c, 4, transactional_id=txn)
    pid, epoch = init.producer_id, init.producer_epoch
    assert add_partitions(c, txn, pid, epoch, topic) == ErrorCode.none
    records = batch(
        [b"t1", b"t2"],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    assert txn_produce(c, txn, topic, records).error_code == ErrorCode.none
    return pid, epoch


def test_bad_input_gets_kafka_errors_and_writes_nothing(client: RawClient, tmp_path: Path) -> None:
    assert produce_one(client, 9, "bad", 0, batch([b"plain"])).error_code == ErrorCode.none
    init = init_producer_id(client, 4, transactional_id="bad-txn")
    pid, epoch = init.producer_id, init.producer_epoch
    # An unknown producer id, a wrong epoch, an unknown topic, an EndTxn without a transaction.
    assert add_partitions(client, "bad-txn", pid + 1000, epoch, "bad") == (
        ErrorCode.invalid_producer_id_mapping
    )
    assert add_partitions(client, "bad-txn", pid, epoch + 1, "bad") == ErrorCode.producer_fenced
    assert add_partitions(client, "bad-txn", pid, epoch + 1, "bad", version=1) == (
        ErrorCode.invalid_producer_epoch
    )
    assert add_partitions(client, "bad-txn", pid, epoch, "no-such-topic") == (
        ErrorCode.unknown_topic_or_partition
    )
    assert add_partitions(client, "unknown-txn", pid, epoch, "bad") == (
        ErrorCode.invalid_producer_id_mapping
    )
    assert end_txn(client, "bad-txn", pid, epoch, True) == ErrorCode.invalid_txn_state
    assert end_txn(client, "bad-txn", pid, epoch, False) == ErrorCode.invalid_txn_state
    assert end_txn(client, "bad-txn", pid + 1000, epoch, True) == (
        ErrorCode.invalid_producer_id_mapping
    )
    assert end_txn(client, "bad-txn", pid, epoch + 1, True) == ErrorCode.producer_fenced
    assert end_txn(client, "bad-txn", pid, epoch + 1, True, version=1) == (
        ErrorCode.invalid_producer_epoch
    )
    assert end_txn(client, "unknown-txn", pid, epoch, True) == (
        ErrorCode.invalid_producer_id_mapping
    )
    # Offsets of a transaction that did not add the group's partition (AddOffsetsToTxn).
    assert txn_offset_commit(client, "bad-txn", pid, epoch, "bad") == ErrorCode.invalid_txn_state
    # A transactional batch for a partition never added: refused, nothing written.
    records = batch(
        [b"x"], producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True
    )
    assert txn_produce(client, "bad-txn", "bad", records).error_code == ErrorCode.invalid_txn_state
    p = fetch(client, "bad", 1)
    assert (p.high_watermark, p.last_stable_offset) == (1, 1)
    # Nothing reached the coordinator's state either: no transaction began (so no partition
    # was added), the unknown topic was not created on the way. (ListTransactions: kio cannot
    # decode DescribeTransactions' start time of -1 for an id without a transaction.)
    listing = schema_module(ApiKey.LIST_TRANSACTIONS, 2)
    r = client.call(listing.ListTransactionsRequest(transactional_id_pattern="bad-txn"))
    assert [
        (t.transactional_id, t.producer_id, t.transaction_state) for t in r.transaction_states
    ] == [("bad-txn", pid, "Empty")]
    assert not list((tmp_path / "b" / "logs").glob("no-such-topic-*"))
    # And the id still works: a transaction after all that commits normally.
    assert add_partitions(client, "bad-txn", pid, epoch, "bad") == ErrorCode.none
    assert txn_produce(client, "bad-txn", "bad", records).error_code == ErrorCode.none
    assert end_txn(client, "bad-txn", pid, epoch, True) == ErrorCode.none
    p = fetch(client, "bad", 1)
    assert (p.high_watermark, p.last_stable_offset) == (3, 3)


def test_open_transaction_sets_the_lso_and_abort_lists_it(client: RawClient) -> None:
    pid, epoch = open_transaction(client, "iso-txn", "iso")

    # Open: read_committed stops at the transaction's first offset.
    assert list_offsets(client, 5, "iso", -1, isolation_level=1).offset == 1
    assert list_offsets(client, 5, "iso", -1, isolation_level=0).offset == 3
    p = fetch(client, "iso", 1)
    assert (p.high_watermark, p.last_stable_offset) == (3, 1)

    assert end_txn(client, "iso-txn", pid, epoch, False) == ErrorCode.none
    # The abort marker takes offset 3; the aborted range is listed for read_committed readers.
    assert list_offsets(client, 5, "iso", -1, isolation_level=1).offset == 4
    p = fetch(client, "iso", 1)
    assert (p.high_watermark, p.last_stable_offset) == (4, 4)
    assert [(t.producer_id, t.first_offset) for t in p.aborted_transactions] == [(pid, 1)]
    assert not fetch(client, "iso", 0).aborted_transactions
    # Ending it again: the retry of an abort succeeds, a commit is refused.
    assert end_txn(client, "iso-txn", pid, epoch, False) == ErrorCode.none
    assert end_txn(client, "iso-txn", pid, epoch, True) == ErrorCode.invalid_txn_state


def write_txn_markers(
    c: RawClient, pid: int, epoch: int, commit: bool, topic: str
) -> dict[tuple[str, int], ErrorCode]:
    mod = schema_module(ApiKey.WRITE_TXN_MARKERS, 1)
    r = c.call(
        mod.WriteTxnMarkersRequest(
            markers=(
                mod.WritableTxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    transaction_result=commit,
                    topics=(mod.WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),),
                    coordinator_epoch=0,
                ),
            )
        )
    )
    (m,) = r.markers
    assert m.producer_id == pid
    return {
        (t.name, p.partition_index): ErrorCode(p.error_code) for t in m.topics for p in t.partitions
    }


def test_write_txn_markers_from_another_coordinator(client: RawClient) -> None:
    # What a coordinator on another broker sends this partition's leader.
    pid, epoch = open_transaction(client, "remote-txn", "remote")
    assert fetch(client, "remote", 1).last_stable_offset == 1

    assert write_txn_markers(client, pid, epoch, False, "remote") == {("remote", 0): ErrorCode.none}
    p = fetch(client, "remote", 1)
    assert (p.high_watermark, p.last_stable_offset) == (4, 4)
    assert [(t.producer_id, t.first_offset) for t in p.aborted_transactions] == [(pid, 1)]
    assert write_txn_markers(client, pid, epoch, True, "gone") == {
        ("gone", 0): ErrorCode.unknown_topic_or_partition
    }


def test_idle_transactional_id_expires(tmp_path: Path) -> None:
    overrides = {
        **OVERRIDES,
        "transactional.id.expiration.ms": "1000",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "300",
    }
    with (
        BrokerProcess(tmp_path / "b", overrides=overrides).start() as broker,
        RawClient(broker.port) as c,
    ):
        first = init_producer_id(c, 4, transactional_id="idle-txn")
        again = init_producer_id(c, 4, transactional_id="idle-txn")
        # Still known: the same producer id, the next epoch.
        assert (again.producer_id, again.producer_epoch) == (
            first.producer_id,
            first.producer_epoch + 1,
        )
        # Forgotten: EndTxn no longer knows the id (before: no transaction to end).
        wait_until(
            lambda: (
                end_txn(c, "idle-txn", again.producer_id, again.producer_epoch, False)
                == ErrorCode.invalid_producer_id_mapping
            ),
            15,
            "the idle transactional id forgotten",
            interval=0.5,
        )
        fresh = init_producer_id(c, 4, transactional_id="idle-txn")
        assert (fresh.producer_epoch, fresh.producer_id != first.producer_id) == (0, True)


def test_describe_and_list_transactions(client: RawClient) -> None:
    pid, epoch = open_transaction(client, "shown-txn", "shown")
    describe = schema_module(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    r = client.call(describe.DescribeTransactionsRequest(transactional_ids=("shown-txn", "nope")))
    shown, nope = r.transaction_states
    assert (shown.error_code, shown.transaction_state) == (ErrorCode.none, "Ongoing")
    assert (shown.producer_id, shown.producer_epoch) == (pid, epoch)
    assert [(t.topic, t.partitions) for t in shown.topics] == [("shown", (0,))]
    assert nope.error_code == ErrorCode.transactional_id_not_found

    listing = schema_module(ApiKey.LIST_TRANSACTIONS, 2)

    def listed(**filters: Any) -> tuple[list[tuple[str, int, str]], tuple[str, ...]]:
        r = client.call(listing.ListTransactionsRequest(**filters))
        assert r.error_code == ErrorCode.none
        found = [
            (t.transactional_id, t.producer_id, t.transaction_state) for t in r.transaction_states
        ]
        return sorted(found), r.unknown_state_filters

    assert listed() == ([("shown-txn", pid, "Ongoing")], ())
    assert listed(state_filters=("CompleteCommit", "Bogus")) == ([], ("Bogus",))
    assert listed(producer_id_filters=(pid + 1,)) == ([], ())
    assert listed(transactional_id_pattern="shown-.*") == ([("shown-txn", pid, "Ongoing")], ())
    assert listed(transactional_id_pattern="other") == ([], ())
    assert end_txn(client, "shown-txn", pid, epoch, True) == ErrorCode.none
    assert listed(state_filters=("CompleteCommit",)) == ([("shown-txn", pid, "CompleteCommit")], ())
