"""ProducerStateManager: idempotence, epochs, transactions and snapshots (Kafka's semantics)."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from logkeel.records.batch import BatchHeader, set_base_offset
from logkeel.records.control import ControlRecordType
from logkeel.storage.engine.producer_entry import (
    INT32_MAX,
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CompletedTxn,
    DuplicateBatch,
    ProducerStateEntry,
    read_end_txn_marker,
)
from logkeel.storage.engine.producer_snapshot import (
    ProducerSnapshotEntry,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from logkeel.storage.engine.producer_state import (
    InvalidTxnStateError,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
)
from logkeel.storage.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    KafkaStorageError,
    OutOfOrderSequenceError,
)

ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


def data_header(
    pid: int,
    epoch: int,
    base_seq: int,
    count: int = 1,
    base_offset: int = 0,
    *,
    txn: bool = False,
    max_ts: int = 1_000,
) -> BatchHeader:
    return BatchHeader(
        base_offset=base_offset,
        batch_length=49 + 10 * count,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=ATTR_TRANSACTIONAL if txn else 0,
        last_offset_delta=count - 1,
        base_timestamp=max_ts,
        max_timestamp=max_ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_seq,
        records_count=count,
    )


def _varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if raw < 0x80:
            out.append(raw)
            return bytes(out)
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7


def control_batch(
    pid: int,
    epoch: int,
    offset: int,
    *,
    commit: bool,
    coordinator_epoch: int = 0,
    timestamp: int = 2_000,
    type_id: int | None = None,
) -> tuple[BatchHeader, bytes]:
    """An end-transaction marker batch, assembled byte by byte from the v2 format."""
    key = struct.pack(">hh", 0, (1 if commit else 0) if type_id is None else type_id)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = (
        b"\x00"
        + _varint(0)
        + _varint(0)
        + _varint(len(key))
        + key
        + _varint(len(value))
        + value
        + _varint(0)
    )
    record = _varint(len(body)) + body
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            ATTR_TRANSACTIONAL | ATTR_CONTROL,
            0,
            timestamp,
            timestamp,
            pid,
            epoch,
            -1,
            1,
        )
        + record
    )
    crc = crc32c.crc32c(after_crc)
    prefix = struct.pack(">qiibI", offset, 4 + 1 + 4 + len(after_crc), 0, 2, crc)
    data = prefix + after_crc
    return BatchHeader.parse(data), data


def manager(tmp_path: Path, **kwargs: int) -> ProducerStateManager:
    part = tmp_path / "topic-0"
    part.mkdir(parents=True, exist_ok=True)
    return ProducerStateManager(part, **kwargs)


class Log:
    """Drives a manager the way the log does: prepare, assign offsets, update."""

    def __init__(self, psm: ProducerStateManager, start: int = 0):
        self.psm = psm
        self.leo = start

    def append(self, header: BatchHeader, data: bytes | None = None, client: bool = True):
        dup = self.psm.prepare_append(header, client, batch=data)
        if dup is not None:
            return dup
        first, last = self.leo, self.leo + header.last_offset_delta
        completed = self.psm.update(header, first, last, batch=data)
        self.leo = last + 1
        if completed is not None:
            self.psm.complete_txn(completed)
        return completed

    def marker(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0):
        header, data = control_batch(
            pid, epoch, self.leo, commit=commit, coordinator_epoch=coordinator_epoch
        )
        return self.append(header, data, client=False)


# -- the control-record helper ---------------------------------------------------------------


def test_control_batch_helper_is_understood_by_kafka_python() -> None:
    header, data = control_batch(77, 3, 40, commit=False, coordinator_epoch=9, timestamp=1234)
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert record.abort and record.version == 0
    assert struct.unpack(">hi", record.value) == (0, 9)
    assert header.base_offset == 40 and header.producer_id == 77


@pytest.mark.parametrize("commit", [True, False])
def test_read_end_txn_marker(commit: bool) -> None:
    header, data = control_batch(5, 1, 0, commit=commit, coordinator_epoch=42, timestamp=98765)
    marker = read_end_txn_marker(header, data)
    assert marker is not None
    assert marker.control_type == (ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
    assert marker.coordinator_epoch == 42
    assert marker.timestamp == 98765


def test_read_end_txn_marker_rejects_bad_content() -> None:
    header, data = control_batch(5, 1, 0, commit=True, type_id=2)  # LEADER_CHANGE, not a marker
    with pytest.raises(CorruptRecordError, match="type 2"):
        read_end_txn_marker(header, data)
    header, data = control_batch(5, 1, 0, commit=True)
    with pytest.raises(CorruptRecordError):
        read_end_txn_marker(header, data[:-8])
    compressed = header._replace(attributes=header.attributes | 1)
    with pytest.raises(CorruptRecordError, match="compressed"):
        read_end_txn_marker(compressed, data)
    assert read_end_txn_marker(header._replace(records_count=0), data) is None


# -- idempotence -----------------------------------------------------------------------------


def test_batch_metadata_first_sequence_wraps() -> None:
    assert (
        BatchMetadata(last_seq=1, last_offset=10, offset_delta=3, timestamp=0).first_seq
        == INT32_MAX - 1
    )
    assert BatchMetadata(last_seq=9, last_offset=10, offset_delta=3, timestamp=0).first_offset == 7


def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    log = Log(manager(tmp_path))
    # Unknown producer: any starting sequence is taken, so start just below the wrap.
    log.append(data_header(1, 0, INT32_MAX - 1, count=4))
    assert log.psm.last_entry(1).last_seq == 1
    log.append(data_header(1, 0, 2, count=2))
    dup = log.append(data_header(1, 0, INT32_MAX - 1, count=4))
    assert dup == DuplicateBatch(0, 3, 1_000)
    log2 = Log(manager(tmp_path / "b"))
    log2.append(data_header(1, 0, INT32_MAX - 2, count=3))
    assert log2.psm.last_entry(1).last_seq == INT32_MAX
    log2.append(data_header(1, 0, 0, count=1))
    with pytest.raises(OutOfOrderSequenceError):
        log2.append(data_header(1, 0, 5))


def test_unknown_producer_with_nonzero_sequence_is_accepted(tmp_path: Path) -> None:
    # Kafka stopped answering UNKNOWN_PRODUCER_ID here (KIP-360): the producer's state may
    # have been removed with its data by retention, so the log takes it as a new start.
    log = Log(manager(tmp_path))
    assert log.append(data_header(9, 4, 57)) is None
    assert log.psm.last_entry(9).producer_epoch == 4
    assert log.append(data_header(9, 4, 58)) is None
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data_header(9, 4, 60))  # once known, the producer must stay in sequence


def test_retry_of_first_batch_is_duplicate(tmp_path: Path) -> None:
    log = Log(manager(tmp_path))
    log.append(data_header(9, 4, 57, count=2))
    assert log.append(data_header(9, 4, 57, count=2)) == DuplicateBatch(0, 1, 1_000)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data_header(9, 4, 57, count=1))  # same start, different length


def test_epoch_rules(tmp_path: Path) -> None:
    log = Log(manager(tmp_path))
    log.append(data_header(1, 5, 0, count=3))
    with pytest.raises(InvalidProducerEpochError):
        log.append(data_header(1, 4, 3))
    with pytest.raises(InvalidProducerEpochError):
        log.append(data_header(1, 4, 3), client=False)  # the coordinator is fenced too
    with pytest.raises(OutOfOrderSequenceError, match="must start at sequence 0"):
        log.append(data_header(1, 6, 3))
    assert log.append(data_header(1, 6, 0)) is None
    # The old epoch's batches are gone: a retry of them is now fenced, not a duplicate.
    with pytest.raises(InvalidProducerEpochError):
        log.append(data_header(1, 5, 0, count=3))
    assert list(log.psm.last_entry(1).batches) == [BatchMetadata(0, 3, 0, 1_000)]


def test_non_client_origin_skips_sequence_checks(tmp_path: Path) -> None:
    log = Log(manager(tmp_path))
    log.append(data_header(1, 0, 0))
    assert log.append(data_header(1, 0, 17), client=False) is None
    assert log.psm.last_entry(1).last_seq == 17


def test_batches_without_producer_id_only_advance_the_map(tmp_path: Path) -> None:
    log = Log(manager(tmp_path))
    log.append(data_header(-1, -1, -1, count=10))
    assert log.psm.producer_id_count == 0
    assert log.psm.map_end_offset == 10


def test_prepare_appends_validates_batches_of_one_request_in_order(tmp_path: Path) -> None:
    psm = manager(tmp_path)
    Log(psm).append(data_header(1, 0, 0, count=2))
    b1, b2 = data_header(1, 0, 2, count=3), data_header(1, 0, 5, count=1)
    assert psm.prepare_appends([(b1, None), (b2, None)]) is None
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare_appends([(b1, None), (data_header(1, 0, 6), None)])
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare_append(b2)  # alone, b2 leaves a gap
    assert psm.last_entry(1).last_seq == 1  # validation changed nothing
    # A retried batch anywhere makes the whole append a duplicate, as in Kafka.
    assert psm.prepare_appends(
        [(data_header(1, 0, 0, count=2), None), (b1, None)]
    ) == DuplicateBatch(0, 1, 1_000)


def test_real_batches_from_kafka_python(tmp_path: Path) -> None:
    psm = manager(tmp_path)
    leo = 0
    for seq in (0, 3, 6):
        builder = DefaultRecordBatchBuilder(2, 0, False, 4242, 1, seq, 1 << 20)
        for i in range(3):
            builder.append(i, 1_700_000_000_000 + seq + i, None, b"v%d" % i, [])
        data = bytearray(builder.build())
        header = BatchHeader.parse(data)
        assert psm.prepare_append(header) is None
        set_base_offset(data, leo)
        assert psm.update(header, leo, leo + 2) is None
        leo += 3
    entry = psm.last_entry(4242)
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        (0, 2, 0, 2),
        (3, 5, 3, 5),
        (6, 8, 6, 8),
    ]
    assert entry.last_timestamp == 1_700_000_000_008
    assert psm.map_end_offset == 9


ops = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.integers(0, 1), st.integers(1, 4)),
        st.tuples(st.just("retry"), st.integers(0, 1), st.integers(0, 9)),
        st.tuples(st.just("gap"), st.integers(0, 1), st.integers(1, 3)),
        st.tuples(st.just("old-epoch"), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("bump"), st.integers(0, 1), st.integers(0, 2)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_dedup_against_a_model(steps: list[tuple[str, int, int]]) -> None:
    """Retries of any of the last 5 batches are duplicates with their original offsets; older
    retries, gaps and stale epochs are rejected; nothing rejected changes the state."""
    with tempfile.TemporaryDirectory() as d:
        log = Log(manager(Path(d)))
        pids = (100, 200)
        epoch = {p: 0 for p in pids}
        next_seq = {p: 0 for p in pids}
        sent: dict[int, list[tuple[int, int, int, int]]] = {
            p: [] for p in pids
        }  # seq, count, first, last
        for kind, which, n in steps:
            pid = pids[which]
            before = (log.leo, log.psm.last_entry(pid) and list(log.psm.last_entry(pid).batches))
            if kind == "new":
                first = log.leo
                assert (
                    log.append(data_header(pid, epoch[pid], next_seq[pid], n, max_ts=first)) is None
                )
                sent[pid].append((next_seq[pid], n, first, first + n - 1))
                next_seq[pid] += n
                continue
            if kind == "retry":
                if not sent[pid]:
                    continue
                back = min(n, len(sent[pid]) - 1)
                seq, count, first, last = sent[pid][-1 - back]
                header = data_header(pid, epoch[pid], seq, count, max_ts=first)
                if back < NUM_BATCHES_TO_RETAIN:
                    assert log.append(header) == DuplicateBatch(first, last, first)
                else:
                    with pytest.raises(OutOfOrderSequenceError):
                        log.append(header)
            elif kind == "gap":
                if not sent[pid]:
                    continue
                with pytest.raises(OutOfOrderSequenceError):
                    log.append(data_header(pid, epoch[pid], next_seq[pid] + n))
            elif kind == "old-epoch":
                if epoch[pid] == 0:
                    continue
                with pytest.raises(InvalidProducerEpochError):
                    log.append(data_header(pid, epoch[pid] - 1, next_seq[pid]))
            else:  # bump: a new epoch must restart at 0
                if not sent[pid]:
                    continue
                if n:
                    with pytest.raises(OutOfOrderSequenceError):
                        log.append(data_header(pid, epoch[pid] + 1, n))
                else:
                    epoch[pid] += 1
                    first = log.leo
                    assert log.append(data_header(pid, epoch[pid], 0, 1, max_ts=first)) is None
                    next_seq[pid] = 1
                    sent[pid] = [(0, 1, first, first)]
                    continue
            after = (log.leo, log.psm.last_entry(pid) and list(log.psm.last_entry(pid).batches))
            assert after == before


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=12))
def test_only_the_last_batch_survives_a_snapshot(counts: list[int]) -> None:
    """Kafka's snapshot keeps one batch per producer: after a reload only the newest batch is
    recognised as a duplicate; earlier retries are out of order."""
    with tempfile.TemporaryDirectory() as d:
        log = Log(manager(Path(d)))
        sent = []
        seq = 0
        for n in counts:
            first = log.leo
            log.append(data_header(7, 2, seq, n, max_ts=first))
            sent.append((seq, n, first, log.leo - 1))
            seq += n
        log.psm.take_snapshot()
        reloaded = ProducerStateManager(log.psm.partition_dir)
        assert reloaded.load_latest_snapshot().offset == log.leo
        s, n, first, last = sent[-1]
        assert reloaded.prepare_append(data_header(7, 2, s, n)) == DuplicateBatch(
            first, last, first
        )
        for s, n, _, _ in sent[:-1]:
            with pytest.raises(OutOfOrderSequenceError):
                reloaded.prepare_append(data_header(7, 2, s, n))
        assert reloaded.prepare_append(data_header(7, 2, seq)) is None


# -- transactions ----------------------------------------------------------------------------


def test_transactions_and_unstable_offsets(tmp_path: Path) -> None:
    psm = manager(tmp_path)
    log = Log(psm)
    log.append(data_header(1, 0, 0, count=3, txn=True))  # 0..2
    log.append(data_header(2, 0, 0, count=2, txn=True))  # 3..4
    log.append(data_header(1, 0, 3, count=1, txn=True))  # 5
    assert psm.first_unstable_offset() == 0
    assert psm.first_undecided_offset() == 0

    header, data = control_batch(1, 0, 6, commit=True, coordinator_epoch=3)
    assert psm.prepare_append(header, False, batch=data) is None
    completed = psm.update(header, 6, 6, batch=data)
    assert completed == CompletedTxn(1, 0, 6, is_aborted=False)
    assert psm.last_stable_offset(completed) == 3  # producer 2's transaction is still open
    psm.complete_txn(completed)
    assert psm.first_undecided_offset() == 3
    assert psm.first_unstable_offset() == 0  # the marker is not yet below the high watermark
    psm.on_high_watermark_updated(7)
    assert psm.first_unstable_offset() == 3
    assert psm.last_entry(1).current_txn_first_offset is None
    assert psm.last_entry(1).coordinator_epoch == 3
    assert psm.last_entry(1).last_timestamp == 2_000  # the marker's timestamp

    header, data = control_batch(2, 0, 7, commit=False)
    completed = psm.update(header, 7, 7, batch=data)
    assert completed == CompletedTxn(2, 3, 7, is_aborted=True)
    assert psm.last_stable_offset(completed) == 8
    psm.complete_txn(completed)
    assert psm.first_undecided_offset() is None
    assert psm.first_unstable_offset() == 3
    psm.on_high_watermark_updated(7)
    assert psm.first_unstable_offset() == 3  # marker at 7 is not below 7
    psm.on_high_watermark_updated(8)
    assert psm.first_unstable_offset() is None
    assert psm.map_end_offset == 8


def test_marker_without_transaction_completes_nothing(tmp_path: Path) -> None:
    log = Log(manager(tmp_path))
    log.append(data_header(1, 0, 0))
    assert log.marker(1, 0, commit=True) is None
    assert log.psm.first_unstable_offset() is None


def test_transactional_validation(tmp_path: Path) -> None:
    log = Log(manager(tmp_path))
    log.append(data_header(1, 0, 0, txn=True))
    with pytest.raises(InvalidTxnStateError):
        log.append(data_header(1, 0, 1, txn=False))
    log.marker(1, 0, commit=True, coordinator_epoch=5)
    header, data = control_batch(1, 0, log.leo, commit=True, coordinator_epoch=4)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.psm.prepare_append(header, False, batch=data)
    stale, data = control_batch(1, 0, log.leo, commit=True, coordinator_epoch=5)
    log.append(data_header(1, 1, 0))  # epoch bump
    with pytest.raises(InvalidProducerEpochError):
        log.psm.prepare_append(stale, False, batch=data)
    with pytest.raises(ValueError):
        log.psm.prepare_append(stale, False)  # a control batch needs its bytes


def test_marker_bumping_the_epoch_clears_batches(tmp_path: Path) -> None:
    log = Log(manager(tmp_path))
    log.append(data_header(1, 0, 0, txn=True))
    log.marker(1, 1, commit=False)  # coordinator aborts with a bumped epoch
    entry = log.psm.last_entry(1)
    assert entry.producer_epoch == 1 and entry.is_empty
    assert log.append(data_header(1, 1, 0)) is None


def test_load_batch_tolerates_what_validation_would_reject(tmp_path: Path) -> None:
    psm = manager(tmp_path)
    psm.load_batch(data_header(1, 5, 10, count=2, base_offset=0, txn=True))
    psm.load_batch(data_header(1, 5, 40, count=1, base_offset=2))  # gap, non-transactional
    psm.load_batch(data_header(1, 3, 0, count=1, base_offset=3))  # older epoch
    header, data = control_batch(1, 3, 4, commit=True, coordinator_epoch=1)
    completed = psm.load_batch(header, batch=data)
    assert completed == CompletedTxn(1, 0, 4, False)
    psm.complete_txn(completed)
    assert psm.map_end_offset == 5
    assert psm.last_entry(1).producer_epoch == 3


def test_update_checks_offsets_span_the_batch(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        manager(tmp_path).update(data_header(1, 0, 0, count=3), 0, 5)


# -- snapshots -------------------------------------------------------------------------------


def _populate(log: Log) -> None:
    log.append(data_header(1, 0, 0, count=2, max_ts=100))  # 0..1
    log.append(data_header(2, 3, 0, count=1, txn=True, max_ts=200))  # 2
    log.append(data_header(1, 0, 2, count=3, max_ts=300))  # 3..5
    log.marker(3, 0, commit=True, coordinator_epoch=8)  # 6: marker only, no data


def test_snapshot_round_trip(tmp_path: Path) -> None:
    psm = manager(tmp_path)
    log = Log(psm)
    assert psm.take_snapshot() is None  # nothing to save yet
    _populate(log)
    path = psm.take_snapshot()
    assert path == snapshot_path(psm.partition_dir, 7)
    assert psm.take_snapshot() is None  # no new offsets
    assert read_snapshot(path) == [
        ProducerSnapshotEntry(1, 0, 4, 5, 2, 300, -1, -1),
        ProducerSnapshotEntry(2, 3, 0, 2, 0, 200, -1, 2),
        ProducerSnapshotEntry(3, 0, -1, -1, 0, 2_000, 8, -1),
    ]
    reloaded = ProducerStateManager(psm.partition_dir)
    result = reloaded.load_latest_snapshot()
    assert (result.offset, result.discarded, result.producers) == (7, [], 3)
    assert reloaded.map_end_offset == 7
    assert reloaded.first_unstable_offset() == 2  # the open transaction came back
    assert reloaded.last_entry(3).coordinator_epoch == 8
    assert reloaded.last_entry(3).is_empty
    assert reloaded.prepare_append(data_header(1, 0, 2, count=3)) == DuplicateBatch(3, 5, 300)
    assert reloaded.prepare_append(data_header(1, 0, 5)) is None


def test_take_snapshot_at_a_roll_offset(tmp_path: Path) -> None:
    psm = manager(tmp_path)
    Log(psm).append(data_header(1, 0, 0, count=2))
    assert psm.take_snapshot(10) == snapshot_path(psm.partition_dir, 10)
    assert psm.map_end_offset == 10
    with pytest.raises(ValueError):
        psm.take_snapshot(5)


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage-version"])
def test_corrupt_latest_snapshot_falls_back_to_the_previous(tmp_path: Path, damage: str) -> None:
    psm = manager(tmp_path)
    log = Log(psm)
    log.append(data_header(1, 0, 0, count=2))
    psm.take_snapshot()  # at 2
    log.append(data_header(1, 0, 2, count=2))
    newest = psm.take_snapshot()  # at 4
    raw = bytearray(newest.read_bytes())
    if damage == "flip":
        raw[20] ^= 0x40
    elif damage == "truncate":
        raw = raw[:-5]
    elif damage == "empty":
        raw = bytearray()
    else:
        raw[0:2] = b"\x7f\x7f"
    newest.write_bytes(bytes(raw))

    reloaded = ProducerStateManager(psm.partition_dir)
    result = reloaded.load_latest_snapshot()
    assert result.offset == 2
    assert result.discarded == [newest]
    assert not newest.exists()
    assert reloaded.snapshot_offsets == [2]
    assert reloaded.map_end_offset == 2
    assert reloaded.last_entry(1).last_seq == 1


def test_no_usable_snapshot_starts_empty_at_log_start(tmp_path: Path) -> None:
    psm = manager(tmp_path)
    write_snapshot(snapshot_path(psm.partition_dir, 9), [])
    snapshot_path(psm.partition_dir, 9).write_bytes(b"\x00\x01")
    psm = ProducerStateManager(psm.partition_dir)
    result = psm.load_latest_snapshot(log_start_offset=5)
    assert result.offset is None and len(result.discarded) == 1
    assert psm.map_end_offset == 5 and psm.producer_id_count == 0


def test_snapshot_bookkeeping(tmp_path: Path) -> None:
    psm = manager(tmp_path)
    log = Log(psm)
    for offset in (10, 20, 30, 40):
        log.append(data_header(1, 0, offset // 10 - 1))
        psm.take_snapshot(offset)
    assert psm.snapshot_offsets == [10, 20, 30, 40]
    assert (psm.oldest_snapshot_offset, psm.latest_snapshot_offset) == (10, 40)
    assert psm.delete_snapshots_below(20) == [10]
    assert not snapshot_path(psm.partition_dir, 10).exists()

    result = psm.truncate_and_reload(log_start_offset=20, log_end_offset=35)
    # at/below the log start and above the log end are gone; state reloaded from 30
    assert psm.snapshot_offsets == [30]
    assert result is not None and result.offset == 30
    assert psm.map_end_offset == 30
    assert sorted(p.name for p in psm.partition_dir.iterdir()) == [
        snapshot_path(psm.partition_dir, 30).name
    ]

    assert psm.truncate_and_reload(log_start_offset=25, log_end_offset=30) is None  # already there
    psm.truncate_fully_and_start_at(100)
    assert psm.snapshot_offsets == [] and psm.map_end_offset == 100 and psm.producer_id_count == 0
    assert list(psm.partition_dir.iterdir()) == []


def test_remove_stray_snapshots(tmp_path: Path) -> None:
    psm = manager(tmp_path)
    for offset in (0, 5, 10, 15, 20, 50):
        write_snapshot(snapshot_path(psm.partition_dir, offset), [])
    psm = ProducerStateManager(psm.partition_dir)
    # segments start at 0, 10, 20; 50 is the clean-shutdown snapshot above them and is kept
    assert psm.remove_stray_snapshots([0, 10, 20]) == [5, 15]
    assert psm.snapshot_offsets == [0, 10, 20, 50]
    assert psm.remove_stray_snapshots([0, 10, 20, 60]) == [50]


def test_scan_flags_malformed_and_leaves_temp_files(tmp_path: Path) -> None:
    """A second manager on a live dir (replay's scratch state) must not delete the snapshot the
    live one is writing: the crash-torture test with transactions saw the writer's rename fail."""
    part = tmp_path / "topic-0"
    part.mkdir()
    (part / "bogus.snapshot").write_bytes(b"")
    (part / "00000000000000000004.snapshot.tmp").write_bytes(b"half")
    write_snapshot(snapshot_path(part, 3), [])
    psm = ProducerStateManager(part)
    assert psm.malformed_snapshot_files == [part / "bogus.snapshot"]
    assert psm.snapshot_offsets == [3]
    assert (part / "00000000000000000004.snapshot.tmp").read_bytes() == b"half"


def test_io_errors_become_kafka_storage_errors(tmp_path: Path) -> None:
    part = tmp_path / "logs" / "topic-0"  # never created
    psm = ProducerStateManager(part)
    psm.update(data_header(1, 0, 0), 0, 0)
    with pytest.raises(KafkaStorageError) as info:
        psm.take_snapshot()
    assert info.value.log_dir == str(tmp_path / "logs")


# -- expiration ------------------------------------------------------------------------------


def test_producer_expiration(tmp_path: Path) -> None:
    psm = manager(tmp_path, max_producer_id_expiration_ms=1_000)
    log = Log(psm)
    log.append(data_header(1, 0, 0, max_ts=10_000))
    log.append(data_header(2, 0, 0, max_ts=10_500))
    log.append(data_header(3, 0, 0, txn=True, max_ts=1))  # open transaction: never expired
    assert psm.remove_expired_producers(10_999) == []
    assert psm.remove_expired_producers(11_000) == [1]
    assert sorted(psm.active_producers) == [2, 3]
    psm.take_snapshot()
    fresh = ProducerStateManager(psm.partition_dir, max_producer_id_expiration_ms=1_000)
    assert fresh.load_latest_snapshot(now_ms=20_000).producers == 1
    assert list(fresh.active_producers) == [3]


def test_late_transaction(tmp_path: Path) -> None:
    psm = manager(tmp_path, max_transaction_timeout_ms=1_000)
    log = Log(psm)
    assert not psm.has_late_transaction(10**12)
    log.append(data_header(1, 0, 0, txn=True, max_ts=5_000))
    assert not psm.has_late_transaction(5_000 + 1_000 + 300_000)
    assert psm.has_late_transaction(5_000 + 1_000 + 300_001)


def test_entry_snapshot_conversion_round_trip() -> None:
    entry = ProducerStateEntry(5, 2, 7, 99, 40, [BatchMetadata(9, 44, 4, 99)])
    assert ProducerStateEntry.from_snapshot_entry(entry.to_snapshot_entry()).__repr__() == repr(
        entry
    )
