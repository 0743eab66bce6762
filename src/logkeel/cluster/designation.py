"""The replica to designate for a partition left without a leader, as `logkeel console` shows
it: the audit's ranking (`storage.tools.replica_rank`) applied to what each replica's broker
last reported to the controller (/logkeel/replica_logs) instead of to scanned segment files.
A report knows no corrupt range and no log start, so the ranking comes down to the log end
offset, then the last leader epoch; `logkeel audit` on the log dirs checks every batch. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from logkeel.cluster.zk_data import ReplicaLogReport
from logkeel.storage.tools.replica_rank import PartitionReport, ReplicaReport, elect_command

__all__ = ["replica_to_designate"]


def replica_to_designate(
    topic: str,
    partition: int,
    replicas: Collection[int],
    reports: Mapping[int, ReplicaLogReport],
    *,
    topic_id: str | None,
    live: Collection[int],
    bootstrap: str,
) -> dict[str, Any]:
    """The audit's answer from ``reports`` (broker -> its report of this partition's replica):
    ``broker`` (None when no replica reported), each replica's reported log, and the
    ``elect_command`` to run. A report about another topic of the same name (deleted and made
    again) is left out; a best replica on a broker that is down is named, with the advice to
    start it first (a designated election needs the broker live)."""
    known = {
        b: r
        for b, r in reports.items()
        if b in replicas and (topic_id is None or r.topic_id in ("", topic_id))
    }
    ranked = PartitionReport(topic, partition, [
        ReplicaReport(str(b), 0, max(r.log_end_offset, 0), r.last_epoch, [])
        for b, r in sorted(known.items())
    ])  # fmt: skip
    best = ranked.best_replica
    broker = None if best is None else int(best.path)
    answer: dict[str, Any] = {
        "broker": broker,
        "replicas": [
            {
                "broker": b,
                "log_end_offset": r.log_end_offset,
                "last_leader_epoch": r.last_epoch,
                "high_watermark": r.high_watermark,
                "live": b in live,
            }
            for b, r in sorted(known.items())
        ],  # fmt: skip
        "unreported": sorted(set(replicas) - set(known)),
        "elect_command": None,
        "note": "",
    }
    if broker is None:
        answer["note"] = "no replica has reported its log: run `logkeel audit` on the log dirs"
        return answer
    answer["elect_command"] = elect_command(topic, partition, broker, bootstrap)
    if broker not in live:
        answer["note"] = f"broker {broker} holds the most but is down: start it, then run this"
    elif answer["unreported"]:
        answer["note"] = (
            f"replicas {answer['unreported']} have not reported: they may hold more; "
            "`logkeel audit` on their log dirs tells"
        )
    return answer
