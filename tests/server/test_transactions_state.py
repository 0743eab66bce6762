"""The transaction state machine (no sockets) and the ``__transaction_state`` record formats."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from logkeel.server.txn.records import (
    TxnLogValue,
    TxnStatus,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from logkeel.server.txn.state import MAX_EPOCH, VALID_PREVIOUS, TxnError, TxnMetadata

S = TxnStatus


def step(meta: TxnMetadata, target: TxnLogValue | None) -> None:
    assert target is not None
    assert meta.pending == target.status
    meta.complete(target)
    assert meta.pending is None


def initialised(now: int = 1000) -> TxnMetadata:
    meta = TxnMetadata.new("app", 7, 60_000, now)
    step(meta, meta.prepare_init(None, 60_000, now))
    assert (meta.state, meta.producer_id, meta.producer_epoch) == (S.EMPTY, 7, 0)
    return meta


def test_commit_cycle() -> None:
    meta = initialised()
    step(meta, meta.prepare_add_partitions([("t", 0), ("t", 1)], 2000))
    assert meta.state == S.ONGOING and meta.value.start_ms == 2000
    # Adding partitions already in the transaction writes nothing.
    assert meta.prepare_add_partitions([("t", 1)], 2500) is None
    step(meta, meta.prepare_add_partitions([("u", 3)], 3000))
    assert meta.partitions() == [("t", 0), ("t", 1), ("u", 3)]
    assert meta.value.start_ms == 2000
    step(meta, meta.prepare_end(True, 4000))
    assert meta.state == S.PREPARE_COMMIT
    step(meta, meta.prepare_complete(5000))
    assert meta.state == S.COMPLETE_COMMIT and meta.partitions() == []
    # A retried commit is answered without a change; an abort now is a state error.
    assert meta.prepare_end(True, 6000) is None
    with pytest.raises(TxnError) as e:
        meta.prepare_end(False, 6000)
    assert e.value.code == ErrorCode.invalid_txn_state


def test_abort_and_next_transaction() -> None:
    meta = initialised()
    step(meta, meta.prepare_add_partitions([("t", 0)], 2000))
    step(meta, meta.prepare_end(False, 3000))
    assert meta.state == S.PREPARE_ABORT
    step(meta, meta.prepare_complete(4000))
    assert meta.state == S.COMPLETE_ABORT
    step(meta, meta.prepare_add_partitions([("t", 0)], 5000))
    assert meta.state == S.ONGOING and meta.value.start_ms == 5000


def test_end_without_transaction_and_pending_changes() -> None:
    meta = initialised()
    with pytest.raises(TxnError) as e:
        meta.prepare_end(True, 2000)
    assert e.value.code == ErrorCode.invalid_txn_state
    target = meta.prepare_add_partitions([("t", 0)], 2000)
    assert target is not None
    # While a change is being written, the id answers CONCURRENT_TRANSACTIONS.
    with pytest.raises(TxnError) as e:
        meta.check_producer(7, 0)
    assert e.value.code == ErrorCode.concurrent_transactions
    meta.abandon()
    assert meta.state == S.EMPTY
    with pytest.raises(TxnError) as e:
        meta.prepare_complete(3000)
    assert e.value.code == ErrorCode.invalid_txn_state


def test_producer_checks() -> None:
    meta = initialised()
    with pytest.raises(TxnError) as e:
        meta.check_producer(8, 0)
    assert e.value.code == ErrorCode.invalid_producer_id_mapping
    with pytest.raises(TxnError) as e:
        meta.check_producer(7, 1)
    assert e.value.code == ErrorCode.producer_fenced
    meta.check_producer(7, 0)


def test_fencing_an_open_transaction_bumps_the_epoch_then_aborts() -> None:
    meta = initialised()
    step(meta, meta.prepare_add_partitions([("t", 0)], 2000))
    step(meta, meta.prepare_fence(3000))
    assert (meta.state, meta.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 1)
    with pytest.raises(TxnError):
        meta.prepare_end(True, 3000)  # a fenced transaction is never committed
    step(meta, meta.prepare_end(False, 3000))
    assert meta.state == S.PREPARE_ABORT and meta.partitions() == [("t", 0)]
    step(meta, meta.prepare_complete(4000))
    step(meta, meta.prepare_init(None, 60_000, 5000))
    assert (meta.state, meta.producer_epoch) == (S.EMPTY, 2)


def test_timeout_and_epoch_exhaustion() -> None:
    meta = initialised()
    step(meta, meta.prepare_add_partitions([("t", 0)], 2000))
    assert not meta.expired(2000 + 60_000)
    assert meta.expired(2000 + 60_001)
    meta.value = TxnLogValue(7, MAX_EPOCH, 60_000, S.COMPLETE_COMMIT, {}, 0, -1)
    assert meta.needs_new_producer_id()
    step(meta, meta.prepare_init(9, 60_000, 3000))
    assert (meta.producer_id, meta.producer_epoch) == (9, 0)


def test_every_invalid_transition_is_refused() -> None:
    for current in S:
        for target in S:
            if current in VALID_PREVIOUS[target]:
                continue
            meta = TxnMetadata("x", TxnLogValue(1, 0, 1000, current, {}, 0, -1))
            with pytest.raises(TxnError):
                meta._target(target, 0)
            assert meta.pending is None


def test_records_round_trip_in_kafka_format() -> None:
    key = encode_txn_key("app")
    assert key == b"\x00\x00\x00\x03app"
    assert decode_txn_key(key) == "app"
    value = TxnLogValue(7, 3, 60_000, S.ONGOING, {"t": (0, 2), "a": (1,)}, 1234, 1000)
    raw = encode_txn_value(value)
    assert raw[:2] == b"\x00\x00"  # version 0
    decoded = decode_txn_value(raw)
    assert decoded.partitions == {"a": (1,), "t": (0, 2)}
    assert (decoded.producer_id, decoded.producer_epoch, decoded.status) == (7, 3, S.ONGOING)
    assert (decoded.timeout_ms, decoded.last_update_ms, decoded.start_ms) == (60_000, 1234, 1000)
