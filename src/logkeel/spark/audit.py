"""The replica audit: which broker holds the most intact copy of each partition.

Input is the log dirs of several brokers that hold replicas of the same partitions. The driver
lists them and groups the replicas by partition; each Spark task takes a batch of whole
partitions, checks every segment file of their replicas (headers and CRC-32C of every batch, no
record decoded; the index files are not trusted, they are what corruption leaves stale) and puts
each replica together: log start and end offsets, last leader epoch, corrupt ranges, and the
replica to recover from. Progress is counted from completed batches (an accumulator the tasks
add their partitions to), never estimated.

The best replica is the one `storage.tools.replica_rank` ranks first (the one ranking, shared
with `logkeel console`, which ranks the brokers' reports instead of scanned segments).

For ``--master`` clusters the paths must be readable under the same names on every executor.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from logkeel.spark.segment_scan import (
    PartitionReplica,
    SegmentFile,
    SegmentSummary,
    checkpointed_epochs,
    checkpointed_log_starts,
    find_partitions,
    last_leader_epoch,
    list_segments,
    summarize_segment,
)
from logkeel.storage.tools.replica_rank import PartitionReport, ReplicaReport
from logkeel.storage.topic_partition import TopicPartition

Json = dict[str, Any]

log = logging.getLogger("logkeel.audit")

# At most this many partitions per Spark task: PySpark costs tens of ms per task whatever it
# does (BENCHMARKS.md: 2,000 partitions in 20 tasks took 5.1 s, in 8 tasks 1.7 s), so tasks are
# few, parallelism x 4 for balance, and more only on very many partitions, so that progress
# still moves in steps.
PARTITIONS_PER_TASK = 500
# How often the driver looks at the count of checked partitions while the job runs.
PROGRESS_POLL_S = 0.5

Progress = Callable[[int, int], None]  # (partitions checked, partitions in all)


def replica_report(
    replica: PartitionReplica, summaries: Sequence[SegmentSummary], checkpoint_start: int | None
) -> ReplicaReport:
    """One replica from its segments' summaries; ``checkpoint_start`` is its log start offset in
    its log dir's ``log-start-offset-checkpoint``, if named there."""
    summaries = sorted(summaries, key=lambda s: s.base_offset)
    if summaries:
        first_base = summaries[0].base_offset
        # As Kafka's loader: the checkpoint may be ahead of the first segment, never behind it.
        log_start = max(
            first_base, checkpoint_start if checkpoint_start is not None else first_base
        )
        log_end = max(summaries[-1].end_offset, log_start)
    else:
        log_start = log_end = checkpoint_start or 0
    last_epoch = next(
        (s.last_batch_epoch for s in reversed(summaries) if s.last_batch_epoch is not None), None
    )
    corrupt = [dict(c) for s in summaries for c in s.corrupt]
    return ReplicaReport(
        replica.path,
        log_start,
        log_end,
        last_leader_epoch(checkpointed_epochs(replica.path), log_end, last_epoch),
        corrupt,
    )


@dataclass(frozen=True)
class ReplicaWork:
    """One replica to check: its segment files (listed by the driver) and checkpointed start."""

    replica: PartitionReplica
    segments: tuple[SegmentFile, ...]
    checkpoint_start: int | None

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)


@dataclass(frozen=True)
class PartitionWork:
    topic_partition: TopicPartition
    replicas: tuple[ReplicaWork, ...]

    @property
    def size(self) -> int:
        return sum(r.size for r in self.replicas)


def plan(dirs: Sequence[str | os.PathLike[str]]) -> list[PartitionWork]:
    """Every partition under ``dirs`` with its replicas, in partition order; each log dir's
    checkpoint is read once."""
    starts: dict[str, dict[TopicPartition, int]] = {}
    by_tp: dict[TopicPartition, list[ReplicaWork]] = defaultdict(list)
    for replica in find_partitions(dirs):
        if replica.log_dir not in starts:
            starts[replica.log_dir] = checkpointed_log_starts(replica.log_dir)
        tp = replica.topic_partition
        by_tp[tp].append(
            ReplicaWork(replica, tuple(list_segments(replica)), starts[replica.log_dir].get(tp))
        )
    return [
        PartitionWork(tp, tuple(sorted(reps, key=lambda r: r.replica.path)))
        for tp, reps in sorted(by_tp.items())
    ]


