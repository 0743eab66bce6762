"""`logkeel audit`: replicas that differ, audited by a real Spark job."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from logkeel.cli.audit import add_elect_commands, audit_command
from logkeel.spark.audit import audit, audit_json
from logkeel.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from logkeel.storage.log_dir import META_PROPERTIES, MetaProperties
from logkeel.storage.topic_partition import TopicPartition
from tests.spark.logdirs import (
    corrupt_batch,
    find_batch,
    remove_segment,
    segment_holding,
    truncate_at,
    write_partition,
)

EPOCHS = [i // 20 for i in range(60)]  # offsets 0-59 epoch 0, 60-119 epoch 1, 120-179 epoch 2


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """Four brokers' log dirs holding replicas of t-0 (and a few of t-1, t-2) that differ."""
    root = tmp_path_factory.mktemp("audit")
    dirs = {name: root / name for name in ("b1", "b2", "b3", "b4")}
    facts = {}

    # Everything is written first: a later LogManager start-up on a dir would repair its damage.
    w1 = write_partition(dirs["b1"], "t", 0, 60, epochs=EPOCHS)
    w2 = write_partition(dirs["b2"], "t", 0, 60, epochs=EPOCHS)
    w3 = write_partition(dirs["b3"], "t", 0, 60, epochs=EPOCHS)
    # b4: wiped (the in-sync replica that lost its data): an empty log.
    write_partition(dirs["b4"], "t", 0, 0)
    # t-1: b1 and b2 agree, but b2 has three more batches in a newer epoch; b1's log start was
    # moved to 6 (retention or DeleteRecords) before its checkpoint was written.
    write_partition(dirs["b1"], "t", 1, 10)
    write_partition(dirs["b2"], "t", 1, 13, epochs=[0] * 10 + [1] * 3)
    OffsetCheckpointFile(dirs["b1"] / LOG_START_OFFSET_CHECKPOINT_FILE).write(
        {TopicPartition("t", 0): 0, TopicPartition("t", 1): 6}
    )
    # t-2: identical replicas on b3 and b4.
    write_partition(dirs["b3"], "t", 2, 4)
    write_partition(dirs["b4"], "t", 2, 4)

    # b1: torn inside the batch at offset 105 (a crash mid-write), later segments gone.
    seg, pos, _ = find_batch(w1, 105)
    truncate_at(w1, 105, cut_into_batch=10)
    facts["b1"] = {"torn": (seg.name, pos)}
    # b2: a batch in the middle fails its CRC.
    seg, pos, size = corrupt_batch(w2, 60)
    facts["b2"] = {"crc": (seg.name, pos, size)}
    # b3: the segment holding offset 90 was deleted.
    gone = segment_holding(w3, 90)
    segments = w3.segments()
    before, after = segments[segments.index(gone) - 1], segments[segments.index(gone) + 1]
    remove_segment(gone)
    facts["b3"] = {"gap": (before.name, before.stat().st_size, int(gone.stem), int(after.stem))}
    return dirs, facts


def test_audit_reports_each_replica_and_picks_the_one_with_most_intact_data(spark, replicas):
    dirs, facts = replicas
    reports = audit_json(audit(spark, [str(d) for d in dirs.values()]))
    assert [(r["topic"], r["partition"]) for r in reports] == [("t", 0), ("t", 1), ("t", 2)]
    for r in reports:
        assert set(r) == {"topic", "partition", "replicas", "best_replica"}
        for rep in r["replicas"]:
            assert set(rep) == {
                "path",
                "log_start_offset",
                "log_end_offset",
                "last_leader_epoch",
                "corrupt_ranges",
            }

    t0 = {os.path.basename(os.path.dirname(rep["path"])): rep for rep in reports[0]["replicas"]}
    assert {k: v["path"] for k, v in t0.items()} == {k: str(d / "t-0") for k, d in dirs.items()}

    b1 = t0["b1"]
    torn_segment, torn_pos = facts["b1"]["torn"]
    assert (b1["log_start_offset"], b1["log_end_offset"], b1["last_leader_epoch"]) == (0, 105, 1)
    assert b1["corrupt_ranges"] == [
        {
            "segment": torn_segment,
            "position": torn_pos,
            "bytes": 10,
            "first_offset": 105,
            "last_offset": None,
            "reason": b1["corrupt_ranges"][0]["reason"],
        }
    ]

    b2 = t0["b2"]
    crc_segment, crc_pos, crc_size = facts["b2"]["crc"]
    assert (b2["log_start_offset"], b2["log_end_offset"], b2["last_leader_epoch"]) == (0, 180, 2)
    [crc] = b2["corrupt_ranges"]
    assert (crc["segment"], crc["position"], crc["bytes"]) == (crc_segment, crc_pos, crc_size)
    assert (crc["first_offset"], crc["last_offset"]) == (60, 62)
    assert "CRC mismatch" in crc["reason"]

    b3 = t0["b3"]
    before_name, before_size, gone_first, gone_next = facts["b3"]["gap"]
    assert (b3["log_start_offset"], b3["log_end_offset"], b3["last_leader_epoch"]) == (0, 180, 2)
    [gap] = b3["corrupt_ranges"]
    assert (gap["segment"], gap["position"], gap["bytes"]) == (before_name, before_size, 0)
    assert (gap["first_offset"], gap["last_offset"]) == (gone_first, gone_next - 1)
    assert gone_first < 105  # so b1's unbroken run (0-104) is the longest

    b4 = t0["b4"]
    assert (b4["log_start_offset"], b4["log_end_offset"], b4["last_leader_epoch"]) == (0, 0, -1)
    assert b4["corrupt_ranges"] == []

    assert reports[0]["best_replica"] == b1["path"]

    t1 = {os.path.basename(os.path.dirname(rep["path"])): rep for rep in reports[1]["replicas"]}
    assert (t1["b1"]["log_start_offset"], t1["b1"]["log_end_offset"]) == (6, 30)
    assert (t1["b2"]["log_start_offset"], t1["b2"]["log_end_offset"]) == (0, 39)
    assert (t1["b1"]["last_leader_epoch"], t1["b2"]["last_leader_epoch"]) == (0, 1)
    assert reports[1]["best_replica"] == t1["b2"]["path"]

    # Identical replicas: a stable answer, the first path.
    assert reports[2]["best_replica"] == str(dirs["b3"] / "t-2")


