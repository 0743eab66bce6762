"""The cluster's history as the controller decided it, kept in ZooKeeper for `logkeel console`:
leader elections (clean ones included), slow leaders that stepped down, log dirs that failed
and came back (KIP-18). Election losses keep their own record (`zk_elections`).

Each kind is one persistent znode under /logkeel/history holding its last ``HISTORY_LIMIT``
events as a JSON list, oldest first, appended by compare-and-set; a controller pass's events go
in one write. Unlike the sequential children of election losses, nothing here grows without
bound: a broker failure moving 2,000 leaderships costs one rewrite of a few hundred KB, not
2,000 creates, and pushes the oldest elections out.

Recording never holds back what it records: `ControllerHistory.flush` logs a failed write and
drops its events (they are in the controller's log too).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from logkeel.cluster import zk_data as zd
from logkeel.cluster.zk_session import ZkSession
from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "HISTORY_KINDS",
    "HISTORY_LIMIT",
    "ControllerHistory",
    "HistoryZnodes",
    "appended",
    "decode_history",
]

log = logging.getLogger(__name__)

HISTORY = "/logkeel/history"
LEADER_ELECTIONS = f"{HISTORY}/leader_elections"
SLOW_LEADER_STEP_DOWNS = f"{HISTORY}/slow_leader_step_downs"
LOG_DIR_EVENTS = f"{HISTORY}/log_dir_events"
# kind -> znode; the kinds are the keys `logkeel console` shows them under.
HISTORY_KINDS = {
    "leader_elections": LEADER_ELECTIONS,
    "slow_leader_step_downs": SLOW_LEADER_STEP_DOWNS,
    "log_dir_events": LOG_DIR_EVENTS,
}
# Events kept per kind. A reason is cut to _REASON_CHARS, so a full znode stays well under
# ZooKeeper's 1 MB request limit (jute.maxbuffer): under 900 KB with the longest topic names.
HISTORY_LIMIT = 1000
_REASON_CHARS = 360
_CAS_ATTEMPTS = 50  # two writers at once only while controllers change hands


def appended(existing: bytes | None, events: Iterable[Mapping[str, Any]], limit: int) -> bytes:
    """The znode's new data: its events (none if ``existing`` is None or unreadable) and
    ``events`` after them, the oldest dropped beyond ``limit``."""
    try:
        kept = decode_history(existing) if existing else []
    except ValueError:
        kept = []  # an unreadable record is replaced rather than blocking every later one
    kept.extend(
        {**e, "reason": str(e["reason"])[:_REASON_CHARS]} if "reason" in e else dict(e)
        for e in events
    )
    return json.dumps(
        {"version": 1, "events": kept[-limit:] if limit > 0 else []}, separators=(",", ":")
    ).encode()


def decode_history(data: bytes) -> list[dict[str, Any]]:
    """The events of one kind, oldest first; ValueError if not a history record."""
    try:
        obj = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a history record: {exc}") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("events"), list):
        raise ValueError("not a history record: no events list")
    return [e for e in obj["events"] if isinstance(e, dict)]


class HistoryZnodes(ZkSession):
    def append_history(
        self, path: str, events: Sequence[Mapping[str, Any]], limit: int = HISTORY_LIMIT
    ) -> None:
        """Appends ``events`` to the record at ``path`` (created when missing), compare-and-set
        against a concurrent writer (an old controller finishing its pass)."""
        for _ in range(_CAS_ATTEMPTS):
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                try:
                    self.zk.create(path, appended(None, events, limit), makepath=True)
                    return
                except NodeExistsError:
                    continue
            try:
                self.zk.set(path, appended(data, events, limit), version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue
        raise RuntimeError(f"{path} kept changing: {len(events)} events not recorded")

    def history(self) -> dict[str, list[dict[str, Any]]]:
        """Every kind's events, oldest first (an unreadable record: none)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for kind, path in HISTORY_KINDS.items():
            try:
                out[kind] = decode_history(self.zk.get(path)[0])
            except (NoNodeError, ValueError):
                out[kind] = []
        return out


class ControllerHistory:
    """What the controller records as it decides, buffered until ``flush`` (the end of its
    pass, or of an election asked for). Any thread may add; ``flush`` runs on the controller's."""

    def __init__(self, client: HistoryZnodes, limit: int = HISTORY_LIMIT) -> None:
        self._client = client
        self._limit = limit
        self._lock = threading.Lock()
        self._pending: dict[str, list[dict[str, Any]]] = {}

    def _add(self, path: str, event: dict[str, Any]) -> None:
        with self._lock:
            pending = self._pending.setdefault(path, [])
            pending.append(event)
            del pending[: -self._limit]  # a failing ZooKeeper must not grow the buffer either

    def election(
        self,
        tp: TopicPartition,
        from_leader: int,
        leader: int,
        leader_epoch: int,
        election: str,
        reason: str,
    ) -> None:
        """A leader change written: ``election`` is clean, unclean, preferred, designated or
        offline (no leader left)."""
        self._add(LEADER_ELECTIONS, {
            "time_ms": _now_ms(), "topic": tp.topic, "partition": tp.partition,
            "from_leader": from_leader, "leader": leader, "leader_epoch": leader_epoch,
            "election": "offline" if leader < 0 else election, "reason": reason,
        })  # fmt: skip

    def step_down(
        self, tp: TopicPartition, broker: int, leader: int, leader_epoch: int, reason: str
    ) -> None:
        """``broker``, a slow leader, asked to resign and ``leader`` leads instead."""
        self._add(SLOW_LEADER_STEP_DOWNS, {
            "time_ms": _now_ms(), "topic": tp.topic, "partition": tp.partition,
            "broker": broker, "leader": leader, "leader_epoch": leader_epoch, "reason": reason,
        })  # fmt: skip

    def log_dir(self, event: zd.LogDirEvent) -> None:
        """A broker's notification of a dir failing or back online (one without the dir, from
        an older broker, is not history)."""
        if event.log_dir is None:
            return
        self._add(LOG_DIR_EVENTS, {
            "time_ms": event.time_ms or _now_ms(), "broker": event.broker,
            "log_dir": event.log_dir,
            "event": "LogDirOnline" if event.online else "LogDirFailure", "reason": event.reason,
        })  # fmt: skip

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for path, events in pending.items():
            try:
                self._client.append_history(path, events, self._limit)
            except Exception:
                log.exception("recording %d events in %s failed", len(events), path)


def _now_ms() -> int:
    return int(time.time() * 1000)
