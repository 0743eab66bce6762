"""Creating many logs at once (issue 19): a topic's new logs are made together, each dir that
got new logs is synced once for the batch, and no log of the batch is served before that sync
(a crash after a partition took writes must not lose its dir's entry)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from logkeel.storage import log_manager as log_manager_module
from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

from .logutil import all_records, batch
from .startuputil import crash


def tps(n: int, topic: str = "t") -> list[TopicPartition]:
    return [TopicPartition(topic, i) for i in range(n)]


def test_a_batch_is_created_with_one_sync_per_dir_before_any_log_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    m.startup(start_background=False)
    synced: list[tuple[str, int]] = []
    real = log_manager_module.fsync_dir

    def spy(path: str | Path) -> None:
        # At the sync no log of the batch serves yet.
        synced.append((Path(path).name, len(m.logs)))
        real(path)

    monkeypatch.setattr(log_manager_module, "fsync_dir", spy)
    made = m.create_logs(tps(40))
    assert sorted(synced) == [("a", 0), ("b", 0)]
    assert all(isinstance(plog, PartitionLog) for plog in made.values())
    assert {tp: m.get_log(tp) for tp in tps(40)} == made
    # Placed evenly, each in its own dir on disk.
    counts = sorted(sum(1 for p in d.iterdir() if p.is_dir()) for d in dirs)
    assert counts == [20, 20]
    m.shutdown()


def test_existing_offline_and_new_logs_in_one_batch(tmp_path: Path) -> None:
    m = LogManager([tmp_path])
    m.startup(start_background=False)
    existing = m.get_or_create_log(TopicPartition("t", 0))
    m.offline_partitions[TopicPartition("t", 1)] = "its dir failed"
    made = m.create_logs(tps(4))
    assert made[TopicPartition("t", 0)] is existing
    offline = made[TopicPartition("t", 1)]
    assert isinstance(offline, KafkaStorageError) and "its dir failed" in str(offline)
    assert TopicPartition("t", 1) not in m.logs
    assert all(isinstance(made[TopicPartition("t", i)], PartitionLog) for i in (2, 3))
    m.shutdown()


def test_a_failed_dir_sync_serves_none_of_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = LogManager([tmp_path])
    m.startup(start_background=False)

    def failing(path: str | Path) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(log_manager_module, "fsync_dir", failing)
    made = m.create_logs(tps(10))
    assert all(isinstance(e, KafkaStorageError) for e in made.values())
    errors = [e for e in made.values() if isinstance(e, KafkaStorageError)]
    assert {str(e.log_dir) for e in errors} == {str(tmp_path)}
    assert "Input/output error" in str(errors[0])
    assert m.logs == {}
    # The caller takes the dir offline; every partition of it answers offline from then on.
    m.handle_dir_failure(errors[0])
    assert not m.online_dirs
    m.shutdown()


def test_logs_of_a_batch_survive_a_crash_with_their_records(tmp_path: Path) -> None:
    m = LogManager([tmp_path])
    m.startup(start_background=False)
    made = m.create_logs(tps(30))
    plog = made[TopicPartition("t", 7)]
    assert isinstance(plog, PartitionLog)
    plog.append_as_leader(batch(), 0)
    plog.flush()
    expected = len(all_records(plog))
    crash(m)  # no shutdown: the next start is unclean and finds every log of the batch
    again = LogManager([tmp_path])
    again.startup(start_background=False)
    assert set(again.logs) == set(tps(30))
    assert len(all_records(again.logs[TopicPartition("t", 7)])) == expected == 1
    again.shutdown()
