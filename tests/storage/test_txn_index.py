"""The transaction index against Kafka's AbortedTxn layout, a model of collectAbortedTxns,
reopening, torn writes and corruption."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.storage.engine.txn_index import (
    ABORTED_TXN_SIZE,
    AbortedTxn,
    TransactionIndex,
    TxnIndexSearchResult,
)
from logkeel.storage.errors import (
    CorruptIndexError,
    InvalidOffsetError,
    KafkaStorageError,
    StorageError,
)

from .logutil import open_fds

# Kafka's AbortedTxn: putShort(version 0), putLong(producerId), putLong(firstOffset),
# putLong(lastOffset), putLong(lastStableOffset): 34 bytes.
ENTRY = struct.Struct(">hqqqq")


def txn_index_path(root: Path, base_offset: int = 0) -> Path:
    partition_dir = root / "logs" / "topic-0"
    partition_dir.mkdir(parents=True, exist_ok=True)
    return partition_dir / f"{base_offset:020d}.txnindex"


def model_collect(txns: list[AbortedTxn], fetch: int, upper: int) -> TxnIndexSearchResult:
    found = []
    for txn in txns:
        if txn.last_offset >= fetch and txn.first_offset < upper:
            found.append(txn)
        if txn.last_stable_offset >= upper:
            return TxnIndexSearchResult(found, True)
    return TxnIndexSearchResult(found, False)


def test_bytes_are_kafkas_layout(tmp_path: Path) -> None:
    path = txn_index_path(tmp_path)
    index = TransactionIndex(path, 0)
    index.append(AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=11))
    index.append(AbortedTxn(2**63 - 1, 21, 30, 31))
    index.close()
    data = path.read_bytes()
    assert ABORTED_TXN_SIZE == ENTRY.size == len(data) // 2 == 34
    assert data[:34] == bytes.fromhex(
        "0000"  # version 0
        "0000000000000007"  # producer id
        "000000000000000a"  # first offset
        "0000000000000014"  # last offset
        "000000000000000b"  # last stable offset
    )
    assert list(ENTRY.iter_unpack(data)) == [(0, 7, 10, 20, 11), (0, 2**63 - 1, 21, 30, 31)]


def test_append_collect_truncate_reopen(tmp_path: Path) -> None:
    path = txn_index_path(tmp_path, 100)
    txns = [
        AbortedTxn(1, 100, 105, 100),
        AbortedTxn(2, 102, 110, 106),
        AbortedTxn(3, 111, 120, 121),
        AbortedTxn(4, 115, 130, 131),
    ]
    index = TransactionIndex(path, 100)
    assert index.all_aborted_txns() == [] and index.last_offset is None
    for txn in txns:
        index.append(txn)
    index.flush()
    assert index.last_offset == 130
    # No entry's LSO reaches 200: a later segment may still hold overlapping transactions.
    assert index.collect_aborted_txns(106, 200) == TxnIndexSearchResult(txns[1:], False)
    # The third entry's LSO (121) is at or past the range's end: the search can stop there.
    assert index.collect_aborted_txns(106, 112) == TxnIndexSearchResult(txns[1:3], True)
    assert index.collect_aborted_txns(106, 121) == TxnIndexSearchResult(txns[1:3], True)
    assert index.collect_aborted_txns(106, 122) == TxnIndexSearchResult(txns[1:], True)
    # The first LSO (100) already reaches the end of [0, 100): complete, and nothing overlaps.
    assert index.collect_aborted_txns(0, 100) == TxnIndexSearchResult([], True)
    assert index.collect_aborted_txns(131, 200) == TxnIndexSearchResult([], False)

    index.close()
    reopened = TransactionIndex(path, 100)
    assert reopened.all_aborted_txns() == txns
    assert reopened.last_offset == 130  # restored from the file, so appends stay ordered
    with pytest.raises(InvalidOffsetError):
        reopened.append(AbortedTxn(5, 125, 130, 131))
    reopened.sanity_check()

    reopened.truncate_to(111)  # drops every transaction ending at or after 111
    assert reopened.all_aborted_txns() == txns[:2]
    assert path.stat().st_size == 2 * 34
    reopened.truncate_to(1000)  # past the end: no effect
    assert reopened.all_aborted_txns() == txns[:2]
    reopened.append(AbortedTxn(9, 140, 150, 151))
    reopened.close()
    assert TransactionIndex(path, 100).all_aborted_txns() == [
        *txns[:2],
        AbortedTxn(9, 140, 150, 151),
    ]


txn_steps = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(1, 40), st.integers(0, 60)),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=txn_steps,
    ranges=st.lists(st.tuples(st.integers(-5, 1500), st.integers(0, 200)), max_size=10),
    cut=st.integers(-5, 1500),
)
def test_matches_model(
    steps: list[tuple[int, int, int, int]], ranges: list[tuple[int, int]], cut: int
) -> None:
    txns: list[AbortedTxn] = []
    last = 0
    for pid, back, forward, lso_ahead in steps:
        end = last + forward
        txns.append(AbortedTxn(pid, max(0, end - back), end, end - 20 + lso_ahead))
        last = end
    with tempfile.TemporaryDirectory() as tmp:
        path = txn_index_path(Path(tmp))
        index = TransactionIndex(path, 0)
        for txn in txns:
            index.append(txn)
        index.close()
        reopened = TransactionIndex(path, 0)
        assert reopened.all_aborted_txns() == txns
        reopened.sanity_check()
        for fetch, length in ranges:
            assert reopened.collect_aborted_txns(fetch, fetch + length) == model_collect(
                txns, fetch, fetch + length
            )
        reopened.truncate_to(cut)
        kept = [t for t in txns if t.last_offset < cut]
        assert reopened.all_aborted_txns() == kept
        reopened.close()
        assert TransactionIndex(path, 0).all_aborted_txns() == kept
        if txns or path.exists():
            assert path.stat().st_size == 34 * len(kept)


def test_torn_append_is_corrupt_and_repaired_by_the_next_append(tmp_path: Path) -> None:
    path = txn_index_path(tmp_path)
    first = AbortedTxn(1, 0, 5, 6)
    path.write_bytes(first.to_bytes() + AbortedTxn(2, 6, 9, 10).to_bytes()[:20])
    index = TransactionIndex(path, 0)
    assert index.all_aborted_txns() == [first]  # the partial entry is not an entry
    with pytest.raises(CorruptIndexError, match="multiple of 34"):
        index.sanity_check()
    index.append(AbortedTxn(3, 7, 12, 13))
    index.sanity_check()
    index.close()
    assert list(ENTRY.iter_unpack(path.read_bytes())) == [(0, 1, 0, 5, 6), (0, 3, 7, 12, 13)]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([(0, 1, 50, 55, 56), (1, 2, 56, 59, 60)], "version 1"),
        ([(0, 1, 40, 45, 46)], "less than start offset 50"),
        ([(0, 1, 60, 70, 71), (0, 2, 60, 70, 72)], "does not follow"),
        ([(0, 1, 80, 70, 81)], "ends before it starts"),
    ],
)
def test_corrupt_files(tmp_path: Path, entries: list[tuple[int, ...]], message: str) -> None:
    path = txn_index_path(tmp_path, 50)
    path.write_bytes(b"".join(ENTRY.pack(*e) for e in entries))
    index = TransactionIndex(path, 50)
    with pytest.raises(CorruptIndexError, match=message):
        index.sanity_check()
    index.reset()  # usable for a rebuild
    index.sanity_check()
    assert index.all_aborted_txns() == [] and path.stat().st_size == 0


def test_lazy_and_created_only_by_first_append(tmp_path: Path) -> None:
    existing = [txn_index_path(tmp_path, i) for i in range(500)]
    for i, path in enumerate(existing):
        path.write_bytes(AbortedTxn(i, i, i + 1, i + 2).to_bytes())
    missing = [txn_index_path(tmp_path, 10**6 + i) for i in range(500)]
    before = open_fds()
    indexes = [TransactionIndex(p, i) for i, p in enumerate(existing)]
    indexes += [TransactionIndex(p, 10**6 + i) for i, p in enumerate(missing)]
    assert not any(index.is_loaded for index in indexes)
    assert open_fds() == before
    assert indexes[4].all_aborted_txns() == [AbortedTxn(4, 4, 5, 6)]
    assert [i for i, index in enumerate(indexes) if index.is_loaded] == [4]
    # Reading, resetting or flushing an index without entries creates no file.
    fresh = indexes[500]
    assert fresh.collect_aborted_txns(0, 10**7) == TxnIndexSearchResult([], False)
    fresh.reset()
    fresh.flush()
    fresh.sanity_check()
    assert not missing[0].exists()
    fresh.append(AbortedTxn(1, 10**6, 10**6 + 3, 10**6 + 4))
    fresh.flush()
    assert missing[0].stat().st_size == 34
    assert open_fds() == before  # no descriptor is kept between calls


def test_rename_and_delete(tmp_path: Path) -> None:
    path = txn_index_path(tmp_path)
    index = TransactionIndex(path, 0)
    index.rename(path.with_name(path.name + ".swap"))  # no file yet: only the name moves
    index.append(AbortedTxn(1, 0, 1, 2))
    assert index.path.name.endswith(".txnindex.swap") and index.path.exists()
    index.rename(path)
    assert path.exists() and index.all_aborted_txns() == [AbortedTxn(1, 0, 1, 2)]
    assert index.delete() is True
    assert not path.exists()
    with pytest.raises(StorageError, match="deleted"):
        index.all_aborted_txns()
    assert TransactionIndex(txn_index_path(tmp_path, 9), 9).delete() is False


def test_io_errors_name_the_log_dir(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "gone-0" / f"{0:020d}.txnindex"
    with pytest.raises(KafkaStorageError) as info:
        TransactionIndex(path, 0).append(AbortedTxn(1, 0, 1, 2))
    assert info.value.log_dir == str(tmp_path / "logs")
    directory = txn_index_path(tmp_path, 5)
    directory.mkdir()  # reading a directory as the index fails with an OSError
    with pytest.raises(KafkaStorageError) as info:
        TransactionIndex(directory, 5, log_dir=tmp_path / "d1").all_aborted_txns()
    assert info.value.log_dir == str(tmp_path / "d1")
