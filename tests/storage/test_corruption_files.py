"""Corruption never stops the process: each kind of damage is repaired where the data allows,
else only that partition goes offline; lazy and eager loading end in the same state as a
rebuild from scratch."""

from __future__ import annotations

import os
import struct

import pytest

from logkeel.storage.engine.segment import file_name
from logkeel.storage.log_dir import META_PROPERTIES, STARTUP_MANIFEST, MetaProperties
from logkeel.storage.log_manager import LogManager
from logkeel.storage.topic_partition import TopicPartition

from .logutil import all_records
from .startuputil import (
    CFG,
    TP,
    append_workload,
    copy,
    fingerprint,
    load,
    rebuild_from_scratch,
    scribble,
    segment_files,
    settle,
)


def three_ways(written, tmp_path, damage, *, indexes=True):
    """Damages three copies the same way; loads them lazily (then validates everything),
    eagerly and from scratch; returns the three managers after checking they agree."""
    managers = []
    for name in ("lazy", "eager", "rebuild"):
        path = copy(written, tmp_path / name)
        damage(path)
        if name == "lazy":
            m = load(path)
            settle(m)
        elif name == "eager":
            m = load(path, validation="eager")
        else:
            m = rebuild_from_scratch(path)
        managers.append(m)
    a, b, c = (fingerprint(m.get_log(TP), indexes=indexes) for m in managers)
    assert a == b
    assert a == c
    return managers


def close(managers):
    for m in managers:
        m.shutdown()


def inactive(path, suffix, n=1):
    return segment_files(path, suffix)[n]


@pytest.mark.parametrize(
    "how",
    ["delete", "garbage", "odd_size", "zeros", "entry_past_log"],
)
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_bad_index_is_rebuilt(written, tmp_path, suffix, how):
    junk = os.urandom(1 << 16)

    def damage(path):
        f = inactive(path, suffix)
        if how == "delete":
            f.unlink()
        elif how == "garbage":
            scribble(f, 0, junk[: f.stat().st_size])
        elif how == "odd_size":
            os.truncate(f, f.stat().st_size - 3)
        elif how == "zeros":
            scribble(f, 0, bytes(f.stat().st_size))
        else:
            entry = (
                struct.pack(">ii", 50, 1 << 20)
                if suffix == ".index"
                else struct.pack(">qi", 1 << 50, 50)
            )
            scribble(f, f.stat().st_size, entry)

    managers = three_ways(written, tmp_path, damage)
    lazy = managers[0]
    assert not lazy.startup_report.truncations and not lazy.validator.repairs
    assert lazy.validator.problems  # the damage was noticed and reported
    assert [r.offset for r in all_records(lazy.get_log(TP))] == list(range(200))
    close(managers)


def test_bad_txn_index_is_rebuilt_from_producer_state(written, tmp_path):
    junk = os.urandom(30)

    def damage(path):
        for f in segment_files(path, ".txnindex"):
            scribble(f, 2, junk)

    managers = three_ways(written, tmp_path, damage)
    aborted = fingerprint(managers[0].get_log(TP))["aborted"]
    assert [t[1] for t in aborted] == [5 * i + 3 for i in range(0, 40, 3)]
    close(managers)


def test_bad_or_missing_snapshot_is_replaced_by_replay(written, tmp_path):
    def damage(path):
        snaps = segment_files(path, ".snapshot")
        scribble(snaps[-1], 10, b"\xde\xad")
        snaps[-2].unlink()

    managers = three_ways(written, tmp_path, damage)
    assert managers[0].get_log(TP).producer_state.last_entry(1).last_seq == 79
    close(managers)


@pytest.mark.parametrize("how", ["cut_mid_batch", "zero_filled", "garbage_tail"])
def test_bad_tail_of_the_active_segment_is_truncated(written, tmp_path, how):
    junk = os.urandom(100)

    def damage(path):
        f = segment_files(path, ".log")[-1]
        size = f.stat().st_size
        if how == "cut_mid_batch":
            os.truncate(f, size - 20)
        elif how == "zero_filled":
            scribble(f, size, bytes(4096))
        else:
            scribble(f, size, junk)

    managers = three_ways(written, tmp_path, damage, indexes=how != "cut_mid_batch")
    lazy = managers[0]
    [t] = lazy.startup_report.truncations
    assert t.bytes > 0
    end = lazy.get_log(TP).log_end_offset
    assert end == (199 if how == "cut_mid_batch" else 200)
    assert [r.offset for r in all_records(lazy.get_log(TP))] == list(range(end))
    close(managers)


