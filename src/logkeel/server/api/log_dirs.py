"""DescribeLogDirs (v1-5): each log dir with its partitions' sizes and lags; offline dirs
answer KAFKA_STORAGE_ERROR. AlterReplicaLogDirs (v1-2): an entry that names an offline log dir
of this broker and no replicas brings that dir back now (``logkeel log-dirs online``), as the
``log.dir.recovery.check.interval.ms`` probe would; moving replicas between dirs is refused."""

from __future__ import annotations

import asyncio
import logging
import shutil
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.server.api.responses import build, nested_types, response
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey
from logkeel.storage.errors import KafkaStorageError, StorageError
from logkeel.storage.log_manager import LogManager
from logkeel.storage.offline_dirs import LogDirNotRecoverable

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

    async def describe_log_dirs(self, ctx: RequestContext, request: Any) -> Any:
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

    def describe_log_dirs_error(self, ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
        return response(
            ctx,
            error_code=code,
            results=(),
        )

    async def alter_replica_log_dirs(self, ctx: RequestContext, request: Any) -> Any:
        """A dir with no replicas named: bring it online if it is offline here (the answer
        has no per-dir error field: DescribeLogDirs tells the outcome, the log says why).
        Replicas named: logkeel does not move replicas between dirs yet (INVALID_REQUEST)."""
        types = nested_types(ApiKey.ALTER_REPLICA_LOG_DIRS, ctx.api_version)
        results = []
        for entry in request.dirs:
            if not entry.topics:
                await asyncio.to_thread(self._bring_online, str(entry.path))
                continue
            log.warning(
                "AlterReplicaLogDirs to %s refused: moving replicas between log dirs is not "
                "supported yet",
                entry.path,
            )
            for topic in entry.topics:
                results.append(
                    build(
                        types.AlterReplicaLogDirTopicResult,
                        topic_name=topic.name,
                        partitions=tuple(
                            build(
                                types.AlterReplicaLogDirPartitionResult,
                                partition_index=p,
                                error_code=ErrorCode.invalid_request,
                            )
                            for p in topic.partitions
                        ),
                    )
                )
        return response(ctx, results=tuple(results))

    def alter_replica_log_dirs_error(
        self, ctx: RequestContext, request: Any, code: ErrorCode
    ) -> Any:
        return response(ctx, results=())

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
        error_response=api.describe_log_dirs_error,
    )
    registry.register(
        ApiKey.ALTER_REPLICA_LOG_DIRS,
        *ALTER_REPLICA_LOG_DIRS_VERSIONS,
        api.alter_replica_log_dirs,
        error_response=api.alter_replica_log_dirs_error,
    )
    return api
