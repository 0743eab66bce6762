"""Which replica of a partition holds the most intact copy: the audit's ranking, shared by
`logkeel audit` (replicas put together from their segment files, `spark.audit`) and `logkeel
console` (replicas as their brokers last reported them to the controller). Pure.

The best replica is the one whose data runs furthest without a hole: the end of the unbroken run
of valid batches from its log start (its log end offset when nothing is corrupt or missing).
Ties go to the higher last leader epoch, then the longer log, then the earlier log start. That
is the recovery plan for the 0.11 index-corruption incident (docs/proposals.md): when the only
in-sync replica lost its data, make the replica that still has it leader instead of letting it
truncate to the empty one, with the command ``elect_command`` names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PartitionReport", "ReplicaReport", "elect_command"]

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


def elect_command(topic: str, partition: int, broker: int, bootstrap: str) -> str:
    """The command that makes ``broker``'s replica the leader (`logkeel elect --replica`)."""
    return (
        f"logkeel elect --topic {topic} --partition {partition} --replica {broker} "
        f"--bootstrap-server {bootstrap}"
    )
