"""The plans of ``logkeel reassign``, pure: Kafka's reassignment JSON (read and written, so
plans of ``kafka-reassign-partitions`` work), its topics-to-move JSON, a balanced rack-aware
proposal (``--generate``), the replacement of replicas lost with a failed log dir
(``--replace-offline``), and the throttled-replica lists a throttled move sets."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "Broker",
    "PlanError",
    "parse_plan",
    "parse_topics",
    "plan_json",
    "propose",
    "replace_lost",
    "throttled_replicas",
]

Plan = dict[TopicPartition, tuple[int, ...]]


class PlanError(ValueError):
    """A plan or topics file that is not Kafka's format, or a plan that cannot be made."""


@dataclass(frozen=True, slots=True)
class Broker:
    id: int
    rack: str | None = None


def parse_plan(text: str) -> Plan:
    """Kafka's ``{"version":1,"partitions":[{"topic","partition","replicas",["log_dirs"]}]}``.
    ``log_dirs`` other than "any" are refused: moves between a broker's dirs are
    ``logkeel log-dirs move``."""
    try:
        obj = json.loads(text)
        entries = obj["partitions"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PlanError(f"not a reassignment JSON ({exc})") from None
    plan: Plan = {}
    for e in entries:
        try:
            tp = TopicPartition(str(e["topic"]), int(e["partition"]))
            replicas = tuple(int(r) for r in e["replicas"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"bad partition entry {e!r} ({exc})") from None
        dirs = e.get("log_dirs")
        if dirs is not None and any(d != "any" for d in dirs):
            raise PlanError(f"{tp}: log_dirs other than \"any\" are not supported (use "
                            f"`logkeel log-dirs move`)")  # fmt: skip
        if tp in plan:
            raise PlanError(f"{tp} appears twice")
        if not replicas or len(set(replicas)) != len(replicas):
            raise PlanError(f"{tp}: replicas {list(replicas)} must be distinct and not empty")
        plan[tp] = replicas
    return plan


def plan_json(plan: Mapping[TopicPartition, Iterable[int]]) -> str:
    partitions = [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r),
         "log_dirs": ["any"] * len(list(r))}
        for tp, r in sorted(plan.items())
    ]  # fmt: skip
    return json.dumps({"version": 1, "partitions": partitions})


