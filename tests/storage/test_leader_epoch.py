"""LeaderEpochFileCache: Kafka's assignment, truncation and OffsetsForLeaderEpoch semantics."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.storage.checkpoints import EpochEntry, LeaderEpochCheckpointFile
from logkeel.storage.engine.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def checkpoint(tmp_path: Path) -> LeaderEpochCheckpointFile:
    part = tmp_path / "t-0"
    part.mkdir()
    return LeaderEpochCheckpointFile.in_partition_dir(part)


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(None)
    for epoch, offset in pairs:
        cache.assign(epoch, offset)
    return cache


def E(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, o) for e, o in pairs]


# -- assignment ------------------------------------------------------------------------------


def test_assign_records_first_offset_of_each_epoch() -> None:
    cache = cache_of((2, 10))
    assert cache.latest_epoch == 2
    assert cache.entries == E((2, 10))
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_latest_epoch_of_an_empty_or_emptied_cache_is_none() -> None:
    # Read by every follower fetch of every partition: an empty cache answers without raising.
    cache = LeaderEpochFileCache(None)
    assert cache.latest_epoch is None
    cache.assign(3, 0)
    assert cache.latest_epoch == 3
    cache.truncate_from_end(0)
    assert cache.entries == [] and cache.latest_epoch is None


def test_an_epochs_start_is_not_moved_later() -> None:
    cache = cache_of((2, 6))
    assert cache.assign(2, 10) is False
    assert cache.assign(2, 6) is False
    assert cache.entries == E((2, 6))


def test_same_epoch_at_an_earlier_offset_replaces_it() -> None:
    cache = cache_of((2, 10))
    assert cache.assign(2, 9) is True
    assert cache.entries == E((2, 9))


def test_same_start_offset_for_a_new_epoch_replaces_the_old_one() -> None:
    # A leader that never wrote: its epoch entry is superseded by the next leader's.
    assert cache_of((2, 9), (3, 9)).entries == E((3, 9))


def test_lower_epoch_truncates_later_entries_last_assignment_wins() -> None:
    cache = cache_of((1, 5), (2, 6), (1, 7))
    assert cache.entries == E((1, 7))
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED


def test_lower_offset_truncates_later_entries() -> None:
    assert cache_of((2, 6), (3, 5)).entries == E((3, 5))
    assert cache_of((5, 11), (6, 12), (7, 13), (7, 12)).entries == E((5, 11), (7, 12))


def test_negative_epoch_or_offset_is_rejected() -> None:
    cache = LeaderEpochFileCache(None)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


# -- OffsetsForLeaderEpoch -------------------------------------------------------------------


def test_end_offset_for_known_cases() -> None:
    assert LeaderEpochFileCache(None).end_offset_for(7, 0) == UNDEFINED
    cache = cache_of((0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(UNDEFINED_EPOCH, 100) == UNDEFINED
    assert cache.end_offset_for(0, 100) == (0, 13)
    assert cache.end_offset_for(1, 100) == (0, 13)  # largest epoch <= 1 is 0
    assert cache.end_offset_for(2, 100) == (2, 17)
    assert cache.end_offset_for(3, 100) == (2, 17)
    assert cache.end_offset_for(4, 100) == (4, 100)  # the latest epoch ends at the log end
    assert cache.end_offset_for(5, 100) == UNDEFINED  # above anything known
    below = cache_of((5, 11), (6, 12), (7, 13))
    assert below.end_offset_for(4, 0) == (4, 11)  # below the first: requested epoch, first start


def test_followers_view_across_leader_changes() -> None:
    cache = LeaderEpochFileCache(None)
    for offset in range(3):
        cache.assign(0, offset)
    for offset in range(3, 6):
        cache.assign(1, offset)
    for offset in range(6, 9):
        cache.assign(2, offset)
    assert cache.entries == E((0, 0), (1, 3), (2, 6))
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)
    assert cache.end_offset_for(2, 9) == (2, 9)


# -- truncation ------------------------------------------------------------------------------


def test_truncate_from_end() -> None:
    cache = cache_of((2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(UNDEFINED_EPOCH_OFFSET)
    assert len(cache) == 3
    assert cache.truncate_from_end(9) == E((4, 11))
    assert cache.entries == E((2, 6), (3, 8))
    cache = cache_of((2, 6), (3, 8), (4, 11))
    assert cache.truncate_from_end(8) == E((3, 8), (4, 11))  # inclusive
    assert cache.entries == E((2, 6))
    assert LeaderEpochFileCache(None).truncate_from_end(7) == []


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (1, [(2, 6), (3, 8), (4, 11)]),
        (6, [(2, 6), (3, 8), (4, 11)]),
        (8, [(3, 8), (4, 11)]),
        (9, [(3, 9), (4, 11)]),
        (11, [(4, 11)]),
        (15, [(4, 15)]),
        (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(start: int, expected: list[tuple[int, int]]) -> None:
    cache = cache_of((2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start)
    assert cache.entries == E(*expected)


def test_epoch_for_offset() -> None:
    cache = cache_of((0, 10), (1, 20), (5, 30))
    assert cache.epoch_for_offset(5) is None
    assert cache.epoch_for_offset(10) == 0
    assert cache.epoch_for_offset(20) == 1
    assert cache.epoch_for_offset(25) == 1
    assert cache.epoch_for_offset(30) == 5
    assert cache.epoch_for_offset(50) == 5


def test_neighbour_queries() -> None:
    cache = cache_of((2, 10), (4, 15), (10, 20))
    assert cache.previous_epoch() == 4
    assert cache.previous_epoch(4) == 2
    assert cache.previous_epoch(2) is None
    assert cache.next_epoch(-1) == 2
    assert cache.next_epoch(4) == 10
    assert cache.next_epoch(10) is None
    assert cache.epoch_entry(4) == EpochEntry(4, 15)
    assert cache.epoch_entry(3) is None
    assert cache.earliest_entry == EpochEntry(2, 10)
    assert cache.latest_entry == EpochEntry(10, 20)
    assert cache.epoch_entries_in_range(12, 18) == E((2, 12), (4, 15))
    assert cache.entries == E((2, 10), (4, 15), (10, 20))  # the range query changed nothing


# -- persistence -----------------------------------------------------------------------------


def test_every_change_is_checkpointed(checkpoint: LeaderEpochCheckpointFile) -> None:
    cache = LeaderEpochFileCache(checkpoint)
    cache.assign(2, 6)
    assert checkpoint.read() == E((2, 6))
    cache.assign(3, 8)
    cache.assign(4, 11)
    assert checkpoint.read() == E((2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(11)
    assert checkpoint.read() == E((2, 6), (3, 8))
    cache.truncate_from_start(8)
    assert checkpoint.read() == E((3, 8))
    assert LeaderEpochFileCache(checkpoint).entries == E((3, 8))
    cache.clear()
    assert checkpoint.read() == []
    assert checkpoint.path.read_text() == "0\n0\n"


def test_loading_does_not_rewrite_the_checkpoint(checkpoint: LeaderEpochCheckpointFile) -> None:
    checkpoint.write(E((1, 0), (2, 5)))
    mtime = checkpoint.path.stat().st_mtime_ns
    cache = LeaderEpochFileCache(checkpoint)
    assert cache.entries == E((1, 0), (2, 5))
    assert checkpoint.path.stat().st_mtime_ns == mtime


def test_no_op_assign_does_not_write(checkpoint: LeaderEpochCheckpointFile) -> None:
    cache = LeaderEpochFileCache(checkpoint)
    cache.assign(1, 0)
    checkpoint.path.unlink()
    cache.assign(1, 3)
    assert not checkpoint.path.exists()


def test_stale_checkpoint_with_conflicts_is_normalised_on_load(
    checkpoint: LeaderEpochCheckpointFile,
) -> None:
    checkpoint.write(E((1, 0), (3, 10), (2, 12)))
    assert LeaderEpochFileCache(checkpoint).entries == E((1, 0), (2, 12))


# -- properties against brute-force models ---------------------------------------------------


assignments = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 60)), max_size=40)


def model_end_offset_for(entries: list[EpochEntry], requested: int, leo: int) -> tuple[int, int]:
    """OffsetsForLeaderEpoch spelled out by cases over a plain list."""
    epochs = [e.epoch for e in entries]
    if requested == UNDEFINED_EPOCH or not entries:
        return UNDEFINED
    if requested == max(epochs):
        return requested, leo
    higher = [e for e in entries if e.epoch > requested]
    if not higher:
        return UNDEFINED
    next_start = min(higher, key=lambda e: e.epoch).start_offset
    at_or_below = [e.epoch for e in entries if e.epoch <= requested]
    return (max(at_or_below) if at_or_below else requested), next_start


@settings(max_examples=300)
@given(assignments, st.integers(0, 100))
def test_end_offset_for_matches_model(pairs: list[tuple[int, int]], leo_extra: int) -> None:
    cache = cache_of(*pairs)
    entries = cache.entries
    leo = (entries[-1].start_offset if entries else 0) + leo_extra
    for requested in range(-1, 15):
        assert cache.end_offset_for(requested, leo) == model_end_offset_for(entries, requested, leo)


@settings(max_examples=300)
@given(assignments)
def test_entries_stay_strictly_increasing_and_last_assignment_wins(
    pairs: list[tuple[int, int]],
) -> None:
    cache = LeaderEpochFileCache(None)
    for epoch, offset in pairs:
        before = cache.entries
        changed = cache.assign(epoch, offset)
        after = cache.entries
        if changed:
            assert after[-1] == EpochEntry(epoch, offset)
            kept = after[:-1]
            assert kept == before[: len(kept)]
            assert all(e.epoch < epoch and e.start_offset < offset for e in kept)
        else:
            assert after == before
            assert before[-1].epoch == epoch and before[-1].start_offset <= offset
        assert all(
            a.epoch < b.epoch and a.start_offset < b.start_offset
            for a, b in itertools.pairwise(after)
        )


@settings(max_examples=200)
@given(assignments, st.integers(-1, 70))
def test_truncations_and_epoch_for_offset_match_models(
    pairs: list[tuple[int, int]], cut: int
) -> None:
    entries = cache_of(*pairs).entries

    from_end = cache_of(*pairs)
    from_end.truncate_from_end(cut)
    assert from_end.entries == (
        entries if cut < 0 else [e for e in entries if e.start_offset < cut]
    )

    from_start = cache_of(*pairs)
    from_start.truncate_from_start(cut)
    below = [e for e in entries if e.start_offset <= cut]
    above = [e for e in entries if e.start_offset > cut]
    expected = ([EpochEntry(below[-1].epoch, cut)] if below else []) + above
    assert from_start.entries == expected

    written = [e.epoch for e in entries if e.start_offset <= cut]
    assert cache_of(*pairs).epoch_for_offset(cut) == (written[-1] if written else None)


@settings(max_examples=50)
@given(assignments, st.integers(0, 70), st.integers(0, 70))
def test_checkpoint_always_mirrors_memory(
    pairs: list[tuple[int, int]], start: int, end: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        part = Path(d) / "t-0"
        part.mkdir()
        checkpoint = LeaderEpochCheckpointFile.in_partition_dir(part)
        cache = LeaderEpochFileCache(checkpoint)
        for epoch, offset in pairs:
            cache.assign(epoch, offset)
            assert checkpoint.read() == cache.entries
        cache.truncate_from_end(end)
        assert checkpoint.read() == cache.entries
        cache.truncate_from_start(start)
        assert checkpoint.read() == cache.entries
        assert LeaderEpochFileCache(checkpoint).entries == cache.entries
