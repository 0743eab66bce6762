"""Where a follower cuts its log for the leader's OffsetForLeaderEpoch answer (KIP-101/KIP-279),
checked against a leader-epoch cache."""

from __future__ import annotations

import pytest

from logkeel.server.replica.fetcher import truncation_offset
from logkeel.storage.engine.leader_epoch import EpochEntry, LeaderEpochFileCache


def cache(entries: list[tuple[int, int]]) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(None, [EpochEntry(epoch, start) for epoch, start in entries])


@pytest.mark.parametrize(
    ("local", "log_end", "hw", "answer", "expected"),
    [
        # Same epoch on both sides: the smaller end of it (the old leader's unreplicated tail).
        ([(0, 0)], 8, 5, (0, 5), (5, True)),
        # The leader has more of our epoch: nothing to cut.
        ([(0, 0)], 5, 5, (0, 9), (5, True)),
        # We led epoch 2 the leader never saw; it answers epoch 1: cut where our epoch 1 ends
        # (the start of our epoch 2) and the leader's end of epoch 1, whichever is smaller.
        ([(0, 0), (1, 4), (2, 7)], 10, 6, (1, 9), (7, True)),
        ([(0, 0), (1, 4), (2, 7)], 10, 6, (1, 6), (6, True)),
        # We do not know the leader's epoch (it answers 1, we had 0 then 2): cut to the end of our
        # largest epoch below it, and ask again.
        ([(0, 0), (2, 7)], 10, 3, (1, 9), (7, False)),
        # The leader knows nothing of the epoch: fall back to the high watermark.
        ([(3, 0)], 10, 6, (-1, -1), (6, True)),
        # An answer without an epoch (an old leader): its end offset.
        ([(0, 0)], 10, 6, (-1, 8), (8, True)),
    ],
)
def test_truncation_offset(
    local: list[tuple[int, int]],
    log_end: int,
    hw: int,
    answer: tuple[int, int],
    expected: tuple[int, bool],
) -> None:
    c = cache(local)
    got = truncation_offset(
        answer[0], answer[1], lambda e: c.end_offset_for(e, log_end), log_end, hw
    )
    assert got == expected