def test_garbage_in_the_middle_of_an_old_segment(written, tmp_path):
    def damage(path):
        f = inactive(path, ".log", 1)
        scribble(f, f.stat().st_size // 2, b"\x00garbage\xff" * 4)

    managers = three_ways(written, tmp_path, damage)
    lazy, eager, rebuilt = managers
    cut = eager.get_log(TP).log_end_offset
    assert 0 < cut < 200
    [t] = eager.startup_report.truncations
    assert t.offset == cut and t.bytes > 0
    [r] = lazy.validator.repairs  # found after start-up, applied to the running log
    assert (r.offset, r.bytes) == (t.offset, t.bytes)
    assert len(lazy.get_log(TP).segments) == 2
    close(managers)


def test_non_monotonic_batches_the_incident(written, tmp_path):
    """A batch whose offsets go back (its base offset is outside the CRC, so the CRC still
    holds): Kafka 0.11 died rebuilding this index; here the log ends before it."""

    def damage(path):
        f = inactive(path, ".log", 2)
        data = bytearray(f.read_bytes())
        (length,) = struct.unpack_from(">i", data, 8)
        second = 12 + length
        (first_base,) = struct.unpack_from(">q", data, 0)
        struct.pack_into(">q", data, second, first_base)  # overlaps the first batch
        f.write_bytes(bytes(data))

    managers = three_ways(written, tmp_path, damage)
    eager = managers[1]
    base = int(inactive(written, ".log", 2).name[:20])
    assert eager.get_log(TP).log_end_offset > base
    assert [t.offset for t in eager.startup_report.truncations] == [
        eager.get_log(TP).log_end_offset
    ]
    close(managers)


def test_overlapping_segments(written, tmp_path):
    """A later segment starting below where the previous one ends."""

    def damage(path):
        logs = segment_files(path, ".log")
        victim = logs[3]
        base = int(victim.name[:20])
        for suffix in (".log", ".index", ".timeindex"):
            src = path / TP.dir_name / file_name(base, suffix)
            if src.exists():
                os.rename(src, path / TP.dir_name / file_name(base - 3, suffix))

    managers = three_ways(written, tmp_path, damage)
    assert managers[1].startup_report.truncations
    close(managers)


@pytest.mark.parametrize(
    "name",
    [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
    ],
)
def test_corrupt_dir_checkpoint(written, tmp_path, name):
    path = copy(written, tmp_path / "d")
    (path / name).write_bytes(b"0\n3\nt zero x\n\xff")
    m = load(path)
    assert TP in m.logs and not m.offline_partitions
    assert m.get_log(TP).log_end_offset == 200
    m.shutdown()


def test_corrupt_leader_epoch_checkpoint_is_rebuilt_from_the_log(written, tmp_path):
    path = copy(written, tmp_path / "d")
    expected = load(copy(written, tmp_path / "ref")).get_log(TP).leader_epochs.entries
    (path / TP.dir_name / "leader-epoch-checkpoint").write_bytes(b"0\n2\n0 zero\n")
    (path / STARTUP_MANIFEST).unlink()  # else the epochs cached at shutdown are used
    m = load(path)
    assert m.get_log(TP).leader_epochs.entries == expected
    assert any("leader-epoch-checkpoint" in p for p in m.startup_report.problems)
    m.shutdown()


def test_corrupt_meta_properties_is_rewritten(written, tmp_path):
    path = copy(written, tmp_path / "d")
    (path / META_PROPERTIES).write_bytes(b"\x00\xffnot properties")
    m = load(path)
    assert m.get_log(TP).log_end_offset == 200
    m.shutdown()
    MetaProperties.parse((path / META_PROPERTIES).read_text())


def test_leftovers_of_interrupted_operations(written, tmp_path):
    path = copy(written, tmp_path / "d")
    part = path / TP.dir_name
    logs = segment_files(path, ".log")
    # a finished cleaning whose swap-in was interrupted: the .swap holds the new segment
    os.rename(logs[1], part / (logs[1].name + ".swap"))
    (part / (logs[2].name + ".cleaned")).write_bytes(b"half-written")
    (part / (logs[3].name + ".deleted")).write_bytes(b"old")
    (part / "00000000000000999999.index.deleted").write_bytes(b"old")
    # a producer snapshot whose write a crash interrupted before its rename
    (part / "00000000000000000150.snapshot.tmp").write_bytes(b"half")
    m = load(path, validation="eager")
    report = m.startup_report
    assert sorted(report.removed_files) == sorted(
        f"t-0/{n}"
        for n in (
            logs[2].name + ".cleaned",
            logs[3].name + ".deleted",
            "00000000000000999999.index.deleted",
            "00000000000000000150.snapshot.tmp",
        )
    )
    assert not any(
        p.name.endswith((".swap", ".cleaned", ".deleted", ".tmp")) for p in part.iterdir()
    )
    assert [r.offset for r in all_records(m.get_log(TP))] == list(range(200))
    m.shutdown()


def test_missing_segment_file_is_reported_and_the_rest_loads(written, tmp_path):
    path = copy(written, tmp_path / "d")
    victim = segment_files(path, ".log")[2]
    base = int(victim.name[:20])
    victim.unlink()
    m = load(path)
    report = m.startup_report
    assert report.missing_segments == [(TP, base)]
    assert any("missing" in p for p in report.problems)
    settle(m)
    offsets = [r.offset for r in all_records(m.get_log(TP))]
    nxt = int(segment_files(path, ".log")[2].name[:20])
    assert offsets == [o for o in range(200) if not base <= o < nxt]
    m.shutdown()


def test_unloadable_partition_goes_offline_alone(written, tmp_path):
    path = tmp_path / "d"
    m = LogManager([path], default_config=CFG)
    m.startup(start_background=False)
    for p in range(3):
        append_workload(m.get_or_create_log(TopicPartition("t", p)), 5)
    m.shutdown()
    bad = path / "t-1" / file_name(0, ".log")
    bad.unlink()
    bad.mkdir()  # not a file: opening it fails with EISDIR
    m2 = load(path)
    assert [tp for tp, _ in m2.startup_report.offline] == [TopicPartition("t", 1)]
    assert "Is a directory" in m2.offline_partitions[TopicPartition("t", 1)]
    assert sorted(m2.logs) == [TopicPartition("t", 0), TopicPartition("t", 2)]
    assert m2.get_log(TopicPartition("t", 2)).log_end_offset == 25
    m2.shutdown()
