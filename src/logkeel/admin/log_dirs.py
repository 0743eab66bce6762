"""Bringing a broker's offline log dir back on demand (`logkeel log-dirs online`, `logkeel
console`'s action): AlterReplicaLogDirs naming the dir and no replicas; the broker probes it
and, if it answers IO with the directory id it had, loads it through unclean recovery. The
request's answer has no per-dir error, so the outcome is read back with DescribeLogDirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from logkeel.admin.session import AdminError, AdminSession, nested
from logkeel.server.protocol import ApiKey, request_schema

__all__ = ["bring_online", "describe_log_dirs"]


def describe_log_dirs(session: AdminSession, address: str) -> list[Any]:
    """The broker's DescribeLogDirs results, one per dir."""
    Request = request_schema(ApiKey.DESCRIBE_LOG_DIRS, 4)
    assert Request is not None
    answer = session.send_to(address, Request(topics=None))
    if answer.error_code != ErrorCode.none:
        raise AdminError(f"DescribeLogDirs refused: {answer.error_code.name.upper()}")
    return list(answer.results)


def bring_online(session: AdminSession, address: str, log_dir: str) -> str:
    """Asks the broker at ``address`` to bring ``log_dir`` back; what happened, in a sentence.
    ``AdminError``: not a dir of that broker, or still offline."""
    wanted = str(Path(log_dir))
    before = {str(r.log_dir): r for r in describe_log_dirs(session, address)}
    if wanted not in before:
        raise AdminError(f"{log_dir} is not a log dir of that broker ({', '.join(before)})")
    if before[wanted].error_code == ErrorCode.none:
        return f"{log_dir} is already online"
    Request = request_schema(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
    assert Request is not None
    Dir = nested(Request, "AlterReplicaLogDir")
    session.send_to(address, Request(dirs=(Dir(path=wanted, topics=()),)))
    after = {str(r.log_dir): r for r in describe_log_dirs(session, address)}[wanted]
    if after.error_code != ErrorCode.none:
        raise AdminError(f"{log_dir} is still offline; the broker's log says why")
    partitions = sum(len(t.partitions) for t in after.topics)
    return f"{log_dir} is online again: {partitions} partition(s)"