def test_cli_json_is_the_audit(spark, replicas):
    dirs, _ = replicas
    args = [str(d) for d in dirs.values()]
    result = CliRunner().invoke(audit_command, [*args, "--json"])
    assert result.exit_code == 0, result.output
    expected = audit_json(audit(spark, args))
    add_elect_commands(expected, "127.0.0.1:9092")
    assert json.loads(result.stdout) == expected
    assert not spark.sparkContext._jsc.sc().isStopped()  # an embedding session keeps running


def test_cli_table_marks_the_best_replica(spark, replicas):
    dirs, _ = replicas
    result = CliRunner().invoke(audit_command, [str(d) for d in dirs.values()])
    assert result.exit_code == 0, result.output
    out = result.stdout
    # t-0 and t-1 differ; t-2's replicas agree, so it is only counted (--all lists it). As
    # whole words: the table wraps the replicas' paths, and pytest's base temp dir pytest-2N
    # holds "t-2" (CI on a machine that had run pytest 24 times).
    assert all(re.search(rf"\b{tp}\b", out) for tp in ("t-0", "t-1"))
    assert not re.search(r"\bt-2\b", out), out
    assert "60..62" in out  # b2's corrupt batch
    assert out.count("yes") == 2  # one best replica per listed partition
    assert "1 partition(s) whose replicas agree are not listed (--all lists them)" in out
    assert "Audit summary" in out
    assert "audit: 3 of 3 partitions checked" in result.stderr

    everything = CliRunner().invoke(audit_command, [*(str(d) for d in dirs.values()), "--all"])
    assert everything.exit_code == 0, everything.output
    assert re.search(r"\bt-2\b", everything.stdout) and everything.stdout.count("yes") == 3


def test_cli_runs_its_own_spark_with_master(replicas, spark):
    dirs, _ = replicas
    args = [str(d) for d in dirs.values()]
    code = "from logkeel.cli.audit import audit_command; audit_command()"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, "-c", code, "--master", "local[1]", "--json", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = audit_json(audit(spark, args))
    add_elect_commands(expected, "127.0.0.1:9092")
    assert json.loads(proc.stdout) == expected


def test_cli_rejects_a_missing_dir(tmp_path):
    result = CliRunner().invoke(audit_command, [str(tmp_path / "nope")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_cli_names_the_elect_command_for_the_best_replica(spark, replicas, tmp_path):
    """With each log dir's meta.properties (the broker id), the audit prints the command that
    makes the best replica the leader."""
    dirs, _ = replicas
    written = []
    try:
        for node, d in enumerate(dirs.values(), start=1):
            (d / META_PROPERTIES).write_bytes(MetaProperties("c", node, f"dir{node}").render())
            written.append(d / META_PROPERTIES)
        result = CliRunner().invoke(
            audit_command, [*(str(d) for d in dirs.values()), "--bootstrap-server", "h:9092"]
        )
    finally:
        for f in written:
            f.unlink()
    assert result.exit_code == 0, result.output
    # t-0's best copy is b1's (the brokers above: b1=1, b2=2, b3=3, b4=4).
    assert "t-0: logkeel elect --topic t --partition 0 --replica 1 --bootstrap-server h:9092" in (
        result.stdout
    )


def test_cli_conf_must_be_key_value(replicas):
    dirs, _ = replicas
    result = CliRunner().invoke(audit_command, [str(dirs["b1"]), "--conf", "spark.executor.memory"])
    assert result.exit_code == 2
    assert "expected KEY=VALUE, got 'spark.executor.memory'" in result.output
