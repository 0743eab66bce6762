"""The replica audit: which broker holds the most intact copy of each partition.

Input is the log dirs of several brokers that hold replicas of the same partitions. Every segment
file is checked (headers and CRC-32C of every batch, no record decoded) in a Spark task; the
driver then puts each replica's segments together: log start and end offsets, last leader epoch,
corrupt ranges, and the replica to recover from.

The best replica is the one whose data runs furthest without a hole: the end of the unbroken run
of valid batches from its log start (its log end offset when nothing is corrupt or missing).
Ties go to the higher last leader epoch, then the longer log, then the earlier log start. That
is the recovery plan for the 0.11 index-corruption incident (docs/proposals.md): when the only
in-sync replica lost its data, make the replica that still has it leader instead of letting it
truncate to the empty one.

For ``--master`` clusters the paths must be readable under the same names on every executor.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from logkeel.spark.segment_scan import (
    PartitionReplica,
    SegmentFile,
    SegmentSummary,
    checkpointed_epochs,
    checkpointed_log_start,
    find_partitions,
    last_leader_epoch,
    list_segments,
    summarize_segment,
)
from logkeel.storage.topic_partition import TopicPartition

Json = dict[str, Any]


@dataclass(frozen=True)
class ReplicaReport:
    path: str
    log_start_offset: int
    log_end_offset: int
    last_leader_epoch: int
    corrupt_ranges: list[Json]

    @property
    def intact_end_offset(self) -> int:
        """Where the first hole starts (or the log end offset when there is none)."""
        ends = [self.log_end_offset]
        for r in self.corrupt_ranges:
            first, last = r["first_offset"], r["last_offset"]
            if last is not None and (last < first or last < self.log_start_offset):
                continue  # no offsets lost, or only ones below the log start
            ends.append(max(first, self.log_start_offset))
        return min(ends)

    def rank(self) -> tuple[int, int, int, int]:
        return (
            self.intact_end_offset,
            self.last_leader_epoch,
            self.log_end_offset,
            -self.log_start_offset,
        )

    def to_json(self) -> Json:
        return {
            "path": self.path,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "last_leader_epoch": self.last_leader_epoch,
            "corrupt_ranges": self.corrupt_ranges,
        }


@dataclass(frozen=True)
class PartitionReport:
    topic: str
    partition: int
    replicas: list[ReplicaReport]

    @property
    def best_replica(self) -> ReplicaReport | None:
        if not self.replicas:
            return None
        # Highest rank; among equals the first path in sort order (max keeps the first it saw).
        return max(sorted(self.replicas, key=lambda r: r.path), key=ReplicaReport.rank)

    def to_json(self) -> Json:
        best = self.best_replica
        return {
            "topic": self.topic,
            "partition": self.partition,
            "replicas": [r.to_json() for r in self.replicas],
            "best_replica": best.path if best else None,
        }


def replica_report(replica: PartitionReplica, summaries: Sequence[SegmentSummary]) -> ReplicaReport:
    """One replica from its segments' summaries (in offset order)."""
    tp = replica.topic_partition
    summaries = sorted(summaries, key=lambda s: s.base_offset)
    checkpoint_start = checkpointed_log_start(replica.log_dir, tp)
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


def build_reports(
    replicas: Iterable[PartitionReplica], summaries: Iterable[SegmentSummary]
) -> list[PartitionReport]:
    by_dir: dict[str, list[SegmentSummary]] = defaultdict(list)
    for s in summaries:
        by_dir[s.partition_dir].append(s)
    by_tp: dict[TopicPartition, list[ReplicaReport]] = defaultdict(list)
    for replica in replicas:
        by_tp[replica.topic_partition].append(replica_report(replica, by_dir.get(replica.path, [])))
    return [
        PartitionReport(tp.topic, tp.partition, sorted(reps, key=lambda r: r.path))
        for tp, reps in sorted(by_tp.items())
    ]


def audit(spark: SparkSession, dirs: Sequence[str | os.PathLike[str]]) -> list[PartitionReport]:
    """Audits the replicas under ``dirs`` (log dirs or partition dirs) on ``spark``."""
    replicas = find_partitions(dirs)
    segments: list[SegmentFile] = [s for r in replicas for s in list_segments(r)]
    summaries: list[SegmentSummary] = []
    if segments:
        # Largest first, so a big segment does not start last and hold up the whole job.
        segments.sort(key=lambda s: s.size, reverse=True)
        sc = spark.sparkContext
        slices = max(1, min(len(segments), sc.defaultParallelism * 4))
        summaries = sc.parallelize(segments, slices).map(summarize_segment).collect()
    return build_reports(replicas, summaries)


def audit_json(reports: Iterable[PartitionReport]) -> list[Json]:
    return [r.to_json() for r in reports]
