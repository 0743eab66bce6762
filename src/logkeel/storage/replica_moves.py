"""Moving a replica between the log dirs of this broker (KIP-113, AlterReplicaLogDirs).

A move makes a *future* replica, ``<topic>-<partition>.<uuid>-future`` in the target dir, and
one thread per move copies the current log into it the way Kafka's ReplicaAlterLogDirsThread
does: it reads whole batches from the current log (closed segments first, then following the
active one as it grows) and appends them as a follower would, with their offsets and leader
epochs, so the future log's indexes, producer state, transaction index and leader-epoch cache
are rebuilt by the same code that builds them on any replica. Truncations of the current log
(a follower that diverged, retention, DeleteRecords) are followed by the same epoch rule a
follower applies. The copy runs at most ``replica.alter.log.dirs.io.max.bytes.per.second``.

Once caught up, the swap holds the current log's lock (every append and truncation takes it,
so the partition's appends wait for it, a few milliseconds): the last batches are copied, the
high watermark, log start and any epoch started without a record are carried over, the future
log is closed (flushed, producer state snapshotted), the current dir is renamed to a ``-delete``
name, the future dir to the real name, and the log is reopened there and handed to whoever
serves it (``LogManager.replace_log``). The old files are closed and removed after
``file.delete.delay.ms`` (fetches in flight still read them).

A target dir that fails aborts the move: the current replica never stopped serving. At start-up
(``resume``), a ``-future`` dir found is resumed (its replica still serves from another dir: the
future dir is the only record of the operator's wish, and Kafka resumes too), or, when no other
dir holds the replica, was caught by a crash between the two renames of a swap: it was complete
(closed before the first rename), so the swap is finished.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from logkeel.storage.engine.log import PartitionLog
from logkeel.storage.errors import KafkaStorageError, StorageError, io_guard
from logkeel.storage.fileio import fsync_dir
from logkeel.storage.log_dir import LogDir, mark_for_deletion
from logkeel.storage.recovery.loader import load_partition
from logkeel.storage.topic_partition import (
    FUTURE_DIR_SUFFIX,
    TopicPartition,
    set_aside_dir_name,
)

if TYPE_CHECKING:
    from logkeel.storage.log_manager import LogManager

__all__ = [
    "UNLIMITED_RATE",
    "FutureFound",
    "LogDirNotFoundError",
    "MoveStatus",
    "ReplicaMoves",
    "ReplicaNotAvailableError",
    "future_dir_action",
]

log = logging.getLogger(__name__)

# replica.alter.log.dirs.io.max.bytes.per.second: Kafka's default, Long.MAX_VALUE.
UNLIMITED_RATE = 2**63 - 1
# Bytes read from the current log per step: small enough that a throttle paces evenly.
_CHUNK = 1024 * 1024
# A step that found nothing new waits this long for the current log to grow.
_IDLE_WAIT_S = 0.05


class LogDirNotFoundError(StorageError):
    """The target is not a log dir of this broker (LOG_DIR_NOT_FOUND)."""


class ReplicaNotAvailableError(StorageError):
    """This broker holds no replica of the partition (REPLICA_NOT_AVAILABLE)."""


class FutureFound(enum.Enum):
    """What start-up does with a ``-future`` dir (``future_dir_action``)."""

    RESUME = "resume"  # the replica serves from another online dir: keep catching up
    FINISH_SWAP = "finish-swap"  # no dir holds the replica: a swap was cut between its renames
    LEAVE = "leave"  # the replica's own dir is offline: nothing to copy from, nothing to decide
    DELETE = "delete"  # a second future of the same replica, or one in the replica's own dir


def future_dir_action(
    future_dir: str, serving_dir: str | None, offline: bool, already_moving: bool
) -> FutureFound:
    """The start-up decision for a future dir in ``future_dir``: ``serving_dir`` is the log dir
    the replica was loaded from (None: none), ``offline`` whether the replica is known but
    offline, ``already_moving`` whether another future of it was taken up already."""
    if already_moving or serving_dir == future_dir:
        return FutureFound.DELETE
    if serving_dir is not None:
        return FutureFound.RESUME
    if offline:
        return FutureFound.LEAVE
    return FutureFound.FINISH_SWAP


@dataclass(frozen=True, slots=True)
class MoveStatus:
    """A future replica as DescribeLogDirs reports it."""

    tp: TopicPartition
    log_dir: str
    size: int
    offset_lag: int


@dataclass(eq=False)
class _Move:
    tp: TopicPartition
    source: LogDir
    target: LogDir
    future: PartitionLog
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    copied_bytes: int = 0
    swapped: bool = False  # the future log was closed and reopened as the partition's log
    final_size: int = 0  # its size when closed for the swap


class _Pacer:
    """At most ``rate`` bytes a second on average since the move started."""

    def __init__(self, rate: Callable[[], int]) -> None:
        self._rate = rate
        self._start = time.monotonic()
        self._bytes = 0

    def chunk(self) -> int:
        return max(1, min(_CHUNK, self._rate()))

    def wait_after(self, n: int, cancel: threading.Event) -> None:
        self._bytes += n
        rate = self._rate()
        if rate >= UNLIMITED_RATE or n == 0:
            return
        ahead = self._bytes / rate - (time.monotonic() - self._start)
        if ahead > 0:
            cancel.wait(ahead)


class ReplicaMoves:
    """The moves in progress on one broker, run by the log manager that owns them."""

    def __init__(self, manager: LogManager, rate_bytes_per_sec: int = UNLIMITED_RATE) -> None:
        if rate_bytes_per_sec <= 0:
            raise ValueError("replica.alter.log.dirs.io.max.bytes.per.second must be positive")
        self._manager = manager
        self.rate_bytes_per_sec = rate_bytes_per_sec
        self._moves: dict[TopicPartition, _Move] = {}
        self._lock = threading.Lock()
        self._closed = False

    # -- requests ---------------------------------------------------------------------------
    def start(self, tp: TopicPartition, target_path: str) -> bool:
        """Starts moving ``tp`` to ``target_path``; False if it is already there (a move
        elsewhere is then cancelled). A move to another dir replaces the one in progress.
        Raises LogDirNotFoundError, KafkaStorageError (target offline),
        ReplicaNotAvailableError. Blocking: run it off the event loop."""
        manager = self._manager
        target = next((d for d in manager.dirs if str(d.path) == str(Path(target_path))), None)
        if target is None:
            raise LogDirNotFoundError(f"{target_path} is not a log dir of this broker")
        if not target.online:
            raise KafkaStorageError(target.path, f"log dir is offline: {target.offline_reason}")
        if tp in manager.offline_partitions:
            raise KafkaStorageError("", f"partition {tp} is offline")
        source = manager.dir_of(tp)
        current = manager.get_log(tp)
        if source is None or current is None:
            raise ReplicaNotAvailableError(f"this broker holds no replica of {tp}")
        with self._lock:
            running = self._moves.get(tp)
        if running is not None:
            if running.target is target:
                return True
            self.cancel(tp)
        if source is target:
            return False
        future_dir = target.path / set_aside_dir_name(tp, FUTURE_DIR_SUFFIX)
        leftover = target.path / tp.dir_name
        with io_guard(target.path, f"creating {future_dir}"):
            # A dir of the partition's name that is not served (what a deletion that could not
            # finish left) would block the swap's rename: set aside, as a new log does.
            doomed = mark_for_deletion(target.path, leftover) if leftover.exists() else None
            future_dir.mkdir()
            fsync_dir(target.path)
        if doomed is not None:
            log.warning("%s: set aside %s, left by a deleted replica", target.path, doomed.name)
            manager.schedule_delete(functools.partial(shutil.rmtree, doomed, ignore_errors=True), 0)
        future, _ = load_partition(
            future_dir,
            current.config,
            log_dir=target.path,
            recovery_point=current.log_start_offset,
            log_start_offset=current.log_start_offset,
            clean=True,
            trusted=True,
        )
        if future.log_end_offset < current.log_start_offset:
            future.truncate_fully_and_start_at(current.log_start_offset)
        self._run(_Move(tp, source, target, future))
        log.info("%s: moving from %s to %s (%s)", tp, source.path, target.path, future_dir.name)
        return True

    def cancel(self, tp: TopicPartition) -> None:
        """Stops a move and removes its future dir; the current replica is untouched."""
        with self._lock:
            move = self._moves.pop(tp, None)
        if move is not None:
            self._abort(move, "cancelled")

    def cancel_dir(self, log_dir: str) -> None:
        """A dir failed: every move from or to it ends, keeping the current replicas."""
        with self._lock:
            doomed = [
                m
                for m in self._moves.values()
                if log_dir in (str(m.source.path), str(m.target.path))
            ]
            for m in doomed:
                self._moves.pop(m.tp, None)
        for m in doomed:
            self._abort(m, f"log dir {log_dir} failed")

    def status(self) -> list[MoveStatus]:
        with self._lock:
            moves = list(self._moves.values())
        found = []
        for m in moves:
            current = self._manager.get_log(m.tp)
            if current is None or not m.target.online:
                continue
            if m.swapped:
                # Mid-swap: still a future (caught up) until the new log serves, so a reader
                # never sees the move gone while the replica is still in its old dir.
                found.append(MoveStatus(m.tp, str(m.target.path), m.final_size, 0))
                continue
            try:
                size = m.future.size_in_bytes
            except (StorageError, OSError):
                continue
            lag = max(0, current.log_end_offset - m.future.log_end_offset)
            found.append(MoveStatus(m.tp, str(m.target.path), size, lag))
        return found

    def close(self) -> None:
        """Shut-down: moves stop where they are; their future dirs stay, to resume at the next
        start-up."""
        with self._lock:
            self._closed = True
            moves = list(self._moves.values())
            self._moves.clear()
        for m in moves:
            m.cancel.set()
        for m in moves:
            if m.thread is not None:
                m.thread.join(timeout=30)
            if m.swapped:
                continue
            try:
                m.future.close()
            except StorageError as exc:
                log.warning("%s: closing its future replica: %s", m.tp, exc)

    # -- start-up ---------------------------------------------------------------------------
    def resume(self) -> None:
        """Takes up the ``-future`` dirs a previous run left (see the module doc)."""
        manager = self._manager
        for d in manager.online_dirs:
            try:
                with io_guard(d.path, "listing log dir"):
                    found = sorted(
                        e.path for e in os.scandir(d.path)
                        if e.name.endswith(FUTURE_DIR_SUFFIX) and e.is_dir()
                    )  # fmt: skip
            except KafkaStorageError as exc:
                manager.handle_dir_failure(exc)
                continue
            for path in map(Path, found):
                try:
                    self._take_up(d, path)
                except KafkaStorageError as exc:
                    manager.handle_dir_failure(exc)
                except StorageError as exc:
                    log.error("%s: future replica cannot be loaded, removed: %s", path, exc)
                    shutil.rmtree(path, ignore_errors=True)

    def _take_up(self, d: LogDir, path: Path) -> None:
        manager = self._manager
        tp = TopicPartition.parse_dir_name(path.name)
        serving = manager.dir_of(tp)
        with self._lock:
            running = self._moves.get(tp)
        if running is not None and running.future.dir == path:
            return  # taken up already
        moving = running is not None
        action = future_dir_action(
            str(d.path),
            str(serving.path) if serving is not None else None,
            tp in manager.offline_partitions,
            moving,
        )
        log.info("%s: future replica %s found at start-up: %s", tp, path, action.value)
        if action is FutureFound.LEAVE:
            return
        if action is FutureFound.DELETE:
            shutil.rmtree(path, ignore_errors=True)
            return
        config = manager.config_for(tp.topic)
        if action is FutureFound.FINISH_SWAP:
            real = d.path / tp.dir_name
            with io_guard(d.path, f"renaming {path.name}"):
                path.rename(real)
                fsync_dir(d.path)
            plog, _ = load_partition(
                real, config, log_dir=d.path, recovery_point=0, log_start_offset=None, clean=False
            )
            manager.replace_log(tp, plog, d)
            log.info("%s: finished a swap cut by a crash; serves from %s", tp, d.path)
            return
        assert serving is not None
        future, _ = load_partition(
            path, config, log_dir=d.path, recovery_point=0, log_start_offset=None, clean=False
        )
        self._run(_Move(tp, serving, d, future))

    # -- the copy ---------------------------------------------------------------------------
    def _run(self, move: _Move) -> None:
        with self._lock:
            if self._closed:
                move.future.close_without_flush()
                return
            self._moves[move.tp] = move
        move.thread = threading.Thread(
            target=self._copy_loop, args=(move,), name=f"alter-log-dirs-{move.tp}", daemon=True
        )
        move.thread.start()

    def _copy_loop(self, move: _Move) -> None:
        pacer = _Pacer(lambda: self.rate_bytes_per_sec)
        try:
            while not move.cancel.is_set():
                current = self._current(move)
                if current is None:
                    self._end(move, "the replica is no longer served from its dir")
                    return
                end = current.log_end_offset
                n = self._copy_step(current, move, pacer.chunk())
                # Caught up with the end as it was: what came since is little, copied under
                # the lock.
                if move.future.log_end_offset >= end and self._try_swap(current, move):
                    return
                if n == 0:
                    move.cancel.wait(_IDLE_WAIT_S)
                pacer.wait_after(n, move.cancel)
        except KafkaStorageError as exc:
            self._end(move, str(exc))
            self._manager.handle_dir_failure(exc)
        except Exception as exc:
            log.exception("%s: move to %s failed", move.tp, move.target.path)
            self._end(move, f"failed: {exc}")

    def _current(self, move: _Move) -> PartitionLog | None:
        manager = self._manager
        if manager.dir_of(move.tp) is not move.source:
            return None
        return manager.get_log(move.tp)

    @staticmethod
    def _follow_truncations(current: PartitionLog, future: PartitionLog) -> None:
        """The future log keeps only what the current log still holds, by a follower's rule:
        the end of the future's latest epoch in the current log, and the current log start."""
        if current.log_start_offset > future.log_end_offset:
            future.truncate_fully_and_start_at(current.log_start_offset)
            return
        latest = future.leader_epochs.latest_epoch
        end = current.log_end_offset
        if latest is not None:
            epoch, epoch_end = current.leader_epochs.end_offset_for(latest, end)
            if epoch >= 0 and epoch_end >= 0:
                end = min(end, epoch_end)
        if end < future.log_end_offset:
            future.truncate_to(end)

    def _copy_step(self, current: PartitionLog, move: _Move, max_bytes: int) -> int:
        """Copies up to ``max_bytes`` (at least one batch); bytes copied."""
        future = move.future
        self._follow_truncations(current, future)
        start = future.log_end_offset
        if start >= current.log_end_offset:
            return 0
        try:
            info = current.read(start, max_bytes)
        except StorageError:
            if current.log_start_offset > start or current.log_end_offset < start:
                return 0  # cut meanwhile: the next step follows it
            raise
        if info.region is None:
            return 0
        data = info.region.read_bytes()
        if not data:
            return 0
        first_base = int.from_bytes(data[0:8], "big")
        if first_base < start:
            if future.log_end_offset != future.log_start_offset:
                # A batch straddling our end would mean the two logs diverged.
                raise StorageError(f"{move.tp}: batch at {first_base} below the copy's end {start}")
            # The log starts inside a batch (DeleteRecords): the copy starts at its base.
            future.truncate_fully_and_start_at(first_base)
        future.append_as_follower(data)
        move.copied_bytes += len(data)
        return len(data)

    def _try_swap(self, current: PartitionLog, move: _Move) -> bool:
        future = move.future
        # The copy made durable before the lock: under it only the last batches are synced.
        future.flush()
        future.snapshot_producer_state()
        with current.lock:
            locked = time.monotonic()
            if self._current(move) is not current or move.cancel.is_set() or not move.target.online:
                return False
            while future.log_end_offset < current.log_end_offset:
                if self._copy_step(current, move, _CHUNK) == 0:
                    break
            self._follow_truncations(current, future)
            if future.log_end_offset != current.log_end_offset:
                return False
            # Epochs begun without a record yet (a leader that appended nothing).
            latest = future.leader_epochs.latest_epoch
            future.leader_epochs.assign_all(
                e for e in current.leader_epochs.entries if latest is None or e.epoch > latest
            )
            future.high_watermark = current.high_watermark
            future.producer_state.on_high_watermark_updated(current.high_watermark)
            if current.log_start_offset > future.log_start_offset:
                future.maybe_increment_log_start_offset(current.log_start_offset)
            hw, start = current.high_watermark, current.log_start_offset
            move.final_size = future.size_in_bytes
            future.close()
            move.swapped = True
            source, target = move.source, move.target
            with io_guard(source.path, f"setting aside {current.dir.name}"):
                doomed = mark_for_deletion(source.path, current.dir)
            real = target.path / move.tp.dir_name
            try:
                with io_guard(target.path, f"renaming {future.dir.name}"):
                    future.dir.rename(real)
                    fsync_dir(target.path)
            except KafkaStorageError:
                # The current replica keeps serving: its dir gets its name back, or a restart
                # would remove it as deleted while the future is removed as a failed move.
                if doomed is not None:
                    with io_guard(source.path, f"restoring {current.dir.name}"):
                        doomed.rename(current.dir)
                        fsync_dir(source.path)
                raise
            new, _ = load_partition(
                real,
                current.config,
                log_dir=target.path,
                recovery_point=future.log_end_offset,
                log_start_offset=start,
                clean=True,
                schedule_delete=self._manager.schedule_delete,
                trusted=True,
            )
            new.high_watermark = hw
            new.producer_state.on_high_watermark_updated(hw)
            self._manager.replace_log(move.tp, new, target)
            with self._lock:
                self._moves.pop(move.tp, None)
            held_ms = (time.monotonic() - locked) * 1000
        log.info(
            "%s: moved from %s to %s (%d bytes copied; appends held for %.1f ms by the swap)",
            move.tp, source.path, target.path, move.copied_bytes, held_ms,
        )  # fmt: skip
        self._manager.after_move(source, target)
        delay = current.config.file_delete_delay_ms / 1000

        def remove_old() -> None:
            current.close_without_flush()
            if doomed is not None:
                shutil.rmtree(doomed, ignore_errors=True)

        self._manager.schedule_delete(remove_old, delay)
        return True

    def _end(self, move: _Move, why: str) -> None:
        with self._lock:
            if self._moves.get(move.tp) is move:
                self._moves.pop(move.tp)
        self._abort(move, why)

    def _abort(self, move: _Move, why: str) -> None:
        move.cancel.set()
        if move.thread is not None and move.thread is not threading.current_thread():
            move.thread.join(timeout=30)
        move.future.close_without_flush()
        log.warning("%s: move to %s ended: %s", move.tp, move.target.path, why)
        if not move.target.online or not move.future.dir.exists():
            return
        try:
            with io_guard(move.target.path, f"removing {move.future.dir.name}"):
                doomed = mark_for_deletion(move.target.path, move.future.dir)
        except KafkaStorageError as exc:
            self._manager.handle_dir_failure(exc)
            return
        if doomed is not None:
            self._manager.schedule_delete(
                functools.partial(shutil.rmtree, doomed, ignore_errors=True), 0
            )
