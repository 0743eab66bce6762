"""Replica moves between the log dirs of one broker process (KIP-113), with real clients: a
partition moved under a live acks=all producer loses no acknowledged record, DescribeLogDirs
shows the future replica while it copies (throttled by
replica.alter.log.dirs.io.max.bytes.per.second so it can be seen), a SIGKILL mid-copy is
resumed at restart, and moves to a missing or offline dir are refused as Kafka refuses them."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from logkeel.cli.broker_requests import call, nested
from logkeel.cli.main import cli
from logkeel.server.protocol import ApiKey, request_schema
from logkeel.storage.log_dir import MetaProperties, random_uuid
from logkeel.testing.faulty_fs import FaultyFs
from logkeel.testing.history import History
from tests.brokerproc import BrokerProcess
from tests.cluster.test_cluster_history import PARTITIONS, TOPIC, Writer, final_logs
from tests.server.admin_clients import admin, offline_log_dirs, outcome, produce, read_partition
from tests.waiting import wait_until

RATE = {"replica.alter.log.dirs.io.max.bytes.per.second": "200000"}


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "d1", tmp_path / "d2"


def _where(log_dirs: tuple[Path, Path], topic: str, partition: int) -> tuple[Path, Path]:
    """(the dir holding the replica, the other one)."""
    a, b = log_dirs
    return (a, b) if (a / f"{topic}-{partition}").is_dir() else (b, a)


def _replicas(bootstrap: str) -> dict[tuple[str, int, bool], tuple[str, Any]]:
    Request = request_schema(ApiKey.DESCRIBE_LOG_DIRS, 4)
    answer = call("test", bootstrap, Request(topics=None))
    return {
        (str(t.name), int(p.partition_index), bool(p.is_future_key)): (str(r.log_dir), p)
        for r in answer.results
        for t in r.topics
        for p in t.partitions
    }


def _move(bootstrap: str, topic: str, partition: int, target: Path, *extra: str) -> Any:
    args = ["log-dirs", "move", "--bootstrap-server", bootstrap, "--topic", topic,
            "--partition", str(partition), "--to", str(target), *extra]  # fmt: skip
    return CliRunner().invoke(cli, args)


def _fill(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    values = [b"%06d-" % i + b"x" * 2000 for i in range(count)]
    for i in range(0, count, 200):
        assert set(produce(bootstrap, topic, partition, values[i : i + 200])) == {"OK"}
    return values


def _leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(("-future", "-delete")))


def test_a_partition_moves_under_an_acks_all_producer_losing_nothing(tmp_path: Path) -> None:
    log_dirs = _dirs(tmp_path)
    with BrokerProcess(tmp_path / "b", log_dirs=list(log_dirs), overrides=RATE) as broker:
        client = admin(broker.bootstrap)
        [f] = client.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values()
        assert outcome(f) == "OK"
        wait_until(lambda: all(any((d / f"{TOPIC}-{p}").is_dir() for d in log_dirs)
                               for p in range(PARTITIONS)))  # fmt: skip
        _fill(broker.bootstrap, TOPIC, 0, 300)  # ~600 KB: three seconds at the throttle
        source, target = _where(log_dirs, TOPIC, 0)
        history = History()
        writer = Writer(broker.bootstrap, history)
        writer.start()
        try:
            wait_until(lambda: len(history.acked) > 50, what="the producer running")
            started = _move(broker.bootstrap, TOPIC, 0, target, "--no-wait")
            assert started.exit_code == 0, started.output

            # The future replica, as DescribeLogDirs reports it while it copies.
            def future_seen() -> bool:
                found = _replicas(broker.bootstrap).get((TOPIC, 0, True))
                return found is not None and int(found[1].partition_size) > 0

            wait_until(future_seen, what="the future replica")
            future_dir, future = _replicas(broker.bootstrap)[(TOPIC, 0, True)]
            current_dir, current = _replicas(broker.bootstrap)[(TOPIC, 0, False)]
            assert (future_dir, current_dir) == (str(target), str(source))
            assert int(future.offset_lag) > 0
            assert int(future.partition_size) < int(current.partition_size)
            assert [p.name for p in target.iterdir() if p.name.endswith("-future")]

            # Following it: a progress bar until the swap.
            followed = _move(broker.bootstrap, TOPIC, 0, target, "--timeout", "60")
            assert followed.exit_code == 0, followed.output
            assert f"moved from {source} to {target}" in followed.output
            at_swap = len(history.acked)
            wait_until(lambda: len(history.acked) > at_swap + 100, what="writes after the swap")
        finally:
            writer.stop.set()
            writer.join(150)
        assert writer.errors == []
        assert history.check(final_logs(broker.bootstrap)) == []
        assert not (source / f"{TOPIC}-0").exists()
        assert (target / f"{TOPIC}-0").is_dir()
        assert not any(p.name.endswith("-future") for p in target.iterdir())
        assert (TOPIC, 0, True) not in _replicas(broker.bootstrap)
        described = CliRunner().invoke(
            cli, ["log-dirs", "describe", "--bootstrap-server", broker.bootstrap, "--json"]
        )
        held = {d["log_dir"]: d["partitions"] for d in json.loads(described.output)}
        assert f"{TOPIC}-0" in held[str(target)] and f"{TOPIC}-0" not in held[str(source)]


def test_a_move_cut_by_sigkill_is_resumed_at_restart(tmp_path: Path) -> None:
    log_dirs = _dirs(tmp_path)
    with BrokerProcess(tmp_path / "b", log_dirs=list(log_dirs), overrides=RATE) as broker:
        client = admin(broker.bootstrap)
        [f] = client.create_topics([NewTopic("cut", 1, 1)]).values()
        assert outcome(f) == "OK"
        wait_until(lambda: any((d / "cut-0").is_dir() for d in log_dirs))
        values = _fill(broker.bootstrap, "cut", 0, 600)  # ~1.2 MB: six seconds to copy
        source, target = _where(log_dirs, "cut", 0)
        started = _move(broker.bootstrap, "cut", 0, target, "--no-wait")
        assert started.exit_code == 0, started.output

        def copying() -> bool:
            found = _replicas(broker.bootstrap).get(("cut", 0, True))
            return found is not None and int(found[1].partition_size) > 200_000

        wait_until(copying, what="the copy under way")
        broker.kill()
        assert [p.name for p in target.iterdir() if p.name.endswith("-future")]
        assert (source / "cut-0").is_dir()

        broker.restart()
        wait_until(lambda: _replicas(broker.bootstrap).get(("cut", 0, False), ("",))[0]
                   == str(target), timeout=60, what="the resumed move swapped in")  # fmt: skip
        assert read_partition(broker.bootstrap, "cut", 0) == (0, values)
        assert not (source / "cut-0").exists() and (target / "cut-0").is_dir()
        assert not any(p.name.endswith("-future") for p in target.iterdir())
        assert produce(broker.bootstrap, "cut", 0, [b"after"]) == ["OK"]
        assert "found at start-up: resume" in broker.output(200_000)


def test_moves_to_a_missing_or_offline_dir_are_refused(tmp_path: Path) -> None:
    healthy, broken = _dirs(tmp_path)
    broken.mkdir()
    # A dir that belongs to another broker: it stays offline at start-up (KIP-18).
    (broken / "meta.properties").write_bytes(MetaProperties("other", 7, random_uuid()).render())
    with BrokerProcess(tmp_path / "b", log_dirs=[healthy, broken]) as broker:
        client = admin(broker.bootstrap)
        [f] = client.create_topics([NewTopic("stay", 1, 1)]).values()
        assert outcome(f) == "OK"
        assert produce(broker.bootstrap, "stay", 0, [b"kept"]) == ["OK"]
        Request = request_schema(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
        Dir, Topic = (
            nested(Request, "AlterReplicaLogDir"),
            nested(Request, "AlterReplicaLogDirTopic"),
        )

        def answer(path: Path, topic: str = "stay") -> ErrorCode:
            move = Dir(path=str(path), topics=(Topic(name=topic, partitions=(i32(0),)),))
            return (
                call("test", broker.bootstrap, Request(dirs=(move,)))
                .results[0]
                .partitions[0]
                .error_code
            )

        assert answer(broken) == ErrorCode.kafka_storage_error
        assert answer(tmp_path / "nowhere") == ErrorCode.log_dir_not_found
        assert answer(healthy, topic="absent") == ErrorCode.replica_not_available
        refused = _move(broker.bootstrap, "stay", 0, broken)
        assert refused.exit_code == 1 and "KAFKA_STORAGE_ERROR" in refused.output
        assert (healthy / "stay-0").is_dir() and _leftovers(healthy) == []
        assert read_partition(broker.bootstrap, "stay", 0) == (0, [b"kept"])


def _dir_bytes(bootstrap: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for (_, _, future), (log_dir, p) in _replicas(bootstrap).items():
        assert not future
        totals[log_dir] = totals.get(log_dir, 0) + int(p.partition_size)
    return totals


def test_balance_proposes_then_spreads_the_replicas_by_size(tmp_path: Path) -> None:
    log_dirs = _dirs(tmp_path)
    with BrokerProcess(tmp_path / "b", log_dirs=list(log_dirs)) as broker:
        client = admin(broker.bootstrap)
        [f] = client.create_topics([NewTopic("bal", 4, 1)]).values()
        assert outcome(f) == "OK"
        wait_until(lambda: sum(1 for d in log_dirs for _ in d.glob("bal-*")) == 4)
        heavy = log_dirs[0]
        written = {}
        for p in range(4):
            count = 150 if (heavy / f"bal-{p}").is_dir() else 10
            written[p] = _fill(broker.bootstrap, "bal", p, count)
        before = _dir_bytes(broker.bootstrap)
        gap = abs(before[str(log_dirs[0])] - before[str(log_dirs[1])])
        args = ["log-dirs", "balance", "--bootstrap-server", broker.bootstrap]
        proposed = CliRunner().invoke(cli, args)
        assert proposed.exit_code == 0, proposed.output
        assert "proposed only" in proposed.output and "bal-" in proposed.output
        assert _dir_bytes(broker.bootstrap) == before

        done = CliRunner().invoke(cli, [*args, "--execute", "--timeout", "60"])
        assert done.exit_code == 0, done.output
        assert "replica(s) moved" in done.output
        after = _dir_bytes(broker.bootstrap)
        assert abs(after[str(log_dirs[0])] - after[str(log_dirs[1])]) < gap
        for p, values in written.items():
            assert read_partition(broker.bootstrap, "bal", p) == (0, values)
        again = CliRunner().invoke(cli, args)
        assert "the log dirs are balanced" in again.output


def test_a_target_disk_failing_mid_move_ends_it_and_keeps_the_replica(
    tmp_path: Path, faulty_fs: FaultyFs
) -> None:
    healthy, failing = tmp_path / "healthy", faulty_fs.mountpoint / "logs"
    with BrokerProcess(tmp_path / "b", log_dirs=[healthy, failing], overrides=RATE) as broker:
        client = admin(broker.bootstrap)
        [f] = client.create_topics([NewTopic("keep", 1, 1)]).values()
        assert outcome(f) == "OK"
        wait_until(lambda: (healthy / "keep-0").is_dir())
        values = _fill(broker.bootstrap, "keep", 0, 300)
        started = _move(broker.bootstrap, "keep", 0, failing, "--no-wait")
        assert started.exit_code == 0, started.output
        wait_until(lambda: ("keep", 0, True) in _replicas(broker.bootstrap), what="the copy")

        faulty_fs.fail(errno.EIO, ops={"write", "fsync"})
        wait_until(lambda: offline_log_dirs(broker.bootstrap) == [str(failing)], what="offline")
        assert ("keep", 0, True) not in _replicas(broker.bootstrap)
        assert _replicas(broker.bootstrap)[("keep", 0, False)][0] == str(healthy)
        assert produce(broker.bootstrap, "keep", 0, [b"after"]) == ["OK"]
        assert read_partition(broker.bootstrap, "keep", 0) == (0, [*values, b"after"])
        assert f"keep-0: move to {failing} ended" in broker.output(200_000)
        faulty_fs.heal()
