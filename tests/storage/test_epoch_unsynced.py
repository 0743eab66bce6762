"""A new leader's epoch is written to leader-epoch-checkpoint, and synced, only by the log's next
flush (a broker taking over hundreds of leaderships spent seconds in the fsyncs, and then in
the writes): a crash before it loses nothing. The checkpoint is then as it was (or, after a
machine crash during an earlier unsynced write, empty), and the epoch is found again in the
batches above the recovery point; the recovery point never moves past an epoch not yet synced."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logkeel.storage.checkpoints import LEADER_EPOCH_CHECKPOINT_FILE
from logkeel.storage.engine.leader_epoch import EpochEntry

from .logutil import batch
from .startuputil import TP, copy, crash, load, write_dir


def synced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files fsynced from now on, by path."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def leader_after_crash(path: Path, appended: int) -> tuple[int, int, bytes]:
    """A partition written in epoch 0, flushed; then this broker leads epoch 3 from its log
    end (the unsynced write) and appends ``appended`` batches in it; then kill -9. Returns (the
    epoch's start, the log end, the checkpoint as it was before epoch 3)."""
    m = write_dir(path, rounds=10, shutdown=False)
    plog = m.get_log(TP)
    plog.flush()
    m.checkpoint_all()
    checkpoint = path / TP.dir_name / LEADER_EPOCH_CHECKPOINT_FILE
    before = checkpoint.read_bytes()
    start = plog.log_end_offset
    assert plog.leader_epochs.assign(3, start, sync=False)
    for _ in range(appended):
        plog.append_as_leader(batch(2), 3)
    end = plog.log_end_offset
    crash(m)
    return start, end, before


def test_a_new_leaders_epoch_is_written_and_synced_by_the_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = write_dir(tmp_path / "d", rounds=3, shutdown=False)
    plog = m.get_log(TP)
    plog.flush()
    checkpoint = str(tmp_path / "d" / TP.dir_name / LEADER_EPOCH_CHECKPOINT_FILE)
    synced = synced_paths(monkeypatch)
    start = plog.log_end_offset
    before = Path(checkpoint).read_text()
    plog.leader_epochs.assign(3, start, sync=False)
    assert synced == []
    assert Path(checkpoint).read_text() == before  # nothing written yet
    plog.append_as_leader(batch(2), 3)
    synced.clear()
    plog.flush()
    # First (its temp file, renamed over it), before any segment: the recovery point must not
    # claim epoch-3 batches before.
    assert synced[0].startswith(checkpoint + ".")
    assert (Path(checkpoint).read_text().splitlines()[-1]) == f"3 {start}"
    synced.clear()
    plog.flush()
    assert not any(p.startswith(checkpoint) for p in synced)  # once, not on every flush
    m.shutdown()


def test_kill_9_right_after_taking_leadership_finds_the_epoch_in_the_batches(
    tmp_path: Path,
) -> None:
    start, end, before = leader_after_crash(tmp_path / "d", appended=2)
    # The epoch was never written: the start below takes it from the batches.
    assert (tmp_path / "d" / TP.dir_name / LEADER_EPOCH_CHECKPOINT_FILE).read_bytes() == before
    m = load(tmp_path / "d")
    plog = m.get_log(TP)
    assert plog.log_end_offset == end
    assert plog.leader_epochs.entries == [EpochEntry(0, 0), EpochEntry(3, start)]
    m.shutdown()


@pytest.mark.parametrize("left", ["the checkpoint before the write", "an empty checkpoint"])
def test_a_machine_crash_that_loses_the_write_finds_the_epoch_in_the_batches(
    tmp_path: Path, left: str
) -> None:
    start, end, before = leader_after_crash(tmp_path / "d", appended=3)
    checkpoint = tmp_path / "d" / TP.dir_name / LEADER_EPOCH_CHECKPOINT_FILE
    checkpoint.write_bytes(before if left.startswith("the checkpoint") else b"")
    m = load(tmp_path / "d")
    plog = m.get_log(TP)
    assert plog.log_end_offset == end
    assert plog.leader_epochs.entries == [EpochEntry(0, 0), EpochEntry(3, start)]
    # What a follower that stayed in epoch 0 is told to truncate to: where epoch 3 began.
    assert plog.leader_epochs.end_offset_for(0, plog.log_end_offset) == (0, start)
    assert plog.leader_epochs.end_offset_for(3, plog.log_end_offset) == (3, end)
    m.shutdown()


def test_an_epoch_with_no_batch_is_dropped_at_load_whether_its_write_was_lost_or_not(
    tmp_path: Path,
) -> None:
    """Epoch 3 began at the log end and holds nothing: any load drops it (entries at or past
    the log end go, as Kafka's truncateFromEnd), so losing its write changes nothing."""
    start, end, before = leader_after_crash(tmp_path / "kept", appended=0)
    assert start == end
    lost = copy(tmp_path / "kept", tmp_path / "lost")
    (lost / TP.dir_name / LEADER_EPOCH_CHECKPOINT_FILE).write_bytes(before)
    entries = []
    for d in (tmp_path / "kept", lost):
        m = load(d)
        entries.append(m.get_log(TP).leader_epochs.entries)
        m.shutdown()
    assert entries[0] == entries[1] == [EpochEntry(0, 0)]