def parse_topics(text: str) -> list[str]:
    """Kafka's topics-to-move JSON: ``{"version":1,"topics":[{"topic":"foo"}]}``."""
    try:
        return [str(t["topic"]) for t in json.loads(text)["topics"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise PlanError(f"not a topics-to-move JSON ({exc})") from None


class _Load:
    """Each broker's replica count and bytes as a plan places them."""

    def __init__(self, brokers: Iterable[Broker]) -> None:
        self.count = {b.id: 0 for b in brokers}
        self.bytes = {b.id: 0 for b in brokers}

    def add(self, broker: int, size: int) -> None:
        self.count[broker] += 1
        self.bytes[broker] += size

    def key(self, broker: int) -> tuple[int, int, int]:
        return (self.count[broker], self.bytes[broker], broker)


def _pick(
    candidates: Iterable[int], chosen: list[int], racks: Mapping[int, str | None], load: _Load
) -> int | None:
    """The least loaded candidate, on a rack not yet used by ``chosen`` if there is one."""
    free = [b for b in candidates if b not in chosen]
    if not free:
        return None
    used = {racks[b] for b in chosen if racks.get(b) is not None}
    spread = [b for b in free if racks.get(b) is None or racks[b] not in used]
    return min(spread or free, key=load.key)


def propose(
    current: Mapping[TopicPartition, tuple[int, ...]],
    brokers: Iterable[Broker],
    sizes: Mapping[TopicPartition, int],
) -> Plan:
    """A placement of ``current``'s partitions (each keeps its replication factor) on
    ``brokers``, balanced by replica count then bytes, each partition's replicas on distinct
    racks where the racks allow, moving as little as that takes: replicas on brokers not in
    the list are placed on the least loaded ones, then single replicas move from the most to
    the least loaded broker (the largest partition that may go first) until the counts differ
    by at most one. The order of a partition's replicas is kept (a replacement takes the place
    of the replica it replaces, so a leader that stays stays first). Raises PlanError when a
    partition has more replicas than there are brokers."""
    pool = list(brokers)
    racks = {b.id: b.rack for b in pool}
    load = _Load(pool)
    placed: dict[TopicPartition, list[int]] = {}
    order = sorted(current, key=lambda tp: (-sizes.get(tp, 0), tp))
    for tp in order:
        if len(current[tp]) > len(pool):
            raise PlanError(f"{tp} has {len(current[tp])} replicas but only {len(pool)} brokers "
                            "are given")  # fmt: skip
        placed[tp] = [r if r in racks else -1 for r in current[tp]]
        for r in placed[tp]:
            if r >= 0:
                load.add(r, sizes.get(tp, 0))
    for tp in order:
        replicas = placed[tp]
        for i, r in enumerate(replicas):
            if r < 0:
                pick = _pick(racks, [x for x in replicas if x >= 0], racks, load)
                assert pick is not None
                replicas[i] = pick
                load.add(pick, sizes.get(tp, 0))
    while True:
        most = max(racks, key=load.key)
        least = min(racks, key=load.key)
        if load.count[most] - load.count[least] <= 1:
            break
        movable = [
            tp for tp in order
            if most in placed[tp] and least not in placed[tp]
            and _rack_allows(placed[tp], most, least, racks)
        ]  # fmt: skip
        if not movable:
            break
        tp = movable[0]
        size = sizes.get(tp, 0)
        placed[tp][placed[tp].index(most)] = least
        load.count[most] -= 1
        load.bytes[most] -= size
        load.add(least, size)
    return {tp: tuple(placed[tp]) for tp in sorted(placed)}


def _rack_allows(
    replicas: list[int], leaving: int, coming: int, racks: Mapping[int, str | None]
) -> bool:
    """Replacing ``leaving`` by ``coming`` puts no two replicas on one rack that were not."""
    rack = racks.get(coming)
    others = {racks.get(r) for r in replicas if r != leaving}
    return rack is None or rack == racks.get(leaving) or rack not in others


def replace_lost(
    current: Mapping[TopicPartition, tuple[int, ...]],
    lost: Mapping[TopicPartition, Iterable[int]],
    brokers: Iterable[Broker],
    sizes: Mapping[TopicPartition, int],
) -> Plan:
    """For each partition with replicas ``lost`` (on a failed log dir), the same replicas with
    each lost one replaced by the least loaded live broker not already a replica, on another
    rack where possible. Raises PlanError when no broker is left to take one."""
    pool = list(brokers)
    racks = {b.id: b.rack for b in pool}
    load = _Load(pool)
    for tp, replicas in current.items():
        for r in replicas:
            if r in load.count:
                load.add(r, sizes.get(tp, 0))
    plan: Plan = {}
    for tp in sorted(lost):
        gone = set(lost[tp])
        kept = [r for r in current[tp] if r not in gone]
        new = list(kept)
        for r in current[tp]:
            if r not in gone:
                continue
            pick = _pick((b for b in racks if b not in current[tp]), new, racks, load)
            if pick is None:
                raise PlanError(f"{tp}: no live broker left to re-create replica {r} on")
            new.append(pick)
            load.add(pick, sizes.get(tp, 0))
        # Kept replicas first: the leader stays among them.
        plan[tp] = tuple(new)
    return plan


def throttled_replicas(
    current: Mapping[TopicPartition, tuple[int, ...]],
    plan: Mapping[TopicPartition, tuple[int, ...]],
) -> dict[str, tuple[str, str]]:
    """Per topic, Kafka's leader and follower throttled-replica lists for a move: the
    replicas that may lead meanwhile (the current ones) and those that catch up (the new)."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for tp, target in sorted(plan.items()):
        before = current.get(tp, ())
        adding = [r for r in target if r not in before]
        if not adding:
            continue
        leaders.setdefault(tp.topic, []).extend(f"{tp.partition}:{r}" for r in before)
        followers.setdefault(tp.topic, []).extend(f"{tp.partition}:{r}" for r in adding)
    return {t: (",".join(leaders[t]), ",".join(followers[t])) for t in leaders}
