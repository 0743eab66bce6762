"""split_batches (the produce path's walk, with its batches checked in line) agrees with the
shared walker's STOP walk on every payload, damaged or not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logkeel.records.builder import build_batch
from logkeel.records.walk import BadBatch, split_batches, walk_batches

PAYLOAD = b"".join(
    build_batch([(1_700_000_000_000 + i, b"k%d" % i, b"v" * (10 * i), ())] * (i + 1))
    for i in range(3)
)


def reference(buf: bytes, max_batch_size: int | None) -> list | BadBatch:
    out = []
    for item in walk_batches(buf, max_batch_size=max_batch_size):
        if type(item) is BadBatch:
            return item
        out.append(item)
    return out


@given(
    flips=st.lists(st.tuples(st.integers(0, len(PAYLOAD) - 1), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, len(PAYLOAD)),
    max_batch_size=st.one_of(st.none(), st.integers(0, 400)),
)
def test_split_batches_matches_the_walker(flips, cut, max_batch_size):
    buf = bytearray(PAYLOAD[:cut] if cut else PAYLOAD)
    for pos, value in flips:
        if pos < len(buf):
            buf[pos] = value
    assert split_batches(bytes(buf), max_batch_size=max_batch_size) == reference(
        bytes(buf), max_batch_size
    )


def test_an_intact_payload_splits_into_its_batches():
    batches = split_batches(PAYLOAD)
    assert [b.header.records_count for b in batches] == [1, 2, 3]
    assert batches == reference(PAYLOAD, None)
