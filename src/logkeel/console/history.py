"""The cluster's history as one list of rows, newest first, from what the controller records
in ZooKeeper (`cluster.zk_history`: elections, slow leaders' step-downs, log dirs failing and
coming back). The elections after which replicas lost records have their own table. Pure."""

from __future__ import annotations

from typing import Any

__all__ = ["history_rows"]


def history_rows(
    history: dict[str, list[dict[str, Any]]], limit: int = 500
) -> list[dict[str, Any]]:
    """Each row: ``time_ms``, ``kind``, ``broker`` (the one it happened to: the old leader, the
    broker of the dir), ``subject`` (a partition or a log dir), ``change`` and ``reason``."""
    rows: list[dict[str, Any]] = []
    for e in history.get("leader_elections", []):
        rows.append(_row(e, f"{e.get('election', '?')} election", e.get("from_leader"),
                         _partition(e), _leaders(e)))  # fmt: skip
    for e in history.get("slow_leader_step_downs", []):
        rows.append(_row(e, "slow leader stepped down", e.get("broker"), _partition(e),
                         _leaders({**e, "from_leader": e.get("broker")})))  # fmt: skip
    for e in history.get("log_dir_events", []):
        failed = e.get("event") == "LogDirFailure"
        rows.append(_row(e, "log dir failed" if failed else "log dir back online", e.get("broker"),
                         str(e.get("log_dir")), "offline" if failed else "online"))  # fmt: skip
    rows.sort(key=lambda r: r["time_ms"], reverse=True)
    return rows[:limit]


def _row(e: dict[str, Any], kind: str, broker: Any, subject: str, change: str) -> dict[str, Any]:
    return {"time_ms": int(e.get("time_ms") or 0), "kind": kind, "broker": broker,
            "subject": subject, "change": change, "reason": e.get("reason", "")}  # fmt: skip


def _partition(e: dict[str, Any]) -> str:
    return f"{e.get('topic')}-{e.get('partition')}"


def _leaders(e: dict[str, Any]) -> str:
    to = e.get("leader")
    target = "none (offline)" if isinstance(to, int) and to < 0 else str(to)
    return f"leader {e.get('from_leader')} -> {target}, epoch {e.get('leader_epoch')}"
