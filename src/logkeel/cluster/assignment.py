"""Replica assignment for CreateTopics and CreatePartitions, as pure functions.

The placement is Kafka's (AdminUtils.assignReplicasToBrokers): leaders go round-robin over the
brokers from a start index, followers follow at a shift that grows every full round so that
replicas spread; with racks, brokers are first ordered alternating between racks and a follower
goes to a rack without a replica of the partition while there is one. The caller supplies the
start index and shift (Kafka picks them at random) so that decisions stay reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from logkeel.cluster.metadata import MetadataError

Assignment = dict[int, tuple[int, ...]]


def rack_alternated(brokers: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered by taking one from each rack in turn (racks and ids sorted):
    {1: a, 2: a, 3: b, 4: c} -> [1, 3, 4, 2]."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(brokers.items()):
        by_rack.setdefault(rack or "", []).append(broker)
    columns = [by_rack[r] for r in sorted(by_rack)]
    depth = max((len(c) for c in columns), default=0)
    return [c[i] for i in range(depth) for c in columns if i < len(c)]


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _check(brokers: Mapping[int, str | None], partitions: int, replication_factor: int) -> None:
    if partitions < 1:
        raise MetadataError(
            "INVALID_PARTITIONS", f"number of partitions must be at least 1, got {partitions}"
        )
    if replication_factor < 1:
        raise MetadataError(
            "INVALID_REPLICATION_FACTOR",
            f"replication factor must be at least 1, got {replication_factor}",
        )
    if replication_factor > len(brokers):
        raise MetadataError(
            "INVALID_REPLICATION_FACTOR",
            f"replication factor {replication_factor} is larger than the {len(brokers)} available broker(s)",
        )
    racks = {rack is None for rack in brokers.values()}
    if len(racks) > 1:
        missing = sorted(b for b, r in brokers.items() if r is None)
        raise MetadataError(
            "INVALID_REPLICATION_FACTOR",
            f"brokers {missing} have no broker.rack while others do: set it on every broker or none",
        )


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int = 0,
    shift: int = 0,
    first_partition: int = 0,
) -> Assignment:
    """Replicas for partitions ``first_partition`` .. ``first_partition + partitions - 1`` over the
    live ``brokers`` (id -> rack or None). Raises MetadataError with Kafka's error name."""
    _check(brokers, partitions, replication_factor)
    rack_aware = all(rack is not None for rack in brokers.values())
    ordered = rack_alternated(brokers) if rack_aware else sorted(brokers)
    n = len(ordered)
    num_racks = len(set(brokers.values())) if rack_aware else 1
    start = start_index % n
    out: Assignment = {}
    for i in range(partitions):
        p = first_partition + i
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ordered[first]]
        racks = {brokers[ordered[first]]}
        j = 0
        while len(replicas) < replication_factor:
            broker = ordered[
                _replica_index(first, shift * num_racks if rack_aware else shift, j, n)
            ]
            j += 1
            rack_ok = not rack_aware or brokers[broker] not in racks or len(racks) == num_racks
            if broker not in replicas and rack_ok:
                replicas.append(broker)
                racks.add(brokers[broker])
        out[p] = tuple(replicas)
    return out


def validate_assignment(
    assignment: Mapping[int, Sequence[int]],
    live_brokers: Sequence[int],
    *,
    first_partition: int = 0,
) -> None:
    """A manual assignment (CreateTopics/CreatePartitions with explicit replicas): partitions
    numbered on from ``first_partition``, one replication factor, no repeated or unknown broker."""
    if not assignment:
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT", "the assignment names no partition")
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise MetadataError(
            "INVALID_REPLICA_ASSIGNMENT",
            f"partitions must be numbered {expected[0]}..{expected[-1]}, got {sorted(assignment)}",
        )
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise MetadataError(
            "INVALID_REPLICA_ASSIGNMENT",
            "every partition must have the same, non-zero number of replicas",
        )
    live = set(live_brokers)
    for p, replicas in sorted(assignment.items()):
        if len(set(replicas)) != len(replicas):
            raise MetadataError(
                "INVALID_REPLICA_ASSIGNMENT", f"partition {p} repeats a broker: {list(replicas)}"
            )
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise MetadataError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"partition {p} names unknown or dead brokers {unknown}",
            )
