"""DescribeLogDirs (v1-5): each log dir with its partitions' sizes and lags, future replicas
(moves in progress) with ``is_future_key`` and their lag behind the current replica; offline
dirs answer KAFKA_STORAGE_ERROR. AlterReplicaLogDirs (v1-2): each replica named moves to the
dir named (KIP-113, ``storage/replica_moves.py``); an entry that names an offline log dir of
this broker and no replicas brings that dir back now (``logkeel log-dirs online``), as the
``log.dir.recovery.check.interval.ms`` probe would."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.api.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from logkeel.server.api.responses import build, nested_types, response
from logkeel.server.authorization import ALTER_CLUSTER, DESCRIBE_CLUSTER, gated
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.storage.errors import KafkaStorageError, StorageError
from logkeel.storage.log_manager import LogManager
from logkeel.storage.offline_dirs import LogDirNotRecoverable
from logkeel.storage.replica_moves import LogDirNotFoundError, ReplicaNotAvailableError
from logkeel.storage.topic_partition import TopicPartition

__all__ = [
    "ALTER_REPLICA_LOG_DIRS_VERSIONS",
    "DESCRIBE_LOG_DIRS_VERSIONS",
    "LogDirsApi",
    "register",
]

log = logging.getLogger(__name__)

DESCRIBE_LOG_DIRS_VERSIONS = (1, 5)
ALTER_REPLICA_LOG_DIRS_VERSIONS = (1, 2)


class LogDirsApi:
    """DescribeLogDirs: each log dir, its partitions' sizes and lags; offline dirs say so."""

    def __init__(self, log_manager: LogManager) -> None:
        self._log_manager = log_manager

    async def describe_log_dirs(
        self, ctx: RequestContext, request: DescribeLogDirsRequest
    ) -> DescribeLogDirsResponse:
        wanted: dict[str, set[int]] | None = None
        if request.topics is not None:
            wanted = {}
            for t in request.topics:
                wanted.setdefault(t.topic, set()).update(t.partitions)
        results = await asyncio.to_thread(self._collect, ctx.api_version, wanted)
        return response(
            ctx,
            error_code=ErrorCode.none,
            results=results,
        )

    def describe_log_dirs_error(
        self, ctx: RequestContext, request: DescribeLogDirsRequest, code: ErrorCode
    ) -> DescribeLogDirsResponse:
        return response(
            ctx,
            error_code=code,
            results=(),
        )

    async def alter_replica_log_dirs(
        self, ctx: RequestContext, request: AlterReplicaLogDirsRequest
    ) -> AlterReplicaLogDirsResponse:
        """A dir with no replicas named: bring it online if it is offline here (the answer
        has no per-dir error field: DescribeLogDirs tells the outcome, the log says why).
        Replicas named: each starts moving there, with Kafka's per-partition errors."""
        codes: dict[tuple[str, str, int], ErrorCode] = {}
        for entry in request.dirs:
            path = str(entry.path)
            if not entry.topics:
                await asyncio.to_thread(self._bring_online, path)
                continue
            for topic in entry.topics:
                for p in topic.partitions:
                    tp = TopicPartition(str(topic.name), int(p))
                    codes[(path, tp.topic, tp.partition)] = await asyncio.to_thread(
                        self._move, tp, path
                    )
        return self._alter_response(ctx, request.dirs, lambda path, t, p: codes[(path, t, p)])

    def _move(self, tp: TopicPartition, path: str) -> ErrorCode:
        try:
            self._log_manager.moves.start(tp, path)
        except LogDirNotFoundError as exc:
            log.warning("AlterReplicaLogDirs %s: %s", tp, exc)
            return ErrorCode.log_dir_not_found
        except ReplicaNotAvailableError as exc:
            log.warning("AlterReplicaLogDirs %s: %s", tp, exc)
            return ErrorCode.replica_not_available
        except KafkaStorageError as exc:
            log.warning("AlterReplicaLogDirs %s to %s: %s", tp, path, exc)
            if exc.log_dir == path:
                self._log_manager.handle_dir_failure(exc)
            return ErrorCode.kafka_storage_error
        return ErrorCode.none

    def alter_replica_log_dirs_error(
        self, ctx: RequestContext, request: AlterReplicaLogDirsRequest, code: ErrorCode
    ) -> AlterReplicaLogDirsResponse:
        """Every partition named carries ``code`` (Kafka's answer to an unauthorized caller)."""
        return self._alter_response(ctx, request.dirs, lambda path, t, p: code)

    @staticmethod
    def _alter_response(
        ctx: RequestContext, dirs: Any, code_of: Callable[[str, str, int], ErrorCode]
    ) -> Any:
        types = nested_types(ApiKey.ALTER_REPLICA_LOG_DIRS, ctx.api_version)
        results = [
            build(
                types.AlterReplicaLogDirTopicResult,
                topic_name=topic.name,
                partitions=tuple(
                    build(
                        types.AlterReplicaLogDirPartitionResult,
                        partition_index=p,
                        error_code=code_of(str(entry.path), str(topic.name), int(p)),
                    )
                    for p in topic.partitions
                ),
            )
            for entry in dirs
            for topic in entry.topics
        ]
        return response(ctx, results=tuple(results))

    def _bring_online(self, path: str) -> None:
        try:
            loaded = self._log_manager.offline_dirs.bring_online(path)
        except LogDirNotRecoverable as exc:
            log.warning("log dir %s not brought online: %s", path, exc)
        except KafkaStorageError as exc:
            log.warning("log dir %s still fails; it stays offline: %s", path, exc)
        else:
            log.info("log dir %s brought online on request: %d partition(s)", path, len(loaded))

    def _collect(self, version: int, wanted: dict[str, set[int]] | None) -> tuple[Any, ...]:
        """Runs in a thread: sizes come from file metadata."""
        types = nested_types(ApiKey.DESCRIBE_LOG_DIRS, version)
        lm = self._log_manager
        by_dir: dict[str, dict[str, list[Any]]] = {str(d.path): {} for d in lm.dirs}
        for future in lm.moves.status():
            if wanted is not None and future.tp.partition not in wanted.get(future.tp.topic, ()):
                continue
            by_dir[future.log_dir].setdefault(future.tp.topic, []).append(
                build(
                    types.DescribeLogDirsPartition,
                    partition_index=future.tp.partition,
                    partition_size=future.size,
                    offset_lag=future.offset_lag,
                    is_future_key=True,
                )
            )
        for tp, plog in list(lm.logs.items()):
            if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
                continue
            d = lm.dir_of(tp)
            if d is None or not d.online:
                continue
            try:
                size = plog.size_in_bytes
            except (StorageError, OSError) as exc:  # one failing partition must not fail the rest
                log.warning("DescribeLogDirs: cannot size %s: %s", tp, exc)
                continue
            by_dir[str(d.path)].setdefault(tp.topic, []).append(
                build(
                    types.DescribeLogDirsPartition,
                    partition_index=tp.partition,
                    partition_size=size,
                    offset_lag=max(0, plog.log_end_offset - plog.high_watermark),
                    is_future_key=False,
                )
            )
        results = []
        for d in lm.dirs:
            path = str(d.path)
            total = usable = -1
            if d.online:
                try:
                    usage = shutil.disk_usage(path)
                    total, usable = usage.total, usage.free
                except OSError:
                    pass
                topics = tuple(
                    build(
                        types.DescribeLogDirsTopic,
                        name=topic,
                        partitions=tuple(sorted(parts, key=lambda p: p.partition_index)),
                    )
                    for topic, parts in sorted(by_dir[path].items())
                )
                code = ErrorCode.none
            else:
                topics = ()
                code = ErrorCode.kafka_storage_error
            results.append(
                build(
                    types.DescribeLogDirsResult,
                    error_code=code,
                    log_dir=path,
                    topics=topics,
                    total_bytes=total,
                    usable_bytes=usable,
                    is_cordoned=False,
                )
            )
        return tuple(results)


def register(registry: HandlerRegistry, log_manager: LogManager) -> LogDirsApi:
    api = LogDirsApi(log_manager)
    registry.register(
        ApiKey.DESCRIBE_LOG_DIRS,
        *DESCRIBE_LOG_DIRS_VERSIONS,
        api.describe_log_dirs,
        rule=gated(DESCRIBE_CLUSTER),
        error_response=api.describe_log_dirs_error,
    )
    registry.register(
        ApiKey.ALTER_REPLICA_LOG_DIRS,
        *ALTER_REPLICA_LOG_DIRS_VERSIONS,
        api.alter_replica_log_dirs,
        rule=gated(ALTER_CLUSTER),
        error_response=api.alter_replica_log_dirs_error,
    )
    return api
