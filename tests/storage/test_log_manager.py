"""LogManager: JBOD placement, meta.properties, checkpoints, clean shutdown, dir failure."""

from __future__ import annotations

import errno
import os
import time

import pytest

from logkeel.records.batch import TimestampType
from logkeel.records.record import decode_records
from logkeel.storage.engine.log_config import LogConfig
from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.log_dir import (
    BOOT_ID_FILE,
    CLEAN_SHUTDOWN_FILE,
    META_PROPERTIES,
    MetaProperties,
)
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

from .logutil import TP, batch, open_manager


def test_new_partitions_go_to_the_dir_with_fewest(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    m = LogManager(dirs)
    m.startup(start_background=False)
    for i in range(9):
        m.get_or_create_log(TopicPartition("t", i))
    counts = sorted(len([p for p in d.iterdir() if p.is_dir()]) for d in dirs)
    assert counts == [3, 3, 3]
    m.shutdown()


def test_meta_properties_identify_each_dir(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs, node_id=7, cluster_id="abcdefghijklmnopqrstuv")
    m.startup(start_background=False)
    m.shutdown()
    metas = [MetaProperties.parse((d / META_PROPERTIES).read_text()) for d in dirs]
    assert {(p.cluster_id, p.node_id, p.version) for p in metas} == {
        ("abcdefghijklmnopqrstuv", 7, 1)
    }
    assert metas[0].directory_id != metas[1].directory_id
    # a later start without a cluster id adopts the one on disk
    m2 = LogManager(dirs, node_id=7)
    m2.startup(start_background=False)
    assert m2.cluster_id == "abcdefghijklmnopqrstuv"
    m2.shutdown()


def test_dir_of_another_node_goes_offline_not_the_broker(tmp_path):
    m = LogManager([tmp_path / "a"], node_id=1)
    m.startup(start_background=False)
    m.shutdown()
    m2 = LogManager([tmp_path / "a", tmp_path / "b"], node_id=2, cluster_id=m.cluster_id)
    report = m2.startup(start_background=False)
    assert [d for d, _ in report.offline_dirs] == [str((tmp_path / "a").absolute())]
    assert [d.path.name for d in m2.online_dirs] == ["b"]
    m2.shutdown()


def test_checkpoints_are_kafka_text_format(tmp_path):
    m = open_manager(tmp_path)
    plog = m.get_or_create_log(TP)
    for _ in range(5):
        plog.append_as_leader(batch(), 0)
    plog.high_watermark = 5
    plog.flush()
    m.checkpoint_all()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 5\n"
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 5\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 0\n"
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    m.shutdown()


def test_clean_shutdown_marker_written_and_consumed(tmp_path):
    m = open_manager(tmp_path)
    m.get_or_create_log(TP).append_as_leader(batch(), 0)
    m.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    m2 = open_manager(tmp_path)
    assert m2.startup_report.clean
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from here on is unclean
    m2.shutdown()


@pytest.mark.parametrize(
    ("clean", "rebooted", "lost"),
    [(True, False, False), (False, False, False), (True, True, False), (False, True, True)],
)
def test_logs_after_a_crash_of_the_machine_may_have_lost_unflushed_records(
    tmp_path, clean, rebooted, lost
):
    """Only a start without a clean shutdown on another boot than the last (power loss,
    kernel panic: the page cache is gone) marks the logs: a process crash keeps every record
    written, a clean reboot flushed them."""
    m = open_manager(tmp_path)
    m.get_or_create_log(TP).append_as_leader(batch(), 0)
    m.shutdown()
    assert (tmp_path / BOOT_ID_FILE).read_text().strip()
    if not clean:
        (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    if rebooted:
        (tmp_path / BOOT_ID_FILE).write_text("00000000-0000-0000-0000-000000000000\n")
    m2 = open_manager(tmp_path)
    try:
        plog = m2.get_log(TP)
        assert plog is not None and plog.unflushed_lost is lost
        assert m2.dirs[0].page_cache_lost is lost
    finally:
        m2.shutdown()
    m3 = open_manager(tmp_path)  # the boot id is recorded again: known from now on
    try:
        assert m3.get_log(TP).unflushed_lost is False  # type: ignore[union-attr]
    finally:
        m3.shutdown()


def test_second_manager_cannot_take_a_locked_dir(tmp_path):
    m = open_manager(tmp_path)
    m2 = LogManager([tmp_path])
    report = m2.startup(start_background=False)
    assert report.offline_dirs and "locked" in report.offline_dirs[0][1]
    m2.shutdown()
    m.shutdown()


def test_flush_interval_advances_recovery_point(tmp_path):
    m = open_manager(tmp_path, LogConfig(flush_messages=3))
    plog = m.get_or_create_log(TP)
    plog.append_as_leader(batch(2), 0)
    assert plog.recovery_point == 0
    plog.append_as_leader(batch(2), 0)
    assert plog.recovery_point == 4
    plog.config = LogConfig(flush_ms=0)
    plog.append_as_leader(batch(1), 0)
    m.background.flush_dirty_logs()
    assert plog.recovery_point == 5
    m.shutdown()


def test_producer_snapshot_on_timer(tmp_path):
    m = open_manager(tmp_path, LogConfig(producer_snapshot_interval_ms=1))
    plog = m.get_or_create_log(TP)
    plog.append_as_leader(batch(1, producer_id=3, producer_epoch=0, base_sequence=0), 0)
    time.sleep(0.01)
    m.background.flush_dirty_logs()
    assert (tmp_path / "t-0" / f"{1:020d}.snapshot").exists()
    m.shutdown()


def test_log_append_time_stamps_and_rechecksums(tmp_path):
    m = open_manager(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    plog = m.get_or_create_log(TP)
    info = plog.append_as_leader(batch(2, ts=1000), 0)
    assert info.log_append_time > 1000
    header, records = decode_records(plog.read(0, 1 << 20).read_bytes())  # verifies the CRC
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in records] == [info.log_append_time] * 2
    m.shutdown()


def test_io_error_takes_only_its_dir_offline(tmp_path, monkeypatch):
    """EIO on one dir's segment file: that dir goes offline, the other keeps serving.

    A failing disk cannot be produced on demand here, so the write syscall is made to fail
    for file descriptors of the first dir only.
    """
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    m.startup(start_background=False)
    failed: list[str] = []
    m.add_dir_failure_listener(lambda d, reason: failed.append(d))
    bad = m.get_or_create_log(TopicPartition("t", 0))
    good = m.get_or_create_log(TopicPartition("t", 1))
    assert bad.log_dir != good.log_dir
    bad_fd = bad.active_segment.log.fd
    real_pwritev = os.pwritev

    def pwritev(fd, buffers, offset):
        if fd == bad_fd:
            raise OSError(errno.EIO, "Input/output error")
        return real_pwritev(fd, buffers, offset)

    monkeypatch.setattr(os, "pwritev", pwritev)
    with pytest.raises(KafkaStorageError) as excinfo:
        bad.append_as_leader(batch(), 0)
    assert excinfo.value.log_dir == str(bad.log_dir)
    m.handle_dir_failure(excinfo.value)
    assert failed == [str(bad.log_dir)]
    assert TopicPartition("t", 0) in m.offline_partitions
    assert m.get_log(TopicPartition("t", 0)) is None
    good.append_as_leader(batch(), 0)
    assert good.log_end_offset == 1
    # new partitions avoid the offline dir
    assert m.get_or_create_log(TopicPartition("u", 0)).log_dir == good.log_dir
    m.shutdown()
    assert (dirs[1] / CLEAN_SHUTDOWN_FILE).exists()
    assert not (dirs[0] / CLEAN_SHUTDOWN_FILE).exists()


def _files_of(root):
    return {
        p.relative_to(root): (p.stat().st_size, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_a_failed_dir_is_not_written_to(tmp_path):
    """Closing a failed dir's logs writes nothing there: no index trimming, no time-index
    entry, no producer snapshot, no checkpoint, no clean-shutdown marker."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = LogManager(dirs)
    m.startup(start_background=False)
    bad = m.get_or_create_log(TopicPartition("t", 0))
    m.get_or_create_log(TopicPartition("t", 1))
    for i in range(5):
        bad.append_as_leader(
            batch(3, ts=1000 + i, producer_id=9, producer_epoch=0, base_sequence=3 * i), 0
        )
    bad.read(0, 1 << 20)  # loads the (preallocated) indexes of the active segment
    before = _files_of(bad.log_dir)
    assert any(size > 8 * 1024 for size, _ in before.values())  # preallocated: would be trimmed
    m.handle_dir_failure(KafkaStorageError(bad.log_dir, "disk gone", OSError(errno.EIO, "EIO")))
    assert TopicPartition("t", 0) in m.offline_partitions
    m.shutdown()
    assert _files_of(bad.log_dir) == before


def test_idle_producer_ids_expire(tmp_path):
    m = open_manager(tmp_path, LogConfig(producer_id_expiration_ms=60_000))
    plog = m.get_or_create_log(TP)
    plog.append_as_leader(batch(1, producer_id=5, producer_epoch=0, base_sequence=0), 0)
    assert m.background.remove_expired_producers() == 0  # still fresh
    assert 5 in plog.producer_state.active_producers
    assert m.background.remove_expired_producers(now_ms=int(time.time() * 1000) + 120_000) == 1
    assert 5 not in plog.producer_state.active_producers
    m.shutdown()
