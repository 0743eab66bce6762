"""Unclean start with its syncs batched at the end: a producer snapshot at the new log end is
written only where the replay changed the producer state, and a crash right after such a
start (before anything else is written) still recovers what a full rebuild gives."""

from __future__ import annotations

from logkeel.records.builder import build_batch
from logkeel.storage.engine.producer_snapshot import snapshot_path

from . import startuputil as su


def test_a_replay_without_producers_keeps_the_snapshot_and_survives_a_second_crash(tmp_path):
    path = tmp_path / "d"
    m = su.write_dir(path, shutdown=False)
    m.background.flush_for_recovery()  # recovery point and a producer snapshot at the log end
    plog = m.get_log(su.TP)
    bases = [s.base_offset for s in plog.segments]
    for i in range(5):  # plain batches only: nothing for the producer state
        plog.append_as_leader(
            build_batch([(su.BASE_TS + 10_000 + i, b"p", b"after-%d" % i, ())]), 0
        )
    plog.high_watermark = plog.log_end_offset
    # No roll: the snapshot at the recovery point stays (a roll's would replace it).
    assert [s.base_offset for s in plog.segments] == bases
    su.crash(m)
    expected = su.fingerprint(
        su.rebuild_from_scratch(su.copy(path, tmp_path / "ref")).get_log(su.TP)
    )

    m = su.load(path)
    assert not m.startup_report.clean
    plog = m.get_log(su.TP)
    assert not snapshot_path(plog.dir, plog.log_end_offset).exists()
    su.settle(m)
    assert su.fingerprint(plog) == expected

    su.crash(m)  # again, right after the start: nothing written since
    m = su.load(path)
    su.settle(m)
    assert su.fingerprint(m.get_log(su.TP)) == expected
    m.shutdown()


def test_a_replay_that_changes_producers_snapshots_the_log_end(tmp_path):
    path = tmp_path / "d"
    m = su.write_dir(path, shutdown=False)
    m.background.flush_for_recovery()
    su.append_workload(m.get_log(su.TP), 5, start=40)  # idempotent and transactional batches
    su.crash(m)
    m = su.load(path)
    plog = m.get_log(su.TP)
    assert snapshot_path(plog.dir, plog.log_end_offset).exists()
    m.shutdown()
