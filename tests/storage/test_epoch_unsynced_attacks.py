"""Adversarial checks of 555cf68 (a new leader's epoch written to leader-epoch-checkpoint
without an fsync): a machine crash is simulated by putting back what a lost or torn unsynced
write can leave (the previous content, no bytes, a short file), at each point of a leader's
life, and the epoch cache after the unclean start is compared with the batches on disk and with
what a follower's truncation (``truncation_offset``) decides from its answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from logkeel.records.builder import build_batch
from logkeel.server.replica.fetcher import truncation_offset
from logkeel.storage import checkpoints
from logkeel.storage.engine.leader_epoch import EpochEntry, LeaderEpochFileCache
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.log_manager import LogManager

from .startuputil import BASE_TS, CFG, TP, crash, load

CHECKPOINT = "leader-epoch-checkpoint"


def _start(path: Path) -> tuple[LogManager, PartitionLog]:
    m = LogManager([path], default_config=CFG)
    m.startup(start_background=False)
    return m, m.get_or_create_log(TP)


def _produce(plog: PartitionLog, epoch: int, batches: int = 1) -> None:
    for _ in range(batches):
        plog.append_as_leader(build_batch([(BASE_TS, None, b"v", ())] * 2), epoch)


def _become_leader(plog: PartitionLog, epoch: int) -> None:
    """What Partition.make_leader does with the new epoch (555cf68: unsynced)."""
    plog.leader_epochs.assign(epoch, plog.log_end_offset, sync=False)


def _epochs_in_batches(plog: PartitionLog) -> list[EpochEntry]:
    """The first offset of each (increasing) epoch, read from the batches on disk."""
    found: list[EpochEntry] = []
    for segment in plog.segments:
        for batch in segment.log.batches():
            h = batch.header
            if h.base_offset >= plog.log_end_offset:
                break
            if not found or h.partition_leader_epoch > found[-1].epoch:
                found.append(EpochEntry(h.partition_leader_epoch, h.base_offset))
    return found


def _assert_cache_matches_batches(plog: PartitionLog) -> None:
    entries = list(plog.leader_epochs.entries)
    # An epoch with no batch at the very end (a leader that wrote nothing) may stay: Kafka's too.
    with_data = [e for e in entries if e.start_offset < plog.log_end_offset]
    assert with_data == _epochs_in_batches(plog)
    for entry in with_data:
        epoch, end = plog.leader_epochs.end_offset_for(entry.epoch, plog.log_end_offset)
        following = [e.start_offset for e in _epochs_in_batches(plog) if e.epoch > entry.epoch]
        assert (epoch, end) == (entry.epoch, following[0] if following else plog.log_end_offset)


def _lose(path: Path, previous: bytes, how: str) -> None:
    """What a machine crash may leave of a checkpoint written without a sync (as brokers
    before the epoch was left to the next flush wrote a new leader's)."""
    file = path / TP.dir_name / CHECKPOINT
    if how == "previous":
        file.write_bytes(previous)
    elif how == "empty":
        file.write_bytes(b"")
    elif how == "short":  # a header promising more lines than the file holds
        lines = previous.decode().splitlines()
        file.write_bytes(
            f"{lines[0]}\n{int(lines[1]) + 1}\n{''.join(x + chr(10) for x in lines[2:])}".encode()
        )
    elif how != "kept":
        raise ValueError(how)


CRASHES = ["previous", "empty", "short", "kept"]


@pytest.mark.parametrize("how", CRASHES)
def test_crash_right_after_becoming_leader_with_no_batch(tmp_path: Path, how: str) -> None:
    path = tmp_path / "d"
    m, plog = _start(path)
    _produce(plog, 1, 3)
    plog.flush()
    m.checkpoint_all()
    previous = (path / TP.dir_name / CHECKPOINT).read_bytes()
    _become_leader(plog, 2)
    crash(m)
    _lose(path, previous, how)
    m2 = load(path)
    try:
        plog2 = m2.get_log(TP)
        _assert_cache_matches_batches(plog2)
        assert plog2.leader_epochs.latest_epoch in (1, 2)
    finally:
        m2.shutdown()


@pytest.mark.parametrize("how", CRASHES)
def test_crash_after_batches_of_several_quick_epochs_before_a_flush(
    tmp_path: Path, how: str
) -> None:
    """E, E+1, E+2 taken in a row, batches in each, nothing flushed since E-1."""
    path = tmp_path / "d"
    m, plog = _start(path)
    _produce(plog, 1, 3)
    plog.flush()
    m.checkpoint_all()
    previous = (path / TP.dir_name / CHECKPOINT).read_bytes()
    for epoch in (2, 3, 4):
        _become_leader(plog, epoch)
        _produce(plog, epoch, 2)
    crash(m)
    _lose(path, previous, how)
    m2 = load(path)
    try:
        plog2 = m2.get_log(TP)
        assert plog2.log_end_offset == 18
        _assert_cache_matches_batches(plog2)
        assert [e.epoch for e in plog2.leader_epochs.entries] == [1, 2, 3, 4]
    finally:
        m2.shutdown()


@pytest.mark.parametrize("how", CRASHES)
def test_crash_that_also_loses_the_new_epochs_batches(tmp_path: Path, how: str) -> None:
    """The checkpoint may survive (it is small) while the tail of the data does not: an
    epoch's start above the log end after recovery must go."""
    path = tmp_path / "d"
    m, plog = _start(path)
    _produce(plog, 1, 3)
    plog.flush()
    m.checkpoint_all()
    previous = (path / TP.dir_name / CHECKPOINT).read_bytes()
    flushed_bytes = plog.active_segment.size
    _become_leader(plog, 2)
    _produce(plog, 2, 2)
    _become_leader(plog, 3)
    _produce(plog, 3, 1)
    crash(m)
    _lose(path, previous, how)
    # The data of epochs 2 and 3 never reached the disk.
    segment = path / TP.dir_name / f"{0:020d}.log"
    with segment.open("r+b") as f:
        f.truncate(flushed_bytes)
    m2 = load(path)
    try:
        plog2 = m2.get_log(TP)
        assert plog2.log_end_offset == 6
        _assert_cache_matches_batches(plog2)
        assert plog2.leader_epochs.latest_epoch == 1
    finally:
        m2.shutdown()


def test_a_follower_truncation_rewrites_the_checkpoint_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader of an unsynced epoch that becomes a follower and truncates by epoch: the
    rewrite that drops the epoch is synced (else a crash could bring the epoch back above data
    fetched from the new leader)."""
    path = tmp_path / "d"
    m, plog = _start(path)
    try:
        _produce(plog, 1, 3)
        _become_leader(plog, 2)
        _produce(plog, 2, 2)
        writes: list[bool] = []
        real = checkpoints.atomic_write

        def spy(p: Path, data: bytes) -> None:
            if Path(p).name == CHECKPOINT:
                writes.append(True)  # a checkpoint is only ever written synced
            real(p, data)

        monkeypatch.setattr(checkpoints, "atomic_write", spy)
        plog.truncate_to(6)
        assert writes == [True]
        assert plog.leader_epochs.latest_epoch == 1
    finally:
        m.shutdown()


def test_a_flush_racing_a_new_epoch_leaves_its_batches_below_the_recovery_point_unsynced(
    tmp_path: Path,
) -> None:
    """A leadership change (metadata thread) and a produce (request handler) landing while
    the flusher is between its sync of the epochs and its read of the log end it moves the
    recovery point to (it waits on the lock an append holds). 555cf68 synced the epochs
    first: the unsynced epoch's batches went below the new recovery point, and a machine
    crash lost the epoch for good (the unclean start reads the batches above it only)."""
    path = tmp_path / "d"
    m, plog = _start(path)
    # Leader A of epoch 1 wrote offsets 0..9; this replica (B) has 0..5 (three batches).
    _produce(plog, 1, 3)  # not flushed yet
    previous = (path / TP.dir_name / CHECKPOINT).read_bytes()
    cache = plog.leader_epochs
    real_sync = cache.sync

    def sync_then_interleave() -> None:
        real_sync()
        cache.sync = real_sync  # type: ignore[method-assign]
        _become_leader(plog, 2)  # B elected: epoch 2 from offset 6
        _produce(plog, 2, 2)  # acknowledged records at 6..9

    cache.sync = sync_then_interleave  # type: ignore[method-assign]
    plog.flush()
    assert plog.log_end_offset == 10
    m.checkpoint_all()
    crash(m)
    _lose(path, previous, "previous")
    m2 = load(path)
    try:
        plog2 = m2.get_log(TP)
        assert plog2.log_end_offset == 10
        # B restarts and is elected again (epoch 3) at its log end.
        plog2.leader_epochs.assign(3, plog2.log_end_offset, sync=False)
        # A, back as a follower with epoch-1 records at 6..9 that B never had, asks B for
        # the end of epoch 1: it must hear 6, where B's epoch 2 begins.
        a_cache = LeaderEpochFileCache(None, entries=[EpochEntry(1, 0)])
        answer = plog2.leader_epochs.end_offset_for(1, plog2.log_end_offset)
        cut, _ = truncation_offset(
            answer[0],
            answer[1],
            lambda e: a_cache.end_offset_for(e, 10),
            log_end_offset=10,
            high_watermark=6,
        )
        assert cut == 6, f"A keeps its divergent epoch-1 records up to {cut}"
        _assert_cache_matches_batches(plog2)
    finally:
        m2.shutdown()


@pytest.mark.parametrize("content", [b"", b"0\n2\n1 0\n2 6\n"])
def test_a_temp_file_the_lost_rename_left_behind(tmp_path: Path, content: bytes) -> None:
    """A checkpoint write whose rename the crash lost can leave its temp file."""
    path = tmp_path / "d"
    m, plog = _start(path)
    _produce(plog, 1, 3)
    _become_leader(plog, 2)
    _produce(plog, 2, 2)
    crash(m)
    part = path / TP.dir_name
    (part / f"{CHECKPOINT}.4242-4242.tmp").write_bytes(content)
    _lose(path, (part / CHECKPOINT).read_bytes(), "empty")
    m2 = load(path)
    try:
        plog2 = m2.get_log(TP)
        assert plog2.log_end_offset == 10
        _assert_cache_matches_batches(plog2)
    finally:
        m2.shutdown()


def test_a_clean_shutdown_syncs_an_epoch_without_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean start trusts the checkpoint (no rescan): the clean-shutdown marker must not
    reach the disk ahead of an epoch not yet written, even one with nothing to flush."""
    path = tmp_path / "d"
    m, plog = _start(path)
    _produce(plog, 1, 3)
    plog.flush()
    _become_leader(plog, 2)
    synced: list[str] = []
    real = checkpoints.atomic_write

    def spy(p: Path, data: bytes) -> None:
        synced.append(Path(p).name)  # a checkpoint is only ever written synced
        real(p, data)

    monkeypatch.setattr(checkpoints, "atomic_write", spy)
    m.shutdown()
    assert CHECKPOINT in synced
    assert (path / TP.dir_name / CHECKPOINT).read_text().splitlines()[-1] == "2 6"