def check_partition(work: PartitionWork) -> PartitionReport:
    """The report of one partition: every segment of every replica scanned (runs in a task)."""
    tp = work.topic_partition
    return PartitionReport(
        tp.topic,
        tp.partition,
        [
            replica_report(
                r.replica, [summarize_segment(s) for s in r.segments], r.checkpoint_start
            )
            for r in work.replicas
        ],
    )


def batches(work: Sequence[PartitionWork], parallelism: int) -> list[list[PartitionWork]]:
    """``work`` in batches for tasks of about equal bytes: the largest partitions are dealt out
    first, round robin, so one big partition does not start last and hold up the job."""
    n = max(1, min(len(work), max(parallelism * 4, -(-len(work) // PARTITIONS_PER_TASK))))
    out: list[list[PartitionWork]] = [[] for _ in range(n)]
    for i, w in enumerate(sorted(work, key=lambda w: w.size, reverse=True)):
        out[i % n].append(w)
    return [b for b in out if b]


def audit(
    spark: SparkSession,
    dirs: Sequence[str | os.PathLike[str]],
    progress: Progress | None = None,
) -> list[PartitionReport]:
    """Audits the replicas under ``dirs`` (log dirs or partition dirs) on ``spark``.

    ``progress(checked, total)`` is called, and a log line written, each time tasks have
    completed more partitions, and once at the end.
    """
    work = plan(dirs)
    total = len(work)
    if not work:
        return []
    sc = spark.sparkContext
    checked = sc.accumulator(0)

    def run(batch: list[PartitionWork]) -> list[PartitionReport]:
        reports = [check_partition(w) for w in batch]
        checked.add(len(reports))  # reaches the driver when the task completes
        return reports

    parts = batches(work, sc.defaultParallelism)

    def tell(done: int) -> None:
        log.info("audit: %s of %s partitions checked", f"{done:,}", f"{total:,}")
        if progress is not None:
            progress(done, total)

    tell(0)
    # The job runs in a thread so that this one can report what completed tasks have counted.
    with ThreadPoolExecutor(1, thread_name_prefix="logkeel-audit-job") as pool:
        job = pool.submit(lambda: sc.parallelize(parts, len(parts)).flatMap(run).collect())
        told = 0
        while not wait([job], PROGRESS_POLL_S).done:
            # A task run twice (speculation) may count its partitions twice.
            done = min(checked.value, total)
            if done != told:
                told = done
                tell(done)
        reports: list[PartitionReport] = job.result()
    tell(len(reports))
    return sorted(reports, key=lambda r: (r.topic, r.partition))


@dataclass(frozen=True)
class AuditSummary:
    partitions: int
    replicas: int
    differing: int  # partitions whose replicas disagree or hold corrupt or missing ranges
    corrupt_ranges: int


def differs(report: PartitionReport) -> bool:
    """Whether the replicas of a partition disagree (log start or end, last leader epoch) or any
    holds a corrupt or missing range: the partitions an operator must look at."""
    seen = {(r.log_start_offset, r.log_end_offset, r.last_leader_epoch) for r in report.replicas}
    return len(seen) > 1 or any(r.corrupt_ranges for r in report.replicas)


def summarize(reports: Sequence[PartitionReport]) -> AuditSummary:
    return AuditSummary(
        len(reports),
        sum(len(r.replicas) for r in reports),
        sum(1 for r in reports if differs(r)),
        sum(len(rep.corrupt_ranges) for r in reports for rep in r.replicas),
    )


def audit_json(reports: Iterable[PartitionReport]) -> list[Json]:
    return [r.to_json() for r in reports]
