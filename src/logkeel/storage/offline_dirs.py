"""Bringing an offline log dir back: probed on a timer (``log.dir.recovery.check.interval.ms``)
or asked for by an operator (``logkeel log-dirs online``), it is loaded again through unclean
recovery once it answers IO and is still the disk it was."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from logkeel.storage.errors import KafkaStorageError
from logkeel.storage.log_dir import LogDir
from logkeel.storage.recovery.load_report import StartupReport
from logkeel.storage.topic_partition import TopicPartition

__all__ = ["LogDirNotRecoverable", "OfflineDirs"]

log = logging.getLogger(__name__)


class LogDirNotRecoverable(Exception):
    """A dir asked to come back is not offline, or is no longer the disk it was."""


class OfflineDirs:
    """``load(d, report)`` loads a reopened dir's partitions into the manager;
    ``served_again(d)`` then clears their offline marks and returns them. ``cluster_id()`` is
    read when a dir is reopened (it is known only after start-up)."""

    def __init__(
        self,
        dirs: list[LogDir],
        *,
        node_id: int,
        cluster_id: Callable[[], str | None],
        validation: str,
        load: Callable[[LogDir, StartupReport], None],
        served_again: Callable[[LogDir], list[TopicPartition]],
    ) -> None:
        self._dirs = dirs
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._validation = validation
        self._load = load
        self._served_again = served_again
        self._online_listeners: list[Callable[[str, list[TopicPartition]], None]] = []
        # One bring-back at a time: the probe and an operator's request may race.
        self._lock = threading.Lock()

    def add_online_listener(self, fn: Callable[[str, list[TopicPartition]], None]) -> None:
        """``fn(log_dir, partitions)`` after an offline dir was loaded again."""
        self._online_listeners.append(fn)

    def probe(self) -> None:
        """Tries each offline dir once; one that is healthy again comes back (the timer of
        ``log.dir.recovery.check.interval.ms``). Failures keep it offline, quietly."""
        for d in self._dirs:
            if d.online:
                continue
            try:
                self.bring_online(str(d.path))
            except (KafkaStorageError, LogDirNotRecoverable) as exc:
                log.debug("log dir %s is still offline: %s", d.path, exc)

    def bring_online(self, path: str) -> list[TopicPartition]:
        """Loads an offline dir again through unclean recovery (it failed while in use), if it
        answers IO and its meta.properties still carries the directory id it had: the same
        disk, healthy again. Returns the partitions it serves again. Raises
        ``KafkaStorageError`` while the dir still fails, and ``LogDirNotRecoverable`` for a
        dir that is not offline or is another disk (restart the broker to adopt that one).
        Blocking: run it off the event loop."""
        d = next((d for d in self._dirs if str(d.path) == str(Path(path).absolute())), None)
        if d is None:
            raise LogDirNotRecoverable(f"{path} is not a log dir of this broker")
        with self._lock:
            if d.online:
                raise LogDirNotRecoverable(f"{d.path} is online")
            expected = d.meta.directory_id if d.meta is not None else None
            d.close()
            try:
                d.open(self._cluster_id() or "", self._node_id)
                if expected is not None and d.meta is not None and d.meta.directory_id != expected:
                    raise LogDirNotRecoverable(
                        f"{d.path} now holds directory id {d.meta.directory_id}, not {expected}: "
                        "another disk; restart the broker to use it"
                    )
                d.probe()
                report = StartupReport(validation=self._validation)
                log.info("%s: answers IO again; loading it (unclean recovery)", d.path)
                self._load(d, report)
            except BaseException:
                d.close()
                raise
            d.offline_reason = None
            loaded = self._served_again(d)
        report.log_summary(log, 1)
        log.info("log dir %s is online again: %d partition(s)", d.path, len(loaded))
        for fn in self._online_listeners:
            try:
                fn(str(d.path), loaded)
            except Exception:
                log.exception("log dir online listener failed")
        return loaded
