"""Moving a replica between two log dirs of one broker (KIP-113), on real files: the copy,
the swap under the log's lock with appends going on, and what start-up does with a
``-future`` dir a crash left."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from logkeel.records.builder import build_batch
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.log_manager import LogManager
from logkeel.storage.replica_moves import (
    FutureFound,
    LogDirNotFoundError,
    ReplicaNotAvailableError,
    future_dir_action,
)
from logkeel.storage.topic_partition import TopicPartition
from tests.waiting import wait_until

from .logutil import all_records
from .startuputil import CFG, TP, append_workload, crash


def _manager(dirs: list[Path], **kwargs: object) -> LogManager:
    m = LogManager(dirs, default_config=CFG, **kwargs)  # type: ignore[arg-type]
    m.startup(start_background=False)
    return m


def _records(plog: PartitionLog) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in all_records(plog)]


def _state(plog: PartitionLog) -> dict[str, object]:
    return {
        "records": _records(plog),
        "start": plog.log_start_offset,
        "end": plog.log_end_offset,
        "hw": plog.high_watermark,
        "epochs": plog.leader_epochs.entries,
        "producers": {
            pid: (e.producer_epoch, e.last_seq, e.current_txn_first_offset)
            for pid, e in plog.producer_state.active_producers.items()
        },
        "aborted": plog.collect_aborted_txns(plog.log_start_offset, plog.log_end_offset),
    }


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "a", tmp_path / "b"


def _leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(("-future", "-delete")))


def test_start_up_decisions() -> None:
    assert future_dir_action("/b", "/a", False, False) is FutureFound.RESUME
    assert future_dir_action("/b", None, False, False) is FutureFound.FINISH_SWAP
    assert future_dir_action("/b", None, True, False) is FutureFound.LEAVE
    assert future_dir_action("/b", "/b", False, False) is FutureFound.DELETE
    assert future_dir_action("/b", "/a", False, True) is FutureFound.DELETE


def test_a_replica_moves_with_its_producer_state_epochs_and_transactions(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    m = _manager([a])
    plog = m.get_or_create_log(TP)
    append_workload(plog, 40)
    plog.leader_epochs.assign(5, plog.log_end_offset)  # an epoch begun without a record
    plog.high_watermark = plog.log_end_offset - 2
    m.shutdown()
    m = _manager([a, b])
    before = _state(m.get_log(TP))
    replaced: list[PartitionLog] = []
    m.add_log_replaced_listener(lambda tp, new: replaced.append(new))
    assert m.moves.start(TP, str(b))
    wait_until(lambda: m.dir_of(TP) is m.dirs[1], 10.0, "m.dir_of(TP) is m.dirs[1]")
    moved = m.get_log(TP)
    assert replaced == [moved] and moved.dir == b / "t-0"
    assert _state(moved) == before
    assert not (a / "t-0").exists() and _leftovers(b) == []
    # Moving it where it is does nothing.
    assert not m.moves.start(TP, str(b))
    m.shutdown()
    again = _manager([a, b])
    assert again.dir_of(TP) is again.dirs[1]
    assert _state(again.get_log(TP)) == before
    again.shutdown()


def test_appends_during_the_move_all_land_in_the_new_dir(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    m = _manager([a, b])
    plog = m.get_or_create_log(TP)
    assert m.dir_of(TP) is m.dirs[0]
    append_workload(plog, 100)
    m.moves.rate_bytes_per_sec = 20_000  # slow enough that appends run during the copy
    done = threading.Event()
    written: list[bytes] = []

    def produce() -> None:
        i = 0
        while not done.is_set():
            current = m.get_log(TP)
            value = b"live-%d" % i
            with current.lock:
                if m.get_log(TP) is not current:
                    continue  # replaced meanwhile: as Partition does, take the new log
                current.append_as_leader(build_batch([(0, None, value, ())]), 0)
            written.append(value)
            i += 1
            done.wait(0.005)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        assert m.moves.start(TP, str(b))
        wait_until(
            lambda: any(s.offset_lag >= 0 for s in m.moves.status()),
            5,
            "any(s.offset_lag >= 0 for s in m.moves.status())",
        )
        [status] = m.moves.status()
        assert status.tp == TP and status.log_dir == str(b) and status.size >= 0
        during = len(written)
        wait_until(lambda: m.dir_of(TP) is m.dirs[1], 30, "m.dir_of(TP) is m.dirs[1]")
        swapped = len(written)
        assert swapped > during  # appends went on while it copied
        wait_until(
            lambda: len(written) > swapped + 3, 10.0, "len(written) > swapped + 3"
        )  # and go on in the new log
    finally:
        done.set()
        writer.join()
    values = [v for _, v in _records(m.get_log(TP))]
    assert [v for v in values if v and v.startswith(b"live-")] == written
    wait_until(lambda: m.moves.status() == [], 10.0, "m.moves.status() == []")
    m.shutdown()


def test_refusals(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    m = _manager([a, b])
    m.get_or_create_log(TP)
    with pytest.raises(LogDirNotFoundError):
        m.moves.start(TP, str(tmp_path / "elsewhere"))
    with pytest.raises(ReplicaNotAvailableError):
        m.moves.start(TopicPartition("nope", 0), str(b))
    m.handle_dir_failure(KafkaStorageError(b, "disk gone"))
    with pytest.raises(KafkaStorageError):
        m.moves.start(TP, str(b))
    m.shutdown()


def test_a_failing_target_aborts_the_move_and_keeps_the_replica(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    m = _manager([a, b])
    plog = m.get_or_create_log(TP)
    append_workload(plog, 40)
    before = _records(plog)
    m.moves.rate_bytes_per_sec = 2_000
    assert m.moves.start(TP, str(b))
    wait_until(
        lambda: bool(m.moves.status()) and m.moves.status()[0].size > 0,
        10.0,
        "bool(m.moves.status()) and m.moves.status()[0].size > 0",
    )
    m.handle_dir_failure(KafkaStorageError(b, "the target disk failed"))
    assert m.moves.status() == []
    assert m.dir_of(TP) is m.dirs[0], m.dir_of(TP)
    assert m.get_log(TP) is plog
    assert _records(plog) == before
    m.shutdown()


def test_start_up_resumes_a_move_a_crash_cut(tmp_path: Path) -> None:
    """What kill -9 mid-copy leaves: the future dir holds a prefix of the log, its last write
    torn; the current replica went on taking appends."""
    a, b = _dirs(tmp_path)
    m = _manager([a, b])
    plog = m.get_or_create_log(TP)
    append_workload(plog, 40)
    plog.flush()
    b.mkdir(exist_ok=True)
    future = b / "t-0.0123456789abcdef-future"
    shutil.copytree(a / "t-0", future)
    last = max(future.glob("*.log"))
    with last.open("r+b") as f:
        f.truncate(last.stat().st_size - 7)
    append_workload(plog, 5, start=40)
    plog.high_watermark = plog.log_end_offset
    before = _records(plog)
    crash(m)
    m = _manager([a, b])
    m.moves.resume()
    wait_until(lambda: m.dir_of(TP) is m.dirs[1], 30, "m.dir_of(TP) is m.dirs[1]")
    assert _records(m.get_log(TP)) == before
    assert not (a / "t-0").exists() and _leftovers(b) == []
    m.shutdown()


def test_start_up_finishes_a_swap_cut_between_its_renames(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    m = _manager([a, b])
    plog = m.get_or_create_log(TP)
    append_workload(plog, 20)
    plog.high_watermark = plog.log_end_offset
    before = _records(plog)
    m.shutdown()
    b.mkdir(exist_ok=True)
    shutil.copytree(a / "t-0", b / "t-0.0123456789abcdef-future")
    (a / "t-0").rename(a / "t-0.fedcba9876543210-delete")
    m = _manager([a, b])
    m.moves.resume()
    assert m.dir_of(TP) is m.dirs[1]
    assert _records(m.get_log(TP)) == before
    assert _leftovers(a) == [] and _leftovers(b) == []
    m.shutdown()


def test_a_stale_dir_of_the_same_name_in_the_target_is_set_aside(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    m = _manager([a, b])
    plog = m.get_or_create_log(TP)
    append_workload(plog, 5)
    before = _records(plog)
    (b / "t-0").mkdir()
    (b / "t-0" / "00000000000000000000.log").write_bytes(b"left by a deletion")
    assert m.moves.start(TP, str(b))
    wait_until(lambda: m.dir_of(TP) is m.dirs[1], 10.0, "m.dir_of(TP) is m.dirs[1]")
    assert _records(m.get_log(TP)) == before
    m.shutdown()
