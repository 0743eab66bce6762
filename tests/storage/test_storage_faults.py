"""Issue 13 in storage: names derived from any legal topic fit the filesystem, and only device
faults take a log dir offline (a real EIO from a FUSE disk; a real ENAMETOOLONG or a missing
file fails the operation and at most its partition)."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.errors import DEVICE_FAULT_ERRNOS, KafkaStorageError, io_guard
from logkeel.storage.log_dir import CLEAN_SHUTDOWN_FILE
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import MAX_NAME_BYTES, TopicPartition, delete_dir_name
from logkeel.testing.faulty_fs import FaultyFs

from .logutil import all_records, batch, now_ms, open_manager

LONGEST = "t" * 249  # Kafka's longest legal topic name


@pytest.mark.parametrize("topic", ["a", "x.y_z-1" * 20, LONGEST, "." * 248 + "_"])
@pytest.mark.parametrize("partition", [0, 7, 9_999, 99_999, 2**31 - 1])
def test_delete_dir_names_fit_and_keep_the_partition(topic: str, partition: int) -> None:
    tp = TopicPartition(topic, partition)
    names = {delete_dir_name(tp) for _ in range(20)}
    assert len(names) == 20  # a unique suffix each time
    for name in names:
        assert len(name.encode()) <= MAX_NAME_BYTES
        assert name.endswith("-delete")
        assert f"-{partition}." in name
        assert TopicPartition.parse_dir_name(name).partition == partition
        if len(tp.dir_name) + 40 <= MAX_NAME_BYTES:
            assert name.startswith(tp.dir_name + ".")  # only long names are cut


def test_the_device_fault_table() -> None:
    assert {errno.EIO, errno.EROFS, errno.ENOSPC, errno.ENODEV, errno.EDQUOT} <= DEVICE_FAULT_ERRNOS
    for code in (errno.ENAMETOOLONG, errno.EEXIST, errno.EINVAL, errno.ENOTEMPTY, errno.ENOENT):
        with pytest.raises(KafkaStorageError) as info, io_guard("/d", "op"):
            raise OSError(code, "x")
        assert not info.value.device_fault
    with pytest.raises(KafkaStorageError) as info, io_guard("/d", "op"):
        raise OSError(errno.EIO, "x")
    assert info.value.device_fault
    assert KafkaStorageError("/d", "locked by another process").device_fault


def _dir_entries(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.is_dir())


def test_a_249_char_topic_through_its_whole_life(tmp_path: Path) -> None:
    """Create, append, roll, compact, retention, delete-records, delete and restart with
    Kafka's longest topic name; its dir shares the log dir with another topic that must keep
    serving throughout."""
    config = LogConfig(segment_bytes=1024, cleanup_policy=("compact", "delete"))
    path = tmp_path / "d"
    m = open_manager(path, config)
    failures: list[str] = []
    m.add_dir_failure_listener(lambda d, why: failures.append(why))
    other = m.get_or_create_log(TopicPartition("other", 0))
    other.append_as_leader(batch(3), 0)
    logs = [m.get_or_create_log(TopicPartition(LONGEST, p)) for p in range(3)]
    for plog in logs:
        for i in range(40):
            plog.append_as_leader(batch(2, key=b"k%d" % (i % 5), value_size=40), 0)
        plog.roll()
        plog.high_watermark = plog.log_end_offset
        assert len(list(plog.dir.glob("*.log"))) > 3
    assert m.background.clean_logs(force=True) > 0  # .cleaned / .swap files next to 249-char dirs
    old = now_ms() - 10 * 24 * 3600 * 1000
    logs[1].append_as_leader(batch(1, ts=old), 0)
    logs[1].config = LogConfig(segment_bytes=1024, retention_ms=1)
    logs[1].roll()
    logs[1].high_watermark = logs[1].log_end_offset
    assert m.background.run_retention() > 0
    assert logs[2].maybe_increment_log_start_offset(logs[2].log_end_offset - 1)
    m.checkpoint_all()
    for p in range(3):
        m.delete_log(TopicPartition(LONGEST, p))
    assert not any(name.startswith(LONGEST) for name in _dir_entries(path) if "-delete" not in name)
    m.shutdown()  # runs the queued removals
    assert _dir_entries(path) == ["other-0"]
    assert failures == [] and (path / CLEAN_SHUTDOWN_FILE).exists()
    m2 = open_manager(path, config)
    assert sorted(m2.logs) == [TopicPartition("other", 0)] and not m2.offline_partitions
    assert len(all_records(m2.get_log(TopicPartition("other", 0)))) == 3
    m2.shutdown()


def test_a_leftover_dir_is_never_adopted_by_a_new_topic(tmp_path: Path) -> None:
    """A partition dir that exists but was not loaded (a deletion that could not finish) is
    set aside when a topic of that name is created, not served as its data."""
    path = tmp_path / "d"
    m = open_manager(path)
    plog = m.get_or_create_log(TopicPartition("t", 0))
    plog.append_as_leader(batch(5), 0)
    m.shutdown()
    m2 = LogManager([path])
    m2.startup(start_background=False)
    # What a crash mid-deletion leaves, as the log manager sees it: the dir without its log.
    m2.logs.pop(TopicPartition("t", 0))
    fresh = m2.get_or_create_log(TopicPartition("t", 0))
    assert fresh.log_end_offset == 0 and all_records(fresh) == []
    m2.shutdown()
    assert _dir_entries(path) == ["t-0"]


def test_a_too_long_name_fails_the_operation_not_the_dir(tmp_path: Path) -> None:
    """A real ENAMETOOLONG (a partition dir of 256 bytes) fails that creation only."""
    path = tmp_path / "d"
    m = open_manager(path)
    failures: list[str] = []
    m.add_dir_failure_listener(lambda d, why: failures.append(why))
    good = m.get_or_create_log(TopicPartition("good", 0))
    with pytest.raises(KafkaStorageError) as info:
        m.get_or_create_log(TopicPartition(LONGEST, 100_000))
    assert info.value.cause is not None and info.value.cause.errno == errno.ENAMETOOLONG
    assert not info.value.device_fault
    m.handle_dir_failure(info.value)
    assert failures == [] and all(d.online for d in m.dirs)
    good.append_as_leader(batch(2), 0)
    assert good.log_end_offset == 2
    m.shutdown()
    assert (path / CLEAN_SHUTDOWN_FILE).exists()


def test_an_operation_error_takes_its_partition_offline_not_the_dir(tmp_path: Path) -> None:
    """A partition whose dir vanished under it (ENOENT at the next roll): that partition goes
    offline with the reason, its log dir and the other partitions in it keep serving."""
    path = tmp_path / "d"
    m = open_manager(path)
    dir_failures: list[str] = []
    partition_failures: list[tuple[TopicPartition, str]] = []
    m.add_dir_failure_listener(lambda d, why: dir_failures.append(why))
    m.add_partition_failure_listener(lambda tp, why: partition_failures.append((tp, why)))
    broken = m.get_or_create_log(TopicPartition("t", 0))
    fine = m.get_or_create_log(TopicPartition("t", 1))
    broken.append_as_leader(batch(2), 0)
    shutil.rmtree(broken.dir)
    with pytest.raises(KafkaStorageError) as info:
        broken.roll()
    assert info.value.cause is not None and info.value.cause.errno == errno.ENOENT
    m.handle_dir_failure(info.value)
    assert dir_failures == [] and m.dirs[0].online
    assert [tp for tp, _ in partition_failures] == [TopicPartition("t", 0)]
    assert "No such file" in m.offline_partitions[TopicPartition("t", 0)]
    assert m.get_log(TopicPartition("t", 0)) is None
    fine.append_as_leader(batch(3), 0)
    assert fine.log_end_offset == 3
    m.shutdown()
    assert (path / CLEAN_SHUTDOWN_FILE).exists()


def test_eio_from_the_disk_takes_only_its_dir_offline(tmp_path: Path, faulty_fs: FaultyFs) -> None:
    """A real EIO: the first log dir is on a FUSE disk that starts failing writes."""
    failing = faulty_fs.mountpoint / "logs"
    healthy = tmp_path / "healthy"
    m = LogManager([failing, healthy])
    m.startup(start_background=False)
    dir_failures: list[str] = []
    m.add_dir_failure_listener(lambda d, why: dir_failures.append(d))
    bad = m.get_or_create_log(TopicPartition("t", 0))
    good = m.get_or_create_log(TopicPartition("t", 1))
    assert bad.log_dir == failing.absolute() and good.log_dir == healthy.absolute()
    bad.append_as_leader(batch(2), 0)
    faulty_fs.fail(errno.EIO, ops={"write", "fsync"})
    with pytest.raises(KafkaStorageError) as info:
        bad.append_as_leader(batch(2), 0)
        bad.flush()
    assert info.value.cause is not None and info.value.cause.errno == errno.EIO
    assert info.value.device_fault
    m.handle_dir_failure(info.value)
    assert dir_failures == [str(failing.absolute())]
    assert TopicPartition("t", 0) in m.offline_partitions
    good.append_as_leader(batch(3), 0)
    assert good.log_end_offset == 3
    m.shutdown()
    faulty_fs.heal()
    assert (healthy / CLEAN_SHUTDOWN_FILE).exists()
    assert not (failing / CLEAN_SHUTDOWN_FILE).exists()
