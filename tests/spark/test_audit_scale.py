"""`logkeel audit` over a few hundred partitions of 3 brokers: progress counted as partitions
are checked, and the damaged replicas found among the intact ones."""

from __future__ import annotations

import json
import logging
import re

import pytest
from click.testing import CliRunner

from logkeel.cli.audit import audit_command
from logkeel.spark.audit import audit, batches, plan
from logkeel.storage.topic_partition import TopicPartition
from tests.spark.logdirs import (
    RECORDS_PER_BATCH,
    Written,
    corrupt_batch,
    truncate_at,
    write_brokers,
    write_partition,
)

PARTITIONS = 300
BATCHES = 6
PROGRESS = re.compile(r"audit: ([\d,]+) of ([\d,]+) partitions checked")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    dirs = write_brokers(tmp_path_factory.mktemp("audit-scale"), 3, PARTITIONS, batches=BATCHES)
    end = BATCHES * RECORDS_PER_BATCH
    # Planted: broker2's copy of t-17 has a batch that fails its CRC; broker3's t-123 was torn
    # in the middle of its log (a crash mid-write, later segments gone).
    corrupt_batch(Written(dirs[1], TopicPartition("t", 17), end), 3)
    truncate_at(Written(dirs[2], TopicPartition("t", 123), end), 9, cut_into_batch=10)
    return dirs, end


def progress_counts(stderr: str) -> list[tuple[int, int]]:
    return [(int(a.replace(",", "")), int(b.replace(",", ""))) for a, b in PROGRESS.findall(stderr)]


def test_audit_of_hundreds_of_partitions_counts_its_progress_and_finds_the_damage(
    spark, cluster
) -> None:
    dirs, end = cluster
    assert len(batches(plan(dirs), spark.sparkContext.defaultParallelism)) > 1

    result = CliRunner().invoke(audit_command, [*map(str, dirs), "--json"])
    assert result.exit_code == 0, result.output
    counts = progress_counts(result.stderr)
    assert counts[0] == (0, PARTITIONS) and counts[-1] == (PARTITIONS, PARTITIONS)
    assert all(total == PARTITIONS for _, total in counts)
    done = [d for d, _ in counts]
    assert done == sorted(done)  # counted as tasks complete, never going back

    reports = {r["partition"]: r for r in json.loads(result.stdout)}
    assert sorted(reports) == list(range(PARTITIONS))
    damaged = {
        (p, rep["path"].split("/")[-2])
        for p, r in reports.items()
        for rep in r["replicas"]
        if rep["corrupt_ranges"] or rep["log_end_offset"] != end
    }
    assert damaged == {(17, "broker2"), (123, "broker3")}
    [crc] = next(r for r in reports[17]["replicas"] if "broker2" in r["path"])["corrupt_ranges"]
    assert "CRC mismatch" in crc["reason"] and crc["first_offset"] == 3
    torn = next(r for r in reports[123]["replicas"] if "broker3" in r["path"])
    assert torn["log_end_offset"] == 9
    assert reports[17]["best_replica"].split("/")[-2] != "broker2"
    assert reports[123]["best_replica"].split("/")[-2] != "broker3"

    table = CliRunner().invoke(audit_command, list(map(str, dirs)))
    assert table.exit_code == 0, table.output
    out = table.stdout
    assert "t-17" in out and "t-123" in out and "t-5 " not in out
    assert f"{PARTITIONS - 2} partition(s) whose replicas agree are not listed" in out
    summary = out[out.index("Audit summary") :]
    assert re.search(r"│\s+300\s+│\s+900\s+│\s+2\s+│\s+2\s+│", summary), summary
    assert progress_counts(table.stderr)[-1] == (PARTITIONS, PARTITIONS)


def test_library_progress_is_the_sum_of_completed_batches(spark, cluster, caplog) -> None:
    """Each count reported is the partitions of some set of finished tasks, and the log lines
    say the same as the callback."""
    dirs, _ = cluster
    sizes = [len(b) for b in batches(plan(dirs), spark.sparkContext.defaultParallelism)]
    reachable = {0}
    for size in sizes:
        reachable |= {r + size for r in reachable}
    seen: list[tuple[int, int]] = []
    with caplog.at_level(logging.INFO, logger="logkeel.audit"):
        reports = audit(spark, dirs, lambda done, total: seen.append((done, total)))
    assert len(reports) == PARTITIONS
    assert seen[0] == (0, PARTITIONS) and seen[-1] == (PARTITIONS, PARTITIONS)
    assert all(done in reachable for done, _ in seen)
    logged = [r.getMessage() for r in caplog.records if r.name == "logkeel.audit"]
    assert logged == [f"audit: {d:,} of {t:,} partitions checked" for d, t in seen]


def test_batches_deal_every_partition_once_largest_first(tmp_path) -> None:
    dirs = write_brokers(tmp_path, 2, 250, batches=2)
    # One partition much bigger than the rest: it is dealt first.
    dirs.append(write_partition(tmp_path / "broker3", "big", 0, 40).log_dir)
    work = plan(dirs)
    out = batches(work, parallelism=2)
    assert len(out) == 8  # 251 partitions: parallelism x 4 tasks
    assert sorted(w.topic_partition for b in out for w in b) == sorted(
        w.topic_partition for w in work
    )
    assert out[0][0].topic_partition == TopicPartition("big", 0)
    assert max(map(len, out)) - min(map(len, out)) <= 1
    many = batches(work * 20, parallelism=2)  # 5,020: at most 500 partitions per task
    assert len(many) == 11


def test_on_a_terminal_the_progress_has_a_bar_above_the_counted_lines(spark, cluster) -> None:
    dirs, _ = cluster
    # FORCE_COLOR makes rich treat the captured stderr as a terminal.
    result = CliRunner(env={"FORCE_COLOR": "1"}).invoke(audit_command, [*map(str, dirs), "--json"])
    assert result.exit_code == 0, result.output
    err = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", result.stderr)
    assert "auditing partitions" in err
    assert progress_counts(err)[-1] == (PARTITIONS, PARTITIONS)
    assert len(json.loads(result.stdout)) == PARTITIONS  # the bar stays off stdout
